"""Capacity of a router on the cluster scenarios: the highest total arrival rate at >= 90% SLO attainment.

    python bench/cluster_capacity.py [--scenarios cluster-azure-conv-4,...] [--router round_robin]
                                     [--seeds 0] [--num-requests N] [--tol 0.02]

For each scenario: mean attainment over the seeds' evaluation episodes (fcfs on every replica), the load
doubled or halved until it brackets 90%, then bisected to ``--tol`` (relative). Prints the capacity as a load
of the scenario's current nominal rate and in requests/s; the nominal rates in ``cluster.scenarios``
are the round-robin capacities this printed on the test part's windows of the scenario's size. Seed ``s`` plays
the part's ``s``-th disjoint window: at the scenarios' own sizes the test part holds one, so more seeds need
a smaller ``--num-requests`` (600 fits three), and a seed beyond the windows is refused, naming the count.
"""

from __future__ import annotations

import argparse
import time

import gymnasium as gym
import numpy as np

import baselines
import llmsched_env  # noqa: F401
from llmsched_env.cluster.scenarios import get_cluster_scenario, list_cluster_scenarios
from llmsched_env.commands.evaluate_args import csv_list
from llmsched_env.envs.episode import run_episode

TARGET = 0.9


def attainment(scenario: str, router: str, load: float, seeds: list[int], num_requests: int | None = None) -> float:
    size = {} if num_requests is None else {"num_requests": num_requests}
    env = gym.make("LLMSchedCluster-v0", scenario=scenario, split="test", load=load, **size)
    ctx = env.unwrapped.policy_context()  # type: ignore[attr-defined]
    values = [run_episode(env, baselines.make_router(router, ctx, seed=s), seed=s)["slo_attainment"] for s in seeds]
    return float(np.mean(values))


def capacity(scenario: str, router: str, seeds: list[int], tol: float, num_requests: int | None = None) -> float:
    """The load (of the scenario's nominal rate) at which mean attainment crosses ``TARGET``."""
    lo, hi = 1.0, 1.0
    if attainment(scenario, router, 1.0, seeds, num_requests) >= TARGET:
        while attainment(scenario, router, hi * 2, seeds, num_requests) >= TARGET:
            hi *= 2
        lo, hi = hi, hi * 2
    else:
        while attainment(scenario, router, lo / 2, seeds, num_requests) < TARGET:
            lo /= 2
        lo, hi = lo / 2, lo
    while hi / lo > 1 + tol:
        mid = (lo * hi) ** 0.5
        if attainment(scenario, router, mid, seeds, num_requests) >= TARGET:
            lo = mid
        else:
            hi = mid
    return lo


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--scenarios", type=csv_list(str), default=list_cluster_scenarios())
    p.add_argument("--router", default="round_robin")
    p.add_argument("--seeds", type=csv_list(int), default=[0])
    p.add_argument("--num-requests", type=int, default=None, help="requests per episode (default: the scenario's)")
    p.add_argument("--tol", type=float, default=0.02)
    args = p.parse_args()
    seeds = args.seeds
    for name in args.scenarios:
        t0 = time.perf_counter()
        load = capacity(name, args.router, seeds, args.tol, args.num_requests)
        rate = get_cluster_scenario(name).rate_rps
        print(
            f"{name}: {args.router} capacity load {load:.3f} = {load * rate:.3g} req/s "
            f"(nominal {rate:.3g} req/s; {time.perf_counter() - t0:.0f} s)",
            flush=True,
        )


if __name__ == "__main__":
    main()
