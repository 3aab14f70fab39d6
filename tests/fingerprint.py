"""Fingerprint of episodes' metrics, rewards and observations over every scenario, baseline and router.

``python tests/fingerprint.py`` rewrites ``tests/data/fingerprint.json``; ``test_fingerprint.py`` checks that
the code still produces it. Regenerate only for a change that is meant to alter behaviour, and say so in the
commit.
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

import baselines
import llmsched_env  # noqa: F401  (registers the envs)
from llmsched_env.envs.single_node import env_id

DATA = Path(__file__).resolve().parent / "data" / "fingerprint.json"
POLICIES = Path(__file__).resolve().parent / "data" / "policies"  # schema-1 fixtures
NUM_REQUESTS = 60

# (scenario, policy, load, split, seed): every scenario once, every baseline on mixed-slo (but tuned, whose knobs
# are data that llmsched-tune rewrites; tests/test_tuned.py checks it plays them); the long-prompt
# scenarios (mooncake-conv, remote-kv) with fewer requests, as the invariant check scans their large pools
SMALL = {"mooncake-conv": 10, "remote-kv": 10}
SINGLE = [
    ("default", "fcfs", 1.0, "val", 0),
    ("azure-conv", "slo_aware", 1.0, "val", 1),
    ("azure-code", "sarathi", 1.0, "train", 2),
    ("mooncake-conv", "lpm", 1.0, "val", 0),
    ("sharegpt-poisson", "sjf", 1.2, "train", 1),
    ("bursty", "kv_guard", 1.0, "val", 0),
    ("multi-tenant-overload", "vtc", 1.0, "val", 3),
    ("tenants-on-off", "priority_aging", 1.0, "train", 0),
    ("mix-shift", "prefill_first", 1.0, "val", 0),
    ("short-long", "random", 1.0, "val", 5),
    ("remote-kv", "slo_aware", 1.0, "val", 0),
] + [("mixed-slo", name, 1.5, "val", 0) for name in baselines.available() if name not in ("tuned", "sprw")]
# the episodes above run on the schema-1 layout (as recorded before schema 2); these on schema 2, with a
# length prediction: (scenario, policy, load, split, seed, length_prediction)
SCHEMA2 = [
    ("mixed-slo", "slo_aware", 1.5, "val", 0, None),
    ("short-long", "sprw", 1.5, "val", 0, "lognormal:0.5"),
    ("sharegpt-poisson", "sprw", 1.2, "val", 1, "exact"),
    ("tenants-on-off", "random", 1.0, "val", 2, "exact"),
]
# a small pool for the mixed-slo sweep, so that admission, preemption and shedding all happen
SMALL_ENGINE = {"num_kv_blocks": 160, "max_num_seqs": 24}
SHIPPED = [("mixed-slo", "mixed-slo", 1.3, 0), ("remote-kv", "remote-kv", 1.0, 1)]
CLUSTER = [
    ("cluster-azure-conv-4", "least_kv_load", 4.0, 0),
    ("cluster-mooncake-4", "prefix_affinity", 2.0, 0),
    ("cluster-azure-conv-pd", "round_robin", 3.0, 0),
    ("cluster-azure-conv-8", "power_of_two", 6.0, 1),
]


def _clean(metrics: dict[str, Any]) -> dict[str, Any]:
    return {k: (float(v) if isinstance(v, (int, float, np.floating, np.integer)) else v) for k, v in metrics.items()}


def _run(env: gym.Env, policy: Any, seed: int) -> dict[str, Any]:
    obs, _ = env.reset(seed=seed)
    digest = hashlib.sha256()
    total, steps = 0.0, 0
    unwrapped: Any = env.unwrapped
    while True:
        digest.update(np.asarray(obs, dtype=np.float32).tobytes())
        action = policy.act(obs, unwrapped.action_masks())
        obs, reward, terminated, truncated, info = env.step(action)
        total += float(reward)
        steps += 1
        if terminated or truncated:
            break
    return {"steps": steps, "reward": total, "obs_sha256": digest.hexdigest()[:16], "metrics": _clean(info["metrics"])}


def _single(scenario: str, name: str, load: float, split: str, seed: int) -> dict[str, Any]:
    env = gym.make(
        "LLMSched-v0",
        scenario=scenario,
        split=split,
        load=load,
        num_requests=SMALL.get(scenario, NUM_REQUESTS),
        check_invariants=True,
        engine=SMALL_ENGINE if scenario == "mixed-slo" else None,
        schema=1,
    )
    return _run(env, baselines.make_for(name, env.unwrapped.policy_context(), seed=seed), seed)


def _schema2(scenario: str, name: str, load: float, split: str, seed: int, prediction: str | None) -> dict[str, Any]:
    env = gym.make(
        "LLMSched-v1",
        scenario=scenario,
        split=split,
        load=load,
        num_requests=NUM_REQUESTS,
        check_invariants=True,
        schema=2,
        length_prediction=prediction,
    )
    return _run(env, baselines.make_for(name, env.unwrapped.policy_context(), seed=seed), seed)


def _shipped(scenario: str, folder: str, load: float, seed: int) -> dict[str, Any]:
    from llmsched_env.runtime.policy_file import load_policy_file

    policy = load_policy_file(POLICIES / folder)
    env = gym.make(
        env_id(policy.schema_version),
        scenario=scenario,
        split="val",
        load=load,
        num_requests=SMALL.get(scenario, NUM_REQUESTS),
        check_invariants=True,
        iterations_per_step=int(policy.meta.get("iterations_per_step", 1)),
        schema=policy.schema_version,
    )
    return _run(env, policy, seed)


def _cluster(scenario: str, name: str, load: float, seed: int) -> dict[str, Any]:
    kwargs = {"split": "val", "load": load, "num_requests": NUM_REQUESTS, "check_invariants": True}
    env = gym.make("LLMSchedCluster-v0", scenario=scenario, **kwargs)
    return _run(env, baselines.make_for(name, env.unwrapped.policy_context(), seed=seed), seed)


def cases() -> dict[str, Callable[[], dict[str, Any]]]:
    """Every episode of the lists above, keyed by a readable name, to be played when called (one at a time, so
    that the test suite can spread them over its workers)."""
    out: dict[str, Callable[[], dict[str, Any]]] = {}
    for scenario, name, load, split, seed in SINGLE:
        out[f"{scenario}/{name}/{load}/{split}/{seed}"] = partial(_single, scenario, name, load, split, seed)
    for scenario, name, load, split, seed, prediction in SCHEMA2:
        key = f"schema2:{scenario}/{name}/{load}/{split}/{seed}/{prediction}"
        out[key] = partial(_schema2, scenario, name, load, split, seed, prediction)
    for scenario, folder, load, seed in SHIPPED:
        out[f"{scenario}/shipped:{folder}/{load}/val/{seed}"] = partial(_shipped, scenario, folder, load, seed)
    for scenario, name, load, seed in CLUSTER:
        out[f"{scenario}/{name}/{load}/val/{seed}"] = partial(_cluster, scenario, name, load, seed)
    return out


def fingerprint() -> dict[str, Any]:
    """Every episode of the lists above, played, keyed by a readable name."""
    return {key: play() for key, play in cases().items()}


if __name__ == "__main__":
    import torch

    torch.set_num_threads(1)
    DATA.parent.mkdir(parents=True, exist_ok=True)
    DATA.write_text(json.dumps(fingerprint(), indent=1, sort_keys=True) + "\n")
    print(f"wrote {DATA}", file=sys.stderr)
