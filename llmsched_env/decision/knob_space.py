"""The space of static knob settings the ``tuned`` search explores (``llmsched_env.evaluation.tuning``), and the
base settings the planners (``lookahead``, ``mpc``) move around.

    search_options(spec)               # the values of each knob, in ``Decision`` field order
    random_candidates(spec, 48, seed)  # uniform draws over them
    neighbours(decision, spec)         # every single-knob move
    static_decision("sjf", ctx)        # the knobs a static heuristic plays

Static admission caps exclude 0: an engine that always holds admits only when idle (the mask forbids holding
then), one request at a time, and such an episode is the slowest to simulate.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from llmsched_env.decision.actions import ActionSpec
from llmsched_env.decision.policy import PolicyContext
from llmsched_env.decision.registry import SCHEDULERS, make_scheduler
from llmsched_env.engine.batch import Decision

__all__ = ["STATIC_HEURISTICS", "base_decision", "neighbours", "random_candidates", "search_options", "static_decision"]

STATIC_HEURISTICS = ("fcfs", "prefill_first", "priority_aging", "sjf", "lpm", "vtc", "kv_guard", "sarathi")


def search_options(spec: ActionSpec) -> dict[str, tuple[Any, ...]]:
    """The values each knob may take in the search, in ``Decision`` field order (admission without 0)."""
    return {
        "order": spec.orders,
        "token_budget": spec.token_budget_values,
        "chunk_cap": spec.chunk_cap_values,
        "prefill_first": (False, True),
        "max_admit": tuple(a for a in spec.admission_caps if a > 0),
        "kv_reserve": spec.kv_reserves,
        "shed": (False, True),
    }


def neighbours(d: Decision, spec: ActionSpec) -> list[Decision]:
    """Every single-knob move from ``d``: another queue order, the neighbouring option (up, down) of each
    numeric knob, the other batch mix, the other shedding; ``d`` itself and repeats left out."""
    out: list[Decision] = []
    for name, options in search_options(spec).items():
        value = getattr(d, name)
        if name in ("order", "prefill_first", "shed"):
            moves = [o for o in options if o != value]
        else:  # ``d`` comes from the search options, so its value is one of them
            i = options.index(value)
            moves = [options[k] for k in (i - 1, i + 1) if 0 <= k < len(options)]
        for v in moves:
            n = replace(d, **{name: v})
            if n != d and n not in out:
                out.append(n)
    return out


def random_candidates(spec: ActionSpec, num: int, seed: int) -> list[Decision]:
    """``num`` knob settings, each knob uniform over its search options, drawn from ``seed``."""
    rng = np.random.default_rng(seed)
    options = search_options(spec)
    return [Decision(**{k: v[int(rng.integers(len(v)))] for k, v in options.items()}) for _ in range(num)]


def static_decision(name: str, ctx: PolicyContext) -> Decision:
    """The knobs static heuristic ``name`` plays at every iteration (a ``baselines.StaticPolicy``'s decision),
    each moved onto ``ctx.action_spec``'s options as the heuristic's action moves it."""
    decision = getattr(make_scheduler(name, ctx), "decision", None)
    if not isinstance(decision, Decision):
        raise ValueError(f"scheduler {name!r} is not a static heuristic (it has no fixed decision)")
    return ctx.action_spec.decode(ctx.action_spec.encode(decision))


def base_decision(name: str, ctx: PolicyContext, seed: int = 0, table: Any = None) -> Decision:
    """The base setting a planner switches around (``lookahead``, ``mpc``): ``tuned``'s entry for ``ctx``'s
    scenario (from ``table``, a ``TunedTable`` or a path; None: the shipped table), or the knobs of the static
    named rule ``name``. ``ValueError`` where ``tuned`` has no entry for the scenario, or ``name`` is no static
    rule."""
    if name != "tuned":
        return static_decision(name, ctx)
    tuned: Any = SCHEDULERS.get("tuned")
    made = tuned(ctx, seed) if table is None else tuned(ctx, seed, table=table)
    return made.decision
