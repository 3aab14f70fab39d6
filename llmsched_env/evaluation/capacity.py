"""Capacity: the highest load at which a policy's SLO attainment stays >= 90% (DistServe), found by search
(``search_capacity``, ``find_capacity``, ``capacity_grid``) and read back from per-seed files (docs/evaluation.md).

A search reports only loads at which its windows are sustained (``evaluation.sustained``); where the windows
cannot grow, a policy still meeting the target is ``window_limited`` (a capacity of at least that load).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from llmsched_env.cluster.scenarios import ClusterScenario
from llmsched_env.common.checks import shown
from llmsched_env.decision.planners.lookahead import is_bound
from llmsched_env.decision.policy_spec import PolicySpec, resolve_policy
from llmsched_env.envs.options import MAX_EPISODE_REQUESTS
from llmsched_env.evaluation.config import AnyScenario, EvalConfig, Row, traffic_label
from llmsched_env.evaluation.decided import ProbeCell, attainment_bounds
from llmsched_env.evaluation.distributed import ray_imap, use_driver_folder
from llmsched_env.evaluation.fallbacks import FALLBACK_SHARE, fallback_summary
from llmsched_env.evaluation.grid import ForeignRunError, check_grid_arguments, run_cell, runners_for, shown_value
from llmsched_env.evaluation.identity import TRAJECTORY, combine_fingerprints, merge_identical, per_seed_values
from llmsched_env.evaluation.progress import Progress
from llmsched_env.evaluation.stats import group_traffic, mean_ci95
from llmsched_env.evaluation.sustained import ScenarioWindows, env_windows, scenario_windows
from llmsched_env.workloads.scenarios import TraceSource

__all__ = ["AT_CAPACITY", "CAPACITY_TARGET", "EXTEND_FACTOR", "capacity_grid", "capacity_notes", "extended_size",
           "find_capacity", "gap_share", "read_per_seed", "read_window_limited", "search_capacity", "search_fallbacks",
           "search_key", "summarize_capacity", "sustained_size", "verdict_notes"]  # fmt: skip

CAPACITY_TARGET = 0.9  # the attainment a capacity is measured at (DistServe)
_MAX_LOAD, _TOLERANCE = 64.0, 1.02  # bracket within [1/64, 64] x nominal; bisect to 2%


def _bisections(lo: float, hi: float) -> int:
    """Bisection steps from the bracket [lo, hi] down to the tolerance (0 without a bracket)."""
    if lo <= 0 or hi <= 0:
        return 0
    ratio, steps = hi / lo, 0
    while ratio > _TOLERANCE:
        ratio, steps = math.sqrt(ratio), steps + 1
    return steps


_FIRST_GUESS = 1 + 1 + _bisections(1.0, 2.0)  # evaluations of a typical search: load 1, one bracket step, bisect


def search_capacity(
    attainment: Callable[[float], float],
    target: float = CAPACITY_TARGET,
    on_evaluation: Callable[[int], None] | None = None,
    max_load: float = _MAX_LOAD,
) -> float:
    """The highest load with ``attainment(load) >= target`` (bracket from 1.0 within [1/64, 64] and ``max_load``, then
    bisect to 2%); 0.0 when even 1/64 misses. ``on_evaluation(remaining)``: the evaluations still expected."""
    top = min(_MAX_LOAD, float(max_load))
    lo, hi = 0.0, 0.0
    load = min(1.0, top)

    def bracketing() -> bool:  # still doubling (or halving) towards the other end of the bracket
        return (hi == 0.0 and load < top) or (lo == 0.0 and load > 1 / _MAX_LOAD)

    def evaluate(at: float) -> None:
        nonlocal lo, hi
        if attainment(at) >= target:
            lo = at
        else:
            hi = at
        if on_evaluation is not None:
            on_evaluation(1 + _bisections(1.0, 2.0) if bracketing() else _bisections(lo, hi))

    evaluate(load)
    factor = 2.0 if lo else 0.5  # met at 1.0: double until it misses; missed: halve until it meets
    while bracketing():
        load = min(load * factor, top)
        evaluate(load)
    hi = hi or load  # met up to the top of the range: the bracket ends there
    while lo > 0 and hi / lo > _TOLERANCE:
        evaluate((lo * hi) ** 0.5)
    return lo


def find_capacity(
    config: EvalConfig,
    scenario: AnyScenario,
    policy: PolicySpec | str,
    target: float = CAPACITY_TARGET,
    on_evaluation: Callable[[int], None] | None = None,
    seed: int | None = None,
    sustained_only: bool = True,
    decide_early: bool = True,
    latency: bool = True,
) -> Row:
    """``policy``'s capacity row on ``scenario`` (mean attainment over ``config.seeds``, or ``seed``'s window alone),
    up to ``max_sustained_load``; ``sustained_only=False`` searches past it (``llmsched-tune``'s, never a figure).
    With ``decide_early`` each probe of a simulated search stops once its verdict is certain (``evaluation.decided``;
    the same capacity); with ``latency`` the capacity load is then played whole for the row's ``at_capacity_*``
    columns (each the mean over the seeds)."""
    spec = policy if isinstance(policy, PolicySpec) else resolve_policy(policy)
    runners = runners_for(config)
    seeds = None if seed is None else (seed,)
    judged = config.seeds if seed is None else (seed,)
    env = config.make_env(scenario, 1.0)
    u: Any = env.unwrapped
    nominal = u.cluster_rate_rps if isinstance(scenario, ClusterScenario) else u.nominal_rate_rps
    windows = env_windows(env, scenario.name)
    env.close()
    cap = windows.max_load(judged)
    played: list[tuple[float, list[str]]] = []
    episodes: list[Row] = []  # every run of the search (the runtime's carry their decisions' fallbacks)
    met: dict[float, float] = {}  # load -> attainment, on the windows of the config's size

    early = decide_early and config.runtime is None  # the runtime's runs play whole (its fallbacks are counted)

    passed: list[ProbeCell] = []  # the last probe that met the target, its runs kept to play whole (latency)

    def attainment(load: float, sized: EvalConfig = config) -> float:
        cell = None
        if early:
            cell = ProbeCell(sized, scenario, load, spec, judged)
            try:
                rows = cell.decide(target)
            except BaseException:
                cell.close()
                raise
        else:
            rows = run_cell(sized, scenario, load, spec, runners=runners, seeds=seeds).rows
        played.append((load, [r[TRAJECTORY] for r in rows]))
        episodes.extend(rows)
        bounds = [attainment_bounds(r) for r in rows]
        low = float(np.mean([b[0] for b in bounds]))  # the same mean, of the bounds (monotone: the same verdict)
        value = low if low >= target else float(np.mean([b[1] for b in bounds]))
        if cell is not None and value >= target and latency:  # the new last probe that met the target
            for old in passed:
                old.close()
            passed[:] = [cell]
        elif cell is not None:
            cell.close()
        return value

    def on_windows(load: float) -> float:
        met[load] = attainment(load)
        return met[load]

    try:
        lo = search_capacity(on_windows, target, on_evaluation, max_load=cap if sustained_only else _MAX_LOAD)
        size = windows.num_requests
        longest = extended_size(config, scenario, windows) if sustained_only else None
        if longest is not None and cap < _MAX_LOAD and lo >= cap:
            # met where the windows stop being sustained: above there each load plays windows long enough for it
            top = min(_MAX_LOAD, replace(windows, num_requests=longest).max_load(judged))
            sizes = {cap: size}  # load -> the episode size it played

            def on_longer(x: float) -> float:
                load = cap * x
                if x == 1.0 and load in met:
                    return met[load]
                sizes[load] = sustained_size(windows, load, judged, longest)
                # a replay beside it keeps its own size
                sized = replace(config, scenarios=(scenario,), num_requests=sizes[load])
                return attainment(load, sized)

            lo = cap * search_capacity(on_longer, target, on_evaluation, max_load=top / cap)
            cap = top
            size = sizes[lo]
        row: Row = {"policy": spec.name, "scenario": scenario.name, **traffic_label(scenario)}
        if seed is not None:
            row["seed"] = seed
        limited = sustained_only and cap < _MAX_LOAD and lo >= cap
        row.update(capacity_load=lo, capacity_rps=lo * nominal, max_sustained_load=cap, window_limited=limited)
        row["window_requests"] = size
        if latency and lo > 0:  # the capacity load played whole: the probe's runs played on, or again
            kept = passed[0] if passed and passed[0].load == lo else None
            at = replace(config, scenarios=(scenario,), num_requests=size) if size != windows.num_requests else config
            whole = (
                kept.finish()
                if kept is not None
                else run_cell(at, scenario, lo, spec, runners=runners, seeds=seeds).rows
            )
            played.append((lo, [r[TRAJECTORY] for r in whole]))
            episodes.extend(whole)
            row.update({f"at_capacity_{name}": float(np.mean([r[name] for r in whole])) for name in AT_CAPACITY})
        return {**row, **search_fallbacks(episodes), TRAJECTORY: combine_fingerprints(played)}
    finally:
        for cell in passed:
            cell.close()


# the metrics of the capacity load's whole runs a capacity row carries (``at_capacity_*``)
AT_CAPACITY = ("slo_attainment", "goodput_rps", "ttft_p90_s", "ttft_p99_s", "tpot_p90_s", "tpot_p99_s")


def search_fallbacks(runs: Sequence[Row]) -> Row:
    """``{FALLBACK_SHARE: share}`` over all decisions of a search's ``runs``; ``{}`` where they count none."""
    if not runs or any(FALLBACK_SHARE not in r for r in runs):
        return {}
    decisions = sum(float(r["policy_decisions"]) for r in runs)
    fallbacks = sum(float(r["policy_fallbacks"]) for r in runs)
    return {FALLBACK_SHARE: fallbacks / decisions if decisions else 0.0}


EXTEND_FACTOR = 64  # the longest window a capacity search grows to, in multiples of the scenario's own size


def extended_size(config: EvalConfig, scenario: AnyScenario, windows: ScenarioWindows) -> int | None:
    """The longest a search may grow ``scenario``'s windows to; None where it keeps them (a trace, a user's size)."""
    if not _generated(windows) or (config.num_requests is not None and not traffic_label(scenario)):
        return None
    return min(MAX_EPISODE_REQUESTS, EXTEND_FACTOR * windows.num_requests)


def _generated(windows: ScenarioWindows) -> bool:
    """Whether ``windows`` are generated traffic (any size a search asks for), not a trace's."""
    return not isinstance(windows.source, TraceSource)


def sustained_size(windows: ScenarioWindows, load: float, seeds: Sequence[int], longest: int) -> int:
    """The smallest episode size (within 2%, at most ``longest``) whose windows are all sustained at ``load``."""

    def reach(n: int) -> float:
        return replace(windows, num_requests=n).max_load(seeds)

    short, n = 0, windows.num_requests
    while True:
        at = reach(n)
        if at >= load:
            break
        if n >= longest:
            return longest
        short, n = n, min(longest, max(n + 1, math.ceil(n * load / max(at, 1e-12))))
    while n - short > max(1, n // 50):
        mid = (short + n) // 2
        short, n = (short, mid) if reach(mid) >= load else (mid, n)
    return n


def capacity_notes(config: EvalConfig, per_seed: bool = False) -> list[str]:
    """One line per scenario whose windows stop being sustained within the search's range, and how searches go on."""
    lines = []
    for scenario in config.scenarios:
        windows = scenario_windows(config, scenario)
        caps = [windows.max_load((s,)) for s in config.seeds]
        if min(caps) >= _MAX_LOAD:
            continue
        low, high = min(caps), max(caps)
        where = f"up to load {low:.3g}" if not per_seed or high / low < 1.0005 else f"up to load {low:.3g}-{high:.3g}"
        head = (
            f"capacity on scenario {scenario.name!r}: its {config.split} windows of {windows.num_requests} requests "
            f"are sustained {where} (evaluation.sustained); "
        )
        longest = extended_size(config, scenario, windows)
        if longest is None:
            lines.append(head + "a policy meeting the target there is reported as >= that load (window_limited)")
            continue
        lines.append(
            head + "above that each load of the search plays windows long enough to be sustained there (up to "
            f"{longest} requests; the capacity row's window_requests and max_sustained_load)"
        )
    return lines


def verdict_notes(config: EvalConfig, rows: Sequence[Row]) -> list[str]:
    """One line per scenario where some capacity of ``rows`` is only a lower bound, and the options that decide."""
    lines = []
    for scenario in config.scenarios:
        mine = [r for r in rows if r.get("scenario") == scenario.name]
        limited = [r for r in mine if r.get("window_limited")]
        if not limited:
            continue
        windows = scenario_windows(config, scenario)
        cap = min(float(r["max_sustained_load"]) for r in limited)
        n, seeds = windows.num_requests, config.seeds
        double = math.ceil(2 * n * cap / max(windows.max_load(seeds), 1e-12))  # spans grow about with the requests
        head = (
            f"capacity on scenario {scenario.name!r}: {len(limited)} of {len(mine)} searches end at a lower bound "
            f"(>= {cap:.3g}, where its {config.split} windows of {n} requests stop being sustained); for a verdict: "
        )
        source = windows.source
        if isinstance(source, TraceSource) and config.split != "train":
            held = len(source.trace)
            whole = replace(windows, num_requests=held).max_load((0,))
            count = max(seeds) + 1
            lines.append(
                head + f"--seeds 0 --num-requests {held} (one window of the whole part) is sustained up to load "
                f"{whole:.3g}; {count} windows sustained up to about {2 * cap:.3g} need about {double} requests "
                f"each, a {config.split} part of about {double * count} requests (a longer trace); or "
                "--fitted-traffic (generated traffic fitted to the trace, as long as each load needs, labelled)"
            )
        elif config.num_requests is not None and _generated(windows):
            lines.append(head + "leave out --num-requests (the search then grows the windows with the load)")
        else:
            lines.append(head + f"about --num-requests {double} is sustained up to about load {2 * cap:.3g}")
    return lines


def summarize_capacity(rows: Sequence[Row], merge: bool = True) -> list[Row]:
    """Per (scenario, policy) of per-seed capacity rows: mean and 95% half-width, the paired columns against ``tuned``;
    with ``merge``, policies whose searches played alike are one row (``same_as``)."""
    groups: dict[tuple[str, str], list[Row]] = {}
    for r in rows:
        groups.setdefault((r["scenario"], r["policy"]), []).append(r)
    out = []
    for (scenario, policy), group in groups.items():
        agg: Row = {"policy": policy, "scenario": scenario, **group_traffic(group), "num_seeds": len(group)}
        for key in ("capacity_load", "capacity_rps"):
            agg[f"{key}_mean"], agg[f"{key}_ci95"] = mean_ci95([float(r[key]) for r in group])
        agg["num_window_limited"] = sum(bool(r.get("window_limited", False)) for r in group)
        for name in AT_CAPACITY:  # the capacity loads' whole runs, where every search played one
            key = f"at_capacity_{name}"
            if all(key in r for r in group):
                agg[f"{key}_mean"] = float(np.mean([float(r[key]) for r in group]))
        agg.update(fallback_summary(group))  # the runtime's: the share of the searches' decisions that fell back
        out.append(agg)
    out = merge_identical(out, rows, fallback=False) if merge else out
    _against_tuned(out, groups)
    return out


def _against_tuned(summary: list[Row], groups: dict[tuple[str, str], list[Row]]) -> None:
    """Each policy's paired ``ratio_to_tuned_mean`` / ``_ci95`` and, with a bound above ``tuned``, ``gap_closed``."""
    by_scenario: dict[str, dict[str, Row]] = {}
    for a in summary:
        by_scenario.setdefault(a["scenario"], {})[a["policy"]] = a
    for scenario, aggs in by_scenario.items():
        tuned = groups.get((scenario, "tuned"))
        if tuned is None:
            continue
        tuned_at = {r.get("seed"): float(r["capacity_load"]) for r in tuned}
        bounds = [a for p, a in aggs.items() if is_bound(p)]
        bound = max((float(a["capacity_load_mean"]) for a in bounds), default=None)
        base = float(aggs["tuned"]["capacity_load_mean"]) if "tuned" in aggs else None
        for policy, a in aggs.items():
            if policy == "tuned":
                continue
            mine = {r.get("seed"): float(r["capacity_load"]) for r in groups.get((scenario, policy), [])}
            ratios = [mine[s] / tuned_at[s] for s in mine if s in tuned_at and tuned_at[s] > 0]
            if ratios:
                a["ratio_to_tuned_mean"], a["ratio_to_tuned_ci95"] = mean_ci95(ratios)
            gap = gap_share(float(a["capacity_load_mean"]), base, bound)
            if gap is not None:
                a["gap_closed"] = gap


def gap_share(value: float, base: float | None, bound: float | None) -> float | None:
    """(value - base) / (bound - base); None when either is missing or the bound is not above the base."""
    if base is None or bound is None or bound <= base:
        return None
    return (value - base) / (bound - base)


def search_key(row: Row) -> tuple[str, str, int | None]:
    """A capacity search's place in ``capacity_grid``: (scenario, policy, seed), seed None without ``per_seed``."""
    return (row["scenario"], row["policy"], row.get("seed"))


def capacity_grid(
    config: EvalConfig,
    *,
    target: float = CAPACITY_TARGET,
    ray: str | None = None,
    ray_cpus: int | None = None,
    on_row: Callable[[Row], None] | None = None,
    progress: Progress | None = None,
    per_seed: bool = False,
    finished: Sequence[Row] = (),
) -> list[Row]:
    """``find_capacity`` of every (scenario, policy) in order (``per_seed``: each seed's window alone), serially or on
    Ray; ``finished`` rows are kept, not searched again (``ValueError`` for a stray one). An argument of the wrong
    type or value: ``TypeError`` or ``ValueError`` naming it (``check_grid_arguments``; ``target`` in (0, 1])."""
    flags = {"per_seed": per_seed}
    check_grid_arguments("capacity_grid", config, ray, ray_cpus, progress, finished, {"on_row": on_row}, flags)
    if isinstance(target, bool) or not isinstance(target, (int, float)) or not 0 < target <= 1:
        raise ValueError(f"capacity_grid: target must be a number in (0, 1] (an SLO attainment), got {shown(target)}")
    for i, row in enumerate(finished):
        if not isinstance(row, Mapping) or {"scenario", "policy"} - set(row):
            raise TypeError(f"capacity_grid: finished[{i}] must be a row (a dict) with scenario and policy, got "
                            f"{shown(row)}")  # fmt: skip
    seeds: Sequence[int | None] = config.seeds if per_seed else (None,)
    cells = [(si, pi, seed) for si in range(len(config.scenarios)) for pi in range(len(config.policies))
             for seed in seeds]  # fmt: skip
    keys = [(config.scenarios[si].name, config.policies[pi].name, seed) for si, pi, seed in cells]
    done = {search_key(row): row for row in finished}
    if len(done) < len(finished):  # a search ends in one line
        twice = next(key for key in done if sum(search_key(row) == key for row in finished) > 1)
        raise ForeignRunError(f"a second line for the capacity search ({', '.join(map(shown_value, twice))})")
    stray = [key for key in done if key not in keys]
    if stray:
        scenario, policy, seed = stray[0]
        which = f"policy {shown_value(policy)}, scenario {shown_value(scenario)}"
        which += "" if seed is None else f", seed {shown_value(seed)}"
        raise ForeignRunError(f"finished capacity search ({which}) is not a search of this evaluation")
    rows: list[Row | None] = [done.get(key) for key in keys]
    todo = [index for index, row in enumerate(rows) if row is None]
    results: Iterator[tuple[int, Row]]
    if ray:
        if progress is not None:
            progress.set_total(len(todo))
        jobs = [(config, os.getcwd(), *cells[index][:2], target, cells[index][2]) for index in todo]
        results = ((todo[i], row) for i, row in ray_imap(_capacity_task, jobs, address=ray, num_cpus=ray_cpus))
    else:
        results = _searches(config, [(index, cells[index]) for index in todo], target, progress)
    for index, row in results:
        rows[index] = row
        if on_row is not None:
            on_row(row)
        if ray and progress is not None:
            progress.update()
    return [row for row in rows if row is not None]


def _searches(
    config: EvalConfig,
    cells: list[tuple[int, tuple[int, int, int | None]]],
    target: float,
    progress: Progress | None,
) -> Iterator[tuple[int, Row]]:
    """Each (index, (scenario, policy, seed)) search in turn, with ``progress`` per evaluation."""
    expected = [_FIRST_GUESS] * len(cells)
    if progress is not None:
        progress.set_total(sum(expected))
    for k, (index, (si, pi, seed)) in enumerate(cells):
        done = 0

        def evaluated(remaining: int, k: int = k) -> None:
            nonlocal done
            done += 1
            expected[k] = done + remaining
            if progress is not None:
                progress.set_total(sum(expected))
                progress.update()

        scenario, policy = config.scenarios[si], config.policies[pi]
        yield index, find_capacity(config, scenario, policy, target, evaluated, seed)


def _capacity_task(config: EvalConfig, cwd: str, si: int, pi: int, target: float, seed: int | None) -> Row:
    """One (scenario, policy[, seed]) search on a Ray worker."""
    use_driver_folder(cwd)
    return find_capacity(config, config.scenarios[si], config.policies[pi], target, seed=seed)


def read_per_seed(files: Iterable[str | Path]) -> dict[str, dict[str, dict[int, float]]]:
    """Scenario -> policy -> seed -> ``capacity_load`` from ``--capacity --per-seed`` results files."""
    return per_seed_values(files, "capacity_load", float)


def read_window_limited(files: Iterable[str | Path]) -> dict[str, dict[str, set[int]]]:
    """Scenario -> policy -> the seeds whose capacity in the same files is only a lower bound (``window_limited``)."""
    flags = per_seed_values(files, "window_limited", lambda v: v.strip().lower() in ("true", "1"), required=False)
    return {s: {p: {k for k, v in seeds.items() if v} for p, seeds in ps.items()} for s, ps in flags.items()}
