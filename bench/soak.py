"""Soak the envs: random masked actions with the invariants checked every step; prints steps, episodes and
violations (each with its case and seed).

    python bench/soak.py [--steps 100000] [--seed 0] [--num-requests 40] [--cases small-pool,cluster]

The cases (``llmsched_env.evaluation.soak.SOAK_CASES``): a tiny KV pool, overload with preemption, remote KV
fetches, a 2-replica cluster, a disaggregated (prefill/decode) cluster; each gets an equal share of the steps.
Exits 1 when any violation was found.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from llmsched_env.evaluation.soak import SOAK_CASES, soak


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=100_000, help="env steps in all (default: %(default)s)")
    p.add_argument("--seed", type=int, default=0, help="first episode's seed (default: %(default)s)")
    p.add_argument("--num-requests", type=int, default=40, help="requests per episode (default: %(default)s)")
    p.add_argument("--cases", default=",".join(SOAK_CASES), help="comma list (default: %(default)s)")
    args = p.parse_args()
    try:
        result = soak(args.steps, args.seed, args.num_requests, tuple(c for c in args.cases.split(",") if c))
    except ValueError as exc:
        p.error(str(exc))
    for case, steps in result.steps_by_case.items():
        print(f"{case:14s} {steps} steps")
    print(f"steps {result.steps}  episodes {result.episodes}  violations {len(result.violations)}  "
          f"wall {result.wall_s:.1f} s ({result.steps / max(result.wall_s, 1e-9):.0f} steps/s)")  # fmt: skip
    for case, seed, message in result.violations:
        print(f"violation: {case} seed {seed}: {message}")
    return 1 if result.violations else 0


if __name__ == "__main__":
    raise SystemExit(main())
