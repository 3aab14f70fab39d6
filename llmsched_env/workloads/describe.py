"""What a scenario offers: rates, length percentiles, tenant mix, and offered load against the engine.

The engine capacity here is a back-of-the-envelope bound, not a simulation: the smaller of
- the compute bound: one request costs its prompt at the prefill rate of a full token-budget chunk plus its
  output at the decode rate of a full running batch (``max_num_seqs`` decodes at the mean context);
- the KV bound: Little's law with as many requests in flight as the KV pool holds at their mean footprint
  (prompt + output / 2, at most ``max_num_seqs``), each staying for its prefill plus its decode steps.
``python evaluate.py --capacity`` measures the real capacity of a scheduler.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from llmsched_env.costs.base import CostModel
from llmsched_env.costs.loader import load_cost_model
from llmsched_env.workloads.arrivals import interarrival_cv
from llmsched_env.workloads.scenarios import Scenario, TraceSource, episode_window
from llmsched_env.workloads.windows import max_sustained_load, window_span

__all__ = ["capacity_estimate_rps", "describe_scenario"]


def capacity_estimate_rps(
    scenario: Scenario, cost: CostModel, prompt_mean: float, output_mean: float
) -> dict[str, float]:
    """Compute-bound and KV-bound request rates of the scenario's engine for requests of the given mean sizes."""
    eng = scenario.engine
    budget = eng.max_num_batched_tokens
    prefill_tps = budget / cost.step_time_s(budget, 0, 0, budget * (budget + 1) / 2)
    context = prompt_mean + output_mean / 2
    batch = eng.max_num_seqs
    decode_step = cost.step_time_s(0, batch, int(batch * context), 0.0)
    decode_tps = batch / decode_step
    compute_rps = 1.0 / (prompt_mean / prefill_tps + output_mean / decode_tps)
    in_flight = min(float(batch), eng.num_kv_tokens / max(context, 1.0))
    stay_s = prompt_mean / prefill_tps + output_mean * cost.step_time_s(
        0, int(in_flight) or 1, int(in_flight * context), 0.0
    )
    kv_rps = in_flight / stay_s
    return {"compute_bound_rps": compute_rps, "kv_bound_rps": kv_rps, "capacity_estimate_rps": min(compute_rps, kv_rps)}


def _pct(values: np.ndarray) -> dict[str, float]:
    if values.size == 0:
        return {"p50": 0.0, "p90": 0.0, "p99": 0.0}
    p50, p90, p99 = np.percentile(values, [50, 90, 99])
    return {"p50": float(p50), "p90": float(p90), "p99": float(p99)}


def describe_scenario(
    scenario: Scenario,
    split: str = "test",
    load: float = 1.0,
    seed: int = 0,
    num_requests: int | None = None,
    cost_model: str | None = None,
) -> dict[str, Any]:
    """One episode of ``scenario`` (``num_requests`` requests, default the scenario's; ``cost_model`` a preset
    name or JSON path, default the scenario's) summarised: overall and per-tenant rates and lengths, SLOs, the
    shares of requests the engine rejects on arrival (longer than ``max_model_len``, or than the whole KV pool),
    the offered load against the engine capacity estimate, whether the window is sustained at ``load``
    (``workloads.windows``: ``required_span_s``, ``sustained``, ``max_sustained_load``) and the tenants its
    part leaves out (``absent_tenants``)."""
    cost = load_cost_model(cost_model if cost_model is not None else scenario.cost_model)
    source = scenario.source(split, cost)
    n = num_requests if num_requests is not None else scenario.num_requests
    requests = source.sample(np.random.default_rng(seed), n, load, episode_window(split, seed))
    arrival = np.array([r.arrival_s for r in requests])
    prompt = np.array([r.prompt_len for r in requests], dtype=np.float64)
    output = np.array([r.output_len for r in requests], dtype=np.float64)
    tenant = np.array([r.tenant for r in requests])
    span = float(arrival[-1] - arrival[0]) if len(requests) > 1 else 0.0
    rate = (len(requests) - 1) / span if span > 0 else 0.0
    with_prefix = sum(1 for r in requests if r.prefix_ids)
    tenants = []
    for k, t in enumerate(source.tenants):
        mine = tenant == k
        tenants.append(
            {
                "name": t.name,
                "slo": f"TTFT {t.slo.ttft_s:.3g}s / TPOT {t.slo.tpot_s:.3g}s ({t.slo.name})",
                "weight": t.weight,
                "priority": t.priority,
                "share": float(mine.mean()) if len(requests) else 0.0,
                "rate_rps": rate * float(mine.mean()) if len(requests) else 0.0,
                "prompt": _pct(prompt[mine]),
                "output": _pct(output[mine]),
            }
        )
    eng = scenario.engine
    total = prompt + output
    over_len = total > eng.max_model_len
    over_kv = ~over_len & (np.ceil(total / eng.block_size) > eng.num_kv_blocks)  # the engine's order of checks
    cap = capacity_estimate_rps(scenario, cost, float(prompt.mean()), float(output.mean()))
    window = window_span(source, split, seed, n, load)  # the same requests: their span and its requirement
    return {
        "name": scenario.name,
        "description": scenario.description,
        "split": split,
        "load": load,
        "engine": scenario.engine,
        "cost_model": cost.name,
        "remote_kv": scenario.remote_kv,
        "num_requests": len(requests),
        "duration_s": span,
        "rate_rps": rate,
        "interarrival_cv": interarrival_cv(arrival) if len(requests) > 2 else 0.0,
        "prompt": _pct(prompt),
        "output": _pct(output),
        "share_with_prefix_ids": with_prefix / len(requests) if requests else 0.0,
        "share_over_max_model_len": float(over_len.mean()) if requests else 0.0,
        "share_over_kv_pool": float(over_kv.mean()) if requests else 0.0,
        "tenants": tenants,
        **cap,
        "offered_load": rate / cap["capacity_estimate_rps"] if cap["capacity_estimate_rps"] > 0 else 0.0,
        "required_span_s": window.required_s,
        "sustained": window.sustained,
        "max_sustained_load": max_sustained_load(source, split, seed, n, load),
        "absent_tenants": source.absent_tenants if isinstance(source, TraceSource) else [],
    }
