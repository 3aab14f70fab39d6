"""Behaviour cloning with DAgger rounds (``agents.bc``): the clone plays, the teacher labels the states it reaches."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from sb3_contrib import MaskablePPO

import baselines
import llmsched_env  # noqa: F401
from agents.bc import behaviour_clone, collect_demonstrations
from agents.train_config import TrainConfig, resolve_hyperparams


def _env() -> gym.Env:
    return gym.make("LLMSched-v1", scenario="default", num_requests=40, load=2.0, check_invariants=True)


def test_an_actor_plays_and_the_teacher_labels() -> None:
    env = _env()
    fcfs = baselines.make("fcfs", env.unwrapped.policy_context())
    played = collect_demonstrations(env, "fcfs", 150, 0.99, seed=3)  # fcfs playing and labelling
    labelled = collect_demonstrations(env, "sjf", 150, 0.99, seed=3, actor=fcfs.act)  # fcfs plays, sjf labels
    np.testing.assert_array_equal(played["obs"], labelled["obs"])  # the same states: the actor's trajectory
    np.testing.assert_array_equal(played["returns"], labelled["returns"])
    sjf = baselines.make("sjf", env.unwrapped.policy_context())
    expected = np.array([sjf.act(o, m) for o, m in zip(labelled["obs"], labelled["masks"], strict=True)])
    np.testing.assert_array_equal(labelled["actions"], expected)  # sjf's choice in each of those states
    assert not np.array_equal(labelled["actions"][:, 0], played["actions"][:, 0])  # the orders differ


def test_dagger_rounds_add_the_clones_states() -> None:
    torch.set_num_threads(1)
    model = MaskablePPO("MlpPolicy", _env(), seed=0, n_steps=64, policy_kwargs={"net_arch": [32, 32]})
    epochs: list[tuple[int, int]] = []
    stats = behaviour_clone(
        model, _env, "sjf", 120, epochs=2, seed=1, dagger_iterations=2, on_epoch=lambda d, t: epochs.append((d, t))
    )
    assert stats["bc_steps"] == 360.0  # the teacher's 120 steps and 120 of the clone's per round
    assert epochs == [(k, 6) for k in range(1, 7)]  # one progress count over every fit
    assert 0.0 <= stats["dagger1_agreement"] <= 1.0 and 0.0 <= stats["dagger2_agreement"] <= 1.0
    assert stats["bc_accuracy"] > 0.5
    with pytest.raises(ValueError, match="dagger_iterations"):
        behaviour_clone(model, _env, "sjf", 10, dagger_iterations=-1)


def test_bc_dagger_hyperparameter_is_checked() -> None:
    hp = resolve_hyperparams(TrainConfig(scenario="generalist"))
    assert hp["bc_dagger"] >= 1
    with pytest.raises(ValueError, match="bc_dagger"):
        resolve_hyperparams(TrainConfig(scenario="generalist", hp={"bc_dagger": -1}))


def test_a_stride_labels_one_played_step_in_k() -> None:
    env = _env()
    every = collect_demonstrations(env, "fcfs", 300, 0.99, seed=3)
    strided = collect_demonstrations(env, "fcfs", 100, 0.99, seed=3, stride=3)  # the same episodes, 300 played
    for key in ("obs", "masks", "actions", "returns"):
        np.testing.assert_array_equal(strided[key], every[key][::3])  # returns over every step, then kept
    assert len(strided["obs"]) == 100
    with pytest.raises(ValueError, match="stride"):
        collect_demonstrations(env, "fcfs", 10, 0.99, seed=3, stride=0)
    with pytest.raises(ValueError, match="bc_stride"):
        resolve_hyperparams(TrainConfig(scenario="generalist", hp={"bc_stride": 0}))
    assert resolve_hyperparams(TrainConfig(scenario="generalist", quick=True))["bc_stride"] == 4
