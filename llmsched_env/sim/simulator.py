"""The simulator: the engine core driven by a cost model on an event clock; ``step(decision)`` runs one engine
iteration. An idle engine jumps straight to the next arrival, so every step the policy sees has work to decide.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import numpy as np
from mypy_extensions import mypyc_attr

from llmsched_env.costs.base import CostModel
from llmsched_env.engine.batch import Batch, Decision
from llmsched_env.engine.block_pool import check_prefix_layout
from llmsched_env.engine.config import EngineConfig, TenantConfig
from llmsched_env.engine.engine import Engine
from llmsched_env.engine.invariants import check_engine
from llmsched_env.engine.remote_kv import RemoteKVConfig, RemoteKVStore
from llmsched_env.engine.request import Request
from llmsched_env.sim.kv_usage import KVUsage
from llmsched_env.sim.metrics import compute_metrics

__all__ = ["Simulator", "check_arrival_order", "idle_tick_s", "wake_s"]


def idle_tick_s(cost_model: CostModel) -> float:
    """An engine idle while requests wait decides again after one single-token decode iteration's time."""
    return cost_model.step_time_s(0, 1, 0, 0.0)


def wake_s(start_s: float, arrival_s: float | None, fetch_s: float | None, waiting: bool, tick_s: float) -> float:
    """When an engine whose iteration ran nothing decides again: the earliest of the next arrival and the next
    remote-KV landing, or one ``tick_s`` while requests wait (or when neither event is due)."""
    wake = start_s + tick_s if waiting or (arrival_s is None and fetch_s is None) else math.inf
    if arrival_s is not None and arrival_s < wake:
        wake = arrival_s
    if fetch_s is not None and fetch_s < wake:
        wake = fetch_s
    return max(wake, start_s)


def check_arrival_order(requests: Sequence[Request]) -> None:
    """ValueError naming the first request listed after one arriving later (every driver replays in arrival order)."""
    for prev, cur in itertools.pairwise(requests):
        if cur.arrival_s < prev.arrival_s:
            raise ValueError(
                f"requests must be sorted by arrival: request {cur.request_id} arrives at {cur.arrival_s} "
                f"before request {prev.request_id} at {prev.arrival_s}"
            )


@mypyc_attr(allow_interpreted_subclasses=True)
class Simulator:
    """Replays ``requests`` (sorted by arrival) through an Engine over ``cost_model``, iterations priced by
    ``clock``."""

    def __init__(
        self,
        config: EngineConfig,
        tenants: Sequence[TenantConfig],
        cost_model: CostModel,
        requests: Sequence[Request],
        remote_kv: RemoteKVConfig | None = None,
        rng: np.random.Generator | None = None,
        clock: CostModel | None = None,
    ) -> None:
        check_arrival_order(requests)
        check_prefix_layout(requests, config.block_size)  # up front, before any request runs
        remote = None
        if remote_kv is not None:
            remote = RemoteKVStore(remote_kv, rng if rng is not None else np.random.default_rng(0))
        self.engine = Engine(config, tenants, cost_model, remote=remote)
        self.cost_model = cost_model
        self.clock = clock if clock is not None else cost_model
        self.requests = list(requests)
        self._next = 0
        self.num_steps = 0
        self.start_s = self.requests[0].arrival_s if self.requests else 0.0
        self.idle_tick_s = idle_tick_s(cost_model)
        self.kv_usage = KVUsage()  # time-weighted mean and peak, and the series after every step
        self._checked_now_s = 0.0
        # True once a fork shares the requests still to arrive: each is then copied as it arrives (``fork``)
        self._pending_shared = False
        self._arrive()
        self._skip_idle()

    # ------------------------------------------------------------------------------------------ driving
    @property
    def now_s(self) -> float:
        return self.engine.now_s

    @property
    def done(self) -> bool:
        """Every request has arrived and none is waiting or running."""
        return self._next >= len(self.requests) and not self.engine.has_work

    @property
    def num_pending_arrivals(self) -> int:
        return len(self.requests) - self._next

    @property
    def next_arrival_s(self) -> float | None:
        return self.requests[self._next].arrival_s if self._next < len(self.requests) else None

    def step(self, decision: Decision) -> Batch:
        """Run one engine iteration under ``decision`` and return the batch it ran."""
        engine = self.engine
        batch = engine.schedule(decision)
        start = engine.now_s
        if batch.is_empty:
            wake = wake_s(start, self.next_arrival_s, engine.next_fetch_ready_s(), engine.num_waiting_total > 0,
                          self.idle_tick_s)  # fmt: skip
            engine.advance_clock(wake)
        else:
            dt = self.execute(batch)
            self.kv_usage.add(engine.pool.usage, dt)
            engine.complete(batch, start + dt)
        self.num_steps += 1
        if self._next < len(self.requests):  # requests still to arrive (nothing to do otherwise)
            self._arrive()
            self._skip_idle()
        self.kv_usage.record(engine.now_s, engine.pool.num_used)
        return batch

    def execute(self, batch: Batch) -> float:
        """Run ``batch`` and return how long it took: the clock's price (the torch runtime runs the model)."""
        return batch.time_s(self.clock)

    def _arrive(self) -> None:
        reqs = self.requests
        i = self._next
        now = self.engine.now_s
        add = self.engine.add_request
        shared = self._pending_shared
        while i < len(reqs) and reqs[i].arrival_s <= now:
            r = reqs[i]
            if shared:  # another fork holds this very object, untouched: change a copy of it
                self.engine.prefix_hashes(r)  # once for every fork (a cache of its own prefix ids), not per copy
                r = reqs[i] = r.copy()
            add(r)
            i += 1
        self._next = i

    # ------------------------------------------------------------------------------------------ fork
    def fork(self, rng: np.random.Generator | None = None) -> Simulator:
        """An independent simulator in the same state: live requests copied, the others shared until copied on arrival.
        ``rng``: the fork's remote KV store's generator. A subclass cannot fork (ValueError)."""
        if type(self) is not Simulator:
            raise ValueError(f"{type(self).__name__} cannot fork: only the simulator's own state can be copied")
        engine = self.engine
        memo = {id(r): r.copy() for r in engine.live_requests()}
        get = memo.get
        new = Simulator.__new__(Simulator)
        new.engine = engine.fork(memo, rng)
        new.cost_model = self.cost_model
        new.clock = self.clock
        nxt = self._next
        reqs = self.requests
        new.requests = [get(id(r), r) for r in reqs[:nxt]]
        new.requests += reqs[nxt:]
        new._next = nxt
        new.num_steps = self.num_steps
        new.start_s = self.start_s
        new.idle_tick_s = self.idle_tick_s
        new.kv_usage = self.kv_usage.copy()
        new._checked_now_s = self._checked_now_s
        new._pending_shared = self._pending_shared = nxt < len(reqs) or self._pending_shared
        return new

    def with_future(
        self, arrivals: Sequence[Request], output_lens: Sequence[int], rng: np.random.Generator | None = None
    ) -> Simulator:
        """A fork whose future is a forecast: ``arrivals`` replace the requests still to arrive, the live ones get
        ``output_lens``. ``ValueError`` for a length not past what was produced, an early arrival or a wrong-sized
        list."""
        check_arrival_order(arrivals)
        if arrivals and arrivals[0].arrival_s < self.engine.now_s:
            raise ValueError(f"with_future: arrival {arrivals[0].request_id} lies before the clock")
        new = self.fork(rng)
        live = new.engine.live_requests()
        if len(live) != len(output_lens):
            raise ValueError(f"with_future: {len(output_lens)} output lengths for {len(live)} live requests")
        for r, n in zip(live, output_lens, strict=True):
            new.engine.set_output_len(r, int(n))
        check_prefix_layout(arrivals, new.engine.config.block_size)
        new.requests = new.requests[: new._next] + list(arrivals)
        new._pending_shared = False  # the arrivals are this fork's own (a fork of it shares them again)
        return new

    @staticmethod
    def around(engine: Engine, arrived: Sequence[Request], num_steps: int, start_s: float) -> Simulator:
        """A simulator going on from ``engine``'s state (it owns the engine now), nothing still to arrive: a planner's
        view. ``arrived``: the requests so far; ``num_steps`` since ``start_s`` estimate the step time."""
        new = Simulator.__new__(Simulator)
        new.engine = engine
        new.cost_model = new.clock = engine.cost_model
        new.requests = list(arrived)
        new._next = len(new.requests)
        new.num_steps = num_steps
        new.start_s = start_s
        new.idle_tick_s = idle_tick_s(engine.cost_model)
        new.kv_usage = KVUsage()
        new._checked_now_s = engine.now_s
        new._pending_shared = False
        return new

    def _skip_idle(self) -> None:
        if not self.engine.has_work and self._next < len(self.requests):
            self.engine.advance_clock(max(self.requests[self._next].arrival_s, self.engine.now_s))
            self._arrive()

    def check_invariants(self) -> None:
        """The engine's invariants, plus: arrivals are admitted in order and none is early."""
        check_engine(self.engine)
        assert self.engine.now_s >= self._checked_now_s, "the clock went back since the last check"
        self._checked_now_s = self.engine.now_s
        assert self.engine.num_arrived == self._next, "arrived count disagrees with the arrival cursor"
        assert all(r.arrival_s <= self.engine.now_s for r in self.requests[: self._next]), "arrival in future"

    # ------------------------------------------------------------------------------------------ results
    def arrived_requests(self) -> list[Request]:
        return self.requests[: self._next]

    def kv_usage_series(self) -> tuple[np.ndarray, np.ndarray]:
        """``(time_s, usage)`` after every step so far: the clock and the share of KV blocks in use; copies."""
        return self.kv_usage.series(self.engine.pool.num_blocks)

    def metrics(self) -> dict[str, float]:
        """The metrics (docs/baselines-and-metrics.md) over every request that has arrived (unfinished ones miss)."""
        engine = self.engine
        engine.sync_all()
        duration = max(engine.now_s - self.start_s, 1e-9)
        extra = {
            **self.kv_usage.metrics(),
            "num_iterations": float(self.num_steps),
            "duration_s": duration,
        }
        if engine.remote is not None:
            remote = engine.remote
            extra["remote_kv_fetches"] = float(remote.num_fetches)
            extra["remote_kv_fetched_tokens"] = float(remote.num_fetched_tokens)
            extra["remote_kv_fetch_mean_s"] = remote.total_fetch_s / remote.num_fetches if remote.num_fetches else 0.0
        return compute_metrics(self.arrived_requests(), engine.tenants, engine.round_end_s, duration, extra)
