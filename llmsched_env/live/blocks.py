"""One block of the live experiment as ``blocks.jsonl`` holds it (``block_record``), and its statistics computed the
same way for the prediction (``block_metrics``, ``latency_components``). ``BlockError``: a block its policy did not
decide throughout.
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
    "COMPONENTS", "COMPONENT_KEYS", "FRONTEND_FIGURES", "LATE_SEND_S", "METRICS", "BlockError", "block_metrics",
    "block_record", "component_key", "flat_components", "frontend_figures", "latency_components",
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

# each latency's mean as the sum of its parts (``latency_components``): the front end (the client's latency minus
# the engine's), the wait in the engine (arrival to first scheduled) and the engine's steps (from then on)
COMPONENTS = {
    "ttft": ("frontend", "wait", "steps"),
    "tpot": ("frontend", "steps"),
    "e2e": ("frontend", "wait", "steps"),
}


def component_key(latency: str, part: str | None = None) -> str:
    """The flat key of a latency's mean (``part`` None) or of one part's, as a prediction holds it: ``ttft_mean_s``,
    ``ttft_wait_mean_s``."""
    return f"{latency}_mean_s" if part is None else f"{latency}_{part}_mean_s"


COMPONENT_KEYS = tuple(component_key(lat, p) for lat, parts in COMPONENTS.items() for p in (None, *parts))


class BlockError(RuntimeError):
    """A block that cannot be trusted: a request or step decided by another policy than the block's."""


def _pct(values: np.ndarray, q: float) -> float:
    finite = values[np.isfinite(values)]
    return float(np.percentile(finite, q)) if finite.size else math.nan


def block_metrics(
    tenants: Sequence[str], ttft_s: np.ndarray, tpot_s: np.ndarray, e2e_s: np.ndarray, succeeded: np.ndarray,
    slos: dict[str, TenantConfig], duration_s: float,
) -> tuple[dict[str, float], list[dict[str, Any]], dict[str, dict[str, float]]]:  # fmt: skip
    """The block's ``METRICS``, per-request records and per-tenant attainment, from per-request arrays."""
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
        "ttft_p50_s": _pct(ttft_s[ok], 50), "ttft_p90_s": _pct(ttft_s[ok], 90), "ttft_p99_s": _pct(ttft_s[ok], 99),
        "tpot_p50_s": _pct(tpot_s[ok], 50), "tpot_p99_s": _pct(tpot_s[ok], 99), "e2e_p50_s": _pct(e2e_s[ok], 50),
        "e2e_p99_s": _pct(e2e_s[ok], 99),
    }  # fmt: skip
    records = [
        {
            "tenant": tenants[i], "ttft_s": float(ttft_s[i]) if ok[i] else math.nan,
            "tpot_s": float(tpot_s[i]) if ok[i] else math.nan, "e2e_s": float(e2e_s[i]) if ok[i] else math.nan,
            "good": bool(good[i]),
        }
        for i in range(n)
    ]  # fmt: skip
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
    """Did the block's requests reach the engine on time: late-send share and lag, client-minus-engine TTFT, steps/s."""
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
        "late_share": float(np.mean(lags > LATE_SEND_S)) if lags.size else math.nan, "send_lag_p90_s": _pct(lags, 90),
        "send_lag_max_s": float(lags.max()) if lags.size else math.nan, "frontend_p50_s": _pct(front, 50),
        "frontend_p90_s": _pct(front, 90),
        "steps_per_s": sum(1 for s in steps if s.busy) / span if span > 0 else math.nan,
    }  # fmt: skip


def latency_components(
    ttft_s: np.ndarray, e2e_s: np.ndarray, output_tokens: np.ndarray, wait_s: np.ndarray, engine_ttft_s: np.ndarray,
    engine_e2e_s: np.ndarray,
) -> dict[str, dict[str, float]]:  # fmt: skip
    """Per latency of ``COMPONENTS`` its mean ``total_s`` and the means of its parts (``frontend_s``, ``wait_s``,
    ``steps_s``, which add up to it), over the completed requests given: the client's TTFT and E2E, the output
    tokens, and the engine's wait (first scheduled - arrival), TTFT (first token - arrival) and E2E (finish -
    arrival). TPOT over the requests of more than one token; NaN where no request counts."""

    def parts(total: np.ndarray, engine: np.ndarray, wait: np.ndarray | None) -> dict[str, float]:
        split = {"frontend_s": total - engine, **({} if wait is None else {"wait_s": wait}),
                 "steps_s": engine if wait is None else engine - wait}  # fmt: skip
        return {name: float(v.mean()) if v.size else math.nan for name, v in {"total_s": total, **split}.items()}

    many = output_tokens > 1
    decode = output_tokens[many] - 1
    return {
        "ttft": parts(ttft_s, engine_ttft_s, wait_s),
        "tpot": parts((e2e_s - ttft_s)[many] / decode, (engine_e2e_s - engine_ttft_s)[many] / decode, None),
        "e2e": parts(e2e_s, engine_e2e_s, wait_s),
    }


def flat_components(components: dict[str, dict[str, float]]) -> dict[str, float]:
    """``latency_components``' figures under their flat keys (``component_key``), as a prediction holds them."""
    return {
        component_key(lat, None if name == "total_s" else name.removesuffix("_s")): v
        for lat, figures in components.items()
        for name, v in figures.items()
    }


def _live_components(
    server: Sequence[ServerRequest], client: ClientResult, ok: np.ndarray
) -> dict[str, dict[str, float]]:
    """``latency_components`` of the completed requests the engine logged first scheduled and first token for."""
    keep = [i for i in range(len(server)) if ok[i] and server[i].first_scheduled_s is not None
            and server[i].first_token_s is not None]  # fmt: skip
    rs = [server[i] for i in keep]
    arrival = np.array([r.arrival_s for r in rs], dtype=np.float64)

    def engine(times: Sequence[float | None]) -> np.ndarray:
        return np.array(times, dtype=np.float64) - arrival

    return latency_components(
        np.array([client.ttft_s[i] for i in keep], dtype=np.float64),
        np.array([client.latency_s[i] for i in keep], dtype=np.float64),
        np.array([client.output_lens[i] for i in keep], dtype=np.float64),
        engine([r.first_scheduled_s for r in rs]), engine([r.first_token_s for r in rs]),
        engine([r.finish_s for r in rs]),
    )  # fmt: skip


def block_record(
    folder: Path, log_dir: Path | None, slos: dict[str, TenantConfig], policy: str | None, meta: dict[str, Any],
    span_s: tuple[float, float] | None = None, server_logs: ServerLogs | None = None,
) -> dict[str, Any]:  # fmt: skip
    """The ``blocks.jsonl`` record of the block in ``folder`` with server logs in ``log_dir`` (None: vLLM's own
    scheduler, the client's figures only, ``components`` None); ``BlockError`` unless ``policy`` decided every
    request and step."""
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
        **meta, "t_start": t_start, "t_end": t_end, "num_requests": n + len(unlogged), "completed": int(ok.sum()),
        "shed": shed if logged else None, "failed": int((~ok).sum()) - shed + len(unlogged),
        "preemptions": int(sum(r.preemptions for r in server)) if logged else None,
        "fallbacks": dict(Counter(s.fallback for s in steps if s.fallback)), "steps": len(steps) if logged else None,
        "step_time_median_s": step_period_median_s([s.t0_s for s in steps], [s.busy for s in steps]),
        "frontend": frontend_figures(run_plan, server, client, steps), "metrics": metrics, "tenants": per_tenant,
        "components": _live_components(server, client, ok) if logged else None, "requests": records,
    }  # fmt: skip
