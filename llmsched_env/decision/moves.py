"""Per-request moves a planner may weigh at a decision point, besides switching settings: send one waiting request
first in the next admission, preempt one running request, or shed one waiting request. Each move picks its
request from the engine's state at that moment (never from a request's true output length), so a plan that chose
it replays it exactly. The ``lookahead`` bound (``candidates=requests``) and ``mpc`` (``candidates=requests``)
weigh them.

    r = pick("first:edf", engine)          # the request the move would act on, or None
    if r is not None and not redundant("first:edf", engine, r, base_order):
        make_move("first:edf", engine, r)    # or play("first:edf", engine): pick and make at once
"""

from __future__ import annotations

from collections.abc import Callable

from llmsched_env.engine.batch import QueueOrder
from llmsched_env.engine.engine import LPM_WINDOW, Engine
from llmsched_env.engine.request import Request

__all__ = ["REQUEST_MOVES", "make_move", "pick", "play", "redundant"]


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
    """Make ``move`` on ``engine`` now, on the request it picks there: a move a planner chose on this very state
    (or on a copy of it), so it picks someone (it picks by state alone)."""
    r = pick(move, engine)
    assert r is not None, f"move {move} picked a request when planned, none now"
    make_move(move, engine, r)


def redundant(move: str, engine: Engine, r: Request, order: QueueOrder) -> bool:
    """Whether ``move`` on ``r`` changes nothing: a promotion of the request the base ``order`` sends first
    anyway (that is the base's own rollout)."""
    return REQUEST_MOVES[move][0] == "promote" and r is _first(order)(engine)
