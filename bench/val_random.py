"""Policies on randomised workloads no training drew: SLO attainment, per workload and on average (a val score
beyond the library, for choosing a generalist; docs/generalist.md).

    python bench/val_random.py --policies slo_aware,sjf,learned,D=runs/generalist-D [--workloads 24]
        [--loads 1.0,1.5] [--num-requests 400] [--out results.csv]

Workload ``i`` is ``workloads.randomized.random_scenario(VAL_SEED_BASE + i)`` (1-16 tenants, every length family,
arrival process, engine and cost preset of the randomised space) at each of ``loads`` times its estimated knee,
seed ``i``, no length prediction. Training draws its randomised scenarios from 31-bit seeds of its own
generator, so these are new workloads. A trained policy holds each decision for its training's iterations per
step; baselines decide every iteration.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import torch

import llmsched_env  # noqa: F401
from llmsched_env.commands.evaluate_args import csv_list
from llmsched_env.common.checks import check_unique
from llmsched_env.common.outputs import write_csv
from llmsched_env.decision.policy_spec import resolve_policy
from llmsched_env.envs.episode import run_episode
from llmsched_env.envs.single_node import LLMSchedEnv
from llmsched_env.workloads.randomized import random_scenario

VAL_SEED_BASE = 7_000_000_000  # above every 31-bit training seed


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--policies", type=csv_list(str), required=True, help="comma list: baselines, learned, NAME=PATH")
    p.add_argument("--workloads", type=int, default=24)
    p.add_argument("--loads", type=csv_list(float, 0.0), default=[1.0, 1.5], help="times each workload's knee")
    p.add_argument("--num-requests", type=int, default=400)
    p.add_argument("--out", type=Path, default=None, help="CSV of every episode")
    a = p.parse_args(argv)
    torch.set_num_threads(1)
    try:
        specs = [resolve_policy(e) for e in a.policies]
        check_unique("--policies", [spec.name for spec in specs])  # two files of one name: one column
        loads = a.loads
    except ValueError as exc:
        p.error(str(exc))
    rows = []
    for i in range(a.workloads):
        scenario = random_scenario(VAL_SEED_BASE + i)
        for load in loads:
            row = {"workload": scenario.name, "load": load}
            for spec in specs:
                env = LLMSchedEnv(
                    scenario=scenario,
                    load=load,
                    num_requests=a.num_requests,
                    iterations_per_step=spec.iterations_per_step,
                    schema=spec.schema,
                )
                row[spec.name] = run_episode(env, lambda e, s=spec, k=i: s.make(e, k), seed=i)["slo_attainment"]
                env.close()
            rows.append(row)
            print(" ".join(f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()), flush=True)
    names = [s.name for s in specs]
    print("mean attainment: " + ", ".join(f"{n} {np.mean([r[n] for r in rows]):.4f}" for n in names))
    for n in names:
        others = [m for m in names if m != n]
        if others:
            diff = [r[n] - max(r[m] for m in others) for r in rows]
            wins = sum(d > 1e-9 for d in diff)
            print(f"{n}: best of all on {wins}/{len(rows)}, mean gap to the best other {np.mean(diff):+.4f}")
    if a.out is not None:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        write_csv(rows, a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
