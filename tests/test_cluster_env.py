"""``LLMSchedCluster-v0``: both env checkers, invariants under random routing and local policies, rewards,
determinism, heterogeneous replicas and bad input."""

from __future__ import annotations

import tracemalloc

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env as gym_check_env
from stable_baselines3.common.env_checker import check_env as sb3_check_env

import baselines
import llmsched_env  # noqa: F401
from llmsched_env.cluster.config import MAX_CLUSTER_KV_BLOCKS, ReplicaSpec, check_cluster_kv_blocks
from llmsched_env.cluster.scenarios import CLUSTER_SCENARIOS
from llmsched_env.cluster.simulator import Cluster
from llmsched_env.costs.loader import load_cost_model
from llmsched_env.engine.config import ENGINE_BOUNDS, EngineConfig
from llmsched_env.envs.episode import run_episode

SMALL = {"num_kv_blocks": 96, "block_size": 16, "max_num_seqs": 8, "max_num_batched_tokens": 512}


def make(**kwargs) -> gym.Env:
    kwargs.setdefault("num_requests", 40)
    return gym.make("LLMSchedCluster-v0", **kwargs)


@pytest.mark.parametrize("scenario", ["cluster-azure-conv-4", "cluster-azure-conv-pd"])
def test_gymnasium_and_sb3_env_checkers_pass(scenario: str) -> None:
    gym_check_env(make(scenario=scenario).unwrapped, skip_render_check=True)
    sb3_check_env(make(scenario=scenario).unwrapped, warn=True)


def test_spaces_names_and_single_node_scenarios() -> None:
    env = make(scenario="azure-conv", num_replicas=3)
    obs, _ = env.reset(seed=0)
    names = env.unwrapped.obs_names
    assert env.action_space.n == 3 and obs.shape == (len(names),) and len(set(names)) == len(names)
    assert "replica/2/prefix_hit" in names and "request/tenant/chat" in names and "decode/kv_used" not in names
    assert env.unwrapped.cluster_rate_rps == pytest.approx(3 * 11.4)  # N x the single-node nominal rate
    pd = make(scenario="cluster-azure-conv-pd")
    assert pd.action_space.n == 2 and "decode/link_backlog" in pd.unwrapped.obs_names


@pytest.mark.parametrize("disaggregated", [False, {"num_prefill": 1, "num_decode": 2, "link_bandwidth_Bps": 5e9}])
def test_invariants_every_step_under_random_routing_and_random_local_policy(disaggregated) -> None:
    env = make(
        scenario="azure-conv",
        num_replicas=3,
        engine=SMALL,
        load=3.0,
        disaggregated=disaggregated,
        local_policy="random",
        check_invariants=True,
        num_requests=60,
    )
    router = baselines.make_router("random", env.unwrapped.policy_context(), seed=3)
    obs, _ = env.reset(seed=3)
    total = 0.0
    while True:
        obs, reward, term, trunc, info = env.step(router.act(obs, env.unwrapped.action_masks()))
        assert env.observation_space.contains(obs) and not info["action_projected"]
        total += reward
        if term or trunc:
            break
    m = info["metrics"]
    assert term and m["num_requests"] == 60 and m["num_finished"] + m["num_rejected"] == 60
    assert total == pytest.approx(2 * m["slo_attainment"] - 1)


def test_same_seed_same_metrics() -> None:
    def episode(env: gym.Env, seed: int) -> dict[str, float]:
        return run_episode(env, baselines.make_router("power_of_two", env.unwrapped.policy_context(), seed=1), seed)

    kw = {"scenario": "cluster-azure-conv-4", "local_policy": ["fcfs", "random", "sjf", "random"], "load": 2.0}
    a, b = make(**kw), make(**kw)
    first = episode(a, 7)
    assert first == episode(b, 7) == episode(a, 7)
    assert first != episode(a, 8)


def test_heterogeneous_replicas_speed_feature_and_mask() -> None:
    tiny = EngineConfig(num_kv_blocks=32, block_size=16, max_num_seqs=8, max_num_batched_tokens=512)
    env = make(scenario="azure-conv", replicas=[(tiny, "llama3-8b-a100"), {"cost_model": "llama3-8b-h100"}])
    obs, _ = env.reset(seed=0)
    names = env.unwrapped.obs_names
    speed0, speed1 = obs[names.index("replica/0/speed")], obs[names.index("replica/1/speed")]
    assert speed0 < 1.0 and speed1 == 1.0
    cluster = env.unwrapped.cluster
    big = next(r for r in cluster.requests if r.total_len > 32 * 16)
    from llmsched_env.decision.router import route_mask

    assert route_mask(cluster, big).tolist() == [False, True]
    m = run_episode(env, baselines.make_router("least_outstanding", env.unwrapped.policy_context()), 0)
    assert m["num_rejected"] == 0  # nothing was routed where it could never fit


def test_masked_action_is_projected_and_bad_actions_raise() -> None:
    tiny = EngineConfig(num_kv_blocks=32, block_size=16, max_num_seqs=8, max_num_batched_tokens=512)
    env = make(scenario="azure-conv", replicas=[(tiny, "llama3-8b-h100"), (None, "llama3-8b-h100")])
    env.reset(seed=0)
    u = env.unwrapped
    while u.action_masks()[0]:
        env.step(0)
    _, _, _, _, info = env.step(0)
    assert info["action_projected"] and info["replica"] == 1
    for bad in (2, -1, 0.5, np.array([0, 1])):
        with pytest.raises(ValueError, match=r"replica index|integer"):
            env.step(bad)


def test_bad_configuration_raises() -> None:
    with pytest.raises(ValueError, match="unknown scenario"):
        make(scenario="nowhere")
    with pytest.raises(ValueError, match="unknown field"):
        make(disaggregated={"num_prefil": 1})
    with pytest.raises(ValueError, match="num_replicas=4"):
        make(scenario="cluster-azure-conv-pd", num_replicas=3)
    with pytest.raises(ValueError, match="not a baseline"):
        make(local_policy="fastest")
    with pytest.raises(ValueError, match="2 policies for 4"):
        make(local_policy=["fcfs", "sjf"])
    with pytest.raises(ValueError, match="load"):
        make(load=0.0)
    for bad, match in (({"max_steps": 0}, "max_steps"), ({"horizon_s": -1.0}, "horizon_s"), ({"split": "x"}, "split")):
        with pytest.raises(ValueError, match=match):
            make(**bad)
    with pytest.raises(ValueError, match=r"LLMSchedClusterEnv\.num_requests"):
        make(num_requests=0)


class HoldThenAdmit:
    """A stand-in for an exported single-node policy: acts on the observation (FCFS, admit 0 when it can)."""

    def __init__(self) -> None:
        self.calls = 0

    def act(self, observation: np.ndarray, action_mask: np.ndarray) -> np.ndarray:
        self.calls += 1
        assert observation.dtype == np.float32
        return np.zeros(7, dtype=np.int64)


def test_local_policy_objects_drive_the_replicas() -> None:
    policy = HoldThenAdmit()
    env = make(scenario="azure-conv", num_replicas=2, local_policy=policy, check_invariants=True, num_requests=20)
    m = run_episode(env, baselines.make_router("round_robin", env.unwrapped.policy_context()), 0)
    assert m["num_finished"] == 20 and policy.calls >= m["num_iterations"]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"num_replicas": 10**6}, r"LLMSchedClusterEnv\.num_replicas must be an integer from 1 to 1,024, got 1000000"),
        ({"num_replicas": 0}, r"LLMSchedClusterEnv\.num_replicas must be an integer from 1 to 1,024, got 0"),
        ({"replicas": [1, 2]}, r"LLMSchedClusterEnv\.replicas\[0\] must be an \(engine, cost_model\) pair or a dict"),
        ({"replicas": "llama3-8b-h100"}, r"LLMSchedClusterEnv\.replicas must be a list of replicas, got str"),
        ({"replicas": []}, r"LLMSchedClusterEnv\.replicas must list 1 to 1,024 replicas, got 0"),
        ({"replicas": [{"engin": None}]}, r"LLMSchedClusterEnv\.replicas\[0\]: unknown keys \['engin'\]"),
        ({"replicas": [(None, None, None)]}, r"LLMSchedClusterEnv\.replicas\[0\] must be an \(engine, cost_model\)"),
        ({"disaggregated": {"num_prefill": 2000}}, r"DisaggConfig\.num_prefill must be an integer from 1 to 1,024"),
        ({"disaggregated": {"num_prefill": 600, "num_decode": 600}}, r"num_prefill \+ num_decode must be at most"),
    ],
)
def test_the_replicas_are_capped_and_their_shape_checked(kwargs: dict, message: str) -> None:
    """A million replicas never finished building; ``replicas=[1, 2]`` was a TypeError from unpacking an int: each a
    ValueError naming the field, before anything is built."""
    with pytest.raises(ValueError, match=message):
        make(scenario="azure-conv", **kwargs)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"num_replicas": 1024, "engine": {"num_kv_blocks": 4_000_000}},
            r"num_replicas x engine\.num_kv_blocks = 1,024 x 4,000,000 = 4,096,000,000 KV blocks over the cluster, "
            r"more than 4,000,000 \(one engine's bound",
        ),
        (
            {
                "num_replicas": 4,
                "engine": {"num_kv_blocks": 2_000_000},
                "disaggregated": {"num_prefill": 2, "num_decode": 2},
            },
            r"\(num_prefill \+ num_decode\) x engine\.num_kv_blocks = \(2 \+ 2\) x 2,000,000 = 8,000,000 KV blocks",
        ),
        (
            {
                "replicas": [{"engine": {"num_kv_blocks": 3_000_000}}, {"engine": {"num_kv_blocks": 2_000_000}}],
                "disaggregated": {"num_prefill": 1, "num_decode": 1},
            },
            r"the 2 replicas' engine\.num_kv_blocks sum to 5,000,000 KV blocks \(prefill pool 3,000,000 \+ decode pool "
            r"2,000,000\) over the cluster",
        ),
    ],
)
def test_the_kv_blocks_of_the_whole_cluster_are_bounded_before_any_pool_is_built(kwargs: dict, message: str) -> None:
    """1,024 replicas of 4,000,000 blocks each (every value within its own cap) took some 380 GB and ended in a
    MemoryError after 22 s: now a ValueError naming the fields and their product, at once."""
    tracemalloc.start()
    try:
        with pytest.raises(ValueError, match=message):
            make(scenario="azure-conv", **kwargs)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 200 * 2**20, f"{peak:,} bytes allocated before the refusal"  # no pool was built


def test_the_cluster_kv_bound_admits_its_limit_and_every_shipped_scenario() -> None:
    env = make(scenario="azure-conv", num_replicas=1000, engine={**SMALL, "num_kv_blocks": 4000})  # 4,000,000 exactly
    assert env.unwrapped.num_replicas == 1000
    for name in CLUSTER_SCENARIOS.names():
        specs = CLUSTER_SCENARIOS.get(name).specs()
        assert check_cluster_kv_blocks(name, specs) <= MAX_CLUSTER_KV_BLOCKS == ENGINE_BOUNDS["num_kv_blocks"]
        make(scenario=name)
    big = ReplicaSpec(EngineConfig(num_kv_blocks=2_000_001), load_cost_model("llama3-8b-h100"))
    with pytest.raises(ValueError, match=r"Cluster: num_replicas x engine\.num_kv_blocks = 2 x 2,000,001"):
        Cluster([big, big], (), [], lambda i, engine: None)  # the simulator refuses it too, from Python
