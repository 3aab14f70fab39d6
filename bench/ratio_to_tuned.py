"""Rank candidate policies by their capacity relative to a reference, from per-seed capacity searches: how the
generalist's checkpoint was chosen on ``val`` (docs/generalist.md).

    python bench/ratio_to_tuned.py RESULTS.csv [MORE.csv ...] [--reference tuned]

For each policy: per scenario, the mean over seeds of its capacity divided by the reference's on the same seed;
then the geometric mean of those over the scenarios and the worst scenario. Reads files only; runs nothing.
"""

from __future__ import annotations

import argparse
import csv
import math
from pathlib import Path


def ratios(files: list[Path], reference: str) -> dict[str, dict[str, float]]:
    """Policy -> scenario -> mean paired capacity ratio to ``reference`` (rows of later files replace earlier)."""
    caps: dict[tuple[str, str], dict[str, float]] = {}
    for path in files:
        if not path.is_file():
            raise SystemExit(f"{path}: no such file (a results.csv of llmsched-evaluate --capacity --per-seed)")
        with path.open() as f:
            for r in csv.DictReader(f):
                if "seed" not in r:
                    raise SystemExit(f"{path}: no seed column; run llmsched-evaluate --capacity --per-seed")
                caps.setdefault((r["scenario"], r["seed"]), {})[r["policy"]] = float(r["capacity_load"])
    per: dict[str, dict[str, list[float]]] = {}
    for (scenario, _), by_policy in caps.items():
        if reference not in by_policy:
            continue
        for policy, cap in by_policy.items():
            if policy != reference:
                per.setdefault(policy, {}).setdefault(scenario, []).append(cap / by_policy[reference])
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
