"""PNG plots of an evaluation (``--out DIR``): latency CDFs, attainment against load, per-tenant service, KV usage,
capacity. matplotlib's object API on the Agg canvas (no pyplot, no global state).
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

__all__ = ["plot_attainment_vs_load", "plot_capacity", "plot_kv_usage", "plot_latency_cdf", "plot_tenant_service",
           "write_plots"]  # fmt: skip

Row = Mapping[str, Any]
_MAX_POINTS = 4000  # a KV series is thinned to about this many points before drawing
_TARGET = 0.9  # the attainment a capacity is measured at (DistServe)
# The metrics' tenant groups (``sim.metrics.TOP_TENANTS``, ``common.tenants.OTHER_TENANTS``), copied: this module
# imports nothing of the package (tests/test_tenant_limits.py checks they agree).
_TOP_TENANTS = 16
_OTHER_TENANTS = "other"


def _unique(values: Sequence[Any]) -> list[Any]:
    return list(dict.fromkeys(values))


def _colors(policies: Sequence[str]) -> dict[str, Any]:
    """One colour per policy, the same in every plot of a run."""
    cycle = [f"C{i}" for i in range(10)]
    return {p: cycle[i % len(cycle)] for i, p in enumerate(policies)}


def _by_scenario(
    rows: Sequence[Row], policy_rows: Sequence[Row] | None = None, width: float = 5.0, height: float = 3.6
) -> tuple[Figure, list[tuple[Axes, str]], dict[str, Any]]:
    """A figure of a subplot per scenario of ``rows`` (three to a line), and the policies' colours."""
    scenarios = _unique([r["scenario"] for r in rows])
    colors = _colors(_unique([r["policy"] for r in (rows if policy_rows is None else policy_rows)]))
    num = max(len(scenarios), 1)
    ncols = min(num, 3)
    nrows = math.ceil(num / ncols)
    fig = Figure(figsize=(width * ncols, height * nrows), layout="constrained")
    FigureCanvasAgg(fig)
    axes = [fig.add_subplot(nrows, ncols, i + 1) for i in range(num)]
    return fig, list(zip(axes, scenarios, strict=False)), colors


def _grouped_bars(
    groups: Sequence[str], heights: Mapping[str, Sequence[float]], width: float
) -> tuple[Figure, Axes, dict[str, Any]]:
    """Grouped bars, a group per ``groups`` entry and a bar per policy: the figure, its axes and each policy's bars."""
    fig = Figure(figsize=(width, 4), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    colors = _colors(list(heights))
    bar_width = 0.8 / max(len(heights), 1)
    x = np.arange(len(groups))
    bars = {
        policy: ax.bar(x + (i - (len(heights) - 1) / 2) * bar_width, h, bar_width, color=colors[policy], label=policy)
        for i, (policy, h) in enumerate(heights.items())
    }
    ax.set_xticks(x, groups)
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize="small")
    return fig, ax, bars


def _save(fig: Figure, path: Path) -> Path:
    """``fig`` as a PNG at ``path``, atomically (``common.outputs.replaced_atomically``'s way, in the stdlib)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.stem}.{os.getpid()}.tmp{path.suffix}")
    try:
        fig.savefig(tmp, dpi=100, format="png")
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def _label(ax: Axes, title: str, xlabel: str, ylabel: str, which: Literal["major", "both"] = "major") -> None:
    """A share plot's axes: y in [0, 1.02], titles and a light grid."""
    ax.set_ylim(0, 1.02)
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(True, which=which, alpha=0.3)


def _first_load(rows: Sequence[Row], scenario: str) -> float:
    return next(r["load"] for r in rows if r["scenario"] == scenario)


def plot_latency_cdf(details: Sequence[Row], key: str, path: Path, label: str | None = None) -> Path:
    """Empirical CDF of ``key`` per policy (pooled over seeds), a subplot per scenario at its first load."""
    fig, panels, colors = _by_scenario(details)
    for ax, scenario in panels:
        load = _first_load(details, scenario)
        runs = [d for d in details if d["scenario"] == scenario and d["load"] == load]
        for policy in _unique([d["policy"] for d in runs]):
            x = np.sort(np.concatenate([np.asarray(d[key], dtype=np.float64) for d in runs if d["policy"] == policy]))
            if x.size == 0 or not (x > 0).any():
                continue
            y = np.arange(1, x.size + 1) / x.size
            ax.step(x, y, where="post", color=colors[policy], label=f"{policy} (n={x.size})")
        ax.set_xscale("log")
        _label(ax, f"{scenario}, load {load:g}", f"{label or key} (s)", "fraction of finished requests", "both")
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize="small", loc="lower right")
    fig.suptitle(f"{label or key} CDF, pooled over seeds")
    return _save(fig, path)


def plot_attainment_vs_load(summary: Sequence[Row], path: Path) -> Path:
    """SLO attainment mean ± 95% CI against load, a line per policy, a subplot per scenario."""
    fig, panels, colors = _by_scenario(summary)
    for ax, scenario in panels:
        runs = [s for s in summary if s["scenario"] == scenario]
        for policy in _unique([s["policy"] for s in runs]):
            pts = sorted(
                (s["load"], s["slo_attainment_mean"], s["slo_attainment_ci95"]) for s in runs if s["policy"] == policy
            )
            load, mean, ci = (np.array(v, dtype=np.float64) for v in zip(*pts, strict=True))
            same = next((s.get("same_as") for s in runs if s["policy"] == policy and s.get("same_as")), "")
            label = f"{policy} (= {same.replace(',', ', ')})" if same else policy  # identical policies merged
            ax.errorbar(load, mean, yerr=ci, marker="o", capsize=3, color=colors[policy], label=label)
            ax.fill_between(load, mean - ci, mean + ci, color=colors[policy], alpha=0.15, linewidth=0)
        ax.axhline(_TARGET, color="gray", linestyle="--", linewidth=1, label=f"{_TARGET:.0%} target")
        _label(ax, scenario, "load (arrival rate / nominal)", "SLO attainment")
        ax.legend(fontsize="small", loc="lower left")
    fig.suptitle("SLO attainment against load (mean ± 95% CI over seeds)")
    return _save(fig, path)


def plot_tenant_service(rows: Sequence[Row], path: Path) -> Path:
    """Per-tenant service (mean over seeds) as bars per policy, for the first scenario at its first load."""
    scenario = rows[0]["scenario"]
    load = _first_load(rows, scenario)
    runs = [r for r in rows if r["scenario"] == scenario and r["load"] == load]
    policies = _unique([r["policy"] for r in runs])
    tenants, per_run = _tenant_groups(runs)
    service = {
        p: [float(np.mean([s[t] for r, s in zip(runs, per_run, strict=True) if r["policy"] == p])) for t in tenants]
        for p in policies
    }
    width = max(6.0, 1.2 * len(tenants) * max(len(policies), 1) ** 0.5 + 3)
    fig, ax, _ = _grouped_bars(tenants, service, width)
    jain = ", ".join(
        f"{p} {np.mean([r['jain_fairness'] for r in runs if r['policy'] == p]):.3f}"
        for p in policies
        if all("jain_fairness" in r for r in runs)
    )
    ax.set_ylabel("service (input + 2 × output tokens) / weight")
    ax.set_title(f"per-tenant service, {scenario}, load {load:g}" + (f"\nJain: {jain}" if jain else ""))
    return _save(fig, path)


def _tenant_groups(runs: Sequence[Row]) -> tuple[list[str], list[dict[str, float]]]:
    """The service plot's bars: the ``TOP_TENANTS`` busiest tenants (ties by name) and ``other``; each run's service."""
    names = _unique([k.split("/")[1] for r in runs for k in r if k.startswith("tenant/") and k.endswith("/service")])
    tenants = [t for t in names if t != _OTHER_TENANTS]
    requests = {t: sum(float(r.get(f"tenant/{t}/num_requests", 0.0)) for r in runs) for t in tenants}
    busiest = set(sorted(tenants, key=lambda t: (-requests[t], t))[:_TOP_TENANTS])
    shown = [t for t in tenants if t in busiest]
    rest = [t for t in names if t not in busiest]
    per_run = []
    for r in runs:
        service = {t: float(r.get(f"tenant/{t}/service", 0.0)) for t in shown}
        if rest:
            service[_OTHER_TENANTS] = sum(float(r.get(f"tenant/{t}/service", 0.0)) for t in rest)
        per_run.append(service)
    return shown + ([_OTHER_TENANTS] if rest else []), per_run


def plot_kv_usage(details: Sequence[Row], path: Path) -> Path:
    """KV usage over time, a line per policy (its first run with a KV series), a subplot per scenario."""
    with_series = [d for d in details if "kv_usage" in d]
    fig, panels, colors = _by_scenario(with_series, details, width=6.0)
    for ax, scenario in panels:
        seen: set[str] = set()
        title = scenario
        for d in with_series:
            if d["scenario"] != scenario or d["policy"] in seen:
                continue
            seen.add(d["policy"])
            t, u = np.asarray(d["kv_time_s"]), np.asarray(d["kv_usage"])
            stride = max(1, math.ceil(t.size / _MAX_POINTS))
            ax.step(t[::stride], u[::stride], where="post", color=colors[d["policy"]], label=d["policy"], linewidth=1)
            title = f"{scenario}, load {d['load']:g}, seed {d['seed']}"
        _label(ax, title, "time since first arrival (s)", "KV blocks in use (share of pool)")
        if seen:
            ax.legend(fontsize="small")
    fig.suptitle("KV cache usage")
    return _save(fig, path)


def plot_capacity(rows: Sequence[Row], path: Path) -> Path:
    """Capacity as bars per scenario and policy (mean over seeds), each labelled with its rate in req/s."""
    scenarios = _unique([r["scenario"] for r in rows])
    groups: dict[str, dict[str, list[Row]]] = {}
    for r in rows:  # per-seed rows (``--per-seed``): one bar per policy at the mean over seeds
        groups.setdefault(r["policy"], {}).setdefault(r["scenario"], []).append(r)
    keys = ("capacity_load", "capacity_rps")
    by_policy = {p: {s: {k: float(np.mean([r[k] for r in rs])) for k in keys} for s, rs in by.items()}
                 for p, by in groups.items()}  # fmt: skip
    loads = {p: [by[s]["capacity_load"] if s in by else np.nan for s in scenarios] for p, by in by_policy.items()}
    fig, ax, bars = _grouped_bars(scenarios, loads, max(6.0, 1.6 * len(scenarios) + 2))
    for p, by in by_policy.items():
        rps = [f"{by[s]['capacity_rps']:.3g}/s" if s in by else "" for s in scenarios]
        ax.bar_label(bars[p], rps, fontsize="x-small", padding=2)
    ax.axhline(1.0, color="gray", linestyle="--", linewidth=1)
    ax.set_ylabel("capacity (load relative to nominal)")
    ax.set_title(f"capacity: highest load with SLO attainment ≥ {_TARGET:.0%}")
    return _save(fig, path)


def write_plots(out: Path, rows: Sequence[Row], summary: Sequence[Row], details: Sequence[Row]) -> list[Path]:
    """Every evaluation plot into ``out`` (the latency and KV ones need ``details``); the paths written."""
    out = Path(out)
    written = []
    if details:
        written.append(plot_latency_cdf(details, "ttft_s", out / "ttft_cdf.png", "TTFT"))
        written.append(plot_latency_cdf(details, "tpot_s", out / "tpot_cdf.png", "TPOT"))
        written.append(plot_kv_usage(details, out / "kv_usage.png"))
    if summary:
        written.append(plot_attainment_vs_load(summary, out / "attainment_vs_load.png"))
    if rows:
        written.append(plot_tenant_service(rows, out / "tenant_service.png"))
    return written
