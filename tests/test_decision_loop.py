"""One decision interface (``decision.loop.DecisionLoop``): its rules one by one, and one scripted policy driven
through every driver — the env's ``step``, the serving loop over the simulator and over the torch runtime, a
cluster's local scheduler and (in the vLLM venv) vLLM's scheduler — giving the same decisions and statistics.

Each driver's loop records every iteration's mask and applied decision (``record=True``); ``check_history``
recomputes what the rules say each iteration must get from the script alone (the action held by the decision the
iteration belongs to, corrected onto that iteration's mask where it forbids it), so a driver that applied an action
its own way fails here even where no other driver runs on the same engine states.
"""

from __future__ import annotations

import math
import time
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import baselines
import llmsched_env  # noqa: F401  (registers the envs)
from llmsched_env.cluster.config import ReplicaSpec
from llmsched_env.cluster.simulator import Cluster
from llmsched_env.costs.loader import load_cost_model
from llmsched_env.decision.actions import ActionSpec
from llmsched_env.decision.local import LocalScheduler
from llmsched_env.decision.loop import ENGINE_DEFAULT, DecisionLoop, DecisionStats
from llmsched_env.decision.serve import ServeOptions, decision_loop, serving
from llmsched_env.engine.batch import Batch, Decision
from llmsched_env.engine.config import SLO_CLASSES, EngineConfig, TenantConfig
from llmsched_env.engine.request import Request
from llmsched_env.sim.simulator import Simulator
from llmsched_env.workloads.lengths import LengthDist
from llmsched_env.workloads.workload import TenantWorkload, WorkloadConfig

ENGINE = EngineConfig(num_kv_blocks=48, block_size=16, max_num_seqs=8, max_num_batched_tokens=256, max_model_len=1024)
TENANTS = (TenantConfig("chat", SLO_CLASSES["chat"]), TenantConfig("batch", SLO_CLASSES["batch"], priority=1))
COST = load_cost_model("llama3-8b-h100")
WORKLOAD = WorkloadConfig(
    tuple(
        TenantWorkload(t, rate, LengthDist.uniform((40, 160), (2, 40)))
        for t, rate in zip(TENANTS, (40.0, 20.0), strict=True)
    ),
    num_requests=40,
)
HOLD = 3
History = list[tuple[tuple[bool, ...], Decision | None, bool]]


class Scripted:
    """At its n-th call, the n-th action of a seeded script drawn over every component's whole range (so the mask
    forbids some of it at times); ``faults`` maps call numbers to ``raise``, ``malformed`` or ``late`` (sleeps past
    any deadline the test sets). Records the observation and mask of every call."""

    def __init__(self, spec: ActionSpec, seed: int = 0, faults: dict[int, str] | None = None) -> None:
        self.spec = spec
        self.seed = seed
        self.faults = faults or {}
        self.calls = 0
        self.late_answers = 0  # late calls that slept to their end (none when the deadline interrupts them)
        self.seen: list[tuple[bytes, bytes]] = []

    def action(self, n: int) -> list[int]:
        rng = np.random.default_rng([self.seed, n])
        return [int(rng.integers(k)) for k in self.spec.nvec]

    def act(self, observation: np.ndarray, action_mask: np.ndarray) -> np.ndarray:
        n = self.calls
        self.calls += 1
        self.seen.append((np.asarray(observation, dtype=np.float32).tobytes(), np.asarray(action_mask).tobytes()))
        fault = self.faults.get(n)
        if fault == "raise":
            raise RuntimeError(f"scripted failure at call {n}")
        if fault == "malformed":
            return np.array([99] * len(self.spec.nvec))
        if fault == "late":
            time.sleep(10.0)  # twenty times the tests' deadline (0.5 s): cut by the deadline, never slept through
            self.late_answers += 1
        return np.array(self.action(n))


def check_history(spec: ActionSpec, history: History, held: list[list[int] | None], hold: int) -> None:
    """Every iteration got what the rules say: the action of its decision (``held[i // hold]``; None: the engine's
    own settings), corrected onto the iteration's mask where the mask forbids it."""
    assert len(held) == math.ceil(len(history) / hold)
    for i, (mask, applied, corrected) in enumerate(history):
        action = held[i // hold]
        if action is None:
            assert applied is None and not corrected, i
            continue
        m = np.array(mask)
        starts = np.cumsum((0, *spec.nvec[:-1]))
        allowed = all(m[s + v] for s, v in zip(starts, action, strict=True))
        expected = spec.decode(action) if allowed else spec.decode(spec.project(action, m))
        assert (applied, corrected) == (expected, not allowed), f"iteration {i}"


def check_stats(stats: DecisionStats, history: History, hold: int, fallbacks: dict[str, int]) -> None:
    decisions = math.ceil(len(history) / hold)
    assert stats.num_iterations == len(history)
    assert stats.num_decisions == decisions
    assert stats.num_held == len(history) - decisions
    assert stats.num_corrected == sum(c for _, _, c in history)
    assert dict(+stats.fallbacks) == fallbacks


def script_held(policy: Scripted, history: History, hold: int, fallback: Any = None) -> list[list[int] | None]:
    """The action each decision held: the script's, or where the script faulted, the fallback's (``fcfs`` acting on
    the decision's mask) or None (the engine's own settings)."""
    out: list[list[int] | None] = []
    for d in range(math.ceil(len(history) / hold)):
        if d not in policy.faults:
            out.append(policy.action(d))
        elif fallback is ENGINE_DEFAULT:
            out.append(None)
        else:
            mask = np.array(history[d * hold][0])
            out.append(fallback.act(np.zeros(1, dtype=np.float32), mask).tolist())
    return out


# -------------------------------------------------------------------------------------------- the rules
def _sim(seed: int = 0) -> tuple[Any, Simulator]:
    env = gym.make("LLMSched-v1", workload=WORKLOAD, engine=ENGINE, cost_model=COST).unwrapped
    return env, Simulator(ENGINE, TENANTS, COST, env.episode_requests(seed))


@pytest.mark.parametrize(
    ("action", "match"),
    [
        ([0, 0, 0], "7 components"),
        ([0, 0, 0, 0, 0, 0, 2], "'shed' must be an integer in"),
        ([0.5, 0, 0, 0, 0, 0, 0], "'queue_order' must be an integer"),
        ([float("nan"), 0, 0, 0, 0, 0, 0], "'queue_order' must be an integer"),
        ([0, True, 0, 0, 0, 0, 0], "'token_budget' must be an integer"),
        ("abc", "7 components"),
    ],
)
def test_a_malformed_action_is_refused_naming_the_component_never_repaired(action: Any, match: str) -> None:
    env, _ = _sim()
    loop = DecisionLoop(env.action_spec, env.encoder)
    with pytest.raises(ValueError, match=match):
        loop.take(action)
    assert loop.stats.num_decisions == 0


def test_a_forbidden_action_is_corrected_on_every_iteration_the_mask_forbids_it() -> None:
    env, sim = _sim()
    spec = env.action_spec
    loop = DecisionLoop(spec, env.encoder, record=True)
    hold_admission = [0, 0, 0, 0, 0, 0, 0]  # admit 0: forbidden while the engine is idle with requests waiting
    loop.take(hold_admission, sim.engine, hold=None)
    for _ in range(40):
        d = loop.next(sim.engine)
        assert d is not None
        sim.step(d)
    assert loop.history is not None
    check_history(spec, loop.history, [hold_admission], 10**9)
    assert 0 < loop.stats.num_corrected < 40  # forbidden only while idle with requests waiting
    assert loop.stats.num_held == 39 and loop.stats.num_decisions == 1


def test_a_failing_policy_falls_back_by_cause_and_the_fallback_holds_like_any_decision() -> None:
    env, sim = _sim()
    spec = env.action_spec
    policy = Scripted(spec, faults={1: "raise", 2: "malformed", 4: "late"})
    fcfs = baselines.make("fcfs", env.policy_context())
    # a deadline far above a scripted call's real time (microseconds), so no load turns one into a timeout
    options = ServeOptions(iterations_per_step=HOLD, policy_timeout_s=0.5, max_iterations=20_000)
    loop = decision_loop(policy, env.encoder, spec, fcfs, options)
    loop.history = []
    assert loop.deadline == "signal"  # the script is not a bounded policy: interrupted at its deadline
    for _ in serving(sim, loop, options):
        pass
    assert policy.late_answers == 0  # the late call was cut at its deadline, not slept through
    check_history(spec, loop.history, script_held(policy, loop.history, HOLD, fcfs), HOLD)
    check_stats(loop.stats, loop.history, HOLD, {"error": 1, "invalid": 1, "timeout": 1})
    assert loop.stats.last_error.startswith("policy interrupted") or "deadline" in loop.stats.last_error


def test_the_engine_default_fallback_leaves_the_decision_to_the_engine() -> None:
    env, sim = _sim()
    policy = Scripted(env.action_spec, faults={0: "raise"})
    loop = DecisionLoop(env.action_spec, env.encoder, policy, hold=2, fallback=ENGINE_DEFAULT, timeout_s=1.0)
    assert loop.next(sim.engine) is None and loop.next(sim.engine) is None  # the fallback's decision holds
    assert loop.next(sim.engine) is not None
    assert loop.stats.num_failed == 1 and loop.stats.num_decisions == 2 and loop.stats.num_held == 1


def test_without_a_fallback_the_policys_error_reaches_the_caller() -> None:
    env, sim = _sim()
    spec = env.action_spec
    with pytest.raises(RuntimeError, match="scripted failure at call 0"):
        DecisionLoop(spec, env.encoder, Scripted(spec, faults={0: "raise"})).next(sim.engine)
    loop = DecisionLoop(spec, env.encoder, Scripted(spec, faults={0: "malformed"}), name="the scripted policy")
    with pytest.raises(ValueError, match=r"the scripted policy returned array\(\[99.*'queue_order' must be"):
        loop.next(sim.engine)


def test_a_policy_of_the_mask_alone_is_asked_once_per_mask_pattern() -> None:
    env, sim = _sim()
    calls = []

    class MaskOnly:
        reads_observation = False

        def act(self, observation: np.ndarray, action_mask: np.ndarray) -> np.ndarray:
            calls.append(observation.any())
            return np.zeros(len(env.action_spec.nvec), dtype=np.int64)

    loop = DecisionLoop(env.action_spec, env.encoder, MaskOnly())
    for _ in range(20_000):  # bounded: a loop that failed to correct "admit 0" would hold the engine forever
        if sim.done:
            break
        d = loop.next(sim.engine)
        assert d is not None
        sim.step(d)
    assert sim.done
    assert 1 <= len(calls) <= 4 < loop.stats.num_decisions  # four mask patterns at most
    assert not any(calls)  # it gets zeros, not an observation


def test_the_last_step_time_is_the_clock_since_the_previous_decision() -> None:
    env, sim = _sim()
    seen: list[float] = []

    class Watches:
        def act(self, observation: np.ndarray, action_mask: np.ndarray) -> np.ndarray:
            seen.append(loop.last_step_s(sim.engine))
            return np.zeros(len(env.action_spec.nvec), dtype=np.int64)

    loop = DecisionLoop(env.action_spec, env.encoder, Watches(), hold=2)
    clocks = []
    for _ in range(10):
        if loop.stats.num_iterations % 2 == 0:
            clocks.append(sim.engine.now_s)
        d = loop.next(sim.engine)
        assert d is not None
        sim.step(d)
    assert seen[0] == 0.0
    assert seen[1:] == pytest.approx(np.diff(clocks).tolist())


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"hold": 0}, "hold must be an integer >= 1"),
        ({"timeout_s": 0.1}, "needs a fallback"),
        ({"timeout_s": -1.0, "fallback": ENGINE_DEFAULT}, "timeout_s must be > 0"),
        ({"deadline_mode": "fast"}, "deadline_mode must be one of"),
    ],
)
def test_bad_loop_arguments_are_refused(kwargs: dict[str, Any], match: str) -> None:
    env, _ = _sim()
    with pytest.raises(ValueError, match=match):
        DecisionLoop(env.action_spec, env.encoder, **kwargs)


# -------------------------------------------------------------------------------------------- every driver
class PricedRuntime:
    """The torch runtime (a real model runs every batch) with each iteration priced by the cost model instead of the
    wall clock, so that its engine goes through exactly the states the simulator's does."""

    @staticmethod
    def make(requests: list[Request]) -> Simulator:
        torch = pytest.importorskip("torch")
        torch.set_num_threads(1)
        from llmsched_env.runtime.executor import Runtime
        from llmsched_env.runtime.model import ModelConfig
        from llmsched_env.runtime.runner import ModelRunner

        class Priced(Runtime):
            def execute(self, batch: Batch) -> float:
                super().execute(batch)
                return batch.time_s(self.cost_model)

        small = ModelConfig("small", 512, 64, 128, 2, 4, 2, 16, rope_theta=10000.0, max_position=2048)
        runner = ModelRunner(small, num_blocks=ENGINE.num_kv_blocks, block_size=ENGINE.block_size)
        return Priced(runner, ENGINE, TENANTS, COST, requests)


def _through_the_env(seed: int) -> tuple[Scripted, History, DecisionStats, dict[str, float]]:
    env = gym.make(
        "LLMSched-v1",
        workload=WORKLOAD,
        engine=ENGINE,
        cost_model=COST,
        iterations_per_step=HOLD,
        check_invariants=True,
    )
    u: Any = env.unwrapped
    u.decisions.history = []
    policy = Scripted(u.action_spec, seed)
    obs, _ = env.reset(seed=seed)
    for _ in range(20_000):
        obs, _, terminated, truncated, info = env.step(policy.act(obs, u.action_masks()))
        if terminated or truncated:
            return policy, u.decisions.history, u.decisions.stats, info["metrics"]
    raise AssertionError("the episode did not end")


def _through_the_serving_loop(sim: Simulator, seed: int) -> tuple[Scripted, History, DecisionStats, dict[str, float]]:
    env: Any = gym.make("LLMSched-v1", workload=WORKLOAD, engine=ENGINE, cost_model=COST).unwrapped
    env.reset(seed=seed)  # the encoder's rate estimate as the env's episode sets it
    policy = Scripted(env.action_spec, seed)
    options = ServeOptions(HOLD, policy_timeout_s=30.0, check_invariants=True, max_iterations=20_000)
    loop = decision_loop(policy, env.encoder, env.action_spec, baselines.make("fcfs", env.policy_context()), options)
    loop.history = []
    for _ in serving(sim, loop, options):
        pass
    return policy, loop.history, loop.stats, sim.metrics()


REQUEST_METRICS = ("num_finished", "num_rejected", "slo_attainment", "ttft_p50_s", "ttft_p99_s", "tpot_p99_s",
                   "preemptions", "duration_s")  # fmt: skip


@pytest.mark.parametrize("seed", [0, 1])
def test_one_script_gives_the_same_decisions_and_statistics_in_the_env_the_simulator_and_the_runtime(
    seed: int,
) -> None:
    env: Any = gym.make("LLMSched-v1", workload=WORKLOAD, engine=ENGINE, cost_model=COST).unwrapped
    requests = env.episode_requests(seed)
    runs = {
        "env": _through_the_env(seed),
        "simulator": _through_the_serving_loop(Simulator(ENGINE, TENANTS, COST, requests), seed),
        "runtime": _through_the_serving_loop(PricedRuntime.make(env.episode_requests(seed)), seed),
    }
    policy, history, stats, metrics = runs["env"]
    check_history(env.action_spec, history, script_held(policy, history, HOLD), HOLD)
    check_stats(stats, history, HOLD, {})
    assert stats.num_corrected > 0 and stats.num_held > 0  # the script exercises correction and holding
    for name, (p, h, s, m) in runs.items():
        assert h == history, name  # every iteration's mask and applied decision
        assert p.seen == policy.seen, name  # every observation and mask the policy saw
        assert (s.num_decisions, s.num_iterations, s.num_held, s.num_corrected) == (
            stats.num_decisions, stats.num_iterations, stats.num_held, stats.num_corrected
        ), name  # fmt: skip
        assert {k: m[k] for k in REQUEST_METRICS} == {k: metrics[k] for k in REQUEST_METRICS}, name


def _one_replica_cluster(policy: Scripted, requests: list[Request], env: Any) -> tuple[Cluster, LocalScheduler]:
    scheduler = LocalScheduler([policy], [env.action_spec], [env.encoder], record=True)
    cluster = Cluster([ReplicaSpec(ENGINE, COST)], TENANTS, requests, scheduler)
    scheduler.cluster = cluster
    return cluster, scheduler


def test_a_clusters_local_scheduler_applies_the_same_rules() -> None:
    env: Any = gym.make("LLMSched-v1", workload=WORKLOAD, engine=ENGINE, cost_model=COST).unwrapped
    env.reset(seed=0)
    policy = Scripted(env.action_spec)
    cluster, scheduler = _one_replica_cluster(policy, env.episode_requests(0), env)
    while cluster.advance() is not None:  # the script's random admission caps let every request in
        cluster.route(0)
    loop = scheduler.loops[0]
    assert loop.history is not None and len(loop.history) > 50
    check_history(env.action_spec, loop.history, script_held(policy, loop.history, 1), 1)
    check_stats(loop.stats, loop.history, 1, {})
    assert loop.stats.num_corrected > 0
    for fault, error, match in [
        ("malformed", ValueError, r"replica 0's local policy returned .*'queue_order' must be an integer"),
        ("raise", RuntimeError, "scripted failure at call 3"),
    ]:  # no fallback inside a cluster: the error reaches the caller
        cluster, _ = _one_replica_cluster(Scripted(env.action_spec, faults={3: fault}), env.episode_requests(0), env)
        with pytest.raises(error, match=match):
            while cluster.advance() is not None:
                cluster.route(0)


@pytest.mark.vllm
def test_vllms_scheduler_applies_the_same_rules_and_falls_back_to_its_own_settings() -> None:
    from llmsched_env.adapters.vllm.loop import VllmLoop
    from llmsched_env.sim.setup import SimSetup

    env: Any = gym.make("LLMSched-v1", workload=WORKLOAD, engine=ENGINE, cost_model=COST).unwrapped
    env.reset(seed=0)
    faulty = {1: "raise", 2: "malformed", 4: "late"}
    for faults, causes in [({}, {}), (faulty, {"error": 1, "invalid": 1, "timeout": 1})]:
        policy = Scripted(env.action_spec, faults=faults)
        run = VllmLoop(SimSetup(ENGINE, TENANTS, COST, env.episode_requests(0), policy, HOLD), policy_timeout_s=0.5)
        decisions = run.scheduler.decisions
        decisions.history = []
        run.run()
        held = script_held(policy, decisions.history, HOLD, ENGINE_DEFAULT)
        check_history(env.action_spec, decisions.history, held, HOLD)
        check_stats(decisions.stats, decisions.history, HOLD, causes)
        assert decisions.stats.num_corrected > 0


def test_a_serving_deadline_past_an_hour_is_refused_before_any_timer_overflows() -> None:
    """``policy_timeout_s=1e300`` ended in an OverflowError from the deadline's timer at the first decision."""
    with pytest.raises(ValueError, match=r"ServeOptions\.policy_timeout_s must be finite and in \(0, 3,600\]"):
        ServeOptions(policy_timeout_s=1e300)
    assert ServeOptions(policy_timeout_s=3600.0).policy_timeout_s == 3600.0
