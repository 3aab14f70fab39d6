"""``tuned``: the best static setting of every knob for the scenario at hand, found on ``val`` and shipped as data.

``llmsched-tune`` (``python -m llmsched_env.commands.tune``) searches each scenario's static knobs (queue order,
token budget, chunk cap, batch mix, admission cap, KV reserve, shedding) on the ``val`` split and writes them,
with how they were found, into ``tuned.json`` next to this module (``llmsched_env.decision.tuned_table``).
``TunedPolicy`` looks its scenario up there by ``PolicyContext.scenario`` and plays those knobs at every
iteration, so it is the strongest fixed configuration an operator could have picked for that workload: the bar
a state-dependent policy has to clear. A user's own table: ``TunedPolicy(ctx, table="my.json")``, or
``--policies tuned=my.json`` on the command line.
"""

from __future__ import annotations

from pathlib import Path

from baselines.base import StaticPolicy
from llmsched_env.decision.planners.tuned import TunedTable, load_tuned_table
from llmsched_env.decision.policy import PolicyContext
from llmsched_env.engine.batch import Decision

__all__ = ["SHIPPED_TABLE", "TunedPolicy"]

SHIPPED_TABLE = Path(__file__).with_name("tuned.json")  # package data (pyproject.toml)


class TunedPolicy(StaticPolicy):
    """``tuned``: the knobs stored for ``ctx.scenario`` in ``table`` (a ``TunedTable``, a table file's path, or
    None for the shipped ``tuned.json``), the same at every iteration.

    Raises ``ValueError`` when the table lacks the scenario (saying how to tune it), when the table file is
    malformed (naming the file), or when a stored knob is not an option of ``ctx.action_spec`` (naming the
    scenario, knob and value: settings tuned for another engine are refused, not moved to the nearest option).
    """

    name = "tuned"
    shipped_table = SHIPPED_TABLE  # where the tune command writes by default

    def __init__(self, ctx: PolicyContext, seed: int | None = None, table: TunedTable | str | Path | None = None):
        if isinstance(table, TunedTable):
            self.table = table
        else:
            self.table = load_tuned_table(table if table is not None else SHIPPED_TABLE, shipped=table is None)
        super().__init__(ctx, seed)

    def decide(self, ctx: PolicyContext) -> Decision:
        return self.table.decision(ctx.scenario, ctx.action_spec)
