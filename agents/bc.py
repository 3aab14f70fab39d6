"""Behaviour-cloning warm start: fit the actor to a baseline's actions (masked maximum likelihood) and the critic to
its returns, then optionally DAgger rounds (``dagger_iterations``) on the states the clone reaches.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypedDict

import gymnasium as gym
import numpy as np
import torch as th

from agents.sb3 import SB3Policy
from agents.teacher import teacher as make_teacher
from llmsched_env.decision.actions import ACTION_COMPONENTS

Actor = Callable[[np.ndarray, np.ndarray], Any]  # (observation, mask) -> action: who plays the episodes
# (scalars, step) -> None: the cloning's figures as it goes, step = cloning epochs done (TensorBoard's tb/clone)
CloneLog = Callable[[Mapping[str, float], int], None]


def collect_demonstrations(
    env: gym.Env, baseline: str, num_steps: int, gamma: float, seed: int, actor: Actor | None = None, stride: int = 1
) -> dict[str, np.ndarray]:
    """``num_steps`` steps on ``env`` played by ``actor`` (None: the teacher), labelled by ``baseline``."""
    if isinstance(stride, bool) or not isinstance(stride, int) or stride < 1:
        raise ValueError(f"stride must be an integer >= 1, got {stride!r}")
    unwrapped: Any = env.unwrapped
    obs_l: list[np.ndarray] = []
    mask_l: list[np.ndarray] = []
    act_l: list[np.ndarray] = []
    rew_l: list[float] = []
    done_l: list[bool] = []
    kept: list[int] = []
    teacher = make_teacher(baseline, seed)  # built for each episode's workload
    obs, _ = env.reset(seed=seed)
    policy = teacher(env)
    episode = 0
    while len(obs_l) < num_steps:
        mask = unwrapped.action_masks()
        action = policy.act(obs, mask)  # every step: a teacher may keep state between its steps
        if len(rew_l) % stride == 0:
            kept.append(len(rew_l))
            obs_l.append(obs)
            mask_l.append(mask)
            act_l.append(action)
        obs, reward, terminated, truncated, _ = env.step(action if actor is None else actor(obs, mask))
        rew_l.append(float(reward))
        done_l.append(terminated or truncated)
        if terminated or truncated:
            episode += 1
            obs, _ = env.reset(seed=seed + 1000 * episode)
            policy = teacher(env)  # LLMSchedMix-v0: a new workload, a heuristic built for it
    returns = np.zeros(len(rew_l), dtype=np.float32)
    running = 0.0
    for i in range(len(rew_l) - 1, -1, -1):  # the last, unfinished episode is cut: its tail return is 0
        running = rew_l[i] + gamma * running * (0.0 if done_l[i] else 1.0)
        returns[i] = running
    return {
        "obs": np.asarray(obs_l, dtype=np.float32),
        "masks": np.asarray(mask_l, dtype=bool),
        "actions": np.asarray(act_l, dtype=np.int64),
        "returns": returns[kept],
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
    smoothing: float = 0.1,
    on_epoch: Callable[[int, int], None] | None = None,
    dagger_iterations: int = 0,
    stride: int = 1,
    on_log: CloneLog | None = None,
) -> dict[str, float]:
    """Fit ``model.policy`` to ``baseline`` (then DAgger rounds); return the accuracy and losses."""
    if dagger_iterations < 0:
        raise ValueError(f"dagger_iterations must be >= 0, got {dagger_iterations!r}")
    log: CloneLog = on_log if on_log is not None else (lambda values, step: None)
    env = make_env()
    gamma = float(getattr(model, "gamma", 0.99))
    masked = "Maskable" in type(model).__name__
    t0 = time.perf_counter()
    data = collect_demonstrations(env, baseline, num_steps, gamma, seed, stride=stride)
    log({"clone/labelled_steps": len(data["obs"]), "clone/collect_s": time.perf_counter() - t0}, 0)
    total = epochs * (1 + dagger_iterations)
    optimizer = th.optim.Adam(model.policy.parameters(), lr=learning_rate)
    gen = th.Generator().manual_seed(seed)
    fit: _FitOptions = {
        "epochs": epochs,
        "batch_size": batch_size,
        "smoothing": smoothing,
        "generator": gen,
        "components": _component_names(env, model),
    }
    stats = _fit(model, data, optimizer, masked, **fit, on_epoch=_offset(on_epoch, 0, total), on_log=_shifted(log, 0))
    for it in range(1, dagger_iterations + 1):
        t0 = time.perf_counter()
        clone = _clone_actor(model, env)
        visited = collect_demonstrations(env, baseline, num_steps, gamma, seed + 7919 * it, actor=clone, stride=stride)
        stats[f"dagger{it}_agreement"] = _accuracy(model, visited, masked)
        data = {k: np.concatenate([data[k], visited[k]]) for k in data}
        played = {"clone/dagger_agreement": stats[f"dagger{it}_agreement"], "clone/labelled_steps": len(data["obs"])}
        log({**played, "clone/collect_s": time.perf_counter() - t0}, it * epochs)
        progress, on_fit = _offset(on_epoch, it * epochs, total), _shifted(log, it * epochs)
        stats.update(_fit(model, data, optimizer, masked, **fit, on_epoch=progress, on_log=on_fit))
    env.close()
    stats["bc_accuracy"] = _accuracy(model, data, masked)
    stats["bc_steps"] = float(len(data["obs"]))
    log({"clone/final_accuracy": stats["bc_accuracy"]}, total)
    return stats


def _component_names(env: gym.Env, model: Any) -> list[str]:
    """The action components' names, as the exported policy names them (``clone/accuracy/NAME``)."""
    space = model.action_space
    count = len(space.nvec) if hasattr(space, "nvec") else 1
    spec = getattr(env.unwrapped, "action_spec", None)
    names = list(getattr(spec, "components", ACTION_COMPONENTS))
    return names if len(names) == count else [f"component{i}" for i in range(count)]


def _shifted(log: CloneLog, done: int) -> Callable[[int, dict[str, float]], None]:
    """``_fit``'s report of epoch ``k`` to ``log`` at step ``done + k`` on the cloning's axis."""
    return lambda k, values: log(values, done + k)


def _clone_actor(model: Any, env: gym.Env) -> Actor:
    """The model's deterministic action as its exported policy computes it, in numpy."""
    from agents.export import export_policy
    from llmsched_env.runtime.policy_file import load_policy_file

    try:
        with tempfile.TemporaryDirectory() as tmp:
            export_policy(model, env, Path(tmp))
            return load_policy_file(tmp).act
    except (TypeError, ValueError):
        return SB3Policy(model).act


def _offset(on_epoch: Callable[[int, int], None] | None, done: int, total: int) -> Callable[[int, int], None] | None:
    """``on_epoch`` counting the epochs of one fit after ``done`` others, out of ``total``."""
    if on_epoch is None:
        return None
    return lambda k, _: on_epoch(done + k, total)


class _FitOptions(TypedDict):
    """``_fit``'s options that stay the same over the rounds of one ``behaviour_clone``."""

    epochs: int
    batch_size: int
    smoothing: float
    generator: th.Generator
    components: list[str]  # the action components' names: clone/accuracy/NAME


def _fit(
    model: Any,
    data: dict[str, np.ndarray],
    optimizer: th.optim.Optimizer,
    masked: bool,
    epochs: int,
    batch_size: int,
    smoothing: float,
    generator: th.Generator,
    components: list[str],
    on_epoch: Callable[[int, int], None] | None,
    on_log: Callable[[int, dict[str, float]], None] | None = None,
) -> dict[str, float]:
    """``epochs`` passes of the actor and critic over ``data``; the last minibatch's losses and entropy."""
    policy = model.policy
    device = policy.device
    obs = th.as_tensor(data["obs"], device=device)
    space = model.action_space  # MultiDiscrete (the scheduler) or Discrete (the cluster router)
    nvec = [int(n) for n in space.nvec] if hasattr(space, "nvec") else [int(space.n)]
    actions = th.as_tensor(np.asarray(data["actions"]).reshape(len(data["obs"]), len(nvec)), device=device)
    masks = th.as_tensor(data["masks"], device=device)
    returns = th.as_tensor(data["returns"], device=device)
    n = obs.shape[0]
    policy.set_training_mode(True)
    stats: dict[str, float] = {}
    t0 = time.perf_counter()
    for epoch in range(epochs):
        perm = th.randperm(n, generator=generator)
        # the epoch's sums over its labelled steps: losses and entropy weighted by batch size, and the steps
        # whose deterministic action matches the label in every component and in each
        sums = {"policy_loss": 0.0, "value_loss": 0.0, "entropy": 0.0}
        hits = th.zeros(len(nvec) + 1, dtype=th.long)
        for start in range(0, n, batch_size):
            idx = perm[start : start + batch_size]
            if masked:
                dist = policy.get_distribution(obs[idx], action_masks=data["masks"][idx.cpu().numpy()])
            else:
                dist = policy.get_distribution(obs[idx])
            policy_loss = th.zeros((), device=device)
            offset = 0
            cats = dist.distributions if masked and hasattr(dist, "distributions") else dist.distribution
            if not isinstance(cats, (list, tuple)):
                cats = [cats]  # one categorical: a Discrete action space
            for c, (cat, k) in enumerate(zip(cats, nvec, strict=True)):
                logp = th.log_softmax(cat.logits, dim=-1)  # [batch, k]
                valid = masks[idx, offset : offset + k].float()
                target = smoothing * valid / valid.sum(dim=1, keepdim=True).clamp(min=1.0)
                target = target + (1 - smoothing) * th.nn.functional.one_hot(actions[idx, c], k).float()
                policy_loss = (
                    policy_loss - (target * logp.clamp(min=-1e4) * valid.clamp(min=float(not masked))).sum(1).mean()
                )
                offset += k
            with th.no_grad():  # no gradient, no random draw: the fit is the same with or without it
                match = th.stack([cat.logits.argmax(-1) == actions[idx, c] for c, cat in enumerate(cats)], 1)
                hits += th.cat([match.all(1, keepdim=True), match], 1).sum(0).cpu()
            values = policy.predict_values(obs[idx]).flatten()
            value_loss = th.nn.functional.mse_loss(values, returns[idx])
            loss = policy_loss + 0.5 * value_loss
            optimizer.zero_grad()
            loss.backward()
            th.nn.utils.clip_grad_norm_(policy.parameters(), 0.5)
            optimizer.step()
            stats = {
                "bc_policy_loss": policy_loss.item(),
                "bc_value_loss": value_loss.item(),
                "bc_entropy": float(dist.entropy().mean().item()),
            }
            size = len(idx)
            for key in sums:
                sums[key] += stats["bc_" + key] * size
        if on_log is not None:
            scalars = {f"clone/{key}": total / n for key, total in sums.items()}
            scalars["clone/accuracy"] = int(hits[0]) / n
            scalars.update({f"clone/accuracy/{name}": int(h) / n for name, h in zip(components, hits[1:], strict=True)})
            if epoch + 1 == epochs:
                scalars["clone/fit_s"] = time.perf_counter() - t0
            on_log(epoch + 1, scalars)
        if on_epoch is not None:
            on_epoch(epoch + 1, epochs)
    policy.set_training_mode(False)
    return stats


def _accuracy(model: Any, data: dict[str, np.ndarray], masked: bool) -> float:
    """Share of ``data``'s steps where the model's deterministic action equals the label in every component."""
    labels = np.asarray(data["actions"])
    labels = labels.reshape(len(labels), -1)
    correct = 0
    with th.no_grad():
        for start in range(0, len(labels), 4096):
            sl = slice(start, start + 4096)
            kwargs = {"action_masks": data["masks"][sl]} if masked else {}
            pred, _ = model.predict(data["obs"][sl], deterministic=True, **kwargs)
            correct += int(np.all(np.asarray(pred).reshape(labels[sl].shape) == labels[sl], axis=1).sum())
    return correct / max(len(labels), 1)
