"""Many trainings (scenario x seed x hyperparameter value), each a child ``python -m agents.cli`` in
``OUT/<scenario>-seed<K>[-key=value...]``, serially or as Ray tasks; ``OUT/sweep.json`` lists them.

    configs = sweep_configs(TrainConfig(quick=True), Path("runs/sweep"), scenarios=["mixed-slo"], seeds=[0, 1])
    results = run_sweep(configs, Path("runs/sweep"), ray="local")   # ray=None: one after the other
"""

from __future__ import annotations

import math
import os
import subprocess
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from agents.config import finite_json, merge_config, parse_overrides
from agents.train_config import TrainConfig
from llmsched_env.common.checks import check_unique
from llmsched_env.common.files import read_config
from llmsched_env.common.lifetime import guarded_command
from llmsched_env.common.outputs import (
    COMPLETE_NAME,
    LOCK_NAME,
    Written,
    check_output,
    locked_output,
    mark_complete,
    write_text_atomically,
    written_in,
)
from llmsched_env.evaluation.progress import Progress, status

RUN_LOG = "train.log"  # in each training's run folder: the output of its child process (``train_task``)
SWEEP_RECORD = "sweep.json"  # in the sweep's folder: every training's result (``run_sweep``)
SWEEP_FILES = (SWEEP_RECORD, COMPLETE_NAME, LOCK_NAME)  # what a sweep writes in its folder
# the most trainings one sweep builds (scenarios x seeds x grid values): 1,000 trainings are days of work already
MAX_SWEEP_TRAININGS = 1_000


def sweep_configs(
    base: TrainConfig,
    out: Path,
    scenarios: Sequence[str] | None = None,
    seeds: Sequence[int] | None = None,
    hp_grid: Mapping[str, Sequence[str]] | None = None,
) -> list[TrainConfig]:
    """``base`` for every scenario x seed x ``hp_grid`` combination, each in its own run folder."""
    check_unique("scenarios", scenarios or [])
    check_unique("seeds", seeds or [])
    sizes = [len(scenarios or [base.scenario]), len(seeds if seeds is not None else [base.seed])]
    sizes += [len(values) for values in (hp_grid or {}).values()]
    if math.prod(sizes) > MAX_SWEEP_TRAININGS:
        raise ValueError(
            f"a sweep of {math.prod(sizes):,} trainings ({' x '.join(map(str, sizes))}: scenarios x seeds x the values "
            f"of each grid key) is more than the {MAX_SWEEP_TRAININGS:,} one sweep may run; split it"
        )
    grid: list[list[tuple[str, str]]] = [[]]
    for key, values in (hp_grid or {}).items():
        if not values:
            raise ValueError(f"hp_grid: no values for {key!r}")
        check_unique(f"hp_grid[{key!r}]", [str(v) for v in values])
        grid = [[*trial, (key, str(v))] for trial in grid for v in values]
    configs = []
    for scenario in scenarios or [base.scenario]:
        for seed in seeds if seeds is not None else [base.seed]:
            for trial in grid:
                name = f"{scenario}-seed{seed}" + "".join(f"-{k}={v}" for k, v in trial)
                hp = merge_config(dict(base.hp), parse_overrides([f"{k}={v}" for k, v in trial]))
                run = (out / name).resolve()
                configs.append(replace(base, scenario=scenario, seed=seed, out=run, hp=hp, progress=False))
    return configs


def sweep_outputs(out: Path, configs: Sequence[TrainConfig]) -> list[Written]:
    """Every file a sweep into ``out`` writes: ``SWEEP_FILES``, and in each training's run folder its ``RUN_LOG``
    and what the training writes (``run_outputs``)."""
    from agents.training import run_outputs  # torch and SB3: only once a sweep is checked

    runs = [w for c in configs for w in [*written_in("--out", c.run_folder, [RUN_LOG]), *run_outputs(c)]]
    return [*written_in("--out", out, SWEEP_FILES), *(replace(w, root=out) for w in runs)]


def finished_result(out: Path) -> dict[str, Any]:
    """The result ``train_task`` gives of a training that finished before (kept by a resumed sweep)."""
    summary = out / "summary.json"
    found = read_config(summary, "the training's summary") if summary.is_file() else None
    return {"out": str(out), "returncode": 0, "summary": found}


def train_task(argv: list[str], cwd: str) -> dict[str, Any]:
    """One training of a sweep as a child process ending with this one, logged to ``train.log``."""
    root = cwd if os.path.isfile(os.path.join(cwd, "agents", "cli.py")) else os.getcwd()
    out = Path(argv[argv.index("--out") + 1])
    out.mkdir(parents=True, exist_ok=True)
    with (out / RUN_LOG).open("w") as log:
        cmd = guarded_command("agents.cli", argv)  # python -m agents.cli *argv, ending when this process ends
        code = subprocess.run(cmd, cwd=root, stdout=log, stderr=subprocess.STDOUT).returncode
    return {**finished_result(out), "returncode": code}


def _line(result: Mapping[str, Any]) -> str:
    best = (result["summary"] or {}).get("best_eval_attainment")
    return f"{result['out']}: exit {result['returncode']}, best evaluation attainment {best}"


def run_sweep(
    configs: Sequence[TrainConfig],
    out: Path,
    ray: str | None = None,
    ray_cpus: int | None = None,
    progress: bool = True,
    force: bool = False,
    kept: Sequence[dict[str, Any]] = (),
) -> list[dict[str, Any]]:
    """Run every training of ``configs``, serially or on ``ray``; one line as each ends."""
    check_output(out, force)
    with locked_output(out, "llmsched-train (a sweep)"):  # a second sweep into this folder is refused
        jobs = [(config.to_argv(), os.getcwd()) for config in configs]
        finished: Iterator[tuple[int, dict[str, Any]]]
        if ray:
            from llmsched_env.evaluation.distributed import ray_imap

            status(f"{len(jobs)} trainings in parallel ({ray})", enabled=progress)
            finished = ray_imap(train_task, jobs, address=ray, num_cpus=ray_cpus)
        else:
            status(f"{len(jobs)} trainings, one after the other (each logs to its train.log)", enabled=progress)
            finished = ((index, train_task(*job)) for index, job in enumerate(jobs))
        results: list[dict[str, Any]] = [{} for _ in jobs]
        with Progress(len(jobs), "trainings", enabled=progress, unit="training") as bar:
            for index, result in finished:  # as each training ends (on Ray: in the order they end)
                results[index] = result
                bar.print(_line(result))
                bar.update()
        results = [*kept, *results]  # the trainings a resumed sweep found finished, then those it ran
        write_text_atomically(out / SWEEP_RECORD, finite_json(results, indent=1))
        mark_complete(out, {"trainings": len(results), "failed": sum(r["returncode"] != 0 for r in results)})
    return results
