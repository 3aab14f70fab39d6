"""Behaviour-cloning warm start: fit the agent's policy to a baseline's actions before reinforcement learning.

The baseline plays training episodes; the actor learns its actions by maximum likelihood (with the action
masks, for MaskablePPO) and the critic learns the discounted returns of those episodes, so PPO starts from
the heuristic's behaviour with a value function that already knows what it is worth.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import torch as th

import baselines

__all__ = ["behaviour_clone", "collect_demonstrations"]


def collect_demonstrations(
    env: gym.Env, baseline: str, num_steps: int, gamma: float, seed: int
) -> dict[str, np.ndarray]:
    """``num_steps`` steps of ``baseline`` on ``env``: observations, masks, actions and discounted returns."""
    unwrapped: Any = env.unwrapped
    policy = baselines.make(baseline, unwrapped.policy_context(), seed=seed)
    obs_l, mask_l, act_l, rew_l, done_l = [], [], [], [], []
    obs, _ = env.reset(seed=seed)
    episode = 0
    while len(obs_l) < num_steps:
        mask = unwrapped.action_masks()
        action = policy.act(obs, mask)
        obs_l.append(obs)
        mask_l.append(mask)
        act_l.append(action)
        obs, reward, terminated, truncated, _ = env.step(action)
        rew_l.append(reward)
        done_l.append(terminated or truncated)
        if terminated or truncated:
            episode += 1
            obs, _ = env.reset(seed=seed + 1000 * episode)
    returns = np.zeros(len(rew_l), dtype=np.float32)
    running = 0.0
    for i in range(len(rew_l) - 1, -1, -1):  # the last, unfinished episode is cut: its tail return is 0
        running = rew_l[i] + gamma * running * (0.0 if done_l[i] else 1.0)
        returns[i] = running
    return {
        "obs": np.asarray(obs_l, dtype=np.float32),
        "masks": np.asarray(mask_l, dtype=bool),
        "actions": np.asarray(act_l, dtype=np.int64),
        "returns": returns,
    }


def behaviour_clone(
    model: Any,
    make_env: Callable[[], gym.Env],
    baseline: str,
    num_steps: int,
    epochs: int = 10,
    batch_size: int = 256,
    learning_rate: float = 1e-3,
    seed: int = 0,
) -> dict[str, float]:
    """Fit ``model.policy`` (an SB3 actor-critic, masked or not) to ``baseline``; return the final accuracy
    (share of steps whose every action component matches) and losses."""
    data = collect_demonstrations(make_env(), baseline, num_steps, float(getattr(model, "gamma", 0.99)), seed)
    policy = model.policy
    device = policy.device
    obs = th.as_tensor(data["obs"], device=device)
    actions = th.as_tensor(data["actions"], device=device)
    masks = th.as_tensor(data["masks"], device=device)
    returns = th.as_tensor(data["returns"], device=device)
    masked = "Maskable" in type(model).__name__
    optimizer = th.optim.Adam(policy.parameters(), lr=learning_rate)
    gen = th.Generator().manual_seed(seed)
    n = obs.shape[0]
    policy.set_training_mode(True)
    stats = {"bc_policy_loss": 0.0, "bc_value_loss": 0.0}
    for _ in range(epochs):
        perm = th.randperm(n, generator=gen)
        for start in range(0, n, batch_size):
            idx = perm[start : start + batch_size]
            kwargs = {"action_masks": masks[idx].cpu().numpy()} if masked else {}
            values, log_prob, _ = policy.evaluate_actions(obs[idx], actions[idx], **kwargs)
            policy_loss = -log_prob.mean()
            value_loss = th.nn.functional.mse_loss(values.flatten(), returns[idx])
            loss = policy_loss + 0.5 * value_loss
            optimizer.zero_grad()
            loss.backward()
            th.nn.utils.clip_grad_norm_(policy.parameters(), 0.5)
            optimizer.step()
            stats = {"bc_policy_loss": float(policy_loss), "bc_value_loss": float(value_loss)}
    policy.set_training_mode(False)
    with th.no_grad():
        correct = 0
        for start in range(0, n, 4096):
            sl = slice(start, start + 4096)
            kwargs = {"action_masks": data["masks"][sl]} if masked else {}
            pred, _ = model.predict(data["obs"][sl], deterministic=True, **kwargs)
            correct += int(np.all(np.asarray(pred) == data["actions"][sl], axis=1).sum())
    stats["bc_accuracy"] = correct / n
    stats["bc_steps"] = float(n)
    return stats
