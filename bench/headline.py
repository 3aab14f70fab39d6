"""The headline table and plot, from per-seed capacity searches that ``llmsched-evaluate`` wrote.

    python bench/headline.py --results docs/results/test --out docs/results/test/headline

For each scenario with ``S-capacity/results.csv`` written by ``llmsched-evaluate --capacity --per-seed``
(one capacity per test seed and policy): the trained agent's capacity, that of ``tuned``, that of the best
named baseline, and the best of all of them (the one with the highest mean; the "rival"), each as the mean
over seeds ± the 95% half-width (Student t); the paired ratio agent / best named baseline; then the agent's
ratio to the rival (ratio of the means) and, seed by seed on the same windows, the paired ratio agent / rival
and the paired difference agent − rival, each mean ± 95% half-width. Prints a Markdown table, writes it to
``OUT.md`` and a bar chart of the capacities (with their intervals) to ``OUT.png``. Reads files only; runs nothing.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from llmsched_env.evaluation.capacity import read_per_seed
from llmsched_env.evaluation.stats import mean_ci95

AGENT, TUNED = "agent", "tuned"
LEARNED = ("agent", "learned", "quick")  # trained policies (per-scenario agents, generalists): never "baselines"


def _fmt(values: list[float], digits: int = 2) -> str:
    mean, half = mean_ci95(values)
    return f"{mean:.{digits}f} ± {half:.{digits}f}"


def collect(results: Path, agent: str = AGENT) -> list[dict[str, object]]:
    """One entry per scenario with per-seed rows for ``agent`` (the policy judged: ``agent``, the per-scenario
    policy, or ``learned``, the generalist) and at least one baseline, gathered from every
    ``*-capacity*/results.csv`` under ``results`` (a policy searched later, e.g. ``tuned``, may sit in a folder
    of its own; a later folder's rows replace an earlier one's). Trained policies (``LEARNED``) are never
    counted as baselines."""
    try:
        caps_of = read_per_seed(sorted(results.glob("*-capacity*/results.csv")))
    except ValueError as exc:
        raise SystemExit(str(exc)) from None
    out = []
    for scenario, all_caps in sorted(caps_of.items()):
        caps = {p: c for p, c in all_caps.items() if p == agent or p not in LEARNED}
        if agent not in caps or len(caps) < 2:
            continue
        seeds = sorted(caps[agent])
        for policy, by_seed in caps.items():
            if sorted(by_seed) != seeds:
                raise SystemExit(f"{results}: {scenario}: {policy} has seeds {sorted(by_seed)}, the agent {seeds}")
        mean = {p: float(np.mean([c[s] for s in seeds])) for p, c in caps.items()}
        named = {p: m for p, m in mean.items() if p not in (agent, TUNED)}
        best_named = max(named, key=named.__getitem__) if named else None
        rival = max((p for p in mean if p != agent), key=mean.__getitem__)
        mine = [caps[agent][s] for s in seeds]
        other = [caps[rival][s] for s in seeds]
        named_caps = [caps[best_named][s] for s in seeds] if best_named else []
        out.append({
            "scenario": scenario, "seeds": seeds, "caps": caps, "best_named": best_named, "rival": rival,
            "agent": agent, "ratio": mean[agent] / mean[rival] if mean[rival] > 0 else float("inf"),
            "paired_ratio": [a / b if b > 0 else float("inf") for a, b in zip(mine, other, strict=True)],
            "paired_diff": [a - b for a, b in zip(mine, other, strict=True)],
            "paired_named": [a / b if b > 0 else float("inf") for a, b in zip(mine, named_caps, strict=True)],
        })  # fmt: skip
    return out


def markdown(rows: list[dict[str, object]], learned: str = "agent", rival_word: str = "best baseline") -> str:
    head = (f"| scenario | {learned} | `tuned` | best named (capacity) | {learned} / best named, paired | "
            f"{rival_word} | ratio of means | paired ratio | paired difference |")  # fmt: skip
    lines = [head, "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        caps: dict[str, dict[int, float]] = r["caps"]  # type: ignore[assignment]
        seeds: list[int] = r["seeds"]  # type: ignore[assignment]

        def cell(policy: str | None, caps: dict[str, dict[int, float]] = caps, seeds: list[int] = seeds) -> str:
            return _fmt([caps[policy][s] for s in seeds]) if policy in caps else "—"

        named = r["best_named"]
        named_cell = f"`{named}` {cell(named)}" if named else "—"  # type: ignore[arg-type]
        versus_named = f"{_fmt(r['paired_named'], 3)}×" if r["paired_named"] else "—"  # type: ignore[arg-type]
        lines.append(
            f"| `{r['scenario']}` | {cell(str(r['agent']))} | {cell(TUNED)} | {named_cell} | {versus_named} | "
            f"`{r['rival']}` | "
            f"{r['ratio']:.3f}× | {_fmt(r['paired_ratio'], 3)}× | {_fmt(r['paired_diff'])} |"  # type: ignore[arg-type]
        )
    return "\n".join(lines)


def plot(rows: list[dict[str, object]], path: Path, agent: str = AGENT) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [str(r["scenario"]) for r in rows]
    fig, ax = plt.subplots(figsize=(12, 4.2))
    series = [("best named baseline", lambda r: r["best_named"]), ("tuned", lambda r: TUNED),
              (agent, lambda r: agent)]  # fmt: skip
    width = 0.8 / len(series)
    for k, (label, pick) in enumerate(series):
        means, halves = [], []
        for r in rows:
            caps: dict[str, dict[int, float]] = r["caps"]  # type: ignore[assignment]
            policy = pick(r)
            values = [caps[policy][s] for s in r["seeds"]] if policy in caps else [np.nan]  # type: ignore[attr-defined]
            m, h = mean_ci95(values) if policy in caps else (np.nan, 0.0)
            means.append(m)
            halves.append(h)
        x = np.arange(len(rows)) + (k - (len(series) - 1) / 2) * width
        ax.bar(x, means, width, yerr=halves, capsize=2, label=label)
    ax.set_xticks(list(range(len(rows))), names, rotation=30, ha="right")
    ax.set_ylabel("capacity (load at 90% SLO attainment)")
    ax.axhline(1.0, color="grey", lw=0.8, ls="--")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--results", type=Path, default=Path("docs/results/test"), help="the evaluate outputs")
    p.add_argument("--out", type=Path, default=None, help="OUT.md and OUT.png (default: RESULTS/headline)")
    p.add_argument("--agent", default=AGENT, help="the policy judged: agent (per scenario) or learned (generalist)")
    args = p.parse_args()
    out = args.out or args.results / "headline"
    rows = collect(args.results, args.agent)
    single = [r for r in rows if not str(r["scenario"]).startswith("cluster-")]
    routers = [r for r in rows if str(r["scenario"]).startswith("cluster-")]
    text = markdown(single, args.agent)
    if routers:
        text += "\n\nRouters (LLMSchedCluster-v0):\n\n" + markdown(routers, "learned router", "best router")
    print(text)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".md").write_text(text + "\n")
    if single:
        plot(single, out.with_suffix(".png"), args.agent)
    print(f"wrote {out.with_suffix('.md')}" + (f" and {out.with_suffix('.png')}" if single else ""))


if __name__ == "__main__":
    main()
