"""``LLMSchedCluster-v0`` on a synthetic single-node scenario (no traces needed): env checkers, invariants every
step under every router, disaggregated mode, determinism."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env as gym_check_env
from stable_baselines3.common.env_checker import check_env as sb3_check_env

import baselines
import llmsched_env  # noqa: F401
from llmsched_env.envs.episode import run_episode

DISAGG = {"num_prefill": 1, "num_decode": 2, "link_latency_s": 0.002, "link_bandwidth_Bps": 5e9}


def make(**kwargs) -> gym.Env:
    kwargs.setdefault("num_requests", 60)
    return gym.make("LLMSchedCluster-v0", scenario="mixed-slo", **kwargs)


@pytest.mark.parametrize("kwargs", [{"num_replicas": 3}, {"num_replicas": 3, "disaggregated": DISAGG}])
def test_env_checkers_pass_without_traces(kwargs: dict) -> None:
    gym_check_env(make(**kwargs).unwrapped, skip_render_check=True)
    sb3_check_env(make(**kwargs).unwrapped, warn=True)


@pytest.mark.parametrize("router", baselines.available_routers())
@pytest.mark.parametrize("disagg", [None, DISAGG])
def test_every_router_serves_every_request_with_invariants_checked(router: str, disagg: dict | None) -> None:
    env = make(num_replicas=3, disaggregated=disagg, check_invariants=True, load=1.5)
    policy = baselines.make_for(router, env.unwrapped.policy_context(), seed=0)
    m = run_episode(env, policy, seed=1)
    assert m["num_finished"] + m["num_rejected"] == 60 and m["num_unfinished"] == 0
    if disagg:
        assert m["kv_transfers"] == m["num_finished"] - sum(  # every finished multi-token request moved once
            1 for r in env.unwrapped.cluster.requests if r.output_len == 1 and r.finish_s is not None
        )


def test_same_seed_same_metrics_without_traces() -> None:
    runs = []
    for _ in range(2):
        env = make(num_replicas=2)
        runs.append(run_episode(env, baselines.make_for("power_of_two", env.unwrapped.policy_context(), 3), seed=4))
    assert runs[0] == runs[1]
    rng = np.random.default_rng(0)
    env = make(num_replicas=2)
    env.reset(seed=0)
    while True:
        _, _, done, trunc, info = env.step(int(rng.integers(2)))
        if done or trunc:
            break
    assert info["metrics"]["num_requests"] == 60
