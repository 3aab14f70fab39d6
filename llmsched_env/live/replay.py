"""Does llmsched's simulator predict a live vLLM server? A live run replayed and compared (docs/vllm.md); errors are
signed, ``(sim - live) / live``; ``frontend_s`` is the front-end time the simulator does not model.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from llmsched_env.common.checks import is_finite_number
from llmsched_env.costs.linear import LinearCostModel
from llmsched_env.decision.policy_spec import resolve_policy
from llmsched_env.engine.config import EngineConfig, TenantConfig
from llmsched_env.evaluation.tables import format_table
from llmsched_env.live.fit import DURATIONS, fit_live_cost_model, live_fit_report, step_breakdown, step_samples
from llmsched_env.live.logs import LiveRun, find_log_dir, load_run
from llmsched_env.live.records import StepRecord
from llmsched_env.live.sim import Latencies, ReplayResult, replay, replay_requests

# A front-end delay (API server, HTTP, tokenisation: milliseconds) added to simulated TTFT and E2E is at most an
# hour (docs/reliability.md, "Physical ranges"); ``--frontend-delay-s`` is refused outside [0, this].
MAX_FRONTEND_DELAY_S = 3600.0

__all__ = [
    "COMPARE_COLUMNS", "DURATIONS", "MAX_FRONTEND_DELAY_S", "Latencies", "LiveReport", "LiveRun", "ReplayResult",
    "StepRecord", "client_latencies", "compare", "engine_latencies", "evaluate_runs", "find_log_dir",
    "fit_live_cost_model", "format_report", "frontend_delay_s", "live_fit_report", "load_run", "replay",
    "replay_requests", "step_breakdown", "step_samples",
]  # fmt: skip


COMPARE_COLUMNS = ("run", "metric", "client", "engine", "sim", "err_client", "err_engine", "frontend_s")
_LATENCIES = ("ttft", "tpot", "e2e")
_QUANTILES = (50.0, 99.0)
Row = dict[str, float | str]


def client_latencies(run: LiveRun) -> Latencies:
    """The client's per-request latencies (NaN: failed), TPOT as vLLM's benchmark, and its throughput."""
    c = run.client
    n = len(run.plan)
    ok = np.array([c.succeeded(i) for i in range(n)], dtype=bool)
    ttft = np.where(ok, np.asarray(c.ttft_s, dtype=np.float64), np.nan)
    e2e = np.where(ok, np.asarray(c.latency_s, dtype=np.float64), np.nan)
    out_lens = np.asarray(c.output_lens, dtype=np.float64)
    multi = ok & (out_lens > 1)
    tpot = np.full(n, np.nan)
    tpot[multi] = (e2e[multi] - ttft[multi]) / (out_lens[multi] - 1)
    return Latencies(ttft, tpot, e2e, c.request_throughput_rps)


def engine_latencies(run: LiveRun) -> Latencies:
    """The server's per-request latencies (NaN: unfinished) and its throughput over the run's span."""
    n = len(run.server)
    ttft, tpot, e2e = (np.full(n, np.nan) for _ in range(3))
    for i, r in enumerate(run.server):
        if not r.finished:
            continue
        e2e[i] = r.finish_s - r.arrival_s
        if r.first_token_s is not None:
            ttft[i] = r.first_token_s - r.arrival_s
            if r.output_tokens > 1:
                tpot[i] = (r.finish_s - r.first_token_s) / (r.output_tokens - 1)
    span = run.end_s - run.start_s
    done = sum(r.finished for r in run.server)
    return Latencies(ttft, tpot, e2e, done / span if span > 0 else 0.0)


def _both(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a - b`` over the requests both measured."""
    keep = ~(np.isnan(a) | np.isnan(b))
    return a[keep] - b[keep]


def frontend_delay_s(run: LiveRun) -> float:
    """The median client TTFT - engine TTFT of ``run``: the front-end delay to add to simulated latencies."""
    diff = _both(client_latencies(run).ttft_s, engine_latencies(run).ttft_s)
    if diff.size == 0:
        raise ValueError(f"run {run.name}: no request with both a client and an engine TTFT")
    return float(np.median(diff))


def _pct(x: np.ndarray, q: float) -> float:
    x = x[~np.isnan(x)]
    return float(np.percentile(x, q)) if x.size else math.nan


def _err(sim: float, live: float) -> float:
    return (sim - live) / live if live > 0 and not math.isnan(sim) else math.nan


def compare(run: LiveRun, simulated: ReplayResult, frontend_delay_s: float = 0.0) -> list[Row]:
    """One row per metric, ``frontend_delay_s`` added to the simulated TTFT and E2E."""
    client, engine = client_latencies(run), engine_latencies(run)
    sim: Latencies = simulated.shifted(frontend_delay_s) if frontend_delay_s else simulated
    base: Row = {"run": run.name, "policy": simulated.policy}
    rows: list[Row] = []
    for name in _LATENCIES:
        attr = f"{name}_s"
        c, e, s = getattr(client, attr), getattr(engine, attr), getattr(sim, attr)
        front = _both(c, e)
        for q in _QUANTILES:
            row = _row(base, f"{name}_p{q:.0f}_s", _pct(c, q), _pct(e, q), _pct(s, q))
            row["frontend_s"] = _pct(front, q)
            row["sim_delay_s"] = frontend_delay_s if name != "tpot" else 0.0
            rows.append(row)
    rows.append(_row(base, "throughput_rps", client.throughput_rps, engine.throughput_rps, sim.throughput_rps))
    counts = [float(np.count_nonzero(~np.isnan(x.e2e_s))) for x in (client, engine, sim)]
    rows.append(_row(base, "completed", *counts))
    return rows


def _row(base: Row, metric: str, client: float, engine: float, sim: float) -> Row:
    return {**base, "metric": metric, "client": client, "engine": engine, "sim": sim,
            "err_client": _err(sim, client), "err_engine": _err(sim, engine)}  # fmt: skip


@dataclass(frozen=True)
class LiveReport:
    """What ``evaluate_runs`` found: the fitted model, its report, the step breakdown and the comparison rows."""

    model: LinearCostModel
    fit: dict[str, float]
    breakdown: dict[str, float]
    rows: list[dict[str, float | str]]
    policy: str
    frontend_delay_s: float


def evaluate_runs(
    runs: Sequence[LiveRun], policy: str, engine: EngineConfig, tenants: Sequence[TenantConfig],
    fit_runs: Sequence[LiveRun] | None = None, duration: str = "period", concave_decodes: bool = False,
    frontend_delay_s: float = 0.0, **replay_options: Any,
) -> LiveReport:  # fmt: skip
    """Fit a cost model to ``fit_runs``' (default: ``runs``') steps, replay each run under ``policy``, ``compare``."""
    if not (is_finite_number(frontend_delay_s) and abs(frontend_delay_s) <= MAX_FRONTEND_DELAY_S):
        raise ValueError(
            f"evaluate_runs: frontend_delay_s must be a finite number of seconds within {MAX_FRONTEND_DELAY_S:g} of 0, "
            f"got {frontend_delay_s!r:.80}"
        )
    spec = resolve_policy(policy)  # once: an exported policy file is loaded once
    fitting = list(fit_runs) if fit_runs else list(runs)
    steps = [run.steps for run in fitting]  # one log per run: no period spans two runs
    model = fit_live_cost_model(steps, duration, concave_decodes)
    rows: list[dict[str, float | str]] = []
    for run in runs:
        rows.extend(compare(run, replay(run, spec, engine, tenants, model, **replay_options), frontend_delay_s))
    fit = live_fit_report(model, steps, duration)
    return LiveReport(model, fit, step_breakdown(steps), rows, spec.name, frontend_delay_s)


def _percent(x: float) -> str:
    return f"{100 * x:.1f}%"


def format_report(report: LiveReport) -> str:
    """The fitted model, its fit, the parts of a busy step and the comparison table, as the command prints them."""
    fit, parts = report.fit, report.breakdown
    errors = ", ".join(f"{q} {_percent(fit[f'{q}_rel_error'])}" for q in ("mean", "p50", "p90", "max"))
    busy = ", ".join(f"{k[:-2]} {v:.4g}" for k, v in parts.items() if k.endswith("_s"))
    return "\n".join(
        [
            f"cost model: {report.model!r}",
            f"  {report.model.description}; relative error {errors}",
            f"  busy step, median s: {busy} (over {parts['num_busy_steps']:.0f} steps)",
            f"policy {report.policy}; the simulated TTFT and E2E include a front-end delay of "
            f"{report.frontend_delay_s:.4g} s",
            format_table(report.rows, COMPARE_COLUMNS),
        ]
    )


if __name__ == "__main__":  # the command line lives with the others, in commands/
    raise SystemExit("the command line is: python -m llmsched_env.commands.live_replay (--help)")
