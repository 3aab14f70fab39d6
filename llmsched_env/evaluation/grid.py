"""Run the grid of an evaluation: every (scenario, load, policy, seed) episode, serially or on Ray.

A row holds the run's key, metrics, ``wall_s``, ``sustained`` and ``trajectory`` (``identity``); rows come in
grid order however they ran; ``finished`` runs (``evaluation.resume``) are not run again.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from llmsched_env.common.checks import shown
from llmsched_env.decision.planners.bounds import lookahead_factory
from llmsched_env.decision.planners.mpc import mpc_factory
from llmsched_env.decision.policy_spec import PolicySpec
from llmsched_env.engine.request import Status, tpot_s
from llmsched_env.envs.episode import DirectEpisode, Episode
from llmsched_env.evaluation.config import AnyScenario, EvalConfig, Row, traffic_label
from llmsched_env.evaluation.distributed import ray_imap, use_driver_folder
from llmsched_env.evaluation.identity import TRAJECTORY, trajectory_fingerprint
from llmsched_env.evaluation.progress import Progress
from llmsched_env.evaluation.sustained import ScenarioWindows, env_windows
from llmsched_env.sim.metrics import token_times
from llmsched_env.sim.simulator import Simulator

if TYPE_CHECKING:  # the runtime backend imports torch: only when it runs
    from llmsched_env.evaluation.runtime_backend import Runners

__all__ = ["KEY_COLUMNS", "FinishedRun", "ForeignRunError", "GridResult", "RunHook", "acting_policy", "cell_row",
           "check_grid_arguments", "episode_details", "run_cell", "run_grid", "run_key", "runners_for", "shown_value",
           "start_episode"]  # fmt: skip

KEY_COLUMNS = ("policy", "scenario", "load", "seed")
RowHook = Callable[[Row], None]
RunHook = Callable[[Row, dict[str, Any] | None], None]  # a run's row and its details (None: none kept)
RunKey = tuple[str, float, str, int]


def run_key(row: Row) -> RunKey:
    """A run's place in the grid: (scenario, load, policy, seed)."""
    return (row["scenario"], row["load"], row["policy"], row["seed"])


class ForeignRunError(ValueError):
    """A finished run (or capacity search) read back for a resume that is not one of the evaluation's: one line."""


def shown_value(value: object, limit: int = 60) -> str:
    """``repr(value)`` for a message, cut to ``limit`` characters (a forged 2 MB name stays one short line)."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


@dataclass(frozen=True)
class FinishedRun:
    """A run that need not run again: its row and, when kept, its ``episode_details`` (for the plots)."""

    row: Row
    details: dict[str, Any] | None = None


@dataclass(frozen=True)
class GridResult:
    """A grid's rows in grid order and, with ``details=True``, each run's ``episode_details`` under the same keys."""

    rows: list[Row]
    details: list[dict[str, Any]] = field(default_factory=list)


def run_cell(
    config: EvalConfig,
    scenario: AnyScenario,
    load: float,
    policy: PolicySpec,
    *,
    details: bool = False,
    runners: Runners | None = None,
    on_row: RowHook | None = None,
    seeds: Sequence[int] | None = None,
    on_run: RunHook | None = None,
) -> GridResult:
    """Every seed (or ``seeds``) of one (scenario, load, policy); ``on_run`` then ``on_row`` see each run as it ends."""
    env = config.make_env(scenario, load, policy.iterations_per_step, policy.schema)
    u: Any = env.unwrapped  # LLMSched-v1's or LLMSchedCluster-v0's
    windows = env_windows(env, scenario.name)
    runners = runners or runners_for(config)
    out = GridResult([])
    seeds = config.seeds if seeds is None else seeds
    for seed in seeds:
        t0 = time.perf_counter()
        sim: Any  # the episode's engine: a Runtime, a Simulator, or None for a cluster
        if config.runtime is not None:
            from llmsched_env.evaluation.runtime_backend import runtime_episode

            assert runners is not None  # runners_for makes them for the runtime backend
            metrics, sim = runtime_episode(config, env, policy, seed, runners)
        else:
            episode = start_episode(config, policy, env, seed)
            while not episode.advance():
                pass
            assert episode.metrics is not None
            metrics = episode.metrics
            sim = getattr(u, "sim", None)  # None for a cluster (no per-request plot details)
        row = cell_row(scenario, load, policy, seed, windows, metrics, time.perf_counter() - t0)
        row[TRAJECTORY] = trajectory_fingerprint(sim if sim is not None else u.cluster)
        out.rows.append(row)
        entry: dict[str, Any] | None = None
        if details and sim is not None:
            first = seed == config.seeds[0] and load == config.loads[0]  # the grid's first run, however many run here
            entry = {**{k: row[k] for k in KEY_COLUMNS}, **episode_details(sim, kv_series=first)}
            out.details.append(entry)
        if on_run is not None:
            on_run(row, entry)
        if on_row is not None:
            on_row(row)
    env.close()
    return out


def start_episode(config: EvalConfig, policy: PolicySpec, env: Any, seed: int) -> Episode | DirectEpisode:
    """``policy``'s episode of ``env`` reset with ``seed``: driven directly on a single node (``DirectEpisode``, the
    same trajectory at a fraction of the cost), by the env's steps on a cluster and for the planners."""
    acting = acting_policy(config, policy, env, seed)
    if config.is_cluster or policy.lookahead is not None or policy.mpc is not None:
        return Episode(env, acting, seed)
    return DirectEpisode(env, acting, seed)


def acting_policy(config: EvalConfig, policy: PolicySpec, env: Any, seed: int) -> Any:
    """What plays ``policy`` in a simulated episode of ``env``: the planners play (lookahead) or fork (mpc) the env's
    own simulator (a factory of the reset env); every other policy acts on observations and masks."""
    if policy.lookahead is not None:
        return lookahead_factory(policy.lookahead, seed, config.tuned_table(), cluster=config.is_cluster)
    if policy.mpc is not None:
        return mpc_factory(policy.mpc, seed, config.tuned_table())
    return policy.make(env, seed)


def cell_row(
    scenario: AnyScenario,
    load: float,
    policy: PolicySpec,
    seed: int,
    windows: ScenarioWindows,
    metrics: Mapping[str, Any],
    wall_s: float,
) -> Row:
    """A run's row: its key, ``metrics``, ``wall_s`` and whether its window is ``sustained`` (a rate, not a burst)."""
    row: Row = {"policy": policy.name, "scenario": scenario.name, **traffic_label(scenario), "load": load}
    row["seed"] = seed
    row.update(metrics)
    row["wall_s"] = wall_s
    row["sustained"] = windows.span(seed, load).sustained  # evaluation.sustained
    return row


def check_grid_arguments(
    owner: str,
    config: object,
    ray: object,
    ray_cpus: object,
    progress: object,
    finished: object,
    hooks: Mapping[str, object],
    flags: Mapping[str, object],
) -> None:
    """``TypeError`` or ``ValueError`` naming the argument of ``owner`` (``run_grid``, ``capacity_grid``) that has the
    wrong type or value: ``config`` an ``EvalConfig``, ``ray`` an address or None, ``ray_cpus`` an integer >= 1 or
    None, ``progress`` a ``Progress`` or None, ``finished`` a list, each of ``hooks`` callable or None, each of
    ``flags`` a bool."""
    if not isinstance(config, EvalConfig):
        raise TypeError(f"{owner}: config must be an EvalConfig, got {shown(config)}")
    if ray is not None and not isinstance(ray, str):
        raise TypeError(f'{owner}: ray must be a Ray address, "local" or None, got {shown(ray)}')
    if ray_cpus is not None and (isinstance(ray_cpus, bool) or not isinstance(ray_cpus, int) or ray_cpus < 1):
        raise ValueError(f"{owner}: ray_cpus must be an integer >= 1 or None, got {shown(ray_cpus)}")
    if progress is not None and not all(callable(getattr(progress, m, None)) for m in ("update", "set_total")):
        raise TypeError(f"{owner}: progress must be a Progress or None, got {shown(progress)}")
    if isinstance(finished, (str, bytes, Mapping)) or not isinstance(finished, Sequence):
        raise TypeError(f"{owner}: finished must be a list, got {shown(finished)}")
    for name, hook in hooks.items():
        if hook is not None and not callable(hook):
            raise TypeError(f"{owner}: {name} must be callable or None, got {shown(hook)}")
    for name, flag in flags.items():
        if not isinstance(flag, bool):
            raise TypeError(f"{owner}: {name} must be True or False, got {shown(flag)}")


def run_grid(
    config: EvalConfig,
    *,
    details: bool = False,
    ray: str | None = None,
    ray_cpus: int | None = None,
    on_row: RowHook | None = None,
    progress: Progress | None = None,
    finished: Sequence[FinishedRun] = (),
    on_run: RunHook | None = None,
) -> GridResult:
    """Every run of ``config``; ``ray``: an address, or "local" for ``ray_cpus`` workers. ``finished`` runs are kept.
    ``ValueError`` for a stray finished run, ``RuntimeError`` without Ray; an argument of the wrong type or value:
    ``TypeError`` or ``ValueError`` naming it (``check_grid_arguments``)."""
    hooks = {"on_row": on_row, "on_run": on_run}
    check_grid_arguments("run_grid", config, ray, ray_cpus, progress, finished, hooks, {"details": details})
    cells = [(si, load, pi) for si in range(len(config.scenarios)) for load in config.loads
             for pi in range(len(config.policies))]  # fmt: skip
    done = _finished(config, finished, details)
    todo = [
        [s for s in config.seeds if (config.scenarios[si].name, load, config.policies[pi].name, s) not in done]
        for si, load, pi in cells
    ]
    made: dict[RunKey, FinishedRun] = {}

    def each_run(row: Row, entry: dict[str, Any] | None) -> None:
        made[run_key(row)] = FinishedRun(row, entry)
        if on_run is not None:
            on_run(row, entry)

    if ray:
        if progress is not None:
            progress.set_total(sum(1 for seeds in todo if seeds))
        jobs = [(config, os.getcwd(), si, load, pi, details, tuple(seeds))
                for (si, load, pi), seeds in zip(cells, todo, strict=True) if seeds]  # fmt: skip
        for _, result in ray_imap(_cell_task, jobs, address=ray, num_cpus=ray_cpus):
            entries = {run_key(d): d for d in result.details}
            for row in result.rows:
                each_run(row, entries.get(run_key(row)))
                if on_row is not None:
                    on_row(row)
            if progress is not None:
                progress.update()
    else:
        if progress is not None:
            progress.set_total(sum(map(len, todo)))
        runners = runners_for(config)

        def each(row: Row) -> None:
            if on_row is not None:
                on_row(row)
            if progress is not None:
                progress.update()

        for (si, load, pi), seeds in zip(cells, todo, strict=True):
            if seeds:
                scenario, policy = config.scenarios[si], config.policies[pi]
                run_cell(config, scenario, load, policy, details=details, runners=runners, on_row=each,
                         seeds=seeds, on_run=each_run)  # fmt: skip
    grid = GridResult([])
    for si, load, pi in cells:
        for seed in config.seeds:
            key = (config.scenarios[si].name, load, config.policies[pi].name, seed)
            run = made.get(key) or done[key]
            grid.rows.append(run.row)
            if details and run.details is not None:
                grid.details.append(run.details)
    return grid


def _finished(config: EvalConfig, finished: Sequence[FinishedRun], details: bool) -> dict[RunKey, FinishedRun]:
    """The ``finished`` runs by key; ``ForeignRunError`` for a run not in the grid or of more lines."""
    grid = {(s.name, load, p.name, seed) for s in config.scenarios for load in config.loads
            for p in config.policies for seed in config.seeds}  # fmt: skip
    done: dict[RunKey, FinishedRun] = {}
    seen: dict[RunKey, FinishedRun] = {}
    for i, run in enumerate(finished):
        if not isinstance(run, FinishedRun) or not isinstance(run.row, Mapping) or set(KEY_COLUMNS) - set(run.row):
            raise TypeError(f"run_grid: finished[{i}] must be a FinishedRun whose row has {KEY_COLUMNS}, got "
                            f"{shown(run)}")  # fmt: skip
        key = run_key(run.row)
        if key not in grid:
            scenario, load, policy, seed = map(shown_value, key)
            raise ForeignRunError(
                f"finished run (policy {policy}, scenario {scenario}, load {load}, seed {seed}) is not a run of this "
                "evaluation"
            )
        earlier = seen.get(key)
        if earlier is not None and not (earlier.details is None and run.details is not None):
            scenario, load, policy, seed = map(shown_value, key)
            raise ForeignRunError(  # only a run kept without details, run again for the plots, has two lines
                f"a second line for the run (policy {policy}, scenario {scenario}, load {load}, seed {seed})"
            )
        seen[key] = run
        if details and run.details is None and not config.is_cluster:
            done.pop(key, None)
            continue
        done[key] = run
    return done


def episode_details(sim: Simulator, kv_series: bool = True) -> dict[str, np.ndarray]:
    """The finished episode's per-request ``ttft_s`` and ``tpot_s`` for plots, and with ``kv_series`` the KV usage."""
    rounds = np.asarray(sim.engine.round_end_s, dtype=np.float64)
    ttft, tpot = [], []
    for r in sim.arrived_requests():
        if r.status == Status.FINISHED:
            t = token_times(r, rounds)
            ttft.append(t[0] - r.arrival_s)
            if len(t) > 1:
                tpot.append(float(tpot_s(t[0], t[-1], len(t))))
    out = {"ttft_s": np.asarray(ttft, dtype=np.float64), "tpot_s": np.asarray(tpot, dtype=np.float64)}
    if kv_series:
        kv_t, kv_u = sim.kv_usage_series()
        out["kv_time_s"], out["kv_usage"] = kv_t - sim.start_s, kv_u
    return out


def runners_for(config: EvalConfig) -> Runners | None:
    """The model runners of the runtime backend (one set per process), or None for the simulator."""
    if config.runtime is None:
        return None
    from llmsched_env.evaluation.runtime_backend import Runners  # torch only for the runtime backend

    return Runners(config.runtime)


def _cell_task(
    config: EvalConfig, cwd: str, si: int, load: float, pi: int, details: bool, seeds: Sequence[int]
) -> GridResult:
    """The ``seeds`` of one (scenario, load, policy) cell on a Ray worker."""
    use_driver_folder(cwd)
    return run_cell(config, config.scenarios[si], load, config.policies[pi], details=details, seeds=seeds)
