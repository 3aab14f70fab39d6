"""Calibrate a cost-model preset on the runtime, end to end (``llmsched-calibrate profile``): ``profile_preset``
times a grid of batch shapes, records fcfs fitting episodes, fits the linear model to both and writes the preset
and ``<out>.samples.csv``, reporting through ``on_status(line)`` and ``on_progress(phase, done, total)``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from llmsched_env.common.checks import MAX_LOAD, MIN_LOAD, is_finite_number
from llmsched_env.common.outputs import check_output, write_csv
from llmsched_env.costs.linear import LinearCostModel, fit_report
from llmsched_env.decision.registry import SCHEDULERS, make_scheduler
from llmsched_env.runtime import calibrate as cal
from llmsched_env.runtime.executor import Runtime
from llmsched_env.runtime.fidelity import (
    FIT_LOADS,
    FIT_SEED,
    RUNTIME_ENGINE,
    FidelityWorkload,
    PolicyFactory,
    check_runtime_requests,
    drive,
    saturation_rps,
)
from llmsched_env.runtime.runner_spec import RunnerSpec

QUICK_GRID = cal.ProfileGrid((0, 64, 512), (0, 512), (0, 1, 8), (128, 512))  # tests and smoke runs
StatusFn = Callable[[str], None]
ProgressFn = Callable[[str, int, int], None]  # (phase, done, total)
# Bounds of a calibration's counts (repeats per shape, requests per workload, loads or seeds in a list).
MAX_REPEATS = 1_000
MAX_REQUESTS = 10_000
MAX_LIST = 100
_MAX_THREADS = 1_024


def max_threads() -> int:
    """The most torch CPU threads a calibration takes: 4 per CPU, at most 1,024 (torch allocates per thread)."""
    return min(_MAX_THREADS, 4 * (os.cpu_count() or 1))


def check_count(name: str, value: object, maximum: int, minimum: int = 1) -> int:
    """``value`` if an integer from ``minimum`` to ``maximum``, else ``ValueError`` naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= maximum:
        raise ValueError(f"{name} must be an integer from {minimum:,} to {maximum:,}, got {value!r}")
    return value


def check_loads(name: str, loads: Sequence[float]) -> list[float]:
    """``loads`` as a list of 1 to ``MAX_LIST`` numbers in [``MIN_LOAD``, ``MAX_LOAD``], else ``ValueError``."""
    values = list(loads)
    if not 1 <= len(values) <= MAX_LIST:
        raise ValueError(f"{name}: expected 1 to {MAX_LIST} loads, got {len(values):,}")
    bad = [x for x in values if not is_finite_number(x) or not MIN_LOAD <= x <= MAX_LOAD]
    if bad:
        raise ValueError(f"{name}: loads must be finite numbers from {MIN_LOAD} to {MAX_LOAD:g}, got {bad[0]!r}")
    return values


def policy_factory(name: str) -> PolicyFactory:
    """Builds the registered scheduler ``name`` (seed 0) for a policy context; ``ValueError`` if unknown."""
    SCHEDULERS.get(name)
    return lambda ctx: make_scheduler(name, ctx, seed=0)


def samples_path(out: Path) -> Path:
    """Where ``profile_preset`` writes the grid samples of the preset ``out``: ``<out>.samples.csv`` beside it."""
    return out.with_suffix(".samples.csv")


def profile_outputs(out: Path) -> list[Path]:
    """Every file ``profile_preset`` writes: the preset ``out`` and its ``samples_path``."""
    return [out, samples_path(out)]


def profile_preset(spec: RunnerSpec, out: Path, *, quick: bool = False, repeats: int = 3, name: str | None = None,
                   fit_loads: Sequence[float] = FIT_LOADS, num_requests: int = FidelityWorkload.num_requests,
                   force: bool = False, on_status: StatusFn | None = None,
                   on_progress: ProgressFn | None = None) -> tuple[LinearCostModel, dict[str, Any]]:
    """Profile, record fitting episodes, fit, save ``out`` and ``<out>.samples.csv``; the model and the fit's
    report. ``ValueError`` before anything runs for a shipped ``out`` (unless ``force``) or a bad count."""
    for path in profile_outputs(out):  # the preset, and the grid samples beside it
        check_output(path, force, file=True)
    check_count("repeats", repeats, MAX_REPEATS)
    check_count("num_requests", num_requests, MAX_REQUESTS)
    check_count("threads", spec.threads, max_threads())
    fit_loads = check_loads("fit_loads", fit_loads)
    check_runtime_requests({"fit_loads": len(fit_loads), "num_requests": num_requests})
    say = on_status or (lambda line: None)
    runner = spec.build(RUNTIME_ENGINE.num_kv_blocks, RUNTIME_ENGINE.block_size)
    workload = FidelityWorkload(num_requests=num_requests)
    grid = QUICK_GRID if quick else cal.ProfileGrid.for_engine(RUNTIME_ENGINE)
    say(f"profiling {spec.describe()} on {len(grid.shapes())} batch shapes (median of {repeats} runs each)")
    t0 = time.perf_counter()
    shapes = (lambda done, total: on_progress("grid", done, total)) if on_progress else None
    samples = cal.profile(runner, grid, repeats=repeats, progress=shapes)
    profile_s = time.perf_counter() - t0
    name = name or out.stem
    # fcfs fitting episodes at fractions of the grid-only model's saturation rate
    fcfs = policy_factory("fcfs")
    grid_model = cal.fit(samples, 0.0, name=name)
    sat = saturation_rps(grid_model, workload, RUNTIME_ENGINE, fcfs)
    say(f"recording {len(fit_loads)} fcfs fitting episodes at loads {list(fit_loads)} of {sat:.2f} req/s")
    iterations: list[cal.Sample] = []
    overheads = []
    for k, load in enumerate(fit_loads):
        reqs = workload.requests(grid_model, sat * load, FIT_SEED)
        rt = Runtime(runner, RUNTIME_ENGINE, workload.tenants(grid_model), grid_model, reqs, record=True)
        drive(rt, fcfs, fcfs)
        iterations += cal.iteration_samples(rt)
        overheads.append(rt.loop_overhead_s())
        if on_progress is not None:
            on_progress("fitting episodes", k + 1, len(fit_loads))
    overhead = float(np.mean(overheads))
    desc = (f"runtime {spec.model} {spec.dtype} on {spec.device}: fitted by `llmsched-calibrate profile` on "
            f"{len(samples)} batch shapes (plus {overhead * 1e6:.0f} us of serving-loop time per iteration) and "
            f"{len(iterations)} iterations of fcfs fitting episodes at loads {list(fit_loads)}")
    model = cal.fit(samples, overhead, name=name, description=desc, iterations=iterations)
    out.parent.mkdir(parents=True, exist_ok=True)
    model.save(out)
    table = samples_path(out)
    write_csv(cal.samples_table(samples), table)
    return model, {"preset": str(out), "samples": str(table), "profile_s": profile_s,
                   "loop_overhead_s": overhead,
                   "grid": fit_report(model, [(p, d, kv, q, t + overhead) for p, d, kv, q, t in samples]),
                   "iterations": fit_report(model, iterations),
                   "iterations_by_decodes": cal.residuals_by_decodes(model, iterations)}
