"""Racing settings on paired windows: the statistics behind ``llmsched-tune``'s search (docs/baselines-and-metrics.md).

Every setting in a race has played the same val windows (the same seeds, so the same requests), so two settings
are compared by their per-window differences of SLO attainment: the mean difference and its 95% confidence
half-width (Student t over the windows). A setting is dropped once the leader is ahead of it with confidence (the
interval's lower end above 0, on at least ``MIN_WINDOWS`` windows), and never while it is within ``TIE_BAND`` of
the leader: those are ties, kept for the confirmation on fresh windows. Pure functions of the scores, so a race is
as deterministic as its episodes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from llmsched_env.evaluation.stats import mean_ci95

__all__ = ["MIN_WINDOWS", "TIE_BAND", "Margin", "Runs", "paired_margin", "ranked", "survivors"]

MIN_WINDOWS = 2  # a setting is never dropped on fewer paired windows (no spread to judge by)
TIE_BAND = 0.01  # mean attainment differences this small are ties: never dropped, whatever the spread
Runs = Sequence[tuple[float, float]]  # (SLO attainment, goodput) per window, the same windows in the same order


@dataclass(frozen=True)
class Margin:
    """How far ``leader`` is ahead of another setting: mean paired attainment difference ± 95% half-width."""

    mean: float
    half_width: float
    num_windows: int

    @property
    def ahead_with_confidence(self) -> bool:
        """Whether the difference is above 0 with 95% confidence, on enough windows and outside the tie band."""
        return self.num_windows >= MIN_WINDOWS and self.mean > TIE_BAND and self.mean - self.half_width > 0

    def as_dict(self) -> dict[str, float | int]:
        return {"attainment_diff": self.mean, "half_width": self.half_width, "num_windows": self.num_windows}


def paired_margin(leader: Runs, other: Runs) -> Margin:
    """``leader``'s attainment minus ``other``'s, paired window by window."""
    if len(leader) != len(other) or not leader:
        raise ValueError(f"paired_margin needs the same non-empty windows, got {len(leader)} and {len(other)}")
    mean, half = mean_ci95([a[0] - b[0] for a, b in zip(leader, other, strict=True)])
    return Margin(mean, half, len(leader))


def ranked(runs: Mapping[int, Runs]) -> list[int]:
    """The settings by mean attainment, then mean goodput, then the lower key (deterministic)."""

    def key(k: int) -> tuple[float, float, int]:
        values = np.asarray(runs[k], dtype=np.float64)
        return -float(values[:, 0].mean()), -float(values[:, 1].mean()), k

    return sorted(runs, key=key)


def survivors(runs: Mapping[int, Runs]) -> list[int]:
    """The settings, ranked, that the leader is not ahead of with confidence (the leader first)."""
    order = ranked(runs)
    leader = runs[order[0]]
    return [order[0]] + [k for k in order[1:] if not paired_margin(leader, runs[k]).ahead_with_confidence]
