"""Engine state and the batch builder (vLLM v1's): ``schedule(decision) -> Batch``, then ``complete(batch,
end_s)``. Running work first (one token per decode, prefills chunked to the cap), then waiting requests in the
decision's order within the leftover budget; a request short of KV blocks preempts a victim by recompute, and an
iteration that preempted admits nobody. A ``prefill_only`` engine hands requests off at their first token
(``handed_off``); a decode engine takes them with ``add_handoff``.
"""

from __future__ import annotations

import heapq
import math
from array import array
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING

from mypy_extensions import mypyc_attr

from llmsched_env.costs.base import CostModel, prefill_time_unchecked_s
from llmsched_env.engine.batch import Batch, Decision, QueueOrder
from llmsched_env.engine.block_pool import BlockPool, chain_hashes, check_prefix_layout
from llmsched_env.engine.config import EngineConfig, TenantConfig
from llmsched_env.engine.queues import WaitingQueues
from llmsched_env.engine.remote_kv import RemoteKVStore
from llmsched_env.engine.request import Request, Status, tpot_s

if TYPE_CHECKING:
    import numpy as np

LPM_WINDOW = 64  # SGLang scores at most this many of the oldest waiting requests by cached prefix
_RATE_TAU_S = 10.0  # time constant of the arrival-rate estimate
_LATENCY_EWMA = 0.05  # weight of the newest finished request in the recent latency averages


def _admit_seq(r: Request) -> int:
    return r.admit_seq


@mypyc_attr(allow_interpreted_subclasses=True)
class Engine:
    """Queues, running set, KV pool and per-tenant counters of one serving engine."""

    def __init__(self, config: EngineConfig, tenants: Sequence[TenantConfig], cost_model: CostModel,
                 priority_aging_s: float = 10.0, sjf_starvation_s: float = 10.0, remote: RemoteKVStore | None = None,
                 prefill_only: bool = False) -> None:
        if not tenants:
            raise ValueError("Engine needs at least one tenant")
        self.config = config
        self.tenants = tuple(tenants)
        self.cost_model = cost_model
        self.remote = remote
        self.num_fetching = 0  # admitted requests waiting for a remote KV transfer
        self.prefill_only = prefill_only  # hand requests off at their first token instead of decoding them
        self.handed_off: list[Request] = []  # requests this engine prefilled and handed off, in order
        self.landed: deque[Request] = deque()  # handed-off requests whose KV arrived here, waiting for blocks
        self.priority_aging_s = priority_aging_s
        self.sjf_starvation_s = sjf_starvation_s
        self.block_size = config.block_size
        self.pool = BlockPool(config.num_kv_blocks, config.block_size)
        n = len(self.tenants)
        self._ttft_heap: list[tuple[float, int, Request]] = []
        self.num_running_t = [0] * n
        self.num_decoding_t = [0] * n
        self.vtc = [0.0] * n  # virtual token counters: (input + 2 * output tokens) / weight
        self.queue = WaitingQueues([t.slo.ttft_s for t in self.tenants],
                                   [t.priority * priority_aging_s for t in self.tenants], self.vtc)
        self.num_waiting = self.queue.num_waiting  # per tenant (the queue's live list)
        self.waiting_tokens = self.queue.waiting_tokens  # prefill tokens waiting, per tenant
        self.waiting_predicted = self.queue.waiting_predicted  # predicted output tokens waiting, per tenant
        self.service_tokens = [0] * n  # unweighted input + 2 * output tokens
        self.num_arrived_t = [0] * n
        self.num_good_t = [0] * n
        self.num_missed_t = [0] * n
        self.running: dict[int, Request] = {}  # admission order
        self._num_admissions = 0
        self.running_total_blocks = 0  # blocks the running requests hold once all their tokens exist
        self.prefilling: dict[int, Request] = {}  # running requests whose prefill is unfinished
        self.finished: list[Request] = []
        self.rejected: list[Request] = []
        self.num_arrived = 0
        self.now_s = 0.0
        self.num_rounds = 0  # decode rounds run so far
        self.round_end_s = array("d")  # end time of each decode round
        self.decode_events: dict[int, list[Request]] = {}
        self.num_decoding = 0
        self.decode_base = 0  # sum over decoding requests of (prompt + out0 - round0)
        self._preempted_since_schedule = False
        self._promoted: Request | None = None  # waiting request the next admission pass considers first (promote)
        self.num_preemptions = 0
        self.num_prompt_tokens_admitted = 0
        self.num_prefix_hit_tokens = 0
        self.num_good = 0
        self.num_missed = 0
        self.num_output_tokens = 0
        self.rate_est = 0.0
        self._rate_t = 0.0
        self.ttft_ratio_ewma = 0.0  # recent TTFT / target of finished requests
        self.tpot_ratio_ewma = 0.0  # recent TPOT / target of finished requests
        self.last_batch: Batch | None = None
        self._ttft_slo = [t.slo.ttft_s for t in self.tenants]
        self._tpot_slo = [t.slo.tpot_s for t in self.tenants]
        self._weights = [t.weight for t in self.tenants]

    # ---------------------------------------------------------------------------------- fork
    def live_requests(self) -> list[Request]:
        """The requests whose state may still change here: waiting, running, and landed hand-offs."""
        return [*self.queue.requests(), *self.running.values(), *self.landed]

    def fork(self, memo: Mapping[int, Request], rng: np.random.Generator | None = None) -> Engine:
        """An independent engine in the same state (same batches, times and metrics under the same decisions).
        ``memo`` maps ``id(request)`` to the fork's copy of every live request (``live_requests``); the others
        are shared. ``rng``: what the fork's remote KV store draws from. O(live state), no deep copy."""
        get = memo.get
        new = Engine.__new__(Engine)  # no __init__: every attribute is set below (compiled, a slot each)
        # numbers, flags, and the immutable config, tenants and cost model
        (new.config, new.tenants, new.cost_model, new.num_fetching, new.prefill_only, new.priority_aging_s,
         new.sjf_starvation_s, new.block_size, new._num_admissions, new.running_total_blocks, new.num_arrived,
         new.now_s, new.num_rounds, new.num_decoding, new.decode_base, new._preempted_since_schedule,
         new.num_preemptions, new.num_prompt_tokens_admitted, new.num_prefix_hit_tokens, new.num_good, new.num_missed,
         new.num_output_tokens, new.rate_est, new._rate_t, new.ttft_ratio_ewma, new.tpot_ratio_ewma) = (
            self.config, self.tenants, self.cost_model, self.num_fetching, self.prefill_only, self.priority_aging_s,
            self.sjf_starvation_s, self.block_size, self._num_admissions, self.running_total_blocks, self.num_arrived,
            self.now_s, self.num_rounds, self.num_decoding, self.decode_base, self._preempted_since_schedule,
            self.num_preemptions, self.num_prompt_tokens_admitted, self.num_prefix_hit_tokens, self.num_good,
            self.num_missed, self.num_output_tokens, self.rate_est, self._rate_t, self.ttft_ratio_ewma,
            self.tpot_ratio_ewma)  # fmt: skip
        # what changes, copied; requests replaced by their copies
        new.remote = self.remote.copy(rng) if self.remote is not None else None
        new.handed_off = [get(id(r), r) for r in self.handed_off]
        new.landed = deque([get(id(r), r) for r in self.landed])
        new.pool = self.pool.copy()
        new._ttft_heap = [(t, rid, get(id(r), r)) for t, rid, r in self._ttft_heap]
        (new.num_running_t, new.num_decoding_t, new.service_tokens, new.num_arrived_t, new.num_good_t, new.num_missed_t,
         new.finished, new.rejected, new._ttft_slo, new._tpot_slo, new._weights) = (
            self.num_running_t[:], self.num_decoding_t[:], self.service_tokens[:], self.num_arrived_t[:],
            self.num_good_t[:], self.num_missed_t[:], self.finished[:], self.rejected[:], self._ttft_slo[:],
            self._tpot_slo[:], self._weights[:])  # fmt: skip
        vtc = new.vtc = self.vtc[:]
        queue = new.queue = self.queue.copy(memo, vtc)
        new.num_waiting = queue.num_waiting  # the queue's live lists, as in __init__
        new.waiting_tokens = queue.waiting_tokens
        new.waiting_predicted = queue.waiting_predicted
        new.running = {rid: get(id(r), r) for rid, r in self.running.items()}
        new.prefilling = {rid: get(id(r), r) for rid, r in self.prefilling.items()}
        new.round_end_s = self.round_end_s[:]
        new.decode_events = {k: [get(id(r), r) for r in bucket] for k, bucket in self.decode_events.items()}
        new.last_batch = self.last_batch.copy(memo) if self.last_batch is not None else None
        promoted = self._promoted
        new._promoted = get(id(promoted), promoted) if promoted is not None else None
        return new

    # ---------------------------------------------------------------------------------- arrivals, clock
    def advance_clock(self, t_s: float) -> None:
        """Move the clock forward to ``t_s`` (an idle engine waiting for the next arrival)."""
        assert t_s >= self.now_s, f"clock goes back: {t_s} < {self.now_s}"
        self.now_s = t_s
        self._expire_ttft()

    def add_request(self, r: Request) -> None:
        """A request arrives now. One that can never fit (longer than the model or the KV pool) is rejected."""
        assert r.status == Status.WAITING and not r.block_table, f"{r} is not a fresh request"
        assert 0 <= r.tenant < len(self.tenants), f"request {r.request_id}: unknown tenant {r.tenant}"
        check_prefix_layout((r,), self.block_size)
        t = r.tenant
        self.num_arrived += 1
        self.num_arrived_t[t] += 1
        decay = math.exp(-(r.arrival_s - self._rate_t) / _RATE_TAU_S) if r.arrival_s > self._rate_t else 1.0
        self.rate_est = self.rate_est * decay + 1.0 / _RATE_TAU_S
        self._rate_t = max(self._rate_t, r.arrival_s)
        if self._rejected_oversized(r):
            return
        if self.num_waiting[t] == 0 and self.num_running_t[t] == 0:
            # VTC counter lift: a returning tenant starts level with the least-served active tenant, so
            # idle time earns it no credit.
            active = [self.vtc[k] for k in range(len(self.tenants)) if self.num_waiting[k] or self.num_running_t[k]]
            if active:
                self.vtc[t] = max(self.vtc[t], min(active))
        heapq.heappush(self._ttft_heap, (r.arrival_s + self._ttft_slo[t], r.request_id, r))
        self.queue.push(r)

    def add_handoff(self, r: Request) -> None:
        """The prompt KV of ``r``, handed off by another engine, arrived: it decodes here once its KV fits (FIFO)."""
        assert r.status == Status.TRANSFERRING and not r.block_table, f"{r} is not a handed-off request"
        self.num_arrived += 1
        self.num_arrived_t[r.tenant] += 1
        if not self._rejected_oversized(r):
            self.landed.append(r)

    def _rejected_oversized(self, r: Request) -> bool:
        """Reject ``r`` if it can never run here (longer than the model or the whole KV pool); whether it was."""
        too_long = r.total_len > self.config.max_model_len
        if too_long or self.pool.blocks_for(r.total_len) > self.config.num_kv_blocks:
            self._reject(r, "exceeds_max_model_len" if too_long else "exceeds_kv_capacity")
            return True
        return False

    def _admit_landed(self) -> None:
        """Give landed hand-offs blocks for their prompt KV and the next token, and start their decoding."""
        pool = self.pool
        while self.landed and len(self.running) < self.config.max_num_seqs:
            r = self.landed[0]
            if not pool.can_allocate(pool.blocks_for(r.prompt_len + r.num_output_tokens)):
                return  # head-of-line: wait for memory (for the prompt KV and the next token's block)
            self.landed.popleft()
            r.block_table = pool.allocate(pool.blocks_for(r.num_computed_tokens))
            self._commit(r, 0, r.num_computed_tokens)  # the transferred prompt blocks hold its prompt
            r.status = Status.RUNNING
            self._enter_running(r)
            self._start_decoding(r)

    def head(self, t: int) -> Request | None:
        """The first waiting request of tenant ``t``."""
        return self.queue.head(t)

    # ---------------------------------------------------------------------------------- per-request control
    def promote(self, r: Request) -> None:
        """Let waiting ``r`` go first in the next admission pass (if it fits); ``ValueError`` if it is not waiting."""
        if r not in self.queue:
            raise ValueError(f"promote: request {r.request_id} is not waiting")
        self._promoted = r

    def preempt_request(self, r: Request) -> None:
        """Preempt running ``r`` now by recompute (the next batch admits nobody). ``ValueError`` if not running."""
        if self.running.get(r.request_id) is not r:
            raise ValueError(f"preempt_request: request {r.request_id} is not running")
        self._preempt(r)

    def shed_request(self, r: Request) -> None:
        """Reject waiting ``r`` now (reason ``shed``, a miss). ``ValueError`` for a request not waiting here."""
        if r not in self.queue:
            raise ValueError(f"shed_request: request {r.request_id} is not waiting")
        self._reject(r, "shed")

    def set_output_len(self, r: Request, output_len: int) -> None:
        """Give live ``r`` a longer output length than it has produced (a planner's forecast on a fork)."""
        if r not in self.queue and self.running.get(r.request_id) is not r:
            raise ValueError(f"set_output_len: request {r.request_id} is neither waiting nor running")
        self._sync(r)
        if output_len <= r.num_output_tokens:
            raise ValueError(f"set_output_len: request {r.request_id} has produced {r.num_output_tokens} tokens; "
                             f"its output length must exceed that, got {output_len}")
        if r.status == Status.RUNNING:
            pool = self.pool
            self.running_total_blocks += pool.blocks_for(r.prompt_len + output_len) - pool.blocks_for(r.total_len)
        r.output_len = output_len
        if r.decoding and r.event_round >= 0 and self._event_round(r) != r.event_round:  # its event moves
            self.decode_events[r.event_round].remove(r)
            self._schedule_event(r)

    def resume(self, r: Request, num_computed_tokens: int) -> None:
        """Install fresh ``r`` as running here (a planner's copy of vLLM's state) with ``num_computed_tokens`` of KV
        in fresh blocks: decoding when all but its last token have KV, else prefilling. ``ValueError`` if invalid."""
        if r.status != Status.WAITING or r.block_table or r.decoding:
            raise ValueError(f"resume: request {r.request_id} is not a fresh request")
        if not 0 <= r.tenant < len(self.tenants):
            raise ValueError(f"resume: request {r.request_id}: unknown tenant {r.tenant}")
        decoding = r.num_output_tokens >= 1 and num_computed_tokens == r.num_prefill_tokens - 1
        if not 0 <= num_computed_tokens < r.num_prefill_tokens or r.num_output_tokens >= r.output_len:
            raise ValueError(f"resume: request {r.request_id}: {num_computed_tokens} computed tokens and "
                             f"{r.num_output_tokens} produced of {r.output_len} do not describe a running request")
        pool = self.pool
        need = pool.blocks_for(r.num_prefill_tokens if decoding else num_computed_tokens)
        if need > pool.num_free_blocks or len(self.running) >= self.config.max_num_seqs:
            raise ValueError(f"resume: no room for request {r.request_id} ({need} blocks)")
        t = r.tenant
        self.num_arrived += 1
        self.num_arrived_t[t] += 1
        if r.first_token_s is None and not r.slo_resolved:
            heapq.heappush(self._ttft_heap, (r.arrival_s + self._ttft_slo[t], r.request_id, r))
        r.block_table = pool.allocate(pool.blocks_for(num_computed_tokens))
        r.status = Status.RUNNING
        r.num_computed_tokens = num_computed_tokens
        self._enter_running(r)
        if decoding:  # the token that ended its prefill, recorded as its first token's (its token records pair up)
            r.prefill_token_s.append(r.first_token_s if r.first_token_s is not None else self.now_s)
            self._start_decoding(r)  # its next token's block: free, checked above
        else:
            self.prefilling[r.request_id] = r

    def _reject(self, r: Request, reason: str) -> None:
        if r in self.queue:
            self.queue.remove(r)
        r.status = Status.REJECTED
        r.reject_reason = reason
        r.finish_s = self.now_s
        self.rejected.append(r)
        self._resolve(r, met=False)

    def _resolve(self, r: Request, met: bool) -> None:
        """Count a request once as meeting or missing its SLO (the reward's signal)."""
        if r.slo_resolved:
            return
        r.slo_resolved = True
        if met:
            self.num_good += 1
            self.num_good_t[r.tenant] += 1
        else:
            self.num_missed += 1
            self.num_missed_t[r.tenant] += 1

    def _expire_ttft(self) -> None:
        """Requests still without a first token past their TTFT deadline are misses from now on."""
        heap = self._ttft_heap
        now = self.now_s
        while heap and heap[0][0] < now:
            _, _, r = heapq.heappop(heap)
            if r.first_token_s is None:
                self._resolve(r, met=False)

    # ---------------------------------------------------------------------------------- queue order
    def _candidates(self, order: QueueOrder) -> Iterator[Request]:
        """Waiting requests in ``order``; each yielded one is admitted or rejected before the next is asked."""
        queue = self.queue
        promoted = self._promoted
        if promoted is not None:
            self._promoted = None
            if promoted in queue:
                yield promoted
        if order == QueueOrder.LPM:
            window = queue.oldest(LPM_WINDOW)
            window.sort(key=lambda r: -self.cached_prefix_blocks(r))  # stable: FCFS among equals
            for r in window:
                if r in queue:
                    yield r
            return
        while True:
            best = queue.best(order, self.now_s, self.sjf_starvation_s)
            if best is None:
                return
            yield best

    def prefix_hashes(self, r: Request) -> list[int]:
        """The chained hashes of ``r``'s shared prefix blocks (``chain_hashes``), computed once and kept on ``r``."""
        if r.prefix_ids and r.prefix_hashes is None:
            r.prefix_hashes = chain_hashes(r.prefix_ids, r.prefix_id_tokens, self.block_size, r.prompt_len)
        return r.prefix_hashes or []

    def cached_prefix_blocks(self, r: Request) -> int:
        """Blocks of waiting ``r``'s prompt the prefix cache holds now (what admission would start from)."""
        return len(self._lookup(r))

    def _lookup(self, r: Request) -> list[int]:
        """The cached blocks ``r``'s prefill can start from (vLLM's ``get_computed_blocks``)."""
        max_blocks = (r.num_prefill_tokens - 1) // self.block_size
        hashes = self.prefix_hashes(r)
        hits = self.pool.lookup(hashes, max_blocks) if hashes else []
        if r.num_preemptions and len(hits) == min(len(hashes), max_blocks) < max_blocks:
            rid = r.request_id
            own = ((rid, j) for j in range(len(hits), max_blocks))  # lazily: the lookup stops at the first miss
            hits += self.pool.lookup(own, max_blocks - len(hits))
        return hits

    # ---------------------------------------------------------------------------------- the builder
    def schedule(self, decision: Decision) -> Batch:
        """Form this iteration's batch under ``decision``."""
        batch = Batch(decision)
        self._expire_ttft()
        if self.landed:
            self._admit_landed()
        cfg = self.config
        budget = min(decision.token_budget, cfg.max_num_batched_tokens)
        # The chunk cap keeps one long prefill from starving the others: alone, a request may use the whole
        # budget (vLLM drops long_prefill_token_threshold when one request is running or waiting).
        chunk_cap = decision.chunk_cap if len(self.running) + self.num_waiting_total > 1 else budget
        if decision.shed:
            self._shed_heads()
        prefill_first = decision.prefill_first
        left = budget if prefill_first else max(0, budget - self.num_decoding)
        # 1. running prefills, in admission order
        for r in list(self.prefilling.values()) if self.prefilling else ():
            if left <= 0:
                break
            if r.status != Status.RUNNING:  # preempted earlier in this loop
                continue
            if r.fetch_ready_s:
                if r.fetch_ready_s > self.now_s:
                    continue  # its remote KV is still in flight
                self._fetch_done(r)
            ctx = r.num_computed_tokens
            chunk = min(r.num_prefill_tokens - ctx, chunk_cap, left)
            if not self._reserve_or_preempt(r, ctx + chunk, batch):
                continue
            batch.add_prefill(r, chunk, ctx)
            self._commit(r, ctx, ctx + chunk)
            left -= chunk
        # 2. admission
        if (
            not self._preempted_since_schedule
            and batch.num_preempted == 0
            and decision.max_admit > 0
            and left > 0
            and any(self.num_waiting)
        ):
            left = self._admit(decision, chunk_cap, batch, left)
        self._preempted_since_schedule = False
        # 3. the decode round
        if self.num_decoding and not (prefill_first and batch.prefill_reqs):
            batch.decode_round = True
            batch.num_decode_seqs = self.num_decoding
            batch.num_kv_tokens = self.decode_base + self.num_decoding * self.num_rounds
        self.last_batch = batch
        return batch

    def _admit(self, decision: Decision, chunk_cap: int, batch: Batch, left: int) -> int:
        cfg = self.config
        pool = self.pool
        bs = self.block_size
        reserve = math.ceil(decision.kv_reserve * cfg.num_kv_blocks)
        admitted = 0
        for r in self._candidates(decision.order):
            if admitted >= decision.max_admit or len(self.running) >= cfg.max_num_seqs or left <= 0:
                break
            hits = self._lookup(r)
            cached = len(hits) * bs
            if decision.shed and self._hopeless(r, cached):
                self._reject(r, "ttft_unreachable")
                batch.num_rejected += 1
                continue
            n = r.num_prefill_tokens
            remote_blocks = 0
            if self.remote is not None and r.prefix_hashes:
                remote_blocks = self.remote.hit_blocks(r.prefix_hashes, len(hits), (n - 1) // bs)
            chunk = 0 if remote_blocks else min(n - cached, chunk_cap, left)
            need = pool.blocks_for(cached + remote_blocks * bs + chunk) - len(hits)
            # vLLM's scheduler_reserve_full_isl: room for the whole prefill, not just its first chunk
            check = pool.blocks_for(n) - len(hits) if cfg.reserve_full_prefill else need
            if not pool.can_allocate(check, reserve if self.running else 0, hits):
                break  # head-of-line: wait for memory, as vLLM does (an empty engine always admits)
            self.queue.remove(r)
            r.block_table = pool.allocate(need, hits)
            r.status = Status.RUNNING
            r.num_computed_tokens = cached
            r.num_cached_tokens = cached
            r.num_prefix_hit_tokens += cached
            r.num_admitted_tokens += n
            self.num_prefix_hit_tokens += cached
            if r.first_scheduled_s is None:
                r.first_scheduled_s = self.now_s
                t = r.tenant
                self.vtc[t] += r.prompt_len / self._weights[t]
                self.service_tokens[t] += r.prompt_len
                self.num_prompt_tokens_admitted += r.prompt_len
            self._enter_running(r)
            self.prefilling[r.request_id] = r
            batch.num_admitted += 1
            admitted += 1
            if remote_blocks:  # wait for the remote prefix KV before computing anything
                assert self.remote is not None  # remote blocks come from it
                remote_tokens = remote_blocks * bs
                r.num_computed_tokens += remote_tokens
                r.num_remote_tokens += remote_tokens
                r.fetch_ready_s = self.remote.fetch(self.now_s, remote_tokens)
                self.num_fetching += 1
                continue
            batch.add_prefill(r, chunk, cached)
            self._commit(r, cached, cached + chunk)
            left -= chunk
        return left

    def _enter_running(self, r: Request) -> None:
        """``r`` (holding its blocks) joins the running set, last in admission order."""
        self.running[r.request_id] = r
        self._num_admissions += 1
        r.admit_seq = self._num_admissions
        self.running_total_blocks += self.pool.blocks_for(r.total_len)
        self.num_running_t[r.tenant] += 1

    def _leave_running(self, r: Request) -> None:
        """``r`` leaves the running set (finished, preempted or handed off) and releases its blocks."""
        del self.running[r.request_id]
        self.running_total_blocks -= self.pool.blocks_for(r.total_len)
        self.num_running_t[r.tenant] -= 1
        self.pool.release(r.block_table)
        r.block_table = []

    def _hopeless(self, r: Request, cached: int | None = None) -> bool:
        """Even alone, unchunked and after its prefix-cache hit (``cached`` tokens), ``r`` would miss its TTFT."""
        if r.first_token_s is not None:
            return False  # a preempted request already has its first token
        deadline = r.arrival_s + self._ttft_slo[r.tenant]
        cost, n = self.cost_model, r.num_prefill_tokens
        if cached is None:
            # a cache hit only shortens a prefill (the cost models are non-decreasing in every batch feature): a
            # request that makes its deadline with no hit is not hopeless, one that misses it with the largest hit
            # a lookup can give (every whole block but the last token's) is; only between is its prefix looked up
            if self.now_s + prefill_time_unchecked_s(cost, n) <= deadline:
                return False
            largest = (n - 1) // self.block_size * self.block_size
            if self.now_s + prefill_time_unchecked_s(cost, n, num_cached_tokens=largest) > deadline:
                return True
            cached = self.cached_prefix_blocks(r) * self.block_size
        return self.now_s + prefill_time_unchecked_s(cost, n, num_cached_tokens=cached) > deadline

    def _shed_heads(self) -> None:
        for t in range(len(self.tenants)):
            while self.num_waiting[t]:
                r = self.head(t)
                if r is None or not self._hopeless(r):
                    break
                self._reject(r, "ttft_unreachable")

    def _reserve_or_preempt(self, r: Request, num_tokens: int, batch: Batch | None = None) -> bool:
        """Give running ``r`` blocks for ``num_tokens`` tokens, preempting victims; False if ``r`` itself was."""
        pool = self.pool
        need = -(-num_tokens // self.block_size) - len(r.block_table)  # pool.blocks_for(num_tokens), on the hot path
        if need <= 0:
            return True
        while pool.num_free_blocks < need:  # pool.can_allocate(need)
            victim = self._victim()
            if batch is not None and victim in batch.prefill_reqs:
                # its chunk will not run: the blocks it was to fill hold nothing a lookup may find
                i = batch.prefill_reqs.index(victim)
                ctx, chunk = batch.prefill_ctx[i], batch.prefill_chunks[i]
                bs = self.block_size
                for j in range(ctx // bs, (ctx + chunk) // bs):
                    pool.forget(victim.block_table[j])
                batch.remove_prefill(victim)
            self._preempt(victim)
            if batch is not None:
                batch.num_preempted += 1
            if victim is r:
                return False
        if need == 1:  # a decoder's next block, the common case
            r.block_table.append(pool.allocate_one())
        else:
            r.block_table += pool.allocate(need)
        return True

    def _victim(self) -> Request:
        if self.config.victim_rule == "latest":
            return next(reversed(self.running.values()))
        return max(self.running.values(), key=lambda q: (self.tenants[q.tenant].priority, q.arrival_s, q.request_id))

    def _preempt(self, r: Request) -> None:
        """Recompute preemption: free ``r``'s KV, reset its progress and put it back at the queue head."""
        self._sync(r)
        assert r.num_output_tokens < r.output_len, f"preempting finished {r}"
        if r.decoding:
            self._commit_decoded(r)
            self._stop_decoding(r)
        else:
            del self.prefilling[r.request_id]
        self._leave_running(r)
        r.num_computed_tokens = 0
        r.num_cached_tokens = 0
        if r.fetch_ready_s:
            r.fetch_ready_s = 0.0
            self.num_fetching -= 1
        r.num_preemptions += 1
        self.num_preemptions += 1
        self._preempted_since_schedule = True
        self.queue.push(r, front=True)

    # ---------------------------------------------------------------------------------- lazy decoding
    def _sync(self, r: Request) -> None:
        """Bring a decoding request's explicit counters up to the current round."""
        if r.decoding:
            out = r.decode_out0 + self.num_rounds - r.decode_round0
            r.num_output_tokens = out
            r.num_computed_tokens = r.prompt_len + out - 1

    def _start_decoding(self, r: Request, reserve: bool = True) -> None:
        """Join the decode rounds from the next one on. With ``reserve=False`` the caller gives it its next block."""
        r.decoding = True
        r.decode_round0 = self.num_rounds
        r.decode_out0 = r.num_output_tokens
        self.num_decoding += 1
        self.num_decoding_t[r.tenant] += 1
        self.decode_base += r.prompt_len + r.decode_out0 - r.decode_round0
        if reserve and self._reserve_or_preempt(r, r.prompt_len + r.num_output_tokens):
            self._schedule_event(r)

    def _stop_decoding(self, r: Request) -> None:
        r.token_segments.append((r.decode_round0, self.num_rounds))
        r.decoding = False
        r.event_round = -1
        self.num_decoding -= 1
        self.num_decoding_t[r.tenant] -= 1
        self.decode_base -= r.prompt_len + r.decode_out0 - r.decode_round0

    def _event_round(self, r: Request) -> int:
        """The round after which decoding ``r`` finishes or needs another KV block for the round that follows."""
        cap = len(r.block_table) * self.block_size
        base = r.decode_round0 - r.decode_out0
        r_fin = base + r.output_len - 1
        r_blk = base + cap - r.prompt_len
        return r_fin if r_fin < r_blk else r_blk

    def _schedule_event(self, r: Request) -> None:
        """Put ``r`` in the bucket of its event round (``_event_round``)."""
        event = self._event_round(r)
        r.event_round = event
        bucket = self.decode_events.get(event)
        if bucket is None:
            self.decode_events[event] = [r]
        else:
            bucket.append(r)

    # ---------------------------------------------------------------------------------- completion
    def complete(self, batch: Batch, end_s: float) -> None:
        """The batch ran and ended at ``end_s``: account its tokens, finish, join decoders, emit events."""
        assert end_s >= self.now_s, f"clock goes back: {end_s} < {self.now_s}"
        self.now_s = end_s
        grow: list[Request] = []
        if batch.decode_round:
            rnd = self.num_rounds
            self.num_rounds = rnd + 1
            self.round_end_s.append(end_s)
            self.num_output_tokens += self.num_decoding
            for t, nd in enumerate(self.num_decoding_t):
                if nd:
                    self.vtc[t] += 2 * nd / self._weights[t]
                    self.service_tokens[t] += 2 * nd
            due = self.decode_events.pop(rnd, ())
            for r in due:  # finish first: a request done this round must never become a victim
                if r.event_round != rnd:
                    continue  # preempted since the event was set
                self._sync(r)
                if r.num_output_tokens >= r.output_len:
                    self._finish(r)
                else:
                    grow.append(r)
        for r, chunk in zip(batch.prefill_reqs, batch.prefill_chunks, strict=True):
            r.num_computed_tokens += chunk
            if r.num_computed_tokens < r.num_prefill_tokens:
                continue
            del self.prefilling[r.request_id]
            r.num_output_tokens += 1
            self.num_output_tokens += 1
            t = r.tenant
            self.vtc[t] += 2 / self._weights[t]
            self.service_tokens[t] += 2
            r.prefill_token_s.append(end_s)
            if r.first_token_s is None:
                r.first_token_s = end_s
            if r.num_output_tokens >= r.output_len:
                r.token_segments.append((self.num_rounds, self.num_rounds))
                self._finish(r)
            elif self.prefill_only:
                self._hand_off(r)
            else:
                self._start_decoding(r, reserve=False)
                grow.append(r)
        # Every token of the batch is in; now the decoders that need a KV block for the next round get one, in
        # admission order, the latest admitted preempted while the pool is short (vLLM's running loop).
        if len(grow) > 1:
            grow.sort(key=_admit_seq)
        for r in grow:
            if r.status == Status.RUNNING and self._reserve_or_preempt(r, r.prompt_len + r.num_output_tokens):
                self._schedule_event(r)
        self._expire_ttft()

    def _commit(self, r: Request, start: int, end: int) -> None:
        """Cache (and publish) the full blocks of ``r`` among tokens [start, end), in the step that computes them."""
        bs = self.block_size
        lo, hi = start // bs, end // bs
        if hi <= lo:
            return
        hashes = r.prefix_hashes or ()
        self.pool.commit_table(r.block_table, lo, hi, hashes, r.request_id)
        if self.remote is not None and min(hi, len(hashes)) > lo:
            self.remote.publish(hashes[lo : min(hi, len(hashes))])

    def _commit_decoded(self, r: Request) -> None:
        """Cache the blocks a decoding ``r`` (synced) has filled since its prefill, before it lets them go."""
        self._commit(r, r.prompt_len + r.decode_out0 - 1, r.num_computed_tokens)

    def _fetch_done(self, r: Request) -> None:
        """A remote KV transfer landed: its blocks now hold the prefix content."""
        r.fetch_ready_s = 0.0
        self.num_fetching -= 1
        self._commit(r, r.num_cached_tokens, r.num_computed_tokens)

    def next_fetch_ready_s(self) -> float | None:
        """When the earliest in-flight remote KV transfer completes (None when none is in flight)."""
        if not self.num_fetching:
            return None
        return min(r.fetch_ready_s for r in self.prefilling.values() if r.fetch_ready_s)

    def _hand_off(self, r: Request) -> None:
        """``r`` produced its first token here: release its blocks (its prefix stays cached) and let it go."""
        self._leave_running(r)
        r.status = Status.TRANSFERRING
        self.handed_off.append(r)

    def _finish(self, r: Request) -> None:
        if r.decoding:
            self._commit_decoded(r)
            self._stop_decoding(r)
        self._leave_running(r)
        r.status = Status.FINISHED
        r.finish_s = self.now_s
        self.finished.append(r)
        t = r.tenant
        first = r.first_token_s
        assert first is not None
        ttft = first - r.arrival_s
        tpot = float(tpot_s(first, self.now_s, r.num_output_tokens))
        ttft_ratio = ttft / self._ttft_slo[t]
        tpot_ratio = tpot / self._tpot_slo[t]
        self.ttft_ratio_ewma += _LATENCY_EWMA * (ttft_ratio - self.ttft_ratio_ewma)
        self.tpot_ratio_ewma += _LATENCY_EWMA * (tpot_ratio - self.tpot_ratio_ewma)
        self._resolve(r, met=ttft_ratio <= 1.0 and tpot_ratio <= 1.0)

    # ---------------------------------------------------------------------------------- views
    @property
    def has_work(self) -> bool:
        return bool(self.running) or any(self.num_waiting) or bool(self.landed)

    @property
    def num_waiting_total(self) -> int:
        return sum(self.num_waiting)

    def waiting_requests(self) -> list[Request]:
        """Live waiting requests, per tenant in queue order (for observers and tests; O(queue))."""
        return self.queue.requests()

    def sync_all(self) -> None:
        """Make every running request's explicit counters current (for observers and the runtime)."""
        for r in self.running.values():
            self._sync(r)

    def decoding_requests(self) -> list[Request]:
        """The requests a decode round now would advance, in admission order (synced)."""
        out = [r for r in self.running.values() if r.decoding]
        for r in out:
            self._sync(r)
        return out

    def arrival_rate(self) -> float:
        """Exponentially decayed arrival-rate estimate (requests/s), time constant 10 s."""
        dt = self.now_s - self._rate_t
        return self.rate_est * math.exp(-dt / _RATE_TAU_S) if dt > 0 else self.rate_est

    def remaining_prefill_tokens(self) -> int:
        return sum(r.num_prefill_tokens - r.num_computed_tokens for r in self.prefilling.values())
