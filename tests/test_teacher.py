"""The ``searched`` teacher (``agents.teacher``): the best of several settings, tried on the episode itself; and
the ``lookahead`` teacher: the bound's label in each state reached."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import llmsched_env  # noqa: F401
from agents.bc import collect_demonstrations
from agents.teacher import (
    LOOKAHEAD,
    MPC,
    SEARCHED,
    LookaheadTeacher,
    MPCTeacher,
    candidate_factory,
    check_teacher,
    searched,
    shipped_settings,
    teacher,
)
from agents.train_config import TrainConfig, resolve_hyperparams
from llmsched_env.decision.planners.lookahead import LookaheadConfig
from llmsched_env.decision.planners.mpc import MPCConfig
from llmsched_env.envs.episode import run_episode
from llmsched_env.envs.mixture import WorkloadMixEnv

CANDIDATES = ("fcfs", "sjf", "tuned:short-long", "tuned:default")


def _mix() -> WorkloadMixEnv:
    """Short library episodes (the search replays each once per candidate), at loads where the settings differ."""
    return WorkloadMixEnv(
        scenarios=("default", "short-long"),
        num_requests=30,
        random_share=0.0,
        load_span=(2.0, 3.0),
        check_invariants=True,
    )


@pytest.mark.slow
def test_replay_gives_the_episode_again() -> None:
    env = _mix()
    env.reset(seed=4)
    first = run_episode(env.replay()[0], candidate_factory("fcfs"), env.episode_seed)  # type: ignore[arg-type]
    again = run_episode(env.replay()[0], candidate_factory("fcfs"), env.episode_seed)  # type: ignore[arg-type]
    assert first == again
    assert run_episode(env, candidate_factory("fcfs"), 4) == first  # the episode itself: the same as its replay
    with pytest.raises(RuntimeError, match="reset"):
        _mix().replay()


@pytest.mark.slow  # about 100 s on the 2-core machine
def test_searched_plays_the_candidate_with_the_best_attainment() -> None:
    env = _mix()
    chosen_names = set()
    for seed in range(4):
        env.reset(seed=seed)
        scores = {}
        for c in CANDIDATES:
            m = run_episode(env.replay()[0], candidate_factory(c), env.episode_seed)  # type: ignore[arg-type]
            scores[c] = (m["slo_attainment"], m["goodput_rps"])
        best = max(CANDIDATES, key=lambda c: scores[c])  # the first of equal scores, as the search keeps it
        policy = searched(env, CANDIDATES)
        expected = candidate_factory(best)(env)
        assert type(policy) is type(expected) and policy.decision_for(0) == expected.decision_for(0)
        # and it is no worse than any candidate on this episode
        assert run_episode(env.replay()[0], lambda e, p=policy: p, env.episode_seed)["slo_attainment"] == max(  # type: ignore[arg-type]
            s[0] for s in scores.values()
        )
        chosen_names.add(best)
    assert len(chosen_names) >= 2  # the best setting depends on the episode


def test_searched_refuses_other_envs_and_unknown_candidates() -> None:
    single = gym.make("LLMSched-v1", scenario="default", num_requests=20)
    single.reset(seed=0)
    with pytest.raises(ValueError, match=r"searched.*LLMSchedMix-v0"):
        searched(single)
    with pytest.raises(ValueError, match="tuned:nowhere"):
        candidate_factory("tuned:nowhere")
    env = _mix()
    env.reset(seed=0)
    with pytest.raises(ValueError, match="at least one candidate"):
        searched(env, ())


@pytest.mark.slow
def test_tuned_first_then_searched_on_random_workloads() -> None:
    env = WorkloadMixEnv(scenarios=("default",), num_requests=8, random_share=0.5)
    make = teacher(f"tuned,{SEARCHED}", seed=0)
    kinds = set()
    for seed in range(8):
        env.reset(seed=seed)
        policy = make(env)
        random = env.workload["scenario"].startswith("random-")
        assert (policy.name == "tuned") != random
        kinds.add(random)
    assert kinds == {True, False}


@pytest.mark.slow  # about 30 s on the 2-core machine
def test_demonstrations_from_the_searched_teacher_are_deterministic() -> None:
    a = collect_demonstrations(_mix(), SEARCHED, 120, 0.99, seed=2)  # searched on every (library) episode
    b = collect_demonstrations(_mix(), SEARCHED, 120, 0.99, seed=2)
    for key in a:
        np.testing.assert_array_equal(a[key], b[key])


def test_a_scenarios_tuned_settings_teach_every_workload() -> None:
    env = WorkloadMixEnv(scenarios=("default",), num_requests=8, random_share=0.5)
    make = teacher("tuned,tuned:mixed-slo", seed=0)
    expected = candidate_factory("tuned:mixed-slo")
    kinds = set()
    for seed in range(10):
        env.reset(seed=seed)
        policy = make(env)
        kinds.add(env.workload["scenario"].startswith("random-"))
        if env.workload["scenario"].startswith("random-"):
            assert policy.decision_for(0) == expected(env).decision_for(0)
        else:
            assert policy.name == "tuned"
    assert kinds == {True, False}
    with pytest.raises(ValueError, match="tuned:nowhere"):
        teacher("tuned:nowhere")


@pytest.mark.parametrize(
    ("hp", "message"),
    [
        ({"bc_warmstart": "tuned,tuned:nowhere"}, "bc_warmstart.*'tuned:nowhere': the tuned table has no 'nowhere'"),
        ({"bc_warmstart": "slo_awre"}, "bc_warmstart.*unknown scheduler 'slo_awre'"),
        ({"bc_warmstart": "tuned, slo_aware"}, "bc_warmstart.*unknown scheduler ' slo_aware'"),
        ({"bc_warmstart": ","}, "bc_warmstart.*no teacher named in ','"),
    ],
)
def test_a_bad_teacher_name_fails_when_the_config_is_read(hp: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        resolve_hyperparams(TrainConfig(scenario="generalist", hp=hp))


def test_every_teacher_kind_passes_the_check() -> None:
    check_teacher(f"tuned,tuned:mixed-slo,{SEARCHED},{LOOKAHEAD},slo_aware")
    resolve_hyperparams(TrainConfig(scenario="generalist", bc="tuned,tuned:mixed-slo"))
    with pytest.raises(ValueError, match="bc: unknown scheduler 'nah'"):
        TrainConfig(scenario="generalist", bc="fcfs,nah")


def test_the_lookahead_teacher_labels_the_state_it_is_asked_about() -> None:
    """Its label is the bound's best candidate from the env's current state, whoever played the env there (a fresh
    teacher on that state gives the same), valid under the mask; the env is left where it stood; a new decision
    every k iterations, and anew when the env starts another episode."""
    config = LookaheadConfig(k=8, horizon=8, tail=16)

    def mix() -> WorkloadMixEnv:
        return WorkloadMixEnv(scenarios=("mixed-slo",), num_requests=40, random_share=0.0, load_span=(2.5, 3.0),
                              iterations_per_step=4, check_invariants=True)  # fmt: skip

    env, twin = mix(), mix()  # the twin plays the same steps, untouched by the teacher
    obs, _ = env.reset(seed=3)
    twin_obs, _ = twin.reset(seed=3)
    t = LookaheadTeacher(env, seed=0, config=config)
    spec = env.action_spec
    fcfs = candidate_factory("fcfs")(env)
    decided = 0
    for _ in range(12):  # fcfs plays (4 iterations a step); the teacher labels each state reached
        mask = env.action_masks()
        label = t.act(obs, mask)
        np.testing.assert_array_equal(spec.project(label, mask), label)  # valid under the mask
        if t.num_labels > decided:  # it decided here: a fresh teacher on the twin's same state gives the same label
            decided = t.num_labels
            np.testing.assert_array_equal(LookaheadTeacher(twin, seed=0, config=config).act(twin_obs, mask), label)
        action = fcfs.act(obs, mask)
        obs, _, terminated, truncated, _ = env.step(action)
        twin_obs = twin.step(action)[0]
        np.testing.assert_array_equal(obs, twin_obs)  # the teacher left the env where it stood
        assert not (terminated or truncated)
    assert decided == 6  # 12 steps of 4 iterations, a decision every 8
    single = gym.make("LLMSched-v1", scenario="mixed-slo", num_requests=30, iterations_per_step=4)
    u = single.unwrapped
    single.reset(seed=0)
    same = LookaheadTeacher(single, seed=0, config=config)
    same.act(np.zeros(1), u.action_masks())
    single.reset(seed=1)
    same.act(np.zeros(1), u.action_masks())
    assert same.num_labels == 2  # a new episode on the same env: decided anew at once
    with pytest.raises(ValueError, match="candidates=requests"):
        LookaheadTeacher(single, config=LookaheadConfig(candidates="requests"))
    with pytest.raises(RuntimeError, match="labels_only"):
        same.bound.act(np.zeros(1), u.action_masks())


@pytest.mark.slow  # about 10 s on the 2-core machine
def test_demonstrations_from_the_lookahead_teacher_are_deterministic() -> None:
    def mix() -> WorkloadMixEnv:
        return WorkloadMixEnv(scenarios=("mixed-slo", "default"), num_requests=40, random_share=0.5,
                              load_span=(2.0, 3.0), iterations_per_step=4)  # fmt: skip

    a = collect_demonstrations(mix(), LOOKAHEAD, 60, 0.99, seed=5)
    b = collect_demonstrations(mix(), LOOKAHEAD, 60, 0.99, seed=5)
    for key in a:
        np.testing.assert_array_equal(a[key], b[key])
    spec = mix().action_spec
    for action, mask in zip(a["actions"], a["masks"], strict=True):
        np.testing.assert_array_equal(spec.project(action, mask), action)


def test_the_mpc_teacher_labels_states_without_touching_the_env() -> None:
    """Its label is the planner's choice from the env's current state, valid under the mask; the env is left where
    it stood; a new decision every k iterations; a randomised workload (no tuned entry) gets mixed-slo's tuned
    setting as its base, chosen without playing the episode; demonstrations are deterministic for a seed."""
    config = MPCConfig(k=8, futures=2, horizon=8, tail=8)

    def mix(random_share: float = 0.0) -> WorkloadMixEnv:
        return WorkloadMixEnv(scenarios=("mixed-slo",), num_requests=40, random_share=random_share,
                              load_span=(2.5, 3.0), iterations_per_step=4, check_invariants=True)  # fmt: skip

    env, twin = mix(), mix()
    obs, _ = env.reset(seed=3)
    twin_obs, _ = twin.reset(seed=3)
    t = MPCTeacher(env, seed=0, config=config)
    spec = env.action_spec
    fcfs = candidate_factory("fcfs")(env)
    for _ in range(12):
        mask = env.action_masks()
        label = t.act(obs, mask)
        np.testing.assert_array_equal(spec.project(label, mask), label)
        action = fcfs.act(obs, mask)
        obs, _, terminated, truncated, _ = env.step(action)
        twin_obs = twin.step(action)[0]
        np.testing.assert_array_equal(obs, twin_obs)  # the planner forks the simulator, never steps it
        assert not (terminated or truncated)
    assert t.num_labels == 6
    randomised = mix(random_share=1.0)
    randomised.reset(seed=0)
    base = MPCTeacher(randomised, seed=0, config=config).planner.candidates[0]
    assert base == spec.decode(spec.encode(shipped_settings()["mixed-slo"]))
    check_teacher(MPC)
    with pytest.raises(ValueError, match="candidates=requests"):
        MPCTeacher(randomised, seed=0, config=MPCConfig(candidates="requests"))
    a = collect_demonstrations(mix(), MPC, 24, 0.99, seed=5)
    b = collect_demonstrations(mix(), MPC, 24, 0.99, seed=5)
    for key in a:
        np.testing.assert_array_equal(a[key], b[key])
