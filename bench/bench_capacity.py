"""What stopping capacity probes once decided saves: per-seed capacity searches (``--capacity --per-seed``'s) of
this checkout and of another (``--root``, e.g. a checkout of an earlier commit), side by side, alternating, each
in a fresh process on one thread; prints each side's wall time, their ratio and whether every capacity is
identical.

    git worktree add /tmp/before <commit>          # and copy or build its compiled engine (llmsched-compile)
    python bench/bench_capacity.py --root /tmp/before
    python bench/bench_capacity.py --root /tmp/before --pairs mixed-slo:2000:fcfs,tuned --seeds 0,1,2,3,4

A pair is ``SCENARIO[:REQUESTS]:POLICY,...`` (REQUESTS: the headline's episode size, bench/headline.sh). This
checkout's searches also play the capacity load whole (its ``at_capacity_*`` columns); the other's as it does.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
# the headline's single-node scenarios and sizes (bench/headline.sh)
DEFAULT_PAIRS = (
    "mixed-slo:2000:fcfs,slo_aware,tuned",
    "mix-shift:2200:fcfs,slo_aware,tuned",
    "bursty::fcfs,slo_aware,tuned",
    "sharegpt-poisson::fcfs,slo_aware,tuned",
    "short-long::fcfs,slo_aware,tuned",
    "tenants-on-off::fcfs,slo_aware,tuned",
    "multi-tenant-overload::fcfs,slo_aware,tuned",
    "azure-conv-fitted::fcfs,slo_aware,tuned",
    "azure-code:143:fcfs,slo_aware,tuned",
    "remote-kv:393:fcfs,slo_aware,tuned",
)

_CHILD = """
import json, sys, time, torch
torch.set_num_threads(1)
from llmsched_env.evaluation import EvalConfig
from llmsched_env.evaluation.capacity import find_capacity
scenario, size, policies, seeds = json.loads(sys.argv[1])
config = EvalConfig(scenarios=[scenario], policies=policies, seeds=seeds, split="test", num_requests=size)
t0 = time.perf_counter()
caps = [find_capacity(config, config.scenarios[0], p, seed=s)["capacity_load"] for p in config.policies for s in seeds]
print(json.dumps({"wall_s": time.perf_counter() - t0, "capacities": caps}))
"""


def run(root: Path, job: list) -> dict:
    """One side's searches of ``job`` in a fresh process importing the package from ``root``."""
    env = {**os.environ, "PYTHONPATH": str(root), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-c", _CHILD, json.dumps(job)], cwd=root, env=env, check=True,
                         capture_output=True, text=True).stdout  # fmt: skip
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--root", type=Path, required=True, help="the other checkout (the one to compare against)")
    p.add_argument("--pairs", default=";".join(DEFAULT_PAIRS), help="SCENARIO[:REQUESTS]:POLICY,... separated by ;")
    p.add_argument("--seeds", default="0,1", help="test seeds, each searched alone")
    args = p.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    print(f"{'scenario':<24} {'searches':>8} {'before s':>9} {'after s':>8} {'ratio':>6}  identical")
    total = [0.0, 0.0]
    for pair in args.pairs.split(";"):
        scenario, size, policies = pair.split(":")
        job = [scenario, int(size) if size else None, policies.split(","), seeds]
        before, after = run(args.root, job), run(HERE, job)  # alternating: before, after, before, after ...
        total[0] += before["wall_s"]
        total[1] += after["wall_s"]
        same = before["capacities"] == after["capacities"]
        print(f"{scenario:<24} {len(after['capacities']):>8} {before['wall_s']:>9.1f} {after['wall_s']:>8.1f} "
              f"{before['wall_s'] / after['wall_s']:>5.2f}x  {'yes' if same else 'NO'}", flush=True)  # fmt: skip
    print(f"{'all':<24} {'':>8} {total[0]:>9.1f} {total[1]:>8.1f} {total[0] / total[1]:>5.2f}x")


if __name__ == "__main__":
    main()
