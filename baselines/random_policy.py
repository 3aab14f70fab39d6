"""``random``: a uniformly random valid action every iteration (the floor), from its own seeded generator."""

from __future__ import annotations

import numpy as np

from baselines.base import BaselinePolicy, valid_mask
from llmsched_env.decision.policy import PolicyContext

_MAX_CACHED_MASKS = 64


class RandomPolicy(BaselinePolicy):
    """Uniform over the valid options of each action component, independently per component."""

    name = "random"
    bounded_act = True  # one draw per component from a cached table (``decision.policy.bounded_act``)

    def __init__(self, ctx: PolicyContext, seed: int | None = None) -> None:
        super().__init__(ctx, seed)
        self.rng = np.random.default_rng(seed)
        self._rows = np.arange(len(self.spec.nvec))
        # mask bytes -> (number of valid options per component, table[i, j] = j-th valid option of i)
        self._tables: dict[bytes, tuple[np.ndarray, np.ndarray]] = {}

    def _table(self, action_mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        m = action_mask if action_mask.dtype == np.bool_ else np.asarray(action_mask, dtype=bool)
        key = m.tobytes()
        entry = self._tables.get(key)
        if entry is None:
            m = valid_mask(self.spec, m)
            nvec = self.spec.nvec
            counts = np.zeros(len(nvec), dtype=np.int64)
            table = np.zeros((len(nvec), max(nvec)), dtype=np.int64)
            start = 0
            for i, n in enumerate(nvec):
                valid = np.flatnonzero(m[start : start + n])
                counts[i] = valid.size
                table[i, : valid.size] = valid
                start += n
            entry = (counts, table)
            if len(self._tables) >= _MAX_CACHED_MASKS:
                self._tables.clear()
            self._tables[key] = entry
        return entry

    def act(self, observation: np.ndarray, action_mask: np.ndarray) -> np.ndarray:
        counts, table = self._table(action_mask)
        picks = self.rng.integers(0, counts)  # one uniform draw per component, in [0, count)
        return table[self._rows, picks]

    def __repr__(self) -> str:
        return f"RandomPolicy(seed={self.seed})"
