"""One block of the live experiment, measured: what vLLM's client saw and what the server's adapter logged for the
block's requests, as the record ``blocks.jsonl`` holds (``block_record``), and the per-block statistics the
simulator's prediction computes the same way (``block_metrics``).

A block's figures are client-side (what a user of the server sees): TTFT from sending the request to its first
token, TPOT = (end to end - TTFT) / (output tokens - 1) over requests of more than one token, E2E; a request is
**good** when it succeeded with TTFT and TPOT within its tenant's targets (a one-token request's TPOT counts as 0);
SLO attainment = good / all requests of the block (failed and shed ones are misses); goodput = good requests per
second of the block's duration (the client's, from its first send to its last answer). Percentiles are over the
requests that succeeded. The front end's figures (``frontend_figures``) say whether the requests reached the
engine when they were meant to: how late the client sent them against the plan, the client-minus-engine TTFT
(HTTP, the API server's processing, streaming) and the engine steps per second. From the server's logs come the
preemptions, the requests shed (aborted by the policy), the fallbacks by cause, the engine steps and their median
period, and the check that the block was decided by the policy it was meant for: every request of the block and
every engine step within its span must carry that policy's name, else ``BlockError``.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from llmsched_env.engine.config import TenantConfig
from llmsched_env.live.logs import ServerLogs, load_run, read_client
from llmsched_env.live.records import ClientResult, PlannedRequest, ServerRequest, StepRecord

__all__ = [
    "FRONTEND_FIGURES", "LATE_SEND_S", "METRICS", "BlockError", "block_metrics", "block_record", "frontend_figures",
    "step_period_median_s",
]  # fmt: skip

# the per-block statistics of blocks.jsonl's "metrics" and of the predictions
METRICS = (
    "slo_attainment", "goodput_rps", "ttft_p50_s", "ttft_p90_s", "ttft_p99_s", "tpot_p50_s", "tpot_p99_s", "e2e_p50_s",
    "e2e_p99_s",
)  # fmt: skip


# the front end's per-block figures (``frontend_figures``)
FRONTEND_FIGURES = ("late_share", "send_lag_p90_s", "send_lag_max_s", "frontend_p50_s", "frontend_p90_s", "steps_per_s")
LATE_SEND_S = 0.1  # a request the client sent this much later than planned counts as late


class BlockError(RuntimeError):
    """A block that cannot be trusted: a request or step decided by another policy than the block's."""


def _pct(values: np.ndarray, q: float) -> float:
    finite = values[np.isfinite(values)]
    return float(np.percentile(finite, q)) if finite.size else math.nan


def block_metrics(
    tenants: Sequence[str],
    ttft_s: np.ndarray,
    tpot_s: np.ndarray,
    e2e_s: np.ndarray,
    succeeded: np.ndarray,
    slos: dict[str, TenantConfig],
    duration_s: float,
) -> tuple[dict[str, float], list[dict[str, Any]], dict[str, dict[str, float]]]:
    """The block's statistics (``METRICS``), its per-request records ``{tenant, ttft_s, tpot_s, e2e_s, good}``
    (NaN where a request has no value) and its per-tenant ``{requests, slo_attainment}``, from per-request arrays
    in one order (``tpot_s`` NaN for a one-token request; ``succeeded`` false for a failed or shed request)."""
    n = len(tenants)
    good = np.zeros(n, dtype=bool)
    for i, name in enumerate(tenants):
        if not succeeded[i]:
            continue
        slo = slos[name].slo
        tpot = 0.0 if not math.isfinite(tpot_s[i]) else float(tpot_s[i])
        good[i] = float(ttft_s[i]) <= slo.ttft_s and tpot <= slo.tpot_s
    ok = succeeded.astype(bool)
    metrics = {
        "slo_attainment": float(good.sum() / n) if n else math.nan,
        "goodput_rps": float(good.sum() / duration_s) if duration_s > 0 else math.nan,
        "ttft_p50_s": _pct(ttft_s[ok], 50),
        "ttft_p90_s": _pct(ttft_s[ok], 90),
        "ttft_p99_s": _pct(ttft_s[ok], 99),
        "tpot_p50_s": _pct(tpot_s[ok], 50),
        "tpot_p99_s": _pct(tpot_s[ok], 99),
        "e2e_p50_s": _pct(e2e_s[ok], 50),
        "e2e_p99_s": _pct(e2e_s[ok], 99),
    }
    records = [
        {
            "tenant": tenants[i],
            "ttft_s": float(ttft_s[i]) if ok[i] else math.nan,
            "tpot_s": float(tpot_s[i]) if ok[i] else math.nan,
            "e2e_s": float(e2e_s[i]) if ok[i] else math.nan,
            "good": bool(good[i]),
        }
        for i in range(n)
    ]
    per_tenant: dict[str, dict[str, float]] = {}
    for name in dict.fromkeys(tenants):
        mine = [i for i in range(n) if tenants[i] == name]
        per_tenant[name] = {"requests": float(len(mine)), "slo_attainment": float(good[mine].mean())}
    return metrics, records, per_tenant


def step_period_median_s(t0_s: Sequence[float], busy: Sequence[bool]) -> float:
    """The median time from one busy engine step's start to the next one's (the server's pace), NaN if none."""
    periods = [b - a for a, b, is_busy in zip(t0_s, t0_s[1:], busy, strict=False) if is_busy and b > a]
    return float(np.median(periods)) if periods else math.nan


def frontend_figures(
    plan: Sequence[PlannedRequest], server: Sequence[ServerRequest], client: ClientResult, steps: Sequence[StepRecord],
) -> dict[str, float]:  # fmt: skip
    """Did the block's requests reach the engine on time? Over the requests in send order (the three sequences
    aligned, as ``live.logs.load_run`` gives them) and the engine steps of the block's span:

    - ``late_share``: the share sent more than ``LATE_SEND_S`` later than planned (both times from the first
      request with a planned time), ``send_lag_p90_s`` and ``send_lag_max_s`` that lag's p90 and maximum (NaN
      without the client's send times or planned times);
    - ``frontend_p50_s``, ``frontend_p90_s``: the client's TTFT minus the engine's (first token minus the API
      server's arrival), over the requests with a first token: HTTP, the API server and streaming;
    - ``steps_per_s``: busy engine steps per second of the span from the first arrival to the last finish.
    """
    planned = [(p.send_s, c) for p, c in zip(plan, client.start_s, strict=False) if p.send_s is not None]
    # both clocks from the first request that has a planned time
    lags = np.array([(c - planned[0][1]) - (s - planned[0][0]) for s, c in planned], dtype=np.float64)
    front = np.array(
        [client.ttft_s[i] - (r.first_token_s - r.arrival_s) for i, r in enumerate(server)
         if r.first_token_s is not None and client.succeeded(i)],
        dtype=np.float64,
    )  # fmt: skip
    span = max(r.finish_s for r in server) - min(r.arrival_s for r in server) if server else 0.0
    return {
        "late_share": float(np.mean(lags > LATE_SEND_S)) if lags.size else math.nan,
        "send_lag_p90_s": _pct(lags, 90),
        "send_lag_max_s": float(lags.max()) if lags.size else math.nan,
        "frontend_p50_s": _pct(front, 50),
        "frontend_p90_s": _pct(front, 90),
        "steps_per_s": sum(1 for s in steps if s.busy) / span if span > 0 else math.nan,
    }


def block_record(
    folder: Path, log_dir: Path | None, slos: dict[str, TenantConfig], policy: str | None, meta: dict[str, Any],
    span_s: tuple[float, float] | None = None, server_logs: ServerLogs | None = None,
) -> dict[str, Any]:  # fmt: skip
    """The ``blocks.jsonl`` record of the block whose client files are in ``folder`` and whose server logs are in
    ``log_dir`` (``live.logs.load_run`` matches them by label), with ``meta`` (cell, round, arm, ...) first.
    ``policy``: the adapter policy that must have decided every request and step of the block (None: vLLM's own
    scheduler, nothing to check); ``BlockError`` naming the first request or step that says otherwise.

    ``log_dir`` None: a server without llmsched's adapter (vLLM's own scheduler) logs nothing, so the record holds
    the client's figures only: ``preemptions``, ``shed``, ``steps`` and ``step_time_median_s`` are null, a request
    counts as completed when the client says it succeeded, and ``t_start``/``t_end`` are ``span_s`` (the driver's
    ``time.time()`` before and after the block), which it then needs. ``server_logs``: the logs of ``log_dir``
    already read (``live.logs.ServerLogTail`` for a server that is still running)."""
    if log_dir is None:
        if span_s is None:
            raise ValueError("block_record: a block without server logs needs span_s (its start and end)")
        plan, client = read_client(folder)
        run_plan = tuple(plan)
        server: tuple[ServerRequest, ...] = ()
        steps: tuple[StepRecord, ...] = ()
        ok = np.array([client.succeeded(i) for i in range(len(plan))], dtype=bool)
        unlogged: tuple[str, ...] = ()
        t_start, t_end = span_s
    else:
        run = load_run(folder, log_dir=log_dir, server_logs=server_logs)
        run_plan, server, steps, client, unlogged = run.plan, run.server, run.steps, run.client, run.unlogged
        ok = np.array([client.succeeded(i) and server[i].finished for i in range(len(run_plan))], dtype=bool)
        t_start, t_end = run.start_s, run.end_s
    n = len(run_plan)
    tenants = [p.tenant for p in run_plan]
    ttft = np.array(client.ttft_s, dtype=np.float64)
    e2e = np.array(client.latency_s, dtype=np.float64)
    out_tokens = np.array(client.output_lens, dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(out_tokens > 1, (e2e - ttft) / (out_tokens - 1), math.nan)
    metrics, records, per_tenant = block_metrics(tenants, ttft, tpot, e2e, ok, slos, client.duration_s)
    if policy is not None and log_dir is not None:
        requests_log = log_dir / "requests.jsonl"
        checks: list[tuple[str | None, str]] = [
            (r.policy, f"{requests_log}:{r.line}: request {r.label!r}") for r in server
        ]
        checks += [(s.policy, f"{log_dir / 'steps.jsonl'}: the step at t0={s.t0_s:.6f}") for s in steps]
        for seen, what in checks:
            if seen != policy:
                raise BlockError(f"{what} of block {folder.name} was decided by {seen!r}, not its policy {policy!r}")
    logged = log_dir is not None
    shed = sum(1 for r in server if r.status == "aborted")
    return {
        **meta,
        "t_start": t_start,
        "t_end": t_end,
        "num_requests": n + len(unlogged),
        "completed": int(ok.sum()),
        "shed": shed if logged else None,
        "failed": int((~ok).sum()) - shed + len(unlogged),
        "preemptions": int(sum(r.preemptions for r in server)) if logged else None,
        "fallbacks": dict(Counter(s.fallback for s in steps if s.fallback)),
        "steps": len(steps) if logged else None,
        "step_time_median_s": step_period_median_s([s.t0_s for s in steps], [s.busy for s in steps]),
        "frontend": frontend_figures(run_plan, server, client, steps),
        "metrics": metrics,
        "tenants": per_tenant,
        "requests": records,
    }
