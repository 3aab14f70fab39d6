"""How ``sprw`` and the generalist change with the length prediction's error: a table from per-seed capacity
searches written by ``llmsched-evaluate --capacity --per-seed --length-prediction E`` into
``RESULTS/<scenario>-<E>/`` (``E``: none, exact, lognormal-0.5, lognormal-1; see docs/generalist.md).

    python bench/prediction_table.py --results docs/results/prediction

Prints one Markdown row per (scenario, policy): the capacity (mean ± 95% half-width over the test seeds) at
each prediction error, and the paired ratio of each error's capacity to that with no prediction. Reads files
only; runs nothing.
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

from llmsched_env.evaluation.stats import mean_ci95

sys.path.insert(0, str(Path(__file__).resolve().parent))  # its sibling, also when a test loads this file
from results_archive import unpacked

ERRORS = ("none", "exact", "lognormal-0.5", "lognormal-1")


def collect(results: Path) -> dict[tuple[str, str], dict[str, dict[int, float]]]:
    """(scenario, policy) -> error -> seed -> capacity (packed runs read as if extracted)."""
    out: dict[tuple[str, str], dict[str, dict[int, float]]] = {}
    with unpacked(results) as root:
        for error in ERRORS:
            for path in sorted(root.glob(f"*-{error}/results.csv")):  # the folder's name ends with the error
                with path.open() as f:
                    for r in csv.DictReader(f):
                        key = (r["scenario"], r["policy"])
                        out.setdefault(key, {}).setdefault(error, {})[int(r["seed"])] = float(r["capacity_load"])
    return out


def markdown(table: dict[tuple[str, str], dict[str, dict[int, float]]]) -> str:
    head = "| scenario | policy | " + " | ".join(ERRORS) + " | " + " | ".join(f"{e} / none" for e in ERRORS[1:]) + " |"
    lines = [head, "|" + "---|" * (2 + 2 * len(ERRORS) - 1)]
    for (scenario, policy), by_error in sorted(table.items()):
        base = by_error.get("none", {})
        cells = []
        for e in ERRORS:
            values = list(by_error.get(e, {}).values())
            m, h = mean_ci95(values) if values else (float("nan"), 0.0)
            cells.append(f"{m:.2f} ± {h:.2f}" if values else "—")
        ratios = []
        for e in ERRORS[1:]:
            caps = by_error.get(e, {})
            seeds = sorted(set(caps) & set(base))
            if seeds:
                m, h = mean_ci95([caps[s] / base[s] for s in seeds])
                ratios.append(f"{m:.3f} ± {h:.3f}×")
            else:
                ratios.append("—")
        lines.append(f"| `{scenario}` | `{policy}` | " + " | ".join(cells) + " | " + " | ".join(ratios) + " |")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--results", type=Path, default=Path("docs/results/prediction"), help="the evaluate outputs")
    args = p.parse_args()
    print(markdown(collect(args.results)))


if __name__ == "__main__":
    main()
