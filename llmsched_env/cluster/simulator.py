"""The cluster simulator: a front router over N engines, each timed by its own cost model, on one event clock
(iteration ends and KV landings in one heap). Disaggregated (``DisaggConfig``), requests start on prefill
replicas and at their first token their prompt KV crosses the link to a decode replica.

    cluster = Cluster(specs, tenants, requests, local_decide)
    while (r := cluster.advance()) is not None:
        cluster.route(choose_replica(r))
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Mapping, Sequence

from llmsched_env.cluster.config import DisaggConfig, KVLink, ReplicaSpec, check_cluster_kv_blocks
from llmsched_env.costs.base import CostModel
from llmsched_env.engine.batch import Batch, Decision
from llmsched_env.engine.block_pool import check_prefix_layout
from llmsched_env.engine.config import TenantConfig
from llmsched_env.engine.engine import Engine
from llmsched_env.engine.request import Request
from llmsched_env.sim.kv_usage import KVUsage
from llmsched_env.sim.simulator import check_arrival_order, idle_tick_s

_new_object = object.__new__

LocalDecide = Callable[[int, Engine], Decision]
_STEP, _LAND = 0, 1  # heap event kinds: a replica's next decision point; a KV transfer landing


class Replica:
    """One replica's engine, cost model, role and run statistics."""

    __slots__ = (
        "batch",
        "busy",
        "cost_model",
        "engine",
        "idle_tick_s",
        "index",
        "kv_usage",
        "last_step_s",
        "num_incoming",
        "num_iterations",
        "role",
    )

    def __init__(self, index: int, spec: ReplicaSpec, tenants: Sequence[TenantConfig], role: str) -> None:
        self.index = index
        self.role = role  # "both", "prefill" or "decode"
        self.cost_model: CostModel = spec.cost_model
        self.engine = Engine(spec.engine, tenants, spec.cost_model, prefill_only=role == "prefill")
        self.batch: Batch | None = None  # the iteration in flight
        self.busy = False  # holds exactly one event in the heap (iteration end or idle tick)
        self.idle_tick_s = idle_tick_s(spec.cost_model)
        self.num_incoming = 0  # KV transfers on their way here
        self.num_iterations = 0
        self.last_step_s = 0.0
        self.kv_usage = KVUsage()

    def copy(self, memo: Mapping[int, Request]) -> Replica:
        """An independent copy in the same state for a fork of the cluster (``Cluster.fork``; ``memo`` as in
        ``Engine.fork``)."""
        c = _new_object(Replica)
        c.index, c.role, c.cost_model = self.index, self.role, self.cost_model
        c.engine = self.engine.fork(memo)
        c.batch = self.batch.copy(memo) if self.batch is not None else None
        c.busy, c.idle_tick_s, c.num_incoming = self.busy, self.idle_tick_s, self.num_incoming
        c.num_iterations, c.last_step_s = self.num_iterations, self.last_step_s
        c.kv_usage = self.kv_usage.copy()
        return c

    @property
    def num_outstanding(self) -> int:
        """Requests waiting, running, landed or on their way here."""
        e = self.engine
        return sum(e.num_waiting) + len(e.running) + len(e.landed) + self.num_incoming


class Cluster:
    """Replays ``requests`` (sorted by arrival, unique ids) through replicas built from ``specs``."""

    def __init__(
        self,
        specs: Sequence[ReplicaSpec],
        tenants: Sequence[TenantConfig],
        requests: Sequence[Request],
        local_decide: LocalDecide,
        disagg: DisaggConfig | None = None,
    ) -> None:
        if not specs:
            raise ValueError("Cluster needs at least one ReplicaSpec")
        if len({s.engine.block_size for s in specs}) > 1:
            raise ValueError("every replica must share one EngineConfig.block_size (KV moves block for block)")
        if disagg is not None and disagg.num_replicas != len(specs):
            raise ValueError(
                f"DisaggConfig has {disagg.num_prefill} prefill + {disagg.num_decode} decode replicas but "
                f"{len(specs)} ReplicaSpecs were given"
            )
        check_cluster_kv_blocks("Cluster", specs, disagg)
        check_arrival_order(requests)
        if len({r.request_id for r in requests}) != len(requests):
            raise ValueError("request ids must be unique within a cluster run")
        check_prefix_layout(requests, specs[0].engine.block_size)  # up front, before any request runs
        roles = (
            ["both"] * len(specs)
            if disagg is None
            else ["prefill"] * disagg.num_prefill + ["decode"] * (disagg.num_decode)
        )
        self.replicas = [Replica(i, s, tenants, roles[i]) for i, s in enumerate(specs)]
        self.tenants = tuple(tenants)
        self.disagg = disagg
        self.routable = [i for i, role in enumerate(roles) if role != "decode"]
        self.decode_pool = [i for i, role in enumerate(roles) if role == "decode"]
        self.requests = list(requests)
        self.local_decide = local_decide
        self.start_s = self.requests[0].arrival_s if self.requests else 0.0
        self.now_s = self.start_s
        self.block_size = specs[0].engine.block_size
        self._heap: list[tuple[float, int, int, int, Request | None]] = []
        self._num_events = 0  # events scheduled so far: the heap's tie-break, in scheduling order
        self._next = 0  # arrival cursor: requests[:_next] have been routed
        self.placed: dict[int, int] = {}  # request id -> replica it was routed to
        self.home: dict[int, int] = {}  # request id -> decode replica it moved to (disaggregated)
        self.in_flight: dict[int, Request] = {}  # KV transfers not yet landed, by request id
        self._rr_decode = 0
        self.links: list[KVLink] = []
        if disagg is not None:
            num_links = 1 if disagg.shared_link else disagg.num_decode
            self.links = [KVLink(disagg.link_latency_s, disagg.link_bandwidth_Bps) for _ in range(num_links)]
        # True once a fork shares the requests still to be routed: each is then copied as it is routed (``fork``)
        self._pending_shared = False

    def fork(self, local_decide: LocalDecide) -> Cluster:
        """An independent cluster in the same state, its iterations decided by ``local_decide``; requests copied
        and shared as ``Simulator.fork`` does (live ones, in flight too, copied; the rest shared)."""
        live = [r for rep in self.replicas for r in rep.engine.live_requests()]
        memo = {id(r): r.copy() for r in (*live, *self.in_flight.values())}
        get = memo.get
        new = _new_object(Cluster)
        d = new.__dict__
        d.update(self.__dict__)  # numbers, the immutable tenants and disaggregation config
        d["replicas"] = [rep.copy(memo) for rep in self.replicas]
        d["routable"] = self.routable[:]
        d["decode_pool"] = self.decode_pool[:]
        nxt = self._next
        d["requests"] = [get(id(r), r) for r in self.requests[:nxt]] + self.requests[nxt:]
        d["local_decide"] = local_decide
        d["_heap"] = [(t, seq, kind, i, r if r is None else get(id(r), r)) for t, seq, kind, i, r in self._heap]
        d["placed"] = self.placed.copy()
        d["home"] = self.home.copy()
        d["in_flight"] = {rid: get(id(r), r) for rid, r in self.in_flight.items()}
        d["links"] = [link.copy() for link in self.links]
        d["_pending_shared"] = self._pending_shared = nxt < len(self.requests) or self._pending_shared
        return new

    # ------------------------------------------------------------------------------------------ driving
    @property
    def num_routed(self) -> int:
        return self._next

    @property
    def done(self) -> bool:
        """Every request has been routed and nothing is left to run or transfer."""
        return self._next >= len(self.requests) and not self._heap

    def advance(self) -> Request | None:
        """Run every event up to the next arrival and return that request, to be placed with ``route``;
        None once all requests are routed and the cluster has drained."""
        if self._next < len(self.requests):
            r = self.requests[self._next]
            self._run_until(r.arrival_s)
            self.now_s = max(self.now_s, r.arrival_s)
            return r
        self._run_until(math.inf)
        return None

    def route(self, replica_index: int) -> None:
        """Place the arrival ``advance()`` returned on replica ``replica_index`` (one of ``routable``)."""
        if self._next >= len(self.requests):
            raise ValueError("no arrival to route: every request has been routed")
        if not (0 <= replica_index < len(self.replicas)) or self.replicas[replica_index].role == "decode":
            raise ValueError(f"replica_index must be one of the routable replicas {self.routable}, got {replica_index}")
        r = self.requests[self._next]
        if r.arrival_s > self.now_s:
            raise ValueError("call advance() before route(): the next request has not arrived yet")
        if self._pending_shared:  # another fork holds this very object, untouched: change a copy of it
            r = self.requests[self._next] = r.copy()
        self._next += 1
        self.placed[r.request_id] = replica_index
        rep = self.replicas[replica_index]
        eng = rep.engine
        if r.arrival_s > eng.now_s:
            eng.advance_clock(r.arrival_s)
        eng.add_request(r)
        if not rep.busy:
            self._start(rep, self.now_s)

    def run(self, choose: Callable[[Request], int]) -> None:
        """Route every request with ``choose(request) -> replica index`` and run until drained."""
        while (r := self.advance()) is not None:
            self.route(choose(r))

    # ------------------------------------------------------------------------------------------ events
    def _run_until(self, t_s: float) -> None:
        heap = self._heap
        replicas = self.replicas
        pop = heapq.heappop
        while heap and heap[0][0] <= t_s:
            t, _, kind, i, r = pop(heap)
            self.now_s = t
            rep = replicas[i]
            if kind == _STEP:
                batch = rep.batch
                if batch is not None:
                    rep.batch = None
                    eng = rep.engine
                    if rep.role == "prefill":
                        n0 = len(eng.handed_off)
                        eng.complete(batch, t)
                        for q in eng.handed_off[n0:]:
                            self._send(q, t)
                    else:
                        eng.complete(batch, t)
                self._start(rep, t)
            else:
                assert r is not None  # a landing event carries its request
                self._land(rep, r, t)

    def _start(self, rep: Replica, t: float) -> None:
        """Begin ``rep``'s next iteration at ``t`` (or an idle tick when its policy runs nothing)."""
        eng = rep.engine
        if not eng.has_work:
            rep.busy = False
            return
        batch = eng.schedule(self.local_decide(rep.index, eng))
        if batch.is_empty:
            if not eng.has_work:  # everything waiting was shed
                rep.busy = False
                return
            dt = rep.idle_tick_s
        else:
            dt = batch.time_s(rep.cost_model)
            rep.kv_usage.add(eng.pool.usage, dt)
            rep.batch = batch
            rep.num_iterations += 1
        rep.last_step_s = dt
        rep.busy = True
        heapq.heappush(self._heap, (t + dt, self._event_seq(), _STEP, rep.index, None))

    def _send(self, r: Request, t: float) -> None:
        """``r`` finished its prefill: send its prompt KV to a decode replica."""
        disagg = self.disagg
        assert disagg is not None
        j = self._pick_decode(r)
        link = self.links[0] if disagg.shared_link else self.links[self.decode_pool.index(j)]
        ready = link.send(t, r.prompt_len * disagg.kv_bytes_per_token)
        self.in_flight[r.request_id] = r
        self.replicas[j].num_incoming += 1
        heapq.heappush(self._heap, (ready, self._event_seq(), _LAND, j, r))

    def _event_seq(self) -> int:
        """The next event's tie-break number (events at one time run in the order they were scheduled)."""
        n = self._num_events
        self._num_events = n + 1
        return n

    def _land(self, rep: Replica, r: Request, t: float) -> None:
        del self.in_flight[r.request_id]
        rep.num_incoming -= 1
        self.home[r.request_id] = rep.index
        eng = rep.engine
        if t > eng.now_s:
            eng.advance_clock(t)
        eng.add_handoff(r)
        if not rep.busy:
            self._start(rep, t)

    def _pick_decode(self, r: Request) -> int:
        """The decode replica for ``r`` under ``DisaggConfig.decode_rule``, among those that can hold it."""
        assert self.disagg is not None
        pool = [
            j
            for j in self.decode_pool
            if self.replicas[j].engine.config.max_model_len >= r.total_len
            and self.replicas[j].engine.pool.blocks_for(r.total_len) <= self.replicas[j].engine.config.num_kv_blocks
        ] or self.decode_pool  # none can: the first rejects it on landing
        rule = self.disagg.decode_rule
        if rule == "round_robin":
            j = pool[self._rr_decode % len(pool)]
            self._rr_decode += 1
            return j
        if rule == "least_outstanding":
            return min(pool, key=lambda k: self.replicas[k].num_outstanding)

        def free_per_request(k: int) -> float:
            rep = self.replicas[k]
            e = rep.engine
            load = len(e.running) + len(e.landed) + rep.num_incoming + 1
            return e.pool.num_free_blocks / load

        return max(pool, key=free_per_request)

    # ------------------------------------------------------------------------------------------ results
    def arrived_requests(self) -> list[Request]:
        return self.requests[: self._next]

    def pending_events(self) -> list[tuple[float, int, int]]:
        """``(time, kind, replica)`` of every scheduled event (kind 0: iteration end or tick, 1: landing)."""
        return [(t, kind, i) for t, _, kind, i, _ in self._heap]
