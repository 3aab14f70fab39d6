"""Run one episode of an env (``LLMSched-v1`` or ``LLMSchedCluster-v0``) under a policy."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym

from llmsched_env.decision.policy import Policy, start_episode

PolicyFactory = Callable[[gym.Env], Policy]  # builds the episode's policy from the env, after its reset


def run_episode(env: gym.Env, policy: Policy | PolicyFactory, seed: int) -> dict[str, float]:
    """Run one episode of ``env`` under ``policy`` (or a factory called with the env after its reset); its final
    metrics. A stateful policy's ``start_episode`` is called before its first action."""
    obs, _ = env.reset(seed=seed)
    if not hasattr(policy, "act"):
        policy = policy(env)
    start_episode(policy)
    unwrapped: Any = env.unwrapped
    while True:
        obs, _, terminated, truncated, info = env.step(policy.act(obs, unwrapped.action_masks()))
        if terminated or truncated:
            return dict(info["metrics"])
