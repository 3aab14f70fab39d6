"""Where a live experiment compares its policies: the loads (x the knee) at which the simulator predicts material
differences between them and the control (``choose_regimes``), chosen after calibration and before any compared
block runs. A difference is material at ``design.DEFAULT_POWERED``'s sizes (5 attainment points, 20% in TTFT p99).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from llmsched_env.evaluation.tables import format_table
from llmsched_env.live.design import DEFAULT_POWERED, format_difference, paired_difference

__all__ = ["CANDIDATE_LOADS", "Regimes", "choose_regimes"]

CANDIDATE_LOADS = (0.6, 0.8, 1.0, 1.15, 1.3, 1.5, 1.75, 2.0)  # x the knee (fcfs at 90% attainment, simulated)


@dataclass(frozen=True)
class Regimes:
    """The loads chosen, whether any predicts a material difference, and a row per (load, arm, metric) scanned."""

    loads: tuple[float, ...]
    material: bool
    rows: list[dict[str, Any]]

    @property
    def table(self) -> str:
        """The scan as a fixed-width table, then a line on the choice."""
        shown = [{"load": f"{r['load']:g}", "arm": r["arm"], "metric": r["metric"],
                  "predicted": format_difference(r["metric"], r["predicted"]),
                  "material": "yes" if r["material"] else "no", "chosen": "yes" if r["load"] in self.loads else ""}
                 for r in self.rows]  # fmt: skip
        line = f"loads chosen (x the knee): {', '.join(f'{x:g}' for x in self.loads)}"
        if not self.material:
            line += "; no load scanned predicts a material difference: this workload can confirm nothing"
        return format_table(shown, ("load", "arm", "metric", "predicted", "material", "chosen")) + "\n" + line


def choose_regimes(
    predict: Callable[[float, str], Mapping[str, float]], arms: Sequence[str], count: int, *, control: str = "fcfs",
    candidates: Sequence[float] = CANDIDATE_LOADS, fallback: Sequence[float] = (1.0, 1.3),
    powered: Mapping[str, float] = DEFAULT_POWERED,
) -> Regimes:  # fmt: skip
    """The ``count`` loads of ``candidates`` with the most material predicted differences (``predict(load, arm)``:
    the mean predicted metrics of ``arm`` at ``load``), ties broken by the largest difference in units of its powered
    size, then the lower load; ``fallback`` (and ``material`` False) when no load predicts one."""
    if count < 1:
        raise ValueError(f"count must be >= 1, got {count}")
    if not candidates:
        raise ValueError("choose_regimes needs at least one candidate load")
    rows: list[dict[str, Any]] = []
    score: dict[float, tuple[int, float]] = {}
    for load in candidates:
        base = predict(load, control)
        hits, largest = 0, 0.0
        for arm in arms:
            if arm == control:
                continue
            values = predict(load, arm)
            for metric, size in powered.items():
                d = paired_difference(metric, values.get(metric, math.nan), base.get(metric, math.nan))
                units = abs(d) / size if math.isfinite(d) else 0.0
                material = units >= 1.0 - 1e-12
                hits += material
                largest = max(largest, units)
                rows.append({"load": load, "arm": arm, "metric": metric, "predicted": d, "material": material})
        score[load] = (hits, largest)
    ranked = sorted(candidates, key=lambda x: (-score[x][0], -score[x][1], x))
    material = score[ranked[0]][0] > 0
    chosen = [x for x in ranked[:count] if score[x][0] > 0] if material else list(fallback)[:count]
    return Regimes(tuple(sorted(chosen)), material, rows)
