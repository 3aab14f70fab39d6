"""Does llmsched's simulator predict a live vLLM server? A live benchmark run replayed in the simulator.

    run = load_run("runs/r8")                     # logs: the run's four files, checked and matched
    model = fit_live_cost_model(run.steps)        # fit: a cost model of the server's engine steps
    sim = replay(run, "slo_aware", engine, tenants, model)   # sim: the same requests, simulated
    rows = compare(run, sim, frontend_delay_s(load_run("runs/r1")))  # compare: live vs simulated
    report = evaluate_runs([run], "slo_aware", engine, tenants)      # all of it, for several runs

The command line is ``python -m llmsched_env.commands.live_replay``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from llmsched_env.common.checks import is_finite_number
from llmsched_env.costs.linear import LinearCostModel
from llmsched_env.decision.policy_spec import resolve_policy
from llmsched_env.engine.config import EngineConfig, TenantConfig
from llmsched_env.evaluation.tables import format_table
from llmsched_env.live.compare import COMPARE_COLUMNS, client_latencies, compare, engine_latencies, frontend_delay_s
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


@dataclass(frozen=True)
class LiveReport:
    """What ``evaluate_runs`` found: the ``model``, its ``fit`` report, the busy step's ``breakdown``, the
    comparison ``rows``, the ``policy`` and the ``frontend_delay_s`` added."""

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
    """Fit a cost model to the steps of ``fit_runs`` (default: ``runs``), replay every run under ``policy`` with
    it (``replay``, given ``replay_options``: ``policy_cost_model``, ``seed``, ...) and compare (``compare``, with
    ``frontend_delay_s`` added to the simulated TTFT and E2E: finite, within ``MAX_FRONTEND_DELAY_S`` s of 0)."""
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
