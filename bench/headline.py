"""The headline table and plot, from what ``llmsched-evaluate`` wrote under a results folder.

    python bench/headline.py --results docs/results/seeds10-14 --out docs/results/seeds10-14/headline

For each scenario with ``S-capacity/results.csv`` (``llmsched-evaluate --capacity``) and ``S/results.csv``
(``llmsched-evaluate --loads 1.0,1.2`` over the same seeds): the trained agent's capacity, the best
heuristic's (the highest capacity among every other policy in the file), their ratio, and at each load the
agent's mean attainment, the best heuristic's, and the paired difference agent − best over the same seeds,
each with its 95% confidence half-width (Student t). Prints a Markdown table, writes it to ``OUT.md`` and a
bar chart of capacities to ``OUT.png``. Reads files only; runs nothing.
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

from llmsched_env.evaluation.stats import mean_ci95

AGENT = "agent"


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open() as f:
        return list(csv.DictReader(f))


def _fmt(values: list[float]) -> str:
    mean, half = mean_ci95(values)
    return f"{mean:.3f} ± {half:.3f}"


def collect(results: Path) -> list[dict[str, object]]:
    """One entry per scenario that has both a capacity file naming the agent and a per-seed results file."""
    out = []
    for cap_file in sorted(results.glob("*-capacity/results.csv")):
        scenario = cap_file.parent.name.removesuffix("-capacity")
        caps = {r["policy"]: (float(r["capacity_load"]), float(r["capacity_rps"])) for r in _rows(cap_file)}
        per_seed = results / scenario / "results.csv"
        if AGENT not in caps or not per_seed.is_file():
            continue
        others = {p: c for p, c in caps.items() if p != AGENT}
        best = max(others, key=lambda p: others[p][0])
        attain: dict[tuple[str, float], dict[int, float]] = {}
        for r in _rows(per_seed):
            attain.setdefault((r["policy"], float(r["load"])), {})[int(r["seed"])] = float(r["slo_attainment"])
        loads = sorted({load for _, load in attain})
        cells = {}
        for load in loads:
            a, b = attain[(AGENT, load)], attain[(best, load)]
            seeds = sorted(a)
            cells[load] = (
                _fmt([a[s] for s in seeds]),
                _fmt([b[s] for s in seeds]),
                _fmt([a[s] - b[s] for s in seeds]),
                len(seeds),
            )
        ratio = caps[AGENT][0] / others[best][0] if others[best][0] > 0 else float("inf")
        out.append({"scenario": scenario, "agent": caps[AGENT], "best": best, "best_cap": others[best],
                    "ratio": ratio, "cells": cells})  # fmt: skip
    return out


def markdown(rows: list[dict[str, object]], rival: str = "best heuristic") -> str:
    loads = sorted({load for r in rows for load in r["cells"]})  # type: ignore[attr-defined]
    head = f"| scenario | agent capacity | {rival} (capacity) | ratio |"
    rule = "|---|---|---|---|"
    for load in loads:
        head += f" @ {load:g}: agent | {rival} | agent − {rival} |"
        rule += "---|---|---|"
    lines = [head, rule]
    for r in rows:
        a_load, a_rps = r["agent"]  # type: ignore[misc]
        b_load, b_rps = r["best_cap"]  # type: ignore[misc]
        line = (f"| `{r['scenario']}` | {a_load:.2f} ({a_rps:.3g} req/s) | `{r['best']}` {b_load:.2f} "
                f"({b_rps:.3g} req/s) | {r['ratio']:.3f}× |")  # fmt: skip
        for load in loads:
            agent, best, diff, _ = r["cells"][load]  # type: ignore[index]
            line += f" {agent} | {best} | {diff} |"
        lines.append(line)
    return "\n".join(lines)


def plot(rows: list[dict[str, object]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [str(r["scenario"]) for r in rows]
    agent = [r["agent"][0] for r in rows]  # type: ignore[index]
    best = [r["best_cap"][0] for r in rows]  # type: ignore[index]
    x = range(len(rows))
    fig, ax = plt.subplots(figsize=(11, 4))
    ax.bar([i - 0.2 for i in x], best, 0.4, label="best heuristic")
    ax.bar([i + 0.2 for i in x], agent, 0.4, label="trained agent")
    ax.set_xticks(list(x), names, rotation=30, ha="right")
    ax.set_ylabel("capacity (load at 90% SLO attainment)")
    ax.axhline(1.0, color="grey", lw=0.8, ls="--")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--results", type=Path, default=Path("docs/results/seeds10-14"), help="the evaluate outputs")
    p.add_argument("--out", type=Path, default=None, help="OUT.md and OUT.png (default: RESULTS/headline)")
    args = p.parse_args()
    out = args.out or args.results / "headline"
    rows = collect(args.results)
    single = [r for r in rows if not str(r["scenario"]).startswith("cluster-")]
    routers = [r for r in rows if str(r["scenario"]).startswith("cluster-")]
    text = markdown(single)
    if routers:
        text += "\n\nRouters (LLMSchedCluster-v0):\n\n" + markdown(routers, rival="best router")
    print(text)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".md").write_text(text + "\n")
    if single:
        plot(single, out.with_suffix(".png"))
    print(f"wrote {out.with_suffix('.md')}" + (f" and {out.with_suffix('.png')}" if single else ""))


if __name__ == "__main__":
    main()
