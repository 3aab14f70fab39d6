"""The headline tables and plot, from per-seed capacity searches that ``llmsched-evaluate`` wrote.

    python bench/headline.py --results docs/results/sustained --agent learned \
        --out docs/results/sustained/generalist --readme README.md

Reads every ``S-capacity*/results.csv`` under RESULTS (``llmsched-evaluate --capacity --per-seed``; packed runs,
``bench/results_archive.py``, as if extracted; a later folder's rows replace an earlier one's) and writes:

- ``OUT.md``, the full table: per scenario the judged policy's capacity (``--agent``), `tuned`'s and the best
  named baseline's (mean ± 95% half-width over the seeds, Student t), the agent paired with the best named
  one and with the rival (the best other policy), then, where searched, the ``lookahead`` reference (clairvoyant,
  never a rival) with the share of the gap from the best named to it that `tuned` and the agent close, and
  ``mpc`` (the best of its spellings; deployable, may be the rival, never a named baseline) with its ratio to
  `tuned` and its share of the gap from `tuned` to the reference. Router scenarios follow in a table of their
  own (one with no trained router still shows its rules). Named baselines that played every search alike (the
  same ``trajectory`` fingerprint) are one candidate: `fcfs` (= `lpm`, `vtc`). ``≥``: window-limited.
- ``OUT.png``, the capacities as bars with their intervals;
- with ``--readme``, the README's headline between its ``<!-- headline -->`` markers: at most 8 columns, every
  ratio paired with `tuned` (``compact``), and its summary in words.

Reads files only; runs nothing.
"""

from __future__ import annotations

import argparse
import sys
import textwrap
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

sys.path.insert(0, str(Path(__file__).resolve().parent))  # its sibling, also when a test loads this file
from results_archive import unpacked

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
    counted as baselines. Packed runs (``bench/results_archive.py``) are read as if extracted."""
    with unpacked(results) as root:
        files = sorted(root.glob("*-capacity*/results.csv"))
        try:
            caps_of = read_per_seed(files)
            limited_of = read_window_limited(files)
        except ValueError as exc:
            raise SystemExit(str(exc).replace(str(root), str(results))) from None
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


WORDS = ("none", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve")
README_START, README_END = "<!-- headline -->", "<!-- /headline -->"
ABOVE_CLAIRVOYANT = (
    "†: a deployable policy's mean is above the clairvoyant `lookahead` here: it searches a limited set of switches "
    "on copies of the simulator, a reference to measure against, not the best any policy could do."
)
LIMITED_NOTE = "≥: window-limited at some seed, a lower bound (the full table says more)."


def _word(n: int) -> str:
    return WORDS[n] if n < len(WORDS) else str(n)


def _paired(top: dict[int, float], base: dict[int, float], seeds: list[int]) -> tuple[float, float]:
    """The paired ratio top / base over ``seeds`` as (mean, 95% half-width), rounded as the table prints it."""
    mean, half = mean_ci95([top[s] / base[s] if base[s] > 0 else float("inf") for s in seeds])
    return round(mean, 3), round(half, 3)


def _ratio(pair: tuple[float, float] | None) -> str:
    return "—" if pair is None else f"{pair[0]:.3f} ± {pair[1]:.3f}×"


def versus(pair: tuple[float, float]) -> str:
    """Where a paired ratio stands against 1: ``level`` (its interval includes 1), ``above`` or ``behind``."""
    mean, half = pair
    return "above" if mean - half > 1 else "behind" if mean + half < 1 else "level"


def compact(rows: list[dict[str, object]], learned: str = "learned") -> tuple[str, str]:
    """The README's headline in one frame: per scenario, `tuned`'s capacity, ``learned``'s and the best named
    rule's, and each of them, ``mpc`` and the clairvoyant ``lookahead`` paired with `tuned` seed by seed; a replay
    whose fitted traffic has a row is left to the full table. Returns the Markdown table and its summary in words,
    both from the data."""
    names = {str(r["scenario"]) for r in rows}
    shown = [r for r in rows if f"{r['scenario']}{FITTED_SUFFIX}" not in names and TUNED in r["caps"]]  # type: ignore[operator]
    head = f"`{learned}` | `{learned}` / `tuned` | best named rule | rule / `tuned` | `mpc` / `tuned`"
    lines = [f"| scenario | `tuned` | {head} | clairvoyant `lookahead` / `tuned` |", "|---" * 8 + "|"]
    stand: dict[str, list[str]] = {"level": [], "above": [], "behind": []}
    planned = {"level": 0, "above": 0, "behind": 0}
    behind, rule_means, over, clairvoyant_means, notes = [], [], [], [], []
    for r in shown:
        caps: dict[str, dict[int, float]] = r["caps"]  # type: ignore[assignment]
        seeds: list[int] = r["seeds"]  # type: ignore[assignment]
        limited: dict[str, list[int]] = r.get("limited", {})  # type: ignore[assignment]
        scenario, named, planner = str(r["scenario"]), r["best_named"], r.get("planner")
        cells = {p: ("≥ " if limited.get(p) else "") + _fmt([caps[p][s] for s in seeds]) for p in caps}
        if any(limited.get(p) for p in (TUNED, learned, named)):
            notes.append(LIMITED_NOTE)
        mine = _paired(caps[learned], caps[TUNED], seeds) if learned in caps else None
        if mine is not None:
            stand[versus(mine)].append(scenario)
            behind += [f"`{scenario}` ({_ratio(mine)})"] if versus(mine) == "behind" else []
        rule = _paired(caps[str(named)], caps[TUNED], seeds) if named else None
        rule_means += [rule[0]] if rule else []
        plan = _paired(caps[str(planner)], caps[TUNED], seeds) if planner else None
        if plan is not None:
            planned[versus(plan)] += 1
        spelling = f" (`{str(planner)[len(MPC) + 1 :]}`)" if planner and planner != MPC else ""
        clairvoyant, beating = None, []
        if r.get("bound"):
            bound = dict(zip(seeds, r["bound_caps"], strict=True))  # type: ignore[call-overload]
            clairvoyant = _paired(bound, caps[TUNED], seeds)
            clairvoyant_means.append((clairvoyant[0], scenario))
            top = float(np.mean(list(bound.values())))
            means = {p: float(np.mean(list(c.values()))) for p, c in caps.items()}
            beating = [p for p in (learned, TUNED, named, planner) if p in caps and means[p] > top]
            if beating:
                over.append(f"`{scenario}` ({', '.join(f'`{p}`' for p in beating)})")
                notes.append(ABOVE_CLAIRVOYANT)
        named_cell = f"{_label(str(named), r.get('same_as', {}))} {cells[str(named)]}" if named else "—"  # type: ignore[arg-type]
        lines.append(
            f"| `{scenario}` | {cells[TUNED]} | {cells.get(learned, '—')} | {_ratio(mine)} | {named_cell} | "
            f"{_ratio(rule)} | {_ratio(plan)}{spelling} | {_ratio(clairvoyant)}{' †' if beating else ''} |"
        )
    for note in dict.fromkeys(notes):
        lines += ["", _wrap(note)]
    words = [f"Of these {_word(len(shown))} scenarios, `{learned}` is level with `tuned` on "
             f"{_word(len(stand['level']))} (the paired interval includes 1)"]  # fmt: skip
    if stand["above"]:
        words.append(f", above it on {', '.join(f'`{s}`' for s in stand['above'])}")
    if behind:
        words.append(f", behind it on {' and '.join(behind)}")
    if rule_means:
        words.append(f"; the best named rule reaches {min(rule_means):.2f}–{max(rule_means):.2f}× `tuned`")
    if sum(planned.values()):
        words.append(f"; `mpc` is level with `tuned` on {_word(planned['level'])}, behind it on "
                     f"{_word(planned['behind'])} and above it on {_word(planned['above'])}")  # fmt: skip
    if clairvoyant_means:
        top_ratio, where = max(clairvoyant_means)
        words.append(f"; the clairvoyant `lookahead` reaches at most {top_ratio:.3f}× `tuned` (`{where}`)")
        if over:
            words.append(f", and a deployable policy's mean passes it on {', '.join(over)}")
    return "\n".join(lines), _wrap("".join(words) + ".")


def _wrap(text: str) -> str:
    return textwrap.fill(text, width=115, break_long_words=False, break_on_hyphens=False)


def write_readme(readme: Path, block: str) -> None:
    """Replace the text between ``README_START`` and ``README_END`` in ``readme`` with ``block``."""
    text = readme.read_text(encoding="utf-8")
    if text.count(README_START) != 1 or text.count(README_END) != 1:
        raise SystemExit(f"{readme}: needs one {README_START} and one {README_END} line")
    head, rest = text.split(README_START + "\n", 1)
    tail = rest.split(README_END, 1)[1]
    write_text_atomically(readme, f"{head}{README_START}\n{block}\n{README_END}{tail}")


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


def full_text(rows: list[dict[str, object]], agent: str = AGENT) -> str:
    """The full table of ``rows`` (the single-node scenarios), then the routers' table: what ``OUT.md`` holds."""
    single = [r for r in rows if not str(r["scenario"]).startswith("cluster-")]
    routers = [r for r in rows if str(r["scenario"]).startswith("cluster-")]
    parts = [markdown(single, agent)] if single or not routers else []
    if routers:
        parts.append("Routers (LLMSchedCluster-v0):\n\n" + markdown(routers, "learned router", "best router"))
    return "\n\n".join(parts)


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
    p.add_argument("--readme", type=Path, default=None, help="also write the compact headline into this README")
    args = p.parse_args(argv)
    out = args.out or args.results / "headline"
    rows = collect(args.results, args.agent)
    single = [r for r in rows if not str(r["scenario"]).startswith("cluster-")]
    text = full_text(rows, args.agent)
    print(text)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomically(out.with_suffix(".md"), text + "\n")
    if single:
        plot(single, out.with_suffix(".png"), args.agent)
    print(f"wrote {out.with_suffix('.md')}" + (f" and {out.with_suffix('.png')}" if single else ""))
    if args.readme:
        table, summary = compact(rows, args.agent)
        write_readme(args.readme, f"{table}\n\n{summary}")
        print(f"wrote the headline of {args.readme}")


if __name__ == "__main__":
    main()
