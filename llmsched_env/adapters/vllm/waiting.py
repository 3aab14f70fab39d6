"""vLLM's waiting queue in the order an llmsched policy chose: ``PolicyWaitingQueue``, a vLLM ``RequestQueue``
over llmsched's ``WaitingQueues`` (the queue ``LLMSchedScheduler`` installs as ``scheduler.waiting``)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from vllm.v1.core.sched.request_queue import RequestQueue
from vllm.v1.request import Request as VllmRequest

from llmsched_env.adapters.vllm.state import VllmState
from llmsched_env.engine.batch import QueueOrder
from llmsched_env.engine.engine import LPM_WINDOW
from llmsched_env.engine.request import Request

__all__ = ["PolicyWaitingQueue"]


class PolicyWaitingQueue(RequestQueue):
    """vLLM's waiting queue in the policy's ``order`` over llmsched's per-tenant ``WaitingQueues`` (the best head in
    O(tenants)); a preempted request goes back to its queue's head, as in vLLM."""

    def __init__(self, state: VllmState, lookup_cached_blocks: Callable[[VllmRequest], int]) -> None:
        self._state = state
        self._q = state.queue
        self._cached_blocks = lookup_cached_blocks
        self.order = QueueOrder.FCFS
        self._lpm: list[Request] = []
        self.sjf_starvation_s = 10.0

    def set_order(self, order: QueueOrder) -> None:
        self.order = order
        if order == QueueOrder.LPM:
            window = self._q.oldest(LPM_WINDOW)
            vreqs = self._state.vreqs
            window.sort(key=lambda r: -self._cached_blocks(vreqs[r.request_id]))  # stable: FCFS among equals
            self._lpm = window
        else:
            self._lpm = []

    def _best(self) -> Request | None:
        if self._lpm:
            for r in self._lpm:
                if r in self._q:
                    return r
        return self._q.best(self.order, self._state.now_s, self.sjf_starvation_s)

    def add_request(self, request: VllmRequest) -> None:
        self._q.push(self._state.shadow_of(request))

    def prepend_request(self, request: VllmRequest) -> None:
        self._q.push(self._state.shadow_of(request), front=True)

    def prepend_requests(self, requests: Iterable[VllmRequest]) -> None:
        for r in requests:  # as deque.extendleft: the last one ends up first
            self.prepend_request(r)

    def peek_request(self) -> VllmRequest:
        r = self._best()
        if r is None:
            raise IndexError("peek from an empty queue")
        return self._state.vreqs[r.request_id]

    def pop_request(self) -> VllmRequest:
        r = self._best()
        if r is None:
            raise IndexError("pop from an empty queue")
        self._q.remove(r)
        return self._state.vreqs[r.request_id]

    def remove_request(self, request: VllmRequest) -> None:
        sh = self._state.shadows.get(request.request_id)
        if sh is None or sh not in self._q:
            raise ValueError(f"request {request.request_id} is not waiting")
        self._q.remove(sh)

    def remove_requests(self, requests: Iterable[VllmRequest]) -> None:
        for request in requests:
            sh = self._state.shadows.get(request.request_id)
            if sh is not None and sh in self._q:
                self._q.remove(sh)

    def __bool__(self) -> bool:
        return len(self._q) > 0

    def __len__(self) -> int:
        return len(self._q)

    def __iter__(self) -> Iterator[VllmRequest]:
        vreqs = self._state.vreqs
        return iter([vreqs[r.request_id] for r in self._q.requests()])
