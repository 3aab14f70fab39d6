"""Statistics over seeds: the mean and 95% confidence half-width (Student t) per (policy, scenario, load)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from llmsched_env.evaluation.fallbacks import fallback_summary
from llmsched_env.evaluation.identity import merge_identical

__all__ = ["SUMMARY_METRICS", "group_traffic", "mean_ci95", "summarize", "t_quantile_975"]

# metrics aggregated over seeds (summary.csv: NAME_mean, NAME_ci95) -> short header of the summary table
SUMMARY_METRICS = {
    "slo_attainment": "attain",
    "goodput_rps": "goodput/s",
    "ttft_p99_s": "ttft p99",
    "tpot_p99_s": "tpot p99",
}
# Student t 0.975 quantiles for 1..30 degrees of freedom (two-sided 95%)
_T975 = (12.7062, 4.3027, 3.1824, 2.7764, 2.5706, 2.4469, 2.3646, 2.3060, 2.2622, 2.2281,
         2.2010, 2.1788, 2.1604, 2.1448, 2.1314, 2.1199, 2.1098, 2.1009, 2.0930, 2.0860,
         2.0796, 2.0739, 2.0687, 2.0639, 2.0595, 2.0555, 2.0518, 2.0484, 2.0452, 2.0423)  # fmt: skip


def t_quantile_975(df: int) -> float:
    """The 0.975 quantile of Student's t with ``df`` >= 1 (table to 30, then Cornish-Fisher, within 1e-4)."""
    if df < 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {df}")
    if df <= len(_T975):
        return _T975[df - 1]
    z = 1.959964
    return (
        z
        + (z**3 + z) / (4 * df)
        + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)
        + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * df**3)
    )


def mean_ci95(values: Sequence[float]) -> tuple[float, float]:
    """Mean and 95% confidence half-width (Student t, sample std); the half-width is 0 for one value."""
    x = np.asarray(values, dtype=np.float64)
    if x.size == 0:
        raise ValueError("mean_ci95 needs at least one value")
    if x.size == 1:
        return float(x[0]), 0.0
    return float(x.mean()), t_quantile_975(x.size - 1) * float(x.std(ddof=1)) / math.sqrt(x.size)


def group_traffic(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """``{"traffic": label}`` when a summary group's rows carry a ``traffic`` label, else ``{}``."""
    return {"traffic": rows[0]["traffic"]} if rows and rows[0].get("traffic") else {}


def summarize(rows: Sequence[dict[str, Any]], merge: bool = True) -> list[dict[str, Any]]:
    """One row per (policy, scenario, load): ``num_seeds``, ``NAME_mean`` and ``NAME_ci95`` of ``SUMMARY_METRICS``;
    with ``merge``, identical policies are one row (``same_as``)."""
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault((row["policy"], row["scenario"], row["load"]), []).append(row)
    out = []
    for (policy, scenario, load), runs in groups.items():
        agg: dict[str, Any] = {"policy": policy, "scenario": scenario, "load": load, "num_seeds": len(runs)}
        agg.update(group_traffic(runs))
        for key in SUMMARY_METRICS:
            agg[f"{key}_mean"], agg[f"{key}_ci95"] = mean_ci95([r[key] for r in runs])
        if all("sustained" in r for r in runs):  # every seed's window lasts long enough at this load
            agg["sustained"] = all(bool(r["sustained"]) for r in runs)
        agg.update(fallback_summary(runs))  # the runtime's: the share of decisions that fell back
        out.append(agg)
    return merge_identical(out, rows) if merge else out
