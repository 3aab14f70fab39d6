"""Build SB3 / sb3-contrib models for ``LLMSched-v1`` and wrap trained ones as a ``Policy``."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from sb3_contrib import MaskablePPO, RecurrentPPO
from stable_baselines3 import A2C, DQN, PPO
from stable_baselines3.common.base_class import BaseAlgorithm

from agents.config import ALGO_NAMES

ALGOS: dict[str, type[BaseAlgorithm]] = {
    "maskable_ppo": MaskablePPO,
    "ppo": PPO,
    "a2c": A2C,
    "dqn": DQN,
    "recurrent_ppo": RecurrentPPO,
}
assert tuple(ALGOS) == ALGO_NAMES, "agents.config.ALGO_NAMES must name ALGOS' keys"
MASKED_ALGOS = {"maskable_ppo"}
FLAT_ACTION_ALGOS = {"dqn"}  # trained through agents.wrappers.FlatActions


def make_model(
    algo: str,
    env: gym.Env | Any,
    seed: int | None,
    tensorboard_log: str | None = None,
    policy: str = "MlpPolicy",
    **kwargs: Any,
) -> BaseAlgorithm:
    """A fresh ``algo`` model on ``env`` (a gym env or a VecEnv) with the given hyperparameters; a
    ``policy_kwargs.activation_fn`` given by name (``ACTIVATION_NAMES``) is torch's class of that name."""
    if algo not in ALGOS:
        raise ValueError(f"unknown algorithm {algo!r}; available: {', '.join(ALGOS)}")
    policy_kwargs = kwargs.get("policy_kwargs")
    if isinstance(policy_kwargs, Mapping) and isinstance(policy_kwargs.get("activation_fn"), str):
        from llmsched_env.runtime.policy_file import ACTIVATIONS

        name = policy_kwargs["activation_fn"]
        if name not in ACTIVATIONS:
            raise ValueError(
                f"policy_kwargs.activation_fn: unknown activation {name!r}; one of {', '.join(ACTIVATIONS)}"
            )
        kwargs["policy_kwargs"] = {**policy_kwargs, "activation_fn": ACTIVATIONS[name]}
    return ALGOS[algo](policy, env, seed=seed, tensorboard_log=tensorboard_log, verbose=0, device="cpu", **kwargs)


class SB3Policy:
    """A trained SB3 model acting through the ``Policy`` protocol (deterministic actions)."""

    def __init__(self, model: BaseAlgorithm) -> None:
        self.model = model
        self.recurrent = isinstance(model, RecurrentPPO)
        self._state: tuple[np.ndarray, ...] | None = None  # the LSTM's (hidden, cell) states after the last act
        self._episode_start = True

    @classmethod
    def load(cls, path: str | Path, algo: str = "maskable_ppo") -> SB3Policy:
        if algo not in ALGOS:
            raise ValueError(f"unknown algorithm {algo!r}; available: {', '.join(ALGOS)}")
        try:
            return cls(ALGOS[algo].load(str(path), device="cpu"))
        except (OSError, ValueError, KeyError) as exc:
            raise ValueError(f"cannot load a {algo} model from {path}: {exc}") from None

    def start_episode(self) -> None:
        """A new episode starts: the next ``act`` begins from a zero LSTM state (recurrent models only)."""
        self._state = None
        self._episode_start = True

    def act(self, observation: np.ndarray, action_mask: np.ndarray) -> np.ndarray:
        if self.recurrent:
            start = np.array([self._episode_start])
            action, self._state = self.model.predict(
                observation, state=self._state, episode_start=start, deterministic=True
            )
            self._episode_start = False
        elif isinstance(self.model, MaskablePPO):
            action, _ = self.model.predict(observation, action_masks=action_mask, deterministic=True)
        else:
            action, _ = self.model.predict(observation, deterministic=True)
        return np.asarray(action, dtype=np.int64)
