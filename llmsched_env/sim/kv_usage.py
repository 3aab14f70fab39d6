"""KV-usage accounting of one block pool over an episode (``KVUsage``): the duration-weighted mean share of blocks
held by running requests (idle time does not count), the peak, and the series after every step.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable

import numpy as np

__all__ = ["KVUsage"]


class KVUsage:
    """Time-weighted mean, peak and (optionally) the per-step series of one pool's KV usage."""

    __slots__ = ("_series_t", "_series_used", "peak", "time_s", "weighted_s")

    def __init__(self) -> None:
        self.weighted_s = 0.0  # sum of usage * iteration seconds
        self.time_s = 0.0  # sum of iteration seconds
        self.peak = 0.0
        self._series_t = array("d")
        self._series_used = array("d")

    def copy(self) -> KVUsage:
        """An independent copy (a fork of the simulator)."""
        c = KVUsage.__new__(KVUsage)
        c.weighted_s, c.time_s, c.peak = self.weighted_s, self.time_s, self.peak
        c._series_t = self._series_t[:]
        c._series_used = self._series_used[:]
        return c

    def add(self, usage: float, dt: float) -> None:
        """An iteration of ``dt`` seconds ran with ``usage`` (in [0, 1]) of the pool in use."""
        self.weighted_s += usage * dt
        self.time_s += dt
        if usage > self.peak:
            self.peak = usage

    def record(self, now_s: float, num_used: int) -> None:
        """One point of the series: the clock and the blocks in use after a step."""
        self._series_t.append(now_s)
        self._series_used.append(num_used)

    @property
    def mean(self) -> float:
        """Time-weighted mean usage over the iterations added so far (0 before any)."""
        return self.weighted_s / self.time_s if self.time_s else 0.0

    def metrics(self, prefix: str = "") -> dict[str, float]:
        """``{prefix}kv_usage_mean`` and ``{prefix}kv_usage_peak``."""
        return {f"{prefix}kv_usage_mean": self.mean, f"{prefix}kv_usage_peak": self.peak}

    def series(self, num_blocks: int) -> tuple[np.ndarray, np.ndarray]:
        """``(time_s, usage)`` of every recorded step: the clock and the pool's share in use, in [0, 1]; fresh
        arrays."""
        used = np.array(self._series_used, dtype=np.float64)
        return np.array(self._series_t, dtype=np.float64), used / num_blocks

    @classmethod
    def merged(cls, parts: Iterable[KVUsage]) -> KVUsage:
        """The accounting of several pools as one (the mean weighs each by its busy time), the highest peak; no
        series."""
        parts = list(parts)
        out = cls()
        out.weighted_s = sum(p.weighted_s for p in parts)
        out.time_s = sum(p.time_s for p in parts)
        out.peak = max((p.peak for p in parts), default=0.0)
        return out
