"""TimedDecider: a policy that hangs or raises cannot hold its caller past the deadline, in signal and thread
mode; late answers are dropped; inline mode only drops them."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from llmsched_env.decision.decider import TimedDecider
from llmsched_env.decision.policy import bounded_act

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


class _Flaky:
    def __init__(self) -> None:
        self.n = 0

    def act(self, observation: np.ndarray, mask: np.ndarray) -> np.ndarray:
        self.n += 1
        if self.n == 1:
            raise RuntimeError("first call fails\nwith a second line")
        return np.array([7])


def _decide(d: TimedDecider, timeout_s: float) -> tuple[object, str | None, str]:
    return d.decide(OBS, MASK, time.perf_counter() + timeout_s)


def test_auto_is_signal_on_the_main_thread_and_thread_elsewhere() -> None:
    assert TimedDecider(_Gate()).mode == "signal"  # pytest runs tests on the main thread
    modes = []
    t = threading.Thread(target=lambda: modes.append(TimedDecider(_Gate()).mode))
    t.start()
    t.join()
    assert modes == ["thread"]
    with pytest.raises(ValueError, match="mode must be one of"):
        TimedDecider(_Gate(), mode="fast")


class _Bounded(_Gate):
    bounded_act = True  # declared by the class that defines act

    def act(self, observation: np.ndarray, mask: np.ndarray) -> np.ndarray:
        return super().act(observation, mask)


class _Inherits(_Gate):
    bounded_act = True  # but act is _Gate's, which makes no claim


class _Overrides(_Bounded):
    def act(self, observation: np.ndarray, mask: np.ndarray) -> np.ndarray:  # may hang: the claim is not inherited
        return super().act(observation, mask)


class _Renounces(_Bounded):
    bounded_act = False


def test_a_bounded_policy_runs_inline_under_auto_and_only_its_act_s_class_can_say_so() -> None:
    assert bounded_act(_Bounded()) and TimedDecider(_Bounded()).mode == "inline"
    assert not bounded_act(_Overrides()) and TimedDecider(_Overrides()).mode == "signal"
    assert not bounded_act(_Renounces()) and not bounded_act(_Gate()) and not bounded_act(_Inherits())
    assert TimedDecider(_Bounded(), mode="signal").mode == "signal"  # an explicit mode is kept


def test_the_named_rules_and_a_numpy_network_declare_a_bounded_act() -> None:
    import gymnasium as gym

    import baselines
    import llmsched_env  # noqa: F401
    from llmsched_env.decision.policy_file import load_policy_file

    env = gym.make("LLMSched-v1", scenario="default", num_requests=20).unwrapped
    ctx = env.policy_context()  # type: ignore[attr-defined]
    for name in ("fcfs", "slo_aware", "sjf", "tuned", "random"):
        assert bounded_act(baselines.make(name, ctx)), name
    assert bounded_act(load_policy_file("policies/generalist"))


@pytest.mark.parametrize("mode", ["signal", "thread", "inline"])
def test_an_answer_on_time_is_returned_and_an_exception_is_one_line(mode: str) -> None:
    d = TimedDecider(_Gate(), mode=mode)
    action, reason, _ = _decide(d, 5.0)
    assert reason is None and list(action) == [1]  # type: ignore[call-overload]
    d = TimedDecider(_Flaky(), mode=mode)
    action, reason, error = _decide(d, 5.0)
    assert action is None and reason == "error" and error == "RuntimeError: first call fails"
    action, reason, _ = _decide(d, 5.0)
    assert reason is None and list(action) == [7]  # type: ignore[call-overload]
    d.close()


def test_signal_mode_interrupts_a_hung_policy_at_its_deadline() -> None:
    gate = _Gate()
    d = TimedDecider(gate, mode="signal")
    gate.hold = True  # it would wait forever: a decision not interrupted would never return
    action, reason, error = _decide(d, 0.05)
    assert action is None and reason == "timeout" and "interrupted" in error
    gate.hold = False
    action, reason, _ = _decide(d, 5.0)  # called again at the next decision
    assert reason is None and list(action) == [2]  # type: ignore[call-overload]


def test_signal_mode_is_not_swallowed_by_the_policys_own_except() -> None:
    class Swallows:
        def act(self, observation: np.ndarray, mask: np.ndarray) -> np.ndarray:
            try:
                while True:
                    pass
            except Exception:  # a policy catching every Exception cannot catch the deadline
                return np.array([0])

    action, reason, _ = _decide(TimedDecider(Swallows(), mode="signal"), 0.05)
    assert action is None and reason == "timeout"


def test_thread_mode_does_not_hold_the_caller_and_drops_the_late_answer() -> None:
    gate = _Gate()
    d = TimedDecider(gate, mode="thread")
    gate.hold = True
    action, reason, error = _decide(d, 0.05)  # would never return if the call were made inline
    assert action is None and reason == "timeout" and "deadline" in error
    # while the late call runs, every decision falls back at once, without calling the policy again
    action, reason, error = _decide(d, 5.0)
    assert action is None and reason == "timeout" and "still running" in error
    assert gate.calls == 1
    gate.hold = False
    gate.released.set()  # the late call returns 1; it must not be taken as the next call's answer
    for _ in range(3000):  # up to 30 s for the late call's thread to end, however busy the machine
        action, reason, _ = _decide(d, 5.0)
        if reason is None:
            break
        time.sleep(0.01)
    assert reason is None and list(action) == [gate.calls] and gate.calls >= 2  # type: ignore[call-overload]
    d.close()


def test_inline_mode_only_drops_a_late_answer() -> None:
    class Slow:
        def act(self, observation: np.ndarray, mask: np.ndarray) -> np.ndarray:
            time.sleep(0.05)
            return np.array([1])

    action, reason, error = _decide(TimedDecider(Slow(), mode="inline"), 0.01)
    assert action is None and reason == "timeout" and "after its deadline" in error
