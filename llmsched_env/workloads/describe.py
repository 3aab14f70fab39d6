"""What a scenario offers (rates, length percentiles, tenant mix, offered load) as data (``describe_scenario``) or
text (``format_description``). Its capacity is a bound, not a simulation: the smaller of the compute bound and
the KV bound (Little's law); ``evaluate.py --capacity`` measures a scheduler's real one.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from llmsched_env.common.tenants import listed_tenants
from llmsched_env.costs.base import CostModel
from llmsched_env.costs.loader import load_cost_model
from llmsched_env.workloads.arrivals import interarrival_cv
from llmsched_env.workloads.scenarios import Scenario, TraceSource, episode_window
from llmsched_env.workloads.windows import SUSTAINED_SPAN_FACTOR, max_sustained_load, window_span


def capacity_estimate_rps(scenario: Scenario, cost: CostModel, prompt_mean: float,
                          output_mean: float) -> dict[str, float]:
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
    decode_s = cost.step_time_s(0, int(in_flight) or 1, int(in_flight * context), 0.0)
    stay_s = prompt_mean / prefill_tps + output_mean * decode_s
    kv_rps = in_flight / stay_s
    return {"compute_bound_rps": compute_rps, "kv_bound_rps": kv_rps, "capacity_estimate_rps": min(compute_rps, kv_rps)}


def _pct(values: np.ndarray) -> dict[str, float]:
    if values.size == 0:
        return {"p50": 0.0, "p90": 0.0, "p99": 0.0}
    p50, p90, p99 = np.percentile(values, [50, 90, 99])
    return {"p50": float(p50), "p90": float(p90), "p99": float(p99)}


def describe_scenario(scenario: Scenario, split: str = "test", load: float = 1.0, seed: int = 0,
                      num_requests: int | None = None, cost_model: str | None = None) -> dict[str, Any]:
    """One episode of ``scenario`` summarised: rates, lengths and SLOs overall and per tenant, rejections on arrival,
    offered load against the capacity estimate, whether ``load`` is sustained and the tenants its part leaves out."""
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
        share = float(mine.mean()) if len(requests) else 0.0
        tenants.append({
            "name": t.name, "slo": f"TTFT {t.slo.ttft_s:.3g}s / TPOT {t.slo.tpot_s:.3g}s ({t.slo.name})",
            "weight": t.weight, "priority": t.priority, "share": share, "rate_rps": rate * share,
            "prompt": _pct(prompt[mine]), "output": _pct(output[mine]),
        })  # fmt: skip
    eng = scenario.engine
    total = prompt + output
    over_len = total > eng.max_model_len
    over_kv = ~over_len & (np.ceil(total / eng.block_size) > eng.num_kv_blocks)  # the engine's order of checks
    cap = capacity_estimate_rps(scenario, cost, float(prompt.mean()), float(output.mean()))
    window = window_span(source, split, seed, n, load)  # the same requests: their span and its requirement
    return {"name": scenario.name, "description": scenario.description, "split": split, "load": load,
            "engine": scenario.engine, "cost_model": cost.name, "remote_kv": scenario.remote_kv,
            "num_requests": len(requests), "duration_s": span, "rate_rps": rate,
            "interarrival_cv": interarrival_cv(arrival) if len(requests) > 2 else 0.0, "prompt": _pct(prompt),
            "output": _pct(output), "share_with_prefix_ids": with_prefix / len(requests) if requests else 0.0,
            "share_over_max_model_len": float(over_len.mean()) if requests else 0.0,
            "share_over_kv_pool": float(over_kv.mean()) if requests else 0.0, "tenants": tenants, **cap,
            "offered_load": rate / cap["capacity_estimate_rps"] if cap["capacity_estimate_rps"] > 0 else 0.0,
            "required_span_s": window.required_s, "sustained": window.sustained,
            "max_sustained_load": max_sustained_load(source, split, seed, n, load),
            "absent_tenants": source.absent_tenants if isinstance(source, TraceSource) else []}


def format_description(scenario: Scenario, *args: Any, **kwargs: Any) -> str:
    """``describe_scenario(scenario, *args, **kwargs)`` as lines of text."""
    d = describe_scenario(scenario, *args, **kwargs)
    split, load = d["split"], d["load"]
    eng = d["engine"]
    pr, out = d["prompt"], d["output"]
    lines = [
        f"== {d['name']}: {d['description']}",
        f"   engine {d['engine']}",
        f"   cost model {d['cost_model']}; remote KV {d['remote_kv']}",
        f"   {split} episode at load {load}: {d['num_requests']} requests over {d['duration_s']:.0f} s, "
        f"{d['rate_rps']:.2f} req/s, inter-arrival CV {d['interarrival_cv']:.2f}, "
        f"{d['share_with_prefix_ids']:.0%} with prefix ids",
        f"   prompt p50/p90/p99 {pr['p50']:.0f}/{pr['p90']:.0f}/{pr['p99']:.0f}, "
        f"output {out['p50']:.0f}/{out['p90']:.0f}/{out['p99']:.0f} tokens",
        f"   rejected on arrival: {d['share_over_max_model_len']:.1%} longer than max_model_len "
        f"{eng.max_model_len}, {d['share_over_kv_pool']:.1%} more than the KV pool's {eng.num_kv_tokens} tokens "
        "(prompt + output)",
    ]
    for t in d["tenants"]:
        tp, to = t["prompt"], t["output"]
        lines.append(f"   tenant {t['name']:<12} {t['share']:5.0%} {t['rate_rps']:6.2f} req/s  {t['slo']}  "
                     f"weight {t['weight']:g} priority {t['priority']}  "
                     f"prompt p50 {tp['p50']:.0f} output p50 {to['p50']:.0f}")
    lines.append(f"   engine capacity estimate {d['capacity_estimate_rps']:.2f} req/s "
                 f"(compute {d['compute_bound_rps']:.2f}, KV {d['kv_bound_rps']:.2f}): "
                 f"offered load {d['offered_load']:.2f}")
    verdict = "sustained" if d["sustained"] else "NOT sustained (a burst, not a rate)"
    lines.append(f"   window: {_seconds(d['duration_s'])} of arrivals at load {load:g}, a sustained rate needs "
                 f"{_seconds(d['required_span_s'])} ({SUSTAINED_SPAN_FACTOR:g} x the mean TTFT target): {verdict}; "
                 f"sustained up to load {d['max_sustained_load']:.3g}")
    if d["absent_tenants"]:
        lines.append(f"   the {split} part has no request of tenants {listed_tenants(d['absent_tenants'])}")
    return "\n".join(lines)


def _seconds(value: float) -> str:
    return f"{value:.0f} s" if value >= 100 else f"{value:.3g} s"
