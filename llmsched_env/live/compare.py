"""Live against simulated: TTFT, TPOT and E2E at p50 and p99 and the request throughput, side by side.

Live is measured at the ``client`` (``vllm bench serve``'s result JSON: includes the API server) and at the
``engine`` (the server's ``requests.jsonl``, from vLLM's arrival stamp); their difference per request, the
``frontend_s`` column, is the front-end time the simulator does not model (``frontend_delay_s``: its median on a
light-load run). Relative errors are signed, ``(sim - live) / live``.
"""

from __future__ import annotations

import math

import numpy as np

from llmsched_env.live.logs import LiveRun
from llmsched_env.live.sim import Latencies, ReplayResult

__all__ = ["COMPARE_COLUMNS", "client_latencies", "compare", "engine_latencies", "frontend_delay_s"]

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
    """One row (``COMPARE_COLUMNS``, ``policy``, ``sim_delay_s``) per metric, ``frontend_delay_s`` added to the
    simulated TTFT and E2E."""
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
