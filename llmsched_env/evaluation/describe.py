"""A scenario described in words: rates, lengths, tenants and offered load of one of its episodes."""

from __future__ import annotations

from llmsched_env.common.tenants import listed_tenants
from llmsched_env.workloads.describe import describe_scenario
from llmsched_env.workloads.scenarios import Scenario
from llmsched_env.workloads.windows import SUSTAINED_SPAN_FACTOR

__all__ = ["format_description"]


def format_description(
    scenario: Scenario,
    split: str = "test",
    load: float = 1.0,
    seed: int = 0,
    num_requests: int | None = None,
    cost_model: str | None = None,
) -> str:
    """Lines describing the ``split`` episode of ``scenario`` at ``load`` for ``seed`` (``describe_scenario``,
    ``num_requests`` and ``cost_model`` defaulting to the scenario's): engine, cost model, arrival rate and
    burstiness, prompt and output lengths, the requests rejected on arrival, each tenant, the offered load
    against the engine's estimated capacity, whether the window is sustained at ``load`` (``workloads.windows``)
    and the tenants the part leaves out."""
    d = describe_scenario(scenario, split, load, seed, num_requests, cost_model)
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
        lines.append(
            f"   tenant {t['name']:<12} {t['share']:5.0%} {t['rate_rps']:6.2f} req/s  {t['slo']}  "
            f"weight {t['weight']:g} priority {t['priority']}  "
            f"prompt p50 {tp['p50']:.0f} output p50 {to['p50']:.0f}"
        )
    lines.append(
        f"   engine capacity estimate {d['capacity_estimate_rps']:.2f} req/s "
        f"(compute {d['compute_bound_rps']:.2f}, KV {d['kv_bound_rps']:.2f}): "
        f"offered load {d['offered_load']:.2f}"
    )
    verdict = "sustained" if d["sustained"] else "NOT sustained (a burst, not a rate)"
    lines.append(
        f"   window: {_seconds(d['duration_s'])} of arrivals at load {load:g}, a sustained rate needs "
        f"{_seconds(d['required_span_s'])} ({SUSTAINED_SPAN_FACTOR:g} x the mean TTFT target): {verdict}; "
        f"sustained up to load {d['max_sustained_load']:.3g}"
    )
    if d["absent_tenants"]:
        lines.append(f"   the {split} part has no request of tenants {listed_tenants(d['absent_tenants'])}")
    return "\n".join(lines)


def _seconds(value: float) -> str:
    return f"{value:.0f} s" if value >= 100 else f"{value:.3g} s"
