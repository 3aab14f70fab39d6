"""What judging on fitted traffic costs: the capacity searches of a trace replay and of its fitted twin, side by
side, and the ratio of their times (the fitted searches grow their windows, so they play more requests).

    python bench/bench_fitted.py                       # azure-conv and cluster-azure-conv-4, fcfs / round_robin ...
    python bench/bench_fitted.py --pairs azure-conv:fcfs,slo_aware --seeds 0,1,2,3,4

Each pair runs ``find_capacity`` per seed (``--per-seed``'s searches) on the replay (five test windows of its
largest size that fits five seeds: 433 requests for Azure) and on the fitted scenario (its own size, grown with the
load), on one thread, and prints the wall time of each, the ratio, and the mean capacity and window size.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from llmsched_env.evaluation import EvalConfig
from llmsched_env.evaluation.capacity import find_capacity

DEFAULT_PAIRS = (
    "azure-conv:433:fcfs,slo_aware",
    "cluster-azure-conv-4:433:round_robin,least_outstanding,least_kv_load",
    "cluster-mooncake-4:393:round_robin,least_outstanding,least_kv_load",
)


def judge(scenario: str, size: int | None, policies: list[str], seeds: list[int]) -> tuple[float, list[dict]]:
    """Wall seconds of every (policy, seed) capacity search of ``scenario`` (windows of ``size``, or its own)."""
    config = EvalConfig(scenarios=[scenario], policies=policies, seeds=seeds, num_requests=size)
    t0 = time.perf_counter()
    rows = [find_capacity(config, config.scenarios[0], p, seed=s) for p in policies for s in seeds]
    return time.perf_counter() - t0, rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--pairs", nargs="*", default=list(DEFAULT_PAIRS), help="REPLAY:SIZE:POLICY,POLICY ...")
    p.add_argument("--seeds", default="0,1,2,3,4")
    args = p.parse_args()
    torch.set_num_threads(1)
    seeds = [int(s) for s in args.seeds.split(",")]
    print("scenario | searches | replay s | fitted s | fitted / replay | capacity replay | capacity fitted | "
          "windows fitted (requests)")  # fmt: skip
    for pair in args.pairs:
        name, size, policies = pair.split(":")
        names = policies.split(",")
        t_replay, replay = judge(name, int(size), names, seeds)
        t_fitted, fitted = judge(name + "-fitted", None, names, seeds)
        limited = sum(bool(r["window_limited"]) for r in replay)
        caps = [np.mean([r["capacity_load"] for r in rows]) for rows in (replay, fitted)]
        sizes = [int(r["window_requests"]) for r in fitted]
        print(
            f"{name} | {len(replay)} | {t_replay:.1f} | {t_fitted:.1f} | {t_fitted / t_replay:.2f} | "
            f"{'≥ ' if limited else ''}{caps[0]:.3f} ({limited} window-limited) | {caps[1]:.3f} | "
            f"{min(sizes)}-{max(sizes)}",
            flush=True,
        )


if __name__ == "__main__":
    main()
