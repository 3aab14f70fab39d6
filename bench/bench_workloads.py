"""Workload loading speed against an episode's run time.

    python bench/bench_workloads.py

Prints the seconds to parse the full Azure conversation and Mooncake traces (cold, cache cleared), to build a
10,000-request episode from each (window + Request objects) and from a synthetic multi-tenant scenario, and
the seconds the fcfs baseline then takes to simulate that episode, so the loaders' share is visible.
"""

from __future__ import annotations

import time

import numpy as np
from timing import run_to_end

import baselines
from llmsched_env.costs.loader import load_cost_model
from llmsched_env.decision.actions import ActionSpec
from llmsched_env.decision.policy import PolicyContext
from llmsched_env.sim.simulator import Simulator
from llmsched_env.workloads.library import get_scenario
from llmsched_env.workloads.scenarios import trace_path
from llmsched_env.workloads.traces import clear_trace_cache, load_azure, load_mooncake


def timed(fn):  # type: ignore[no-untyped-def]
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def simulate(name: str, requests: list) -> float:  # type: ignore[type-arg]
    sc = get_scenario(name)
    spec = ActionSpec.for_engine(sc.engine)
    cost = load_cost_model(sc.cost_model)
    source = sc.source("test", cost)
    ctx = PolicyContext(sc.engine, source.tenants, cost, spec, ())
    sim = Simulator(sc.engine, source.tenants, cost, requests, remote_kv=sc.remote_kv)
    decision = spec.decode(baselines.make("fcfs", ctx).act(np.zeros(1), spec.mask(sim.engine)))
    return run_to_end(sim, decision)


def main() -> None:
    clear_trace_cache()
    _, azure_s = timed(lambda: load_azure(trace_path("azure-conv")))
    _, moon_s = timed(lambda: load_mooncake(trace_path("mooncake-conv")))
    print(f"parse Azure conversation trace (19,366 rows): {azure_s:.3f} s")
    print(f"parse Mooncake conversation trace (12,031 rows): {moon_s:.3f} s")
    for name, load in (("azure-conv", 1.0), ("mooncake-conv", 1.0), ("multi-tenant-overload", 1.0)):
        sc = get_scenario(name)
        src = sc.source("train")
        n = 10_000
        try:
            reqs, build_s = timed(lambda src=src, n=n, load=load: src.sample(np.random.default_rng(0), n, load))
        except ValueError:  # the training part of Mooncake holds fewer than 10,000 requests
            n = 8_000
            reqs, build_s = timed(lambda src=src, n=n, load=load: src.sample(np.random.default_rng(0), n, load))
        sim_s = simulate(name, reqs)
        print(
            f"{name}: build a {n:,}-request episode {build_s:.3f} s; simulate it under fcfs {sim_s:.2f} s "
            f"(building is {build_s / (build_s + sim_s):.1%} of the episode)"
        )


if __name__ == "__main__":
    main()
