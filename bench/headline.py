"""The headline table and plot, from per-seed capacity searches that ``llmsched-evaluate`` wrote.

    python bench/headline.py --results docs/results/test --out docs/results/test/headline

For each scenario with ``S-capacity/results.csv`` written by ``llmsched-evaluate --capacity --per-seed``
(one capacity per test seed and policy): the trained agent's capacity, that of ``tuned``, that of the best
named baseline, and the best of all of them (the one with the highest mean; the "rival"), each as the mean
over seeds ± the 95% half-width (Student t); the paired ratio agent / best named baseline; then the agent's
ratio to the rival (ratio of the means) and, seed by seed on the same windows, the paired ratio agent / rival
and the paired difference agent − rival, each mean ± 95% half-width. A ``lookahead`` row (its policy name ends
with ``(bound, not deployable)``, ``llmsched_env.decision.lookahead``) is never a baseline nor the rival: when
one is present, three more columns give the bound's capacity and where ``tuned`` and the agent stand between
the best named baseline and it, as the share of that gap they close, (x − best named) / (bound − best named)
on the means (1: at the bound; below 0: behind the best named; "—" when the bound does not exceed the best
named). An ``mpc`` row (the planner on forecast futures, ``llmsched_env.decision.mpc``; the best of its spellings
when several were searched) is deployable, so it may be the rival, but never a named baseline: three more
columns give its capacity, its capacity paired with ``tuned``'s seed by seed, and the share of the gap from
``tuned`` to the bound it closes, (mpc − tuned) / (bound − tuned) on the means. A router scenario with no
trained policy in its results (``cluster-azure-conv-pd``) still gets its row: its
rules and bound, "—" for the agent's columns. Named baselines that played every seed's
search alike (the same ``trajectory`` fingerprint, ``llmsched_env.evaluation.identity``; never a mere tie on
capacity) are one candidate, labelled with the others, e.g. `fcfs` (= `lpm`, `vtc`). Prints a Markdown table,
writes it to ``OUT.md`` and a bar chart of the capacities (with their intervals) to ``OUT.png``. Reads files
only; runs nothing.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from llmsched_env.common.checks import check_label
from llmsched_env.common.outputs import replaced_atomically, write_text_atomically
from llmsched_env.decision.planners.lookahead import is_bound
from llmsched_env.decision.planners.mpc import MPC
from llmsched_env.evaluation.capacity import gap_share, read_per_seed, read_window_limited
from llmsched_env.evaluation.identity import TRAJECTORY, identical_groups, read_trajectories
from llmsched_env.evaluation.stats import mean_ci95
from llmsched_env.workloads.fitted import FITTED_SUFFIX

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
    files = sorted(results.glob("*-capacity*/results.csv"))
    try:
        caps_of = read_per_seed(files)
        limited_of = read_window_limited(files)
    except ValueError as exc:
        raise SystemExit(str(exc)) from None
    runs_of = read_trajectories(files)
    out: list[dict[str, object]] = []
    for scenario, all_caps in sorted(caps_of.items()):
        caps = {p: c for p, c in all_caps.items() if (p == agent or p not in LEARNED) and not is_bound(p)}
        planners = [p for p in caps if is_planner(p)]
        bounds = {p: c for p, c in all_caps.items() if is_bound(p)}  # lookahead: a reference, never a rival
        judged = agent in caps
        # in the router table (the per-scenario agent judged), a router scenario with no trained policy at all
        # still shows its rules and bound ("—" for the agent)
        untrained = agent == AGENT and scenario.startswith("cluster-") and not any(p in LEARNED for p in all_caps)
        if not (judged or untrained) or len(caps) < (2 if judged else 1):
            continue
        seeds = sorted(caps[agent] if judged else next(iter(caps.values())))
        for policy, by_seed in caps.items():
            if sorted(by_seed) != seeds:
                raise SystemExit(f"{results}: {scenario}: {policy} has seeds {sorted(by_seed)}, the agent {seeds}")
        mean = {p: float(np.mean([c[s] for s in seeds])) for p, c in caps.items()}
        same_as = _identical([p for p in caps if p not in (agent, TUNED)], runs_of.get(scenario, {}), seeds)
        merged = {p for others in same_as.values() for p in others}
        named = {p: m for p, m in mean.items() if p not in (agent, TUNED) and p not in merged and not is_planner(p)}
        best_named = max(named, key=named.__getitem__) if named else None
        rival = max((p for p in mean if p != agent and p not in merged), key=mean.__getitem__)
        mine = [caps[agent][s] for s in seeds] if judged else []
        other = [caps[rival][s] for s in seeds] if judged else []
        named_caps = [caps[best_named][s] for s in seeds] if best_named and judged else []
        bound = max(bounds, key=lambda b: np.mean(list(bounds[b].values()))) if bounds else None
        if bound is not None and sorted(bounds[bound]) != seeds:
            raise SystemExit(f"{results}: {scenario}: {bound} has seeds {sorted(bounds[bound])}, the agent {seeds}")
        bound_mean = float(np.mean([bounds[bound][s] for s in seeds])) if bound is not None else None
        limited = {p: sorted(v) for p, v in limited_of.get(scenario, {}).items() if v}
        planner = max(planners, key=mean.__getitem__) if planners else None
        tuned_caps = [caps[TUNED][s] for s in seeds] if TUNED in caps else []
        planner_gap = None
        if planner is not None and not limited.keys() & {planner, TUNED, bound}:  # a lower bound among them: none
            planner_gap = gap_share(mean[planner], mean.get(TUNED), bound_mean)
        out.append({
            "scenario": scenario, "seeds": seeds, "caps": caps, "best_named": best_named, "rival": rival,
            "same_as": same_as,
            "limited": limited,
            "bound": bound, "bound_caps": [bounds[bound][s] for s in seeds] if bound is not None else [],
            "gap_closed": {p: gap_share(mean[p], mean[best_named] if best_named else None, bound_mean)
                           for p in (TUNED, agent)
                           if p in mean and not limited.keys() & {p, best_named, bound}},  # a lower bound: none
            "agent": agent,
            "planner": planner,
            "planner_vs_tuned": [caps[planner][s] / t if t > 0 else float("inf") for s, t in zip(seeds, tuned_caps,
                                 strict=True)] if planner is not None and tuned_caps else [],
            "planner_gap": planner_gap,
            "ratio": None if not judged else mean[agent] / mean[rival] if mean[rival] > 0 else float("inf"),
            "paired_ratio": [a / b if b > 0 else float("inf") for a, b in zip(mine, other, strict=True)],
            "paired_diff": [a - b for a, b in zip(mine, other, strict=True)],
            "paired_named": [a / b if b > 0 else float("inf") for a, b in zip(mine, named_caps, strict=True)],
        })  # fmt: skip
    return out


def is_planner(policy: str) -> bool:
    """Whether a results row's ``policy`` is the ``mpc`` planner (any of its spellings): deployable, so it may be
    the rival, but no named baseline."""
    return policy == MPC or policy.startswith(MPC + ":")


def _identical(named: list[str], runs: dict[str, dict[int, str]], seeds: list[int]) -> dict[str, list[str]]:
    """The named baselines in groups of identical ones (``identity``: every seed's search with the same
    fingerprint; a policy without one at some seed stays alone): the first of each group -> the others."""
    rows = [{"policy": p, "scenario": "", "seed": s, TRAJECTORY: runs.get(p, {}).get(s)} for p in named for s in seeds]
    return {group[0]: group[1:] for group in identical_groups(rows, fallback=False).get("", [])}


def _label(policy: str, same_as: dict[str, list[str]]) -> str:
    """``policy`` in backticks, followed by the policies identical to it: `` `fcfs` (= `lpm`, `vtc`)``."""
    others = same_as.get(policy, [])
    return f"`{policy}`" + (" (= " + ", ".join(f"`{p}`" for p in others) + ")" if others else "")


def markdown(rows: list[dict[str, object]], learned: str = "agent", rival_word: str = "best baseline") -> str:
    head = (f"| scenario | {learned} | `tuned` | best named (capacity) | {learned} / best named, paired | "
            f"{rival_word} | ratio of means | paired ratio | paired difference |")  # fmt: skip
    lines = [head, "|---|---|---|---|---|---|---|---|---|"]
    with_bound = any(r.get("bound") for r in rows)
    if with_bound:
        lines[0] += f" bound (capacity) | `tuned`: gap closed | {learned}: gap closed |"
        lines[1] += "---|---|---|"
    with_planner = any(r.get("planner") for r in rows)
    if with_planner:
        lines[0] += " mpc (capacity) | mpc / `tuned`, paired | mpc: share of `tuned` → bound |"
        lines[1] += "---|---|---|"
    for r in rows:
        caps: dict[str, dict[int, float]] = r["caps"]  # type: ignore[assignment]
        seeds: list[int] = r["seeds"]  # type: ignore[assignment]

        limited: dict[str, list[int]] = r.get("limited", {})  # type: ignore[assignment]

        def cell(
            policy: str | None,
            caps: dict[str, dict[int, float]] = caps,
            seeds: list[int] = seeds,
            limited: dict[str, list[int]] = limited,
        ) -> str:
            if policy not in caps:
                return "—"
            at_least = "≥ " if limited.get(policy) else ""  # some seed's search stopped at the sustained cap
            return at_least + _fmt([caps[policy][s] for s in seeds])

        named = r["best_named"]
        same_as: dict[str, list[str]] = r.get("same_as", {})  # type: ignore[assignment]
        named_cell = f"{_label(named, same_as)} {cell(named)}" if named else "—"  # type: ignore[arg-type]
        versus_named = f"{_fmt(r['paired_named'], 3)}×" if r["paired_named"] else "—"  # type: ignore[arg-type]
        ratios = "— | — | — |"  # no agent judged here (a router scenario with no trained router)
        if r["ratio"] is not None:
            ratios = f"{r['ratio']:.3f}× | {_fmt(r['paired_ratio'], 3)}× | {_fmt(r['paired_diff'])} |"  # type: ignore[arg-type]
        lines.append(
            f"| `{r['scenario']}` | {cell(str(r['agent']))} | {cell(TUNED)} | {named_cell} | {versus_named} | "
            f"{_label(str(r['rival']), same_as)} | {ratios}"
        )
        if with_bound:
            gaps: dict[str, float | None] = r.get("gap_closed", {})  # type: ignore[assignment]

            def share(policy: str, gaps: dict[str, float | None] = gaps) -> str:
                g = gaps.get(policy)
                return "—" if g is None else f"{100 * g:.0f}%"

            bound_cell = "—"
            if r.get("bound"):
                bound_cell = ("≥ " if limited.get(str(r["bound"])) else "") + _fmt(r["bound_caps"])  # type: ignore[arg-type]
            lines[-1] += f" {bound_cell} | {share(TUNED)} | {share(str(r['agent']))} |"
        if with_planner:
            planner = r.get("planner")
            gap: float | None = r.get("planner_gap")  # type: ignore[assignment]
            ratio: list[float] = r.get("planner_vs_tuned") or []  # type: ignore[assignment]
            if planner:
                lines[-1] += (
                    f" `{planner}` {cell(str(planner))} | {_fmt(ratio, 3) + '×' if ratio else '—'} |"
                    f" {'—' if gap is None else f'{100 * gap:.0f}%'} |"
                )
            else:
                lines[-1] += " — | — | — |"
    if any(r.get("limited") for r in rows):
        lines += [
            "",
            "≥: at some seed the search reached the largest load at which that seed's window is sustained "
            "and still met the target there (window-limited), so the mean is a lower bound; ratios and "
            "differences with such a cell bound the true ones from one side only.",
        ]
    if any(str(r["scenario"]).endswith(FITTED_SUFFIX) for r in rows):
        lines += [
            "",
            f"`*{FITTED_SUFFIX}`: generated traffic, fitted to the trace's test part (per-tenant Gamma arrivals at its "
            'rate and burstiness, its rows drawn in rounds: docs/workloads.md, "Traffic fitted to a trace"), on '
            "windows as long as each load needs; not a replay of the trace.",
        ]
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
    with replaced_atomically(path) as tmp:  # a kill or a full disk mid-write leaves the old plot whole
        fig.savefig(tmp, dpi=110, format="png")
    plt.close(fig)


def policy_name(text: str) -> str:
    """The ``--agent`` type: a policy name that can label a Markdown table's row (``check_label``)."""
    try:
        check_label("policy name", text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--results", type=Path, default=Path("docs/results/test"), help="the evaluate outputs")
    p.add_argument("--out", type=Path, default=None, help="OUT.md and OUT.png (default: RESULTS/headline)")
    p.add_argument(
        "--agent",
        type=policy_name,
        default=AGENT,
        help="the policy judged: agent (per scenario) or learned (generalist)",
    )
    args = p.parse_args(argv)
    out = args.out or args.results / "headline"
    rows = collect(args.results, args.agent)
    single = [r for r in rows if not str(r["scenario"]).startswith("cluster-")]
    routers = [r for r in rows if str(r["scenario"]).startswith("cluster-")]
    parts = [markdown(single, args.agent)] if single or not routers else []
    if routers:
        parts.append("Routers (LLMSchedCluster-v0):\n\n" + markdown(routers, "learned router", "best router"))
    text = "\n\n".join(parts)
    print(text)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomically(out.with_suffix(".md"), text + "\n")
    if single:
        plot(single, out.with_suffix(".png"), args.agent)
    print(f"wrote {out.with_suffix('.md')}" + (f" and {out.with_suffix('.png')}" if single else ""))


if __name__ == "__main__":
    main()
