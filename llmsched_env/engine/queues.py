"""The waiting queues: one FIFO per tenant (so FCFS, EDF, priority aging and VTC pick among the heads in
O(tenants)), a heap each for SJF and SPRW, and O(1) lazy removal by sequence number.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Iterator, Mapping, Sequence

from mypy_extensions import mypyc_attr

from llmsched_env.engine.batch import QueueOrder
from llmsched_env.engine.request import Request, Status


@mypyc_attr(allow_interpreted_subclasses=True)
class WaitingQueues:
    """Per-tenant waiting queues. ``vtc`` is the engine's live list of per-tenant virtual token counters."""

    def __init__(self, ttft_slo_s: Sequence[float], aging_key_s: Sequence[float], vtc: list[float]) -> None:
        n = len(ttft_slo_s)
        self._queues: list[deque[tuple[int, Request]]] = [deque() for _ in range(n)]
        self._sjf: list[tuple[int, float, int, int, Request]] = []
        self._sprw: list[tuple[int, float, int, int, Request]] = []
        self._seq = 0
        self._live: dict[int, int] = {}  # request id -> seq of its live entry
        self._ttft = list(ttft_slo_s)
        self._aging = list(aging_key_s)
        self._vtc = vtc
        self.num_waiting = [0] * n
        self.waiting_tokens = [0] * n  # prefill tokens of the waiting requests, per tenant
        self.waiting_predicted = [0] * n  # predicted remaining output tokens of the waiting requests, per tenant

    def copy(self, memo: Mapping[int, Request], vtc: list[float]) -> WaitingQueues:
        """A copy for ``Engine.fork`` holding the requests' copies in ``memo`` and the fork's ``vtc`` list; only live
        entries are copied (lookups skip stale ones, so it answers every lookup as the original does)."""
        c = WaitingQueues.__new__(WaitingQueues)
        live = self._live
        c._queues = [deque([(seq, memo[id(r)]) for seq, r in q if live.get(r.request_id) == seq]) for q in self._queues]
        for name in ("_sjf", "_sprw"):
            heap = [(a, b, rid, seq, memo[id(r)]) for a, b, rid, seq, r in getattr(self, name) if live.get(rid) == seq]
            heapq.heapify(heap)
            setattr(c, name, heap)
        c._seq, c._live, c._ttft, c._aging, c._vtc = self._seq, self._live.copy(), self._ttft[:], self._aging[:], vtc
        c.num_waiting, c.waiting_tokens = self.num_waiting[:], self.waiting_tokens[:]
        c.waiting_predicted = self.waiting_predicted[:]
        return c

    def __len__(self) -> int:
        return len(self._live)

    def __contains__(self, r: Request) -> bool:
        return r.request_id in self._live

    def push(self, r: Request, front: bool = False) -> None:
        """Queue ``r`` at the tail of its tenant's queue (or the head: a preempted request goes first)."""
        r.status = Status.WAITING
        self._seq += 1
        seq = self._seq
        self._live[r.request_id] = seq
        q = self._queues[r.tenant]
        if front:
            q.appendleft((seq, r))
        else:
            q.append((seq, r))
        heapq.heappush(self._sjf, (r.num_prefill_tokens, r.arrival_s, r.request_id, seq, r))
        heapq.heappush(self._sprw, (self.predicted_work(r), r.arrival_s, r.request_id, seq, r))
        self.num_waiting[r.tenant] += 1
        self.waiting_tokens[r.tenant] += r.num_prefill_tokens
        self.waiting_predicted[r.tenant] += r.predicted_remaining_output

    def remove(self, r: Request) -> None:
        """Take a waiting request out (its stale entries are skipped later)."""
        del self._live[r.request_id]
        self.num_waiting[r.tenant] -= 1
        self.waiting_tokens[r.tenant] -= r.num_prefill_tokens
        self.waiting_predicted[r.tenant] -= r.predicted_remaining_output

    @staticmethod
    def predicted_work(r: Request) -> int:
        """``r``'s predicted remaining work in tokens: its prefill plus its predicted remaining output."""
        return r.num_prefill_tokens + r.predicted_remaining_output

    def head(self, t: int) -> Request | None:
        """The first live request of tenant ``t``'s queue."""
        q = self._queues[t]
        live = self._live
        while q:
            seq, r = q[0]
            if live.get(r.request_id) == seq:
                return r
            q.popleft()
        return None

    def in_order(self, t: int) -> Iterator[Request]:
        """Tenant ``t``'s live waiting requests from its head on (lazily; do not change the queue meanwhile)."""
        live = self._live
        for seq, r in self._queues[t]:
            if live.get(r.request_id) == seq:
                yield r

    def best(self, order: QueueOrder, now_s: float, sjf_starvation_s: float) -> Request | None:
        """The waiting request ``order`` puts first, the earliest arrival among equals (LPM is FCFS here)."""
        if order == QueueOrder.SJF:
            return self._guarded_best(self._sjf, now_s, sjf_starvation_s)
        if order == QueueOrder.SPRW:
            return self._guarded_best(self._sprw, now_s, sjf_starvation_s)
        best: Request | None = None
        best_key = math.inf
        best_arrival = math.inf
        for t, n in enumerate(self.num_waiting):
            if not n:
                continue
            r = self.head(t)
            if r is None:
                continue
            if order == QueueOrder.PRIORITY_AGING:
                key = self._aging[t] + r.arrival_s  # priority*aging - waited, up to the common "now"
            elif order == QueueOrder.EDF:
                key = r.arrival_s + self._ttft[t]
            elif order == QueueOrder.VTC:
                key = self._vtc[t]
            else:  # FCFS, LPM
                key = r.arrival_s
            # equal keys (VTC counters at 0) go to the earliest arrival, never to the tenant listed first
            if key < best_key or (key == best_key and r.arrival_s < best_arrival):
                best, best_key, best_arrival = r, key, r.arrival_s
        return best

    def _guarded_best(self, heap: list[tuple[int, float, int, int, Request]], now_s: float,
                      starvation_s: float) -> Request | None:
        """The top of a shortest-first ``heap``, unless the oldest request has waited past ``starvation_s``."""
        oldest = self.best(QueueOrder.FCFS, now_s, starvation_s)
        if oldest is not None and now_s - oldest.arrival_s > starvation_s:
            return oldest  # starvation guard
        live = self._live
        while heap:
            _, _, rid, seq, r = heap[0]
            if live.get(rid) == seq:
                return r
            heapq.heappop(heap)
        return None

    def oldest(self, k: int) -> list[Request]:
        """Up to ``k`` live waiting requests in arrival order."""
        live = self._live
        merged = heapq.merge(
            *(((r.arrival_s, r) for seq, r in q if live.get(r.request_id) == seq) for q in self._queues),
            key=lambda x: x[0],
        )
        out = []
        for _, r in merged:
            out.append(r)
            if len(out) == k:
                break
        return out

    def requests(self) -> list[Request]:
        """Live waiting requests, per tenant in queue order. O(queue): for observers and checks."""
        live = self._live
        return [r for q in self._queues for seq, r in q if live.get(r.request_id) == seq]

    def check_invariants(self) -> None:
        waiting = self.requests()
        assert len(waiting) == len(self._live), "a live queue entry is missing from the tenant queues"
        for t in range(len(self.num_waiting)):
            mine = [r for r in waiting if r.tenant == t]
            assert len(mine) == self.num_waiting[t], f"tenant {t}: num_waiting {self.num_waiting[t]} != {len(mine)}"
            assert sum(r.num_prefill_tokens for r in mine) == self.waiting_tokens[t], f"tenant {t}: tokens drifted"
            predicted = sum(r.predicted_remaining_output for r in mine)
            assert predicted == self.waiting_predicted[t], f"tenant {t}: predicted tokens drifted"
