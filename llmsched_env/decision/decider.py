"""``TimedDecider``: a policy's ``act`` under a deadline. Modes: ``"signal"`` (POSIX main thread, a ``SIGALRM``
interrupts it), ``"thread"`` (a worker thread; a late answer is dropped and decisions fall back while it runs),
``"inline"`` (no hard deadline). ``"auto"`` picks inline for a bounded ``act``, else signal where it can, else
thread. None bounds a C call that holds the interpreter lock.
"""

from __future__ import annotations

import queue
import signal
import threading
import time
from typing import Any

import numpy as np

from llmsched_env.decision.policy import bounded_act

DECIDER_MODES = ("auto", "signal", "thread", "inline")


class _Deadline(BaseException):
    """Raised inside a policy's ``act`` by the SIGALRM timer (a BaseException, so a policy's ``except
    Exception`` does not swallow it)."""


def first_line(exc: BaseException) -> str:
    """``Type: first line of the message``, for a fallback's one-line record."""
    text = str(exc)
    return f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}"


def _alarm(signum: int, frame: Any) -> None:
    raise _Deadline


def _signal_mode_available() -> bool:
    return hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()


class TimedDecider:
    """``decide(observation, mask, deadline)``: ``(action, None, "")`` on time, else ``(None, reason, error)`` with
    reason ``"error"`` (it raised) or ``"timeout"`` (late, or an earlier late call still running)."""

    def __init__(self, policy: Any, mode: str = "auto", name: str = "llmsched-policy") -> None:
        if mode not in DECIDER_MODES:
            raise ValueError(f"TimedDecider mode must be one of {DECIDER_MODES}, got {mode!r}")
        if mode == "signal" and not _signal_mode_available():
            raise ValueError("TimedDecider mode 'signal' needs POSIX timers and the process's main thread")
        self.policy = policy
        self.name = name
        if mode == "auto":
            mode = "inline" if bounded_act(policy) else "signal" if _signal_mode_available() else "thread"
        self.mode = mode
        self._jobs: queue.SimpleQueue[tuple[int, np.ndarray, np.ndarray] | None] = queue.SimpleQueue()
        self._results: queue.SimpleQueue[tuple[int, Any, BaseException | None]] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._next_id = 0
        self._pending: int | None = None  # thread mode: a call that timed out and has not returned yet
        if self.mode == "signal":
            previous = signal.getsignal(signal.SIGALRM)
            if previous not in (signal.SIG_DFL, signal.SIG_IGN, None, _alarm):
                raise ValueError("TimedDecider mode 'signal': SIGALRM already has a handler in this process")
            signal.signal(signal.SIGALRM, _alarm)

    def decide(self, observation: np.ndarray, mask: np.ndarray, deadline: float) -> tuple[Any, str | None, str]:
        """The policy's action for ``observation`` and ``mask`` if it answers before ``deadline`` (a
        ``time.perf_counter()`` instant), else a fallback reason (see the class docstring)."""
        if self.mode == "signal":
            return self._signalled(observation, mask, deadline)
        if self.mode == "inline":
            return self._checked(self.policy.act, observation, mask, deadline)
        return self._threaded(observation, mask, deadline)

    # -- modes ----------------------------------------------------------------------------------------------
    @staticmethod
    def _error(exc: BaseException) -> tuple[None, str, str]:
        return None, "error", first_line(exc)

    def _checked(self, act: Any, obs: np.ndarray, mask: np.ndarray, deadline: float) -> tuple[Any, str | None, str]:
        try:
            action = act(obs, mask)
        except Exception as exc:
            return self._error(exc)
        if time.perf_counter() > deadline:
            return None, "timeout", "policy answered after its deadline"
        return action, None, ""

    def _signalled(self, obs: np.ndarray, mask: np.ndarray, deadline: float) -> tuple[Any, str | None, str]:
        remaining = deadline - time.perf_counter()
        if remaining <= 0:
            return None, "timeout", "no time left before the deadline"
        try:
            signal.setitimer(signal.ITIMER_REAL, remaining)
            try:
                return self._checked(self.policy.act, obs, mask, deadline)
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
        except _Deadline:
            return None, "timeout", "policy interrupted at its deadline"

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

    def _threaded(self, obs: np.ndarray, mask: np.ndarray, deadline: float) -> tuple[Any, str | None, str]:
        if self._pending is not None and not self._collect(self._pending):
            return None, "timeout", "policy still running a call that passed its deadline"
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
            self._thread.start()
        job_id = self._next_id
        self._next_id += 1
        self._jobs.put((job_id, obs, mask))
        while True:
            try:
                got_id, action, exc = self._results.get(timeout=max(deadline - time.perf_counter(), 0.0))
            except queue.Empty:
                self._pending = job_id
                return None, "timeout", "policy answered after its deadline"
            if got_id != job_id:  # a late answer of an earlier call
                continue
            if exc is not None:
                return self._error(exc)
            return action, None, ""

    def _collect(self, job_id: int) -> bool:
        """Drop answers up to ``job_id``'s; True once it has come (the worker is free again)."""
        while True:
            try:
                got_id, _, _ = self._results.get_nowait()
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
