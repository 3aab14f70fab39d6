"""Every step of an episode, for tests that compare two ways of playing it (a bound against the policy it replays)."""

from __future__ import annotations

from typing import Any

import gymnasium as gym


def episode_steps(
    env: gym.Env, policy: Any, seed: int, info_key: str | None = None
) -> tuple[list[tuple[Any, ...]], dict[str, float]]:
    """Every observation (as bytes) and reward of the episode of ``seed`` under ``policy`` (or a factory of it,
    called with the env after its reset), each with ``info[info_key]`` when given, and the episode's metrics."""
    u: Any = env.unwrapped
    obs, _ = env.reset(seed=seed)
    if not hasattr(policy, "act"):
        policy = policy(env)
    out: list[tuple[Any, ...]] = []
    while True:
        obs, reward, terminated, truncated, info = env.step(policy.act(obs, u.action_masks()))
        out.append((obs.tobytes(), float(reward), *((info[info_key],) if info_key else ())))
        if terminated or truncated:
            return out, info["metrics"]
