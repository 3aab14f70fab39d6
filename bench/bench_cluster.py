"""Cluster simulator speed: 8 replicas on the Azure conversation trace, against the single-node simulator.

    python bench/bench_cluster.py [--num-requests 10000] [--replicas 8] [--rate-per-replica 10]

Replays one window of the Azure conversation trace (training part) at ``replicas x rate-per-replica`` req/s
over the cluster (fcfs on every replica), and the same window at ``rate-per-replica`` through the
single-node ``Simulator``, so every engine sees the same load. Prints, on one core:
- the cluster's iterations/s summed over replicas and requests/s, routed by round robin and by least
  outstanding requests (core only: a constant fcfs decision, as ``bench_core``'s bare loop), and with the
  local scheduler of the env (fcfs through each replica's mask);
- the single-node simulator's iterations/s on the same trace at 1/N the rate;
- the per-iteration cost of each and the ratio (cluster over single node; the target is <= 1.5);
- ``LLMSchedCluster-v0`` with the least-outstanding router baseline: env steps (arrivals) per second.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import gymnasium as gym
import numpy as np
from timing import run_to_end

import baselines
import llmsched_env  # noqa: F401
from llmsched_env.cluster.config import ReplicaSpec
from llmsched_env.cluster.metrics import cluster_metrics
from llmsched_env.cluster.simulator import Cluster, LocalDecide
from llmsched_env.costs.loader import load_cost_model
from llmsched_env.decision.actions import ActionSpec
from llmsched_env.decision.policy import PolicyContext
from llmsched_env.engine.batch import Decision
from llmsched_env.engine.request import Request
from llmsched_env.envs.episode import run_episode
from llmsched_env.sim.simulator import Simulator
from llmsched_env.workloads.library import get_scenario

SCENARIO = get_scenario("azure-conv")
COST = load_cost_model(SCENARIO.cost_model)
ENGINE = SCENARIO.engine
SOURCE = SCENARIO.source("train", COST)


def trace(num_requests: int, rate_rps: float) -> list[Request]:
    """The same window of the trace (seed 0) replayed at ``rate_rps``."""
    return SOURCE.sample(np.random.default_rng(0), num_requests, rate_rps / SOURCE.nominal_rate_rps())


def fcfs() -> Decision:
    """The fcfs baseline's knobs (they do not depend on the state; the mask only bites on idle engines)."""
    return baselines.FCFSPolicy(PolicyContext(ENGINE, SOURCE.tenants, COST, ActionSpec.for_engine(ENGINE), ())).decision


def bench_single(num_requests: int, rate: float, decision: Decision) -> tuple[float, int]:
    sim = Simulator(ENGINE, SOURCE.tenants, COST, trace(num_requests, rate))
    elapsed = run_to_end(sim, decision)
    m = sim.metrics()
    print(f"  single node: simulated {m['duration_s']:.0f} s, slo_attainment {m['slo_attainment']:.3f}")
    return elapsed, sim.num_steps


def bench_cluster(
    num_requests: int, rate: float, n: int, decide: LocalDecide, router: str
) -> tuple[float, int, dict[str, float]]:
    cluster = Cluster([ReplicaSpec(ENGINE, COST)] * n, SOURCE.tenants, trace(num_requests, rate), decide)
    reps = cluster.replicas
    choose: Callable[[Request], int]
    if router == "round_robin":
        choose = lambda r: r.request_id % n  # noqa: E731
    else:
        choose = lambda r: min(range(n), key=lambda i: reps[i].num_outstanding)  # noqa: E731
    t0 = time.perf_counter()
    cluster.run(choose)
    elapsed = time.perf_counter() - t0
    return elapsed, sum(r.num_iterations for r in reps), cluster_metrics(cluster)


def env_local_decide(n: int) -> LocalDecide:
    """The env's local scheduler: the fcfs baseline through each replica's mask."""
    env = gym.make("LLMSchedCluster-v0", scenario="azure-conv", num_replicas=n, num_requests=10)
    env.reset(seed=0)
    return env.unwrapped.cluster.local_decide  # type: ignore[attr-defined]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--num-requests", type=int, default=10_000)
    p.add_argument("--replicas", type=int, default=8)
    p.add_argument("--rate-per-replica", type=float, default=10.0, help="req/s per engine (saturates near 10)")
    args = p.parse_args()
    n, num, rate = args.replicas, args.num_requests, args.rate_per_replica
    print(f"workload: {num} requests of the Azure conversation trace; {n} replicas x {rate} req/s; {ENGINE}")
    decision = fcfs()
    single_s, single_it = bench_single(num, rate, decision)
    per_single = single_s / single_it
    print(
        f"single-node simulator at {rate} req/s: {single_it / single_s:,.0f} iterations/s, "
        f"{num / single_s:,.0f} requests/s ({single_it:,} iterations, {per_single * 1e6:.1f} us/iteration)"
    )

    def constant(i: int, engine: object) -> Decision:
        return decision

    runs: list[tuple[str, str, LocalDecide]] = [
        ("round_robin", "constant fcfs", constant),
        ("least_outstanding", "constant fcfs", constant),
        ("least_outstanding", "env local scheduler (fcfs + mask)", env_local_decide(n)),
    ]
    for router, local, decide in runs:
        elapsed, iters, m = bench_cluster(num, rate * n, n, decide, router)
        per = elapsed / iters
        print(
            f"cluster, {router} routing, {local}: {iters / elapsed:,.0f} iterations/s summed over replicas, "
            f"{num / elapsed:,.0f} requests/s ({iters:,} iterations, {per * 1e6:.1f} us/iteration, "
            f"{per / per_single:.2f}x single node); slo_attainment {m['slo_attainment']:.3f}, "
            f"requests cv {m['imbalance/requests_cv']:.3f}"
        )
    env = gym.make(
        "LLMSchedCluster-v0",
        scenario="azure-conv",
        num_replicas=n,
        num_requests=num,
        load=rate / SOURCE.nominal_rate_rps(),
    )
    router = baselines.make_router("least_outstanding", env.unwrapped.policy_context())  # type: ignore[attr-defined]
    t0 = time.perf_counter()
    m = run_episode(env, router, seed=0)
    elapsed = time.perf_counter() - t0
    print(
        f"LLMSchedCluster-v0 (least_outstanding baseline + fcfs): {num / elapsed:,.0f} env steps (arrivals)/s, "
        f"{m['num_iterations'] / elapsed:,.0f} iterations/s; slo_attainment {m['slo_attainment']:.3f}"
    )


if __name__ == "__main__":
    main()
