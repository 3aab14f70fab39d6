"""A policy's ``act`` with a deadline that holds even when the policy hangs: ``TimedDecider``.

An engine step must not wait on a slow or stuck policy. Checking the time after ``act`` returns cannot bound
a call that never returns, so ``TimedDecider`` runs ``act`` on one worker thread and waits for the answer at
most until the deadline. A late call goes on in the background; its answer, when it comes, is dropped, and
while it runs every decision falls back at once (the policy is still past its deadline). Calls are
serialised: the policy is never entered by two threads.

What a thread cannot do: a policy spinning in Python code keeps its share of the interpreter lock, so the
engine's thread runs on but slower until the call ends; a policy blocked in a C call that holds the lock
stops the process. Both are outside what a deadline in Python can bound. A handoff costs ~15 µs on the
2-core machine (a ``queue.SimpleQueue`` round trip).
"""

from __future__ import annotations

import queue
import threading
import time
from typing import Any

import numpy as np

__all__ = ["TimedDecider"]


class TimedDecider:
    """``act(observation, mask, deadline)`` of ``policy`` on a worker thread (started on first use).

    ``decide`` returns ``(action, reason, error)``: the policy's raw action and ``None`` on time; else no action
    and a fallback ``reason`` — ``"error"`` (it raised), ``"timeout"`` (no answer by the deadline, or an
    earlier late call still running) — with a one-line ``error``."""

    def __init__(self, policy: Any, name: str = "llmsched-policy") -> None:
        self.policy = policy
        self.name = name
        self._jobs: queue.SimpleQueue[tuple[int, np.ndarray, np.ndarray] | None] = queue.SimpleQueue()
        self._results: queue.SimpleQueue[tuple[int, Any, BaseException | None]] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._next_id = 0
        self._pending: int | None = None  # the id of a call that timed out and has not returned yet

    def _run(self) -> None:
        act = self.policy.act
        while True:
            job = self._jobs.get()
            if job is None:
                return
            job_id, obs, mask = job
            try:
                self._results.put((job_id, act(obs, mask), None))
            except BaseException as exc:  # reported to the caller, never raised on this thread
                self._results.put((job_id, None, exc))

    def decide(self, observation: np.ndarray, mask: np.ndarray, deadline: float) -> tuple[Any, str | None, str]:
        """The policy's action for ``observation`` and ``mask`` if it answers before ``deadline`` (a
        ``time.perf_counter()`` instant), else a fallback reason (see the class docstring)."""
        if self._pending is not None and not self._collect(self._pending, timeout=0.0):
            return None, "timeout", "policy still running a call that passed its deadline"
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
            self._thread.start()
        job_id = self._next_id
        self._next_id += 1
        self._jobs.put((job_id, observation, mask))
        while True:
            try:
                got_id, action, exc = self._results.get(timeout=max(deadline - time.perf_counter(), 0.0))
            except queue.Empty:
                self._pending = job_id
                return None, "timeout", "policy answered after its deadline"
            if got_id != job_id:  # a late answer of an earlier call
                continue
            if exc is not None:
                first = str(exc).splitlines()[0] if str(exc) else ""
                return None, "error", f"{type(exc).__name__}: {first}"
            return action, None, ""

    def _collect(self, job_id: int, timeout: float) -> bool:
        """Drop answers up to ``job_id``'s; True once it has come (the worker is free again)."""
        while True:
            try:
                got_id, _, _ = self._results.get(timeout=timeout) if timeout > 0 else self._results.get_nowait()
            except queue.Empty:
                return False
            if got_id == job_id:
                self._pending = None
                return True

    def close(self) -> None:
        """Stop the worker once it is free (a late call is not interrupted; the thread is a daemon)."""
        if self._thread is not None:
            self._jobs.put(None)
            self._thread = None
