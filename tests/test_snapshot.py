"""Fork an episode: ``snapshot()`` / ``restore()`` on both envs replay a trajectory exactly (restored twice, into
another env made with the same arguments, the original stepping on unaffected), the engine's invariants hold
after a restore, a fork shares no mutable state with its source, and bad snapshots are refused in one line."""

from __future__ import annotations

from array import array
from collections import OrderedDict, deque
from enum import Enum
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import baselines
import llmsched_env  # noqa: F401
from llmsched_env.engine.config import SLO_CLASSES, TenantConfig
from llmsched_env.engine.invariants import check_engine
from llmsched_env.engine.remote_kv import RemoteKVConfig
from llmsched_env.workloads.workload import LengthDist, TenantWorkload, WorkloadConfig

SMALL = {"num_kv_blocks": 96, "block_size": 16, "max_num_seqs": 8, "max_num_batched_tokens": 512}
SLOW_LINK = RemoteKVConfig(slow_prob=0.5)
Trajectory = list[tuple[bytes, float, bool, bool, str]]


def _play(env: gym.Env, policy: Any, obs: np.ndarray, steps: int | None = None) -> tuple[Trajectory, np.ndarray]:
    """Step ``policy`` from ``obs`` for ``steps`` steps (None: to the episode's end): every observation, reward,
    end flag and info (the final metrics included), exactly."""
    u: Any = env.unwrapped
    out: Trajectory = []
    while steps is None or len(out) < steps:
        obs, reward, terminated, truncated, info = env.step(policy.act(obs, u.action_masks()))
        out.append((obs.tobytes(), float(reward), terminated, truncated, repr(sorted(info.items()))))
        if terminated or truncated:
            break
    return out, obs


def _check_replays(make: Any, policy_of: Any, seed: int, prefix: int) -> None:
    """Mid-episode: the rest of the episode after ``restore(snap)`` equals the one played on from the snapshot,
    restored twice into the same env and once into another env of the same arguments, and the original env
    stepping on after its snapshot was restored elsewhere is unaffected. ``policy_of(env)`` is random (a
    generator of its own, reset to the snapshot's moment each time)."""
    env = make()
    u: Any = env.unwrapped
    policy = policy_of(env)
    obs, _ = env.reset(seed=seed)
    _, obs = _play(env, policy, obs, prefix)
    snap = u.snapshot()
    rng_state = policy.rng.bit_generator.state
    reference, _ = _play(env, policy, obs)
    assert len(reference) > 10 and "metrics" in reference[-1][4]  # the rest of the episode, to its end
    for _ in range(2):  # a snapshot survives a restore unchanged
        u.restore(snap)
        policy.rng.bit_generator.state = rng_state
        again, _ = _play(env, policy, obs)
        assert again == reference
    other = make()
    other.reset(seed=seed + 1)  # another episode in flight, replaced by the snapshot's
    other.unwrapped.restore(snap)
    policy.rng.bit_generator.state = rng_state
    half, mid_obs = _play(other, policy, obs, len(reference) // 2)
    mid_rng = policy.rng.bit_generator.state
    # the first env, restored, steps on while the snapshot's copy is half-way in the other one
    u.restore(snap)
    policy.rng.bit_generator.state = rng_state
    mine, _ = _play(env, policy, obs)
    assert mine == reference
    policy.rng.bit_generator.state = mid_rng
    rest, _ = _play(other, policy, mid_obs)
    assert half + rest == reference


def _shared_prefixes() -> WorkloadConfig:
    """Shared system prompts on an engine too small to keep them: prefixes come back from the remote KV store."""
    chat = TenantWorkload(
        TenantConfig("chat", slo=SLO_CLASSES["chat"]),
        rate_rps=6.0,
        lengths=LengthDist.lognormal(200, 100, 1.0, 1.0, max_prompt_len=2048, max_output_len=256),
        prefix_share=0.9,
        num_shared_prefixes=6,
        shared_prefix_tokens=1024,
    )
    return WorkloadConfig((chat,), num_requests=80)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"scenario": "mixed-slo", "engine": SMALL, "load": 2.0, "split": "train"},
        # remote KV fetches, a slow one drawn from the env's generator with probability 0.5
        pytest.param(
            {"workload": _shared_prefixes(), "engine": {**SMALL, "num_kv_blocks": 256}, "remote_kv": SLOW_LINK},
            marks=pytest.mark.slow,
        ),
        pytest.param(
            {
                "scenario": "azure-conv",
                "engine": {**SMALL, "num_kv_blocks": 512},
                "length_prediction": "lognormal:0.5",
                "render_mode": "rgb_array",
                "split": "train",
            },
            marks=pytest.mark.slow,
        ),
    ],
    ids=["mixed-slo", "remote-kv-draws", "azure-conv-predicted"],
)
def test_single_node_restore_replays_the_episode_exactly(kwargs: dict[str, Any]) -> None:
    kwargs = {"num_requests": 120, **kwargs} if "workload" not in kwargs else kwargs

    def make() -> gym.Env:
        return gym.make("LLMSched-v1", check_invariants=True, **kwargs)

    _check_replays(make, lambda env: baselines.make("random", env.unwrapped.policy_context(), seed=5), 2, 60)
    if "remote_kv" in kwargs:  # the case exercises what it is for: transfers, some drawn slow
        env: Any = make()
        obs, _ = env.reset(seed=2)
        _play(env, baselines.make("random", env.unwrapped.policy_context(), seed=5), obs)
        assert env.unwrapped.sim.engine.remote.num_fetches > 5


@pytest.mark.parametrize("disaggregated", [False, {"num_prefill": 1, "num_decode": 2, "link_bandwidth_Bps": 5e9}])
def test_cluster_restore_replays_the_episode_exactly(disaggregated: Any) -> None:
    def make() -> gym.Env:
        return gym.make(
            "LLMSchedCluster-v0",
            scenario="azure-conv",
            num_replicas=3,
            engine=SMALL,
            load=3.0,
            disaggregated=disaggregated,
            local_policy=["random", "fcfs", "slo_aware"],  # one with a generator of its own
            check_invariants=True,
            num_requests=80,
        )

    _check_replays(make, lambda env: baselines.make_router("random", env.unwrapped.policy_context(), seed=3), 4, 30)


def test_mix_restore_replays_the_episode_exactly_in_another_env_of_its_own_workload() -> None:
    def make() -> gym.Env:
        return gym.make("LLMSchedMix-v0", num_requests=30, random_share=0.5)

    env: Any = make()
    obs, _ = env.reset(seed=3)
    policy = baselines.make("random", env.unwrapped.policy_context(), seed=5)
    _, obs = _play(env, policy, obs, 20)
    snap, rng_state = env.unwrapped.snapshot(), policy.rng.bit_generator.state
    reference, _ = _play(env, policy, obs)
    other: Any = make()
    other.reset(seed=4)  # another workload in flight, replaced by the snapshot's
    for target in (env, other):
        target.unwrapped.restore(snap)
        policy.rng.bit_generator.state = rng_state
        assert _play(target, policy, obs)[0] == reference
    assert other.unwrapped.workload == env.unwrapped.workload
    with pytest.raises(ValueError, match=r"random_share=0\.5, this one with 0\.0"):
        gym.make("LLMSchedMix-v0", num_requests=30, random_share=0.0).unwrapped.restore(snap)


def test_restore_leaves_a_consistent_engine_that_metrics_read_alike() -> None:
    env = gym.make("LLMSched-v1", scenario="tenants-on-off", num_requests=150, split="train")
    u: Any = env.unwrapped
    policy = baselines.make("slo_aware", u.policy_context())
    obs, _ = env.reset(seed=0)
    _, obs = _play(env, policy, obs, 300)
    snap = u.snapshot()
    before = u.sim.metrics()
    u.restore(snap)
    check_engine(u.sim.engine)
    u.sim.check_invariants()
    assert u.sim.metrics() == before
    assert u.sim.engine is not snap.state["sim"].engine


_MUTABLE = (list, dict, set, deque, array, OrderedDict)


def _immutable(x: object) -> bool:
    params = getattr(type(x), "__dataclass_params__", None)
    return isinstance(x, Enum) or (params is not None and params.frozen)


def _shared_mutables(a: object, b: object, where: str, seen: set[int]) -> list[str]:
    """Paths of mutable containers, or of objects of the engine and the simulator (not frozen dataclasses or
    enums), that ``a`` and ``b`` share, recursing into the objects they hold (requests are checked apart)."""
    out: list[str] = []
    if id(a) in seen:
        return out
    seen.add(id(a))
    names = getattr(a, "__dict__", None) or {s: None for s in getattr(type(a), "__slots__", ())}
    for name in names:
        x, y = getattr(a, name, None), getattr(b, name, None)
        if isinstance(x, _MUTABLE):
            if x is y:
                out.append(f"{where}.{name}")
        elif type(x).__module__.startswith(("llmsched_env.engine", "llmsched_env.sim")) and not _immutable(x):
            if x is y:
                out.append(f"{where}.{name}")
            elif y is not None:
                out += _shared_mutables(x, y, f"{where}.{name}", seen)
    return out


def _remote_kv_midway(seed: int, steps: int) -> tuple[Any, Any, np.ndarray]:
    """A 60-request ``remote-kv`` episode (train split) after ``steps`` steps of ``fcfs``: (the unwrapped env,
    the policy, the last observation)."""
    env = gym.make("LLMSched-v1", scenario="remote-kv", num_requests=60, split="train")
    u: Any = env.unwrapped
    policy = baselines.make("fcfs", u.policy_context())
    obs, _ = env.reset(seed=seed)
    _, obs = _play(env, policy, obs, steps)
    return u, policy, obs


def test_a_fork_shares_no_mutable_state_and_copies_every_live_request() -> None:
    u, _, _ = _remote_kv_midway(1, 80)
    sim = u.sim
    fork = sim.fork(u.np_random)
    assert _shared_mutables(sim, fork, "sim", set()) == []
    engine, copy = sim.engine, fork.engine
    assert copy.num_waiting is copy.queue.num_waiting and copy.vtc is copy.queue._vtc  # aliases kept
    live = engine.live_requests()
    assert live and all(r is not c for r, c in zip(live, copy.live_requests(), strict=True))
    fields = [n for n in dir(live[0]) if not n.startswith("__") and not callable(getattr(live[0], n))]
    assert {"block_table", "token_segments", "num_computed_tokens"} <= set(fields)  # (compiled: no __slots__)
    for r, c in zip(live, copy.live_requests(), strict=True):
        for name in fields:
            value = getattr(r, name)
            assert getattr(c, name) == value, name
            if isinstance(value, list) and name != "prefix_hashes":
                assert getattr(c, name) is not value, name
    assert [r.request_id for r in sim.requests] == [c.request_id for c in fork.requests]


def test_snapshot_and_restore_refuse_bad_input_in_one_line() -> None:
    env = gym.make("LLMSched-v1", scenario="default", num_requests=30)
    u: Any = env.unwrapped
    with pytest.raises(RuntimeError, match="reset"):
        u.snapshot()
    env.reset(seed=0)
    snap = u.snapshot()
    with pytest.raises(ValueError, match="expected what snapshot"):
        u.restore({"sim": None})
    other: Any = gym.make("LLMSched-v1", scenario="default", num_requests=40).unwrapped
    with pytest.raises(ValueError, match=r"num_requests=30, this one with 40") as err:
        other.restore(snap)
    assert "\n" not in str(err.value)
    cluster: Any = gym.make("LLMSchedCluster-v0", scenario="azure-conv", num_replicas=2, num_requests=30).unwrapped
    with pytest.raises(ValueError, match="taken from a LLMSchedEnv"):
        cluster.restore(snap)
    with pytest.raises(RuntimeError, match="reset"):
        cluster.snapshot()


def test_deepcopy_and_pickle_of_a_mid_episode_simulator_replay_it() -> None:
    """``copy.deepcopy`` and a pickle round trip of the simulator (remote KV draws, a batch and its decision held)
    play the rest of the episode exactly as the original: compiled too (``tests/test_compiled.py`` runs this
    file on a compiled tree, where frozen dataclasses are rebuilt through ``__init__``)."""
    import copy
    import pickle

    u, policy, obs = _remote_kv_midway(2, 120)
    sim = u.sim
    assert sim.engine.last_batch is not None and sim.engine.remote is not None
    decision = u.action_spec.decode(policy.act(obs, u.action_masks()))
    copies = [copy.deepcopy(sim), pickle.loads(pickle.dumps(sim))]
    for c in copies:
        assert c.engine.last_batch.decision == sim.engine.last_batch.decision
        assert c.engine.remote.config == sim.engine.remote.config
    for _ in range(300):  # the same decision on all three: the same batches and clock
        if sim.done:
            break
        for s in (sim, *copies):
            s.step(decision)
        for c in copies:
            c.check_invariants()
            assert c.now_s == sim.now_s and c.engine.num_good == sim.engine.num_good
    assert copies[0].metrics() == sim.metrics() == copies[1].metrics()
