"""A soak of the envs under random masked actions, the invariants checked every step and the request count every
episode (``SOAK_CASES``: a tiny KV pool, overload, remote KV, a cluster, a disaggregated one). Violations are
recorded, never raised; same ``seed``, same episodes.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np

import llmsched_env  # noqa: F401  (registers LLMSched-v1 and LLMSchedCluster-v0)

__all__ = ["SOAK_CASES", "SoakResult", "soak"]

_SMALL_POOL = {"num_kv_blocks": 48, "block_size": 16, "max_num_seqs": 8, "max_num_batched_tokens": 512}
# name -> (env id, env arguments)
SOAK_CASES: dict[str, tuple[str, dict[str, Any]]] = {
    "small-pool": ("LLMSched-v1", {"scenario": "short-long", "engine": _SMALL_POOL, "load": 4.0}),
    "preemption": ("LLMSched-v1", {"scenario": "mixed-slo", "load": (2.0, 8.0)}),
    "remote-kv": ("LLMSched-v1", {"scenario": "remote-kv", "load": (1.0, 4.0)}),
    "cluster": ("LLMSchedCluster-v0", {"scenario": "cluster-azure-conv-4", "load": (0.5, 3.0), "num_replicas": 2}),
    "disaggregated": ("LLMSchedCluster-v0", {"scenario": "cluster-azure-conv-pd", "load": (0.5, 3.0)}),
}


@dataclass
class SoakResult:
    """What a soak ran and found: env steps, episodes ended, and every violation as (case, seed, message)."""

    steps: int = 0
    episodes: int = 0
    violations: list[tuple[str, int, str]] = field(default_factory=list)
    wall_s: float = 0.0
    steps_by_case: dict[str, int] = field(default_factory=dict)


def _random_masked_action(env: Any, rng: np.random.Generator) -> np.ndarray | int:
    """A uniformly random action among those the mask allows (per component for a MultiDiscrete space)."""
    mask = env.action_masks()
    space = env.action_space
    if isinstance(space, gym.spaces.Discrete):
        return int(rng.choice(np.flatnonzero(mask)))
    action, start = [], 0
    for n in space.nvec:
        action.append(int(rng.choice(np.flatnonzero(mask[start : start + n]))))
        start += n
    return np.array(action, dtype=np.int64)


def _conservation(info: dict[str, Any]) -> str | None:
    """The problem with an ended episode's request accounting, or None."""
    m = info.get("metrics", {})
    counted = m.get("num_finished", 0) + m.get("num_rejected", 0) + m.get("num_unfinished", 0)
    if counted != m.get("num_requests"):
        return f"finished + rejected + unfinished = {counted} but the episode had {m.get('num_requests')} requests"
    return None


def soak(steps: int, seed: int = 0, num_requests: int = 40, cases: tuple[str, ...] | None = None) -> SoakResult:
    """Episodes of each of ``cases`` (default: all) until each ran its share of ``steps``; ``ValueError`` if bad."""
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps must be an integer >= 1, got {steps!r}")
    names = tuple(SOAK_CASES) if cases is None else tuple(cases)
    unknown = [n for n in names if n not in SOAK_CASES]
    if unknown or not names:
        raise ValueError(f"unknown soak case(s) {unknown}; available: {', '.join(SOAK_CASES)}")
    envs = {
        name: gym.make(SOAK_CASES[name][0], num_requests=num_requests, check_invariants=True, **SOAK_CASES[name][1])
        for name in names
    }
    result = SoakResult(steps_by_case=dict.fromkeys(names, 0))
    t0 = time.perf_counter()
    episode = 0
    for index, name in enumerate(names):  # each case gets an equal share of the steps
        budget = steps // len(names) + (1 if index < steps % len(names) else 0)
        env = envs[name].unwrapped
        while result.steps_by_case[name] < budget:
            episode_seed = seed + episode
            episode += 1
            rng = np.random.default_rng(episode_seed)
            before = result.steps_by_case[name]
            try:
                env.reset(seed=episode_seed)
                while result.steps_by_case[name] < budget:
                    _, reward, term, trunc, info = env.step(_random_masked_action(env, rng))
                    result.steps += 1
                    result.steps_by_case[name] += 1
                    if not math.isfinite(reward):
                        result.violations.append((name, episode_seed, f"reward {reward} is not finite"))
                    if term or trunc:
                        result.episodes += 1
                        problem = _conservation(info)
                        if problem is not None:
                            result.violations.append((name, episode_seed, problem))
                        break
            except AssertionError as exc:  # an invariant failed: record it, go on with the next episode
                message = str(exc).splitlines()[0] if str(exc) else "AssertionError"
                result.violations.append((name, episode_seed, message))
                if result.steps_by_case[name] == before:  # not even one step: every episode would fail alike
                    break
    for env in envs.values():
        env.close()
    result.wall_s = time.perf_counter() - t0
    return result
