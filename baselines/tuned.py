"""``tuned``: the best static setting of every knob for the scenario at hand, found on ``val`` by ``llmsched-tune``
and shipped as data (``tuned.json`` next to this module, ``llmsched_env.decision.planners.tuned``): the strongest
fixed configuration an operator could pick, the bar a state-dependent policy has to clear. A table of your own:
``TunedPolicy(ctx, table="my.json")``, or ``--policies tuned=my.json``.
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
    """The knobs stored for ``ctx.scenario`` in ``table`` (a ``TunedTable``, a path, or None for the shipped
    table), at every iteration. ``ValueError`` when the table lacks the scenario (saying how to tune it), is
    malformed (naming the file), or stores a knob that is no option of ``ctx.action_spec`` (never moved)."""

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
