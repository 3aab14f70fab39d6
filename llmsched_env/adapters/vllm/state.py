"""vLLM's scheduler state as llmsched's ``EngineState``: ``VllmState`` and the views under it.

Live views of a vLLM v1 ``Scheduler``'s running list, in-flight prefills and block pool, plus per-tenant
counters and one shadow llmsched ``Request`` per live vLLM request, kept by the scheduler's hooks. It reads the
scheduler duck-typed and imports no vLLM (the names it reads: ``SCHEDULER_ATTRIBUTES``, ``REQUEST_ATTRIBUTES``).
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from llmsched_env.costs.base import CostModel, prefill_time_unchecked_s
from llmsched_env.engine.config import EngineConfig, TenantConfig
from llmsched_env.engine.queues import WaitingQueues
from llmsched_env.engine.request import Request, Status, tpot_s

__all__ = [
    "HISTORY", "REQUEST_ATTRIBUTES", "SCHEDULER_ATTRIBUTES", "TENANT_KEY", "SimClock", "VllmState",
    "engine_config_of",
]  # fmt: skip

TENANT_KEY = "llmsched_tenant"  # sampling_params.extra_args key naming a request's tenant
_RATE_TAU_S = 10.0  # the engine's arrival-rate time constant
_LATENCY_EWMA = 0.05  # the engine's latency average weight
HISTORY = 1024  # recent arrivals and finished requests kept for a planner's forecast (adapters.vllm.planning)
_STEP_EWMA = 0.05  # weight of the newest step in the step-time average
_IDLE_GAP_S = 1.0  # a longer gap between two steps is idle time, not a step
# What the adapter reads of vLLM's Scheduler and Request (tests/test_vllm_adapter.py checks vLLM has them)
SCHEDULER_ATTRIBUTES = ("running", "_inflight_prefills", "kv_cache_manager", "scheduler_config", "block_size",
                        "max_model_len", "max_num_scheduled_tokens", "max_num_active_reqs", "requests")  # fmt: skip
REQUEST_ATTRIBUTES = ("request_id", "arrival_time", "num_prompt_tokens", "max_tokens", "sampling_params",
                      "num_output_tokens", "num_tokens", "num_computed_tokens", "status", "client_index")  # fmt: skip


class SimClock:
    """A settable clock for offline runs: ``clock()`` returns ``now_s``."""

    def __init__(self, now_s: float = 0.0) -> None:
        self.now_s = now_s

    def __call__(self) -> float:
        return self.now_s


def engine_config_of(scheduler: Any) -> EngineConfig:
    """The llmsched ``EngineConfig`` of a vLLM scheduler's limits (vLLM's null block is not usable)."""
    sc = scheduler.scheduler_config
    return EngineConfig(num_kv_blocks=scheduler.kv_cache_manager.block_pool.num_gpu_blocks - 1,
                        block_size=scheduler.block_size, max_num_seqs=sc.max_num_seqs,
                        max_num_batched_tokens=sc.max_num_batched_tokens,
                        max_model_len=scheduler.max_model_len)  # fmt: skip


class _CachedFreeCounter:
    """Counts free blocks that still hold a block hash (llmsched's ``num_cached_blocks``) by wrapping the free-block
    queue's moves (O(blocks moved)); rescans once after a prefix-cache reset or a connector eviction."""

    def __init__(self, scheduler: Any) -> None:
        self.pool = scheduler.kv_cache_manager.block_pool
        q = self.pool.free_block_queue
        self.count = 0
        self.recount()
        pop1, popn, rm, app1, appn, prepn = q.popleft, q.popleft_n, q.remove, q.append, q.append_n, q.prepend_n

        def popleft() -> Any:
            b = pop1()
            self.count -= b._block_hash is not None
            return b

        def popleft_n(n: int) -> Any:
            out = popn(n)
            self.count -= sum(b._block_hash is not None for b in out)
            return out

        def remove(b: Any) -> None:
            rm(b)
            self.count -= b._block_hash is not None

        def append(b: Any) -> None:
            app1(b)
            self.count += b._block_hash is not None

        def append_n(blocks: list[Any]) -> None:
            appn(blocks)
            if blocks:  # a request aborted while waiting frees none
                self.count += sum(b._block_hash is not None for b in blocks)

        def prepend_n(blocks: list[Any]) -> None:
            prepn(blocks)
            if blocks:
                self.count += sum(b._block_hash is not None for b in blocks)

        q.popleft, q.popleft_n, q.remove, q.append, q.append_n, q.prepend_n = (popleft, popleft_n, remove, append,
                                                                                append_n, prepend_n)  # fmt: skip
        for name in ("reset_prefix_cache", "evict_blocks"):  # they drop hashes without moving blocks: rescan after
            method = getattr(self.pool, name, None)
            if method is not None:
                setattr(self.pool, name, self._rescanning(method))

    def _rescanning(self, method: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            try:
                return method(*args, **kwargs)
            finally:
                self.recount()

        return call

    def recount(self) -> None:
        """Rescan the pool (O(blocks)): after a prefix-cache reset or a connector eviction only."""
        q = self.pool.free_block_queue
        self.count = sum(1 for b in q.get_all_free_blocks() if b._block_hash is not None)


class _PoolView:
    """The ``PoolState`` of vLLM's block pool (its null block excluded)."""

    def __init__(self, scheduler: Any, num_blocks: int) -> None:
        self._pool = scheduler.kv_cache_manager.block_pool
        self._num_blocks = num_blocks
        self._cached = _CachedFreeCounter(scheduler)

    @property
    def num_free_blocks(self) -> int:
        return self._pool.free_block_queue.num_free_blocks

    @property
    def num_used(self) -> int:
        return self._num_blocks - self._pool.free_block_queue.num_free_blocks

    @property
    def num_cached_blocks(self) -> int:
        return self._cached.count


class VllmState:
    """vLLM's scheduler state as llmsched's ``EngineState`` (see the module docstring)."""

    def __init__(self, scheduler: Any, config: EngineConfig, tenants: Sequence[TenantConfig], cost_model: CostModel,
                 clock: Callable[[], float]) -> None:  # fmt: skip
        self._s = scheduler
        self.config = config
        self.tenants = tuple(tenants)
        self.cost_model = cost_model
        self.clock = clock
        n = len(self.tenants)
        self.tenant_index = {t.name: k for k, t in enumerate(self.tenants)}
        self.pool = _PoolView(scheduler, config.num_kv_blocks)
        self.vtc = [0.0] * n
        self._ttft = [t.slo.ttft_s for t in self.tenants]
        self._tpot = [t.slo.tpot_s for t in self.tenants]
        self._weights = [t.weight for t in self.tenants]
        self.queue = WaitingQueues(self._ttft, [t.priority * 10.0 for t in self.tenants], self.vtc)
        self.num_waiting = self.queue.num_waiting
        self.waiting_tokens = self.queue.waiting_tokens
        self.waiting_predicted = self.queue.waiting_predicted  # all 0: vLLM requests carry no length prediction
        self.num_running_t = [0] * n
        self.service_tokens = [0] * n
        self.num_good_t = [0] * n
        self.num_missed_t = [0] * n
        self.num_good = 0
        self.num_missed = 0
        self.num_fetching = 0  # no remote KV store here
        self.ttft_ratio_ewma = 0.0
        self.tpot_ratio_ewma = 0.0
        self.running_total_blocks = 0
        self.rate_est = 0.0
        self._rate_t = 0.0
        self.shadows: dict[str, Request] = {}  # vLLM request id -> its shadow
        self.vreqs: dict[int, Any] = {}  # shadow id -> the vLLM request
        self.awaiting_first: dict[str, Request] = {}  # running, first token not yet out
        self.running_ids: set[str] = set()  # vLLM ids of the requests in vLLM's running list
        self._ttft_heap: list[tuple[float, int, Request]] = []
        # shadow id -> (prefill tokens, the latest start from which its TTFT is reachable with no cache hit, and
        # with the largest hit possible)
        self._shed_after: dict[int, tuple[int, float, float]] = {}
        self._next_id = 0
        # what a planner's forecast reads (adapters.vllm.planning): the last HISTORY arrivals (shadows, arrival
        # order) and completed requests (each a finished llmsched Request of the length it produced)
        self.recent_arrivals: deque[Request] = deque(maxlen=HISTORY)
        self.recent_finished: deque[Request] = deque(maxlen=HISTORY)
        self.step_s = 0.0  # the recent mean time of a step (0 before two steps)
        self._last_step_end = -1.0

    # -- the EngineState views ---------------------------------------------------------------------------
    @property
    def now_s(self) -> float:
        return self.clock()

    @property
    def running(self) -> list[Any]:
        return self._s.running

    @property
    def prefilling(self) -> set[Any]:
        return self._s._inflight_prefills

    @property
    def num_decoding(self) -> int:
        return len(self._s.running) - len(self._s._inflight_prefills)

    def head(self, t: int) -> Request | None:
        return self.queue.head(t)

    def remaining_prefill_tokens(self) -> int:
        return sum(r.num_tokens - r.num_computed_tokens for r in self._s._inflight_prefills)

    def next_fetch_ready_s(self) -> float | None:
        return None

    def arrival_rate(self) -> float:
        dt = self.now_s - self._rate_t
        return self.rate_est * math.exp(-dt / _RATE_TAU_S) if dt > 0 else self.rate_est

    # -- bookkeeping hooks -------------------------------------------------------------------------------
    def shadow_of(self, vreq: Any) -> Request:
        """The shadow of ``vreq`` (made on first sight), its output count synced."""
        sh = self.shadows.get(vreq.request_id)
        if sh is None:
            sh = self._arrive(vreq)
        sh.num_output_tokens = vreq.num_output_tokens
        return sh

    def _arrive(self, vreq: Any) -> Request:
        extra = vreq.sampling_params.extra_args if vreq.sampling_params is not None else None
        name = extra.get(TENANT_KEY) if extra else None
        t = self.tenant_index.get(name, 0) if name is not None else 0
        sh = Request(self._next_id, vreq.arrival_time, vreq.num_prompt_tokens, max(vreq.max_tokens, 1), tenant=t)
        self._next_id += 1
        self.shadows[vreq.request_id] = sh
        self.vreqs[sh.request_id] = vreq
        self.recent_arrivals.append(sh)
        decay = math.exp(-(sh.arrival_s - self._rate_t) / _RATE_TAU_S) if sh.arrival_s > self._rate_t else 1.0
        self.rate_est = self.rate_est * decay + 1.0 / _RATE_TAU_S
        self._rate_t = max(self._rate_t, sh.arrival_s)
        if self.num_waiting[t] == 0 and self.num_running_t[t] == 0:  # the engine's VTC counter lift
            active = [self.vtc[k] for k in range(len(self.tenants)) if self.num_waiting[k] or self.num_running_t[k]]
            if active:
                self.vtc[t] = max(self.vtc[t], min(active))
        heapq.heappush(self._ttft_heap, (sh.arrival_s + self._ttft[t], sh.request_id, sh))
        return sh

    def admitted(self, rid: str) -> None:
        """vLLM moved request ``rid`` into its running list this step."""
        sh = self.shadows[rid]
        t = sh.tenant
        self.num_running_t[t] += 1
        self.running_total_blocks += -(-sh.total_len // self.config.block_size)
        self.running_ids.add(rid)
        if sh.first_scheduled_s is None:
            sh.first_scheduled_s = self.now_s
            self.vtc[t] += sh.prompt_len / self._weights[t]
            self.service_tokens[t] += sh.prompt_len
        if sh.first_token_s is None:
            self.awaiting_first[rid] = sh

    def left_running(self, vreq: Any) -> None:
        """``vreq`` leaves the running list (preempted or finished)."""
        sh = self.shadows[vreq.request_id]
        self.running_ids.discard(vreq.request_id)
        self.num_running_t[sh.tenant] -= 1
        self.running_total_blocks -= -(-sh.total_len // self.config.block_size)
        self.awaiting_first.pop(vreq.request_id, None)

    def decodes_per_tenant(self, prefilling: Iterable[Any]) -> list[int]:
        """Each tenant's running requests that decode this step (less ``prefilling``)."""
        decodes = self.num_running_t[:]
        shadows = self.shadows
        for r in prefilling:
            decodes[shadows[r.request_id].tenant] -= 1
        return decodes

    def decoded(self, per_tenant: Sequence[int]) -> None:
        """A step ran with ``per_tenant`` decodes: count their tokens (service, VTC) and first tokens."""
        for t, n in enumerate(per_tenant):
            if n:
                self.vtc[t] += 2 * n / self._weights[t]
                self.service_tokens[t] += 2 * n
        now = self.now_s
        dt = now - self._last_step_end
        if 0.0 < dt < _IDLE_GAP_S and self._last_step_end >= 0.0:
            self.step_s += (dt - self.step_s) * (_STEP_EWMA if self.step_s else 1.0)
        self._last_step_end = now
        awaiting = self.awaiting_first
        if awaiting:
            vreqs = self.vreqs
            for rid, sh in list(awaiting.items()):
                if vreqs[sh.request_id].num_output_tokens > 0:
                    sh.first_token_s = now
                    del awaiting[rid]

    def finished(self, vreq: Any, completed: bool) -> None:
        """``vreq`` finished (``completed``, else aborted or failed): resolve its SLO and forget its shadow."""
        sh = self.shadows.pop(vreq.request_id, None)
        if sh is None:
            return
        del self.vreqs[sh.request_id]
        self._shed_after.pop(sh.request_id, None)
        if sh in self.queue:
            self.queue.remove(sh)
        t = sh.tenant
        first = sh.first_token_s
        if first is None or not completed:
            self._resolve(sh, met=False)
            return
        now = self.now_s
        ttft_ratio = (first - sh.arrival_s) / self._ttft[t]
        tpot_ratio = float(tpot_s(first, now, max(vreq.num_output_tokens, 1))) / self._tpot[t]
        self.ttft_ratio_ewma += _LATENCY_EWMA * (ttft_ratio - self.ttft_ratio_ewma)
        self.tpot_ratio_ewma += _LATENCY_EWMA * (tpot_ratio - self.tpot_ratio_ewma)
        self._resolve(sh, met=ttft_ratio <= 1.0 and tpot_ratio <= 1.0)
        done = Request(sh.request_id, sh.arrival_s, sh.prompt_len, max(vreq.num_output_tokens, 1), tenant=t)
        done.num_output_tokens = done.output_len
        done.status = Status.FINISHED
        done.first_token_s, done.finish_s, done.slo_resolved = first, now, True
        self.recent_finished.append(done)

    def _resolve(self, sh: Request, met: bool) -> None:
        if sh.slo_resolved:
            return
        sh.slo_resolved = True
        if met:
            self.num_good += 1
            self.num_good_t[sh.tenant] += 1
        else:
            self.num_missed += 1
            self.num_missed_t[sh.tenant] += 1

    def expire_ttft(self) -> None:
        """Requests still without a first token past their TTFT deadline count as misses from now on."""
        heap = self._ttft_heap
        if not heap:
            return
        now = self.now_s
        while heap and heap[0][0] < now:
            _, _, sh = heapq.heappop(heap)
            if sh.first_token_s is None:
                self._resolve(sh, met=False)

    def hopeless(self, sh: Request) -> bool:
        """Even alone and unchunked, ``sh``'s first token would miss its TTFT deadline (the engine's rule), its
        prefill priced after vLLM's prefix-cache hit; the cache is asked only between the deadlines with no hit
        and with the largest hit, priced once per prefill length."""
        if sh.first_token_s is not None:
            return False
        n, now = sh.num_prefill_tokens, self.now_s
        bounds = self._shed_after.get(sh.request_id)
        if bounds is None or bounds[0] != n:  # priced once per prefill length
            deadline = sh.arrival_s + self._ttft[sh.tenant]
            cost = self.cost_model
            last = deadline - prefill_time_unchecked_s(cost, n, num_cached_tokens=n - 1)
            if now > last:  # shed now: the other deadline is not needed
                return True
            bounds = (n, deadline - prefill_time_unchecked_s(cost, n), last)
            self._shed_after[sh.request_id] = bounds
        if now <= bounds[1]:
            return False
        if now > bounds[2]:
            return True
        _, cached, _ = self._s.kv_cache_manager.get_computed_blocks(self.vreqs[sh.request_id])
        if not cached:
            return True
        return now > sh.arrival_s + self._ttft[sh.tenant] - prefill_time_unchecked_s(
            self.cost_model, n, num_cached_tokens=cached
        )
