"""What a planner weighs: static knob settings (the ``tuned`` search's space, the bases ``lookahead`` and ``mpc``
move around) and per-request moves. Static admission caps exclude 0 (an engine that always holds admits one
request at a time); a per-request move picks its request from the engine's state alone, so a plan replays exactly.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np

from llmsched_env.decision.actions import ActionSpec
from llmsched_env.decision.policy import PolicyContext
from llmsched_env.decision.registry import SCHEDULERS, make_scheduler
from llmsched_env.engine.batch import Decision, QueueOrder
from llmsched_env.engine.engine import LPM_WINDOW, Engine
from llmsched_env.engine.request import Request

__all__ = ["REQUEST_MOVES", "STATIC_HEURISTICS", "acts", "around", "base_decision", "make_move", "neighbours", "pick",
           "play", "random_candidates", "search_options", "setting_of", "static_decision"]  # fmt: skip

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
    """Every single-knob move from ``d``, ``d`` itself and repeats left out."""
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


def around(base: Decision, spec: ActionSpec, candidates: str) -> tuple[list[Decision], list[str]]:
    """A planner's candidates: the settings (``base`` first, then its single-knob moves) and the per-request moves."""
    settings = [base] if candidates == "base" else [base, *neighbours(base, spec)]
    return settings, list(REQUEST_MOVES) if candidates == "requests" else []


def random_candidates(spec: ActionSpec, num: int, seed: int) -> list[Decision]:
    """``num`` knob settings, each knob uniform over its search options, drawn from ``seed``."""
    rng = np.random.default_rng(seed)
    options = search_options(spec)
    return [Decision(**{k: v[int(rng.integers(len(v)))] for k, v in options.items()}) for _ in range(num)]


def static_decision(name: str, ctx: PolicyContext) -> Decision:
    """The knobs static heuristic ``name`` plays, moved onto ``ctx.action_spec``'s options as its action is."""
    decision = getattr(make_scheduler(name, ctx), "decision", None)
    if not isinstance(decision, Decision):
        raise ValueError(f"scheduler {name!r} is not a static heuristic (it has no fixed decision)")
    return ctx.action_spec.decode(ctx.action_spec.encode(decision))


def base_decision(name: str, ctx: PolicyContext, seed: int = 0, table: Any = None) -> Decision:
    """A planner's base setting: ``tuned``'s entry for ``ctx.scenario``, or static rule ``name``'s knobs.
    ``ValueError`` without an entry or for no static rule."""
    if name != "tuned":
        return static_decision(name, ctx)
    tuned: Any = SCHEDULERS.get("tuned")
    made = tuned(ctx, seed) if table is None else tuned(ctx, seed, table=table)
    return made.decision


# ------------------------------------------------------------------------------------------ per-request moves
def _first(order: QueueOrder) -> Callable[[Engine], Request | None]:
    return lambda e: e.queue.best(order, e.now_s, e.sjf_starvation_s)


def _most_cached(e: Engine) -> Request | None:
    window = e.queue.oldest(LPM_WINDOW)  # the window the engine's LPM order scores
    return max(window, key=e.cached_prefix_blocks, default=None)  # the oldest among equals


def _least_attained_head(e: Engine) -> Request | None:
    heads = [(t, h) for t in range(len(e.tenants)) if e.num_waiting[t] and (h := e.head(t)) is not None]
    if len(heads) < 2:
        return None  # one tenant waiting: its head is the base order's pick or one of the others
    good, missed = e.num_good_t, e.num_missed_t

    def attained(item: tuple[int, Request]) -> float:
        t = item[0]
        done = good[t] + missed[t]
        return good[t] / done if done else 1.0

    return min(heads, key=attained)[1]  # the tenant listed first among equals


def _largest_running(e: Engine) -> Request | None:
    if len(e.running) < 2:
        return None  # preempting the only running request frees memory for nobody
    return max(reversed(e.running.values()), key=lambda r: len(r.block_table))  # the latest admitted among equals


def _longest_waiting_prompt(e: Engine) -> Request | None:
    return max(e.queue.requests(), key=lambda r: r.num_prefill_tokens, default=None)


# move name -> (what it does, how it picks its request from the engine's state at the decision point)
REQUEST_MOVES: dict[str, tuple[str, Callable[[Engine], Request | None]]] = {
    "first:edf": ("promote", _first(QueueOrder.EDF)),
    "first:sjf": ("promote", _first(QueueOrder.SJF)),
    "first:priority": ("promote", _first(QueueOrder.PRIORITY_AGING)),
    "first:vtc": ("promote", _first(QueueOrder.VTC)),
    "first:fcfs": ("promote", _first(QueueOrder.FCFS)),
    "first:cached": ("promote", _most_cached),
    "first:least_attained": ("promote", _least_attained_head),
    "preempt:largest": ("preempt", _largest_running),
    "shed:edf": ("shed", _first(QueueOrder.EDF)),
    "shed:longest": ("shed", _longest_waiting_prompt),
}


def pick(move: str, engine: Engine) -> Request | None:
    """The request ``move`` (a ``REQUEST_MOVES`` name) would act on in ``engine``'s state, or None."""
    return REQUEST_MOVES[move][1](engine)


def make_move(move: str, engine: Engine, r: Request) -> None:
    kind = REQUEST_MOVES[move][0]
    if kind == "promote":
        engine.promote(r)
    elif kind == "preempt":
        engine.preempt_request(r)
    else:
        engine.shed_request(r)


def play(move: str, engine: Engine) -> None:
    """Make ``move`` now on the request it picks: one a planner chose on this state or a copy of it."""
    r = pick(move, engine)
    assert r is not None, f"move {move} picked a request when planned, none now"
    make_move(move, engine, r)


def setting_of(chosen: int, settings: int, moves: list[str], engine: Engine) -> int:
    """The setting candidate ``chosen`` plays: its own, or for a move (made on ``engine`` now) the base's."""
    if chosen < settings:
        return chosen
    play(moves[chosen - settings], engine)
    return 0


def acts(move: str, engine: Engine, order: QueueOrder) -> Request | None:
    """The request ``move`` acts on, or None: nobody, or a promotion of the request the base sends first anyway."""
    r = pick(move, engine)
    return None if r is None or (REQUEST_MOVES[move][0] == "promote" and r is _first(order)(engine)) else r
