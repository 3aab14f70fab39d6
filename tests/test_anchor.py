"""``anchor_coef``: the KL pull towards the policy a training started from (``agents/anchor.py``)."""

from __future__ import annotations

import gymnasium as gym
import pytest
import torch
from sb3_contrib import MaskablePPO
from stable_baselines3 import PPO

import llmsched_env  # noqa: F401
from agents.anchor import AnchorCallback, kl_to_reference
from agents.train_config import check_hyperparams


@pytest.mark.parametrize("algo", [MaskablePPO, PPO])
def test_the_pull_brings_the_policy_back_towards_its_start(algo: type) -> None:
    torch.set_num_threads(1)
    env = gym.make("LLMSched-v1", scenario="mixed-slo", num_requests=30)
    model = algo("MlpPolicy", env, seed=0, n_steps=64, batch_size=32, n_epochs=4, learning_rate=3e-3)
    anchor = AnchorCallback(1.0, epochs=5, batch_size=32)
    model.learn(192, callback=anchor)
    assert anchor.last_kl is not None and anchor.last_kl_after is not None
    assert anchor.last_kl > 0  # the updates moved the policy away from its start
    assert anchor.last_kl_after < 0.5 * anchor.last_kl  # and each pull brings it most of the way back
    obs = torch.as_tensor(env.observation_space.sample()[None])
    assert float(kl_to_reference(anchor.reference, anchor.reference, obs)[0]) == pytest.approx(0.0, abs=1e-6)


def test_bad_anchor_settings_are_refused_in_one_line() -> None:
    with pytest.raises(ValueError, match="anchor_coef must be a finite number > 0"):
        AnchorCallback(0.0)
    with pytest.raises(ValueError, match=r"'anchor_coef'.*>= 0"):
        check_hyperparams("maskable_ppo", {"anchor_coef": -1.0})
    with pytest.raises(ValueError, match=r"'anchor_coef'.*dqn has none"):
        check_hyperparams("dqn", {"anchor_coef": 0.5})
    with pytest.raises(ValueError, match=r"'anchor_epochs'.*integer >= 1"):
        check_hyperparams("ppo", {"anchor_coef": 0.5, "anchor_epochs": 0})
    check_hyperparams("ppo", {"anchor_coef": 0.5, "anchor_epochs": 2})
