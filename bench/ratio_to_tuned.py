"""Rank candidate policies by their capacity relative to a reference, from per-seed capacity searches: how the
generalist's checkpoint was chosen on ``val`` (docs/generalist.md).

    python bench/ratio_to_tuned.py RESULTS.csv [MORE.csv ...] [--reference tuned]

For each policy: per scenario, the mean over seeds of its capacity divided by the reference's on the same seed;
then the geometric mean of those over the scenarios and the worst scenario. Reads files only; runs nothing.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from llmsched_env.evaluation.capacity import read_per_seed


def ratios(files: list[Path], reference: str) -> dict[str, dict[str, float]]:
    """Policy -> scenario -> mean paired capacity ratio to ``reference`` (rows of later files replace earlier)."""
    try:
        caps = read_per_seed(files)
    except ValueError as exc:
        raise SystemExit(str(exc)) from None
    per: dict[str, dict[str, list[float]]] = {}
    for scenario, by_policy in caps.items():
        ref = by_policy.get(reference, {})
        for policy, by_seed in by_policy.items():
            for seed, cap in by_seed.items():
                if policy != reference and seed in ref:
                    per.setdefault(policy, {}).setdefault(scenario, []).append(cap / ref[seed])
    return {p: {s: sum(v) / len(v) for s, v in by_s.items()} for p, by_s in per.items()}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("results", type=Path, nargs="+", help="results.csv files of llmsched-evaluate --capacity --per-seed")
    p.add_argument("--reference", default="tuned", help="the policy every ratio divides by (default: tuned)")
    args = p.parse_args()
    table = ratios(args.results, args.reference)
    if not table:
        raise SystemExit(f"no scenario and seed has both {args.reference} and another policy")
    print(f"| policy | geometric mean / {args.reference} | worst scenario | per scenario |")
    print("|---|---|---|---|")
    for policy, by_s in sorted(table.items()):
        geo = math.exp(sum(math.log(v) for v in by_s.values()) / len(by_s))
        worst = min(by_s, key=by_s.__getitem__)
        cells = ", ".join(f"{s} {v:.3f}" for s, v in sorted(by_s.items()))
        print(f"| `{policy}` | {geo:.3f} | {worst} {by_s[worst]:.3f} | {cells} |")


if __name__ == "__main__":
    main()
