"""TimedDecider: a policy that hangs or raises cannot hold its caller past the deadline; late answers are dropped."""

from __future__ import annotations

import threading
import time

import numpy as np

from llmsched_env.decision.decider import TimedDecider

OBS = np.zeros(3, dtype=np.float32)
MASK = np.ones(4, dtype=bool)


class _Gate:
    """Answers its call number at once, except while ``hold`` is set: then it waits until ``release``."""

    def __init__(self) -> None:
        self.hold = False
        self.released = threading.Event()
        self.calls = 0

    def act(self, observation: np.ndarray, mask: np.ndarray) -> np.ndarray:
        self.calls += 1
        n = self.calls
        if self.hold:
            self.released.wait()
        return np.array([n])


def _decide(d: TimedDecider, timeout_s: float) -> tuple[object, str | None, str]:
    return d.decide(OBS, MASK, time.perf_counter() + timeout_s)


def test_an_answer_on_time_is_returned() -> None:
    d = TimedDecider(_Gate())
    action, reason, _ = _decide(d, 5.0)
    assert reason is None and list(action) == [1]  # type: ignore[call-overload]
    d.close()


def test_a_hung_policy_does_not_hold_the_caller_and_its_late_answer_is_dropped() -> None:
    gate = _Gate()
    d = TimedDecider(gate)
    gate.hold = True
    t0 = time.perf_counter()
    action, reason, error = _decide(d, 0.05)  # would never return if the call were made inline
    assert action is None and reason == "timeout" and "deadline" in error
    # while the late call runs, every decision falls back at once, without calling the policy again
    action, reason, error = _decide(d, 5.0)
    assert action is None and reason == "timeout" and "still running" in error
    assert time.perf_counter() - t0 < 4.0 and gate.calls == 1
    gate.hold = False
    gate.released.set()  # the late call returns 1; it must not be taken as the next call's answer
    for _ in range(200):
        action, reason, _ = _decide(d, 5.0)
        if reason is None:
            break
        time.sleep(0.01)
    assert reason is None and list(action) == [gate.calls] and gate.calls >= 2  # type: ignore[call-overload]
    d.close()


def test_an_exception_is_reported_in_one_line_and_the_worker_lives_on() -> None:
    class Flaky:
        n = 0

        def act(self, observation: np.ndarray, mask: np.ndarray) -> np.ndarray:
            self.n += 1
            if self.n == 1:
                raise RuntimeError("first call fails\nwith a second line")
            return np.array([7])

    d = TimedDecider(Flaky())
    action, reason, error = _decide(d, 5.0)
    assert action is None and reason == "error" and error == "RuntimeError: first call fails"
    action, reason, _ = _decide(d, 5.0)
    assert reason is None and list(action) == [7]  # type: ignore[call-overload]
    d.close()
