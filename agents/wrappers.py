"""Wrappers that let algorithms without MultiDiscrete support (DQN) act in ``LLMSched-v1``."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
from gymnasium import spaces


class FlatActions(gym.ActionWrapper):
    """``MultiDiscrete(nvec)`` -> ``Discrete(prod(nvec))``, combinations in row-major order."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        if not isinstance(env.action_space, spaces.MultiDiscrete):
            raise ValueError(f"FlatActions needs a MultiDiscrete action space, got {env.action_space}")
        self.nvec = tuple(int(n) for n in env.action_space.nvec)
        self.action_space = spaces.Discrete(int(np.prod(self.nvec)))

    def action(self, action: int | np.integer | np.ndarray) -> np.ndarray:
        return np.array(np.unravel_index(int(action), self.nvec), dtype=np.int64)

    def flat(self, action: np.ndarray) -> int:
        """The flat index of a MultiDiscrete action (the inverse of ``action``)."""
        return int(np.ravel_multi_index(tuple(int(a) for a in action), self.nvec))
