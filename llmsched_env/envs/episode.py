"""Run one episode of an env (``LLMSched-v0`` or ``LLMSchedCluster-v0``) under a policy."""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from llmsched_env.decision.policy import Policy, start_episode

__all__ = ["run_episode"]


def run_episode(env: gym.Env, policy: Policy, seed: int) -> dict[str, float]:
    """Run one episode of ``env`` under ``policy`` (acting on observation and mask); its final metrics. A
    stateful policy is told that the episode starts (``start_episode``) before its first action."""
    obs, _ = env.reset(seed=seed)
    start_episode(policy)
    unwrapped: Any = env.unwrapped
    while True:
        obs, _, terminated, truncated, info = env.step(policy.act(obs, unwrapped.action_masks()))
        if terminated or truncated:
            return dict(info["metrics"])
