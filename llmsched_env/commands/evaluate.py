"""Evaluate scheduling policies on llmsched workloads and print a metrics table.

    llmsched-evaluate --policies fcfs,slo_aware,mine=runs/ppo0 --seeds 0,1,2 --out results/
    python evaluate.py ...            (the same command, from a checkout)

Runs every (policy, scenario, load, seed) episode to its end through ``LLMSched-v0``; each policy acts on
the observation and action mask only, as an agent would. A policy is a baseline name or the path of an
exported policy (a run folder holding ``policy.json`` + ``policy.safetensors``, or the JSON itself),
optionally named ``alias=path``. Prints one row per run as it finishes (a progress bar with an ETA on
stderr; --no-progress turns it off) and, with several seeds, the mean and 95% confidence half-width
(Student t) per (policy, scenario, load). ``--out`` gets ``results.csv`` and ``results.json`` (one row per
run, one column per metric), ``summary.csv`` and the plots (``--no-plots`` skips them); ``--tensorboard DIR``
writes every run's metrics as TensorBoard scalars (step = seed); either inside ``policies/``,
``docs/results/`` or the installed package is refused unless ``--force``. ``--capacity`` searches each
policy's highest load with attainment >= 90% instead.

``--engine vllm`` also runs every episode through vLLM's real scheduler (the ``vllm`` extra; the policy decides
vLLM's batches, the same cost model prices them) and prints its SLO attainment next to the simulator's.

``--backend runtime --model tiny`` serves the same episodes on the torch runtime (a real model, paged KV
cache, the same core engine and the same policies) instead of the simulator.

Everything it does is a library call (``llmsched_env.evaluation``: ``EvalConfig``, ``run_grid``,
``capacity_grid``, ``summarize``, ``write_results``).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from llmsched_env.commands.evaluate_args import PROG, build_parser, config_from_args
from llmsched_env.commands.help import program
from llmsched_env.evaluation import (
    EvalConfig,
    InputError,
    Row,
    capacity_grid,
    capacity_table,
    format_capacity_summary,
    format_description,
    format_summary,
    results_table,
    run_grid,
    summarize,
    summarize_capacity,
    write_results,
    write_tensorboard,
)
from llmsched_env.evaluation.capacity import capacity_notes
from llmsched_env.evaluation.outputs import RESULTS_TITLE, LiveTable
from llmsched_env.evaluation.progress import Progress
from llmsched_env.evaluation.sustained import absent_tenant_notes, unsustained

__all__ = ["main", "parse"]


def parse(argv: Sequence[str] | None = None) -> tuple[argparse.Namespace, EvalConfig]:
    """The options and the ``EvalConfig`` of a command line; a bad one exits (status 2) with a usage line."""
    parser = build_parser(__doc__ or "")
    args = parser.parse_args(argv)
    return args, config_from_args(parser, args)


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``llmsched-evaluate`` with ``argv`` (default: the process's arguments); 0 on success. A bad
    argument exits with status 2 and one usage line; an input found bad only when its run starts (a weights
    file) exits with status 1 and one error line."""
    args, config = parse(argv)
    if args.describe:
        for scenario in config.scenarios:
            for load in config.loads:
                text = format_description(
                    scenario,
                    config.split,
                    load,
                    config.seeds[0],
                    config.num_requests,
                    config.cost_model,
                )
                print(text)
        return 0
    for spec in config.policies:
        if spec.path is not None:
            exported = spec.load()
            print(f"policy {spec.name}: {exported.path} ({exported.meta.get('algo', '?')})")
    if args.engine == "vllm":
        return _vllm(config, args)
    flagged = [] if args.capacity else unsustained(config)
    notes = absent_tenant_notes(config) + [f"unsustained windows: {line}" for line in flagged]
    for line in notes + (capacity_notes(config, args.per_seed) if args.capacity else []):
        print(f"{program(*PROG)}: {line}", file=sys.stderr, flush=True)
    plots = args.plots if args.plots is not None else args.out is not None
    summary: list[Row] = []
    details: list[Row] = []
    try:
        if config.runtime is not None and not args.no_speed_check:
            _speed_check(config)  # builds the model: a bad weights file is an InputError here
        if args.capacity:
            rows = _capacity(config, args)
            if args.per_seed:
                summary = summarize_capacity(rows)
                print(format_capacity_summary(summary), flush=True)
        else:
            rows, details = _grid(config, args, plots, sustained_column=bool(flagged))
            summary = summarize(rows)
            if len(config.seeds) > 1:
                print(format_summary(summary), flush=True)
    except InputError as exc:  # found only when a run starts (a weights file): one line, no traceback
        raise SystemExit(f"{program(*PROG)}: error: {exc}") from None  # as argparse names the program
    if args.out is not None:
        written = write_results(args.out, rows, summary=summary, details=details, plots=plots)
        print("wrote " + ", ".join(str(p) for p in written))
    if args.tensorboard is not None:
        write_tensorboard(rows, args.tensorboard)
        print(f"wrote TensorBoard events under {args.tensorboard} (tensorboard --logdir {args.tensorboard})")
    return 0


def _vllm(config: EvalConfig, args: argparse.Namespace) -> int:
    """``--engine vllm``: every run on llmsched's simulator and on vLLM's scheduler in the loop, same requests;
    a table of both attainments, and the rows (every metric of both engines) in ``--out``."""
    from llmsched_env.evaluation.vllm_engine import compare_engines, format_comparison

    try:
        rows = compare_engines(config, policy_timeout_s=args.policy_timeout_s)
    except ValueError as exc:
        raise SystemExit(f"{program(*PROG)}: error: {exc}") from None
    print(format_comparison(rows), flush=True)
    if args.out is not None:
        written = write_results(args.out, rows, plots=False)
        print("wrote " + ", ".join(str(p) for p in written))
    return 0


def _speed_check(config: EvalConfig) -> None:
    """Profile this machine for a few seconds against the cost model that prices the runtime's SLOs and
    arrival rate; one line on stderr with the measured ratio, and a warning when it is far from 1."""
    import time

    from llmsched_env.evaluation.runtime_backend import Runners, speed_check, speed_message

    assert config.runtime is not None and config.cost_model is not None
    env: Any = config.make_env(config.scenarios[0], 1.0).unwrapped
    t0 = time.perf_counter()
    ratio = speed_check(Runners(config.runtime), env.engine_config, config.cost_model)
    env.close()
    took = time.perf_counter() - t0
    print(f"speed check: measured step time / {config.cost_model}'s = {ratio:.2f} ({took:.1f} s)", file=sys.stderr)
    message = speed_message(ratio, config.cost_model, config.runtime.model, str(config.runtime.device))
    if message is not None:
        print(message, file=sys.stderr, flush=True)


@contextmanager
def _live(
    table: LiveTable, args: argparse.Namespace, desc: str, unit: str, total: int, title: str | None = None
) -> Iterator[dict[str, Any]]:
    """A bar over ``total`` steps on stderr, ``title`` and ``table``'s header on stdout now; yields the
    keyword arguments ``run_grid`` and ``capacity_grid`` share: Ray, each row printed under the header as it
    comes, the bar."""
    with Progress(total=total, desc=desc, unit=unit, enabled=not args.no_progress) as bar:
        for line in ([title] if title else []) + table.head():
            bar.print(line)
        yield {
            "ray": args.ray,
            "ray_cpus": args.ray_cpus,
            "on_row": lambda row: bar.print(table.format(row)),
            "progress": bar,
        }


def _grid(
    config: EvalConfig, args: argparse.Namespace, details: bool, sustained_column: bool = False
) -> tuple[list[Row], list[Row]]:
    """Every run, each row printed as it comes (as its cell comes on Ray); the bar counts runs (cells). With
    ``sustained_column`` (some window is not sustained) the table shows each run's ``sustained``."""
    unit = "cell" if args.ray else "run"
    table = results_table(config, sustained=sustained_column)
    with _live(table, args, "grid", unit, config.num_runs, RESULTS_TITLE) as live:
        result = run_grid(config, details=details, **live)
    return result.rows, result.details


def _capacity(config: EvalConfig, args: argparse.Namespace) -> list[Row]:
    """Every (scenario, policy) capacity search, each row printed as its search ends; the bar counts load
    evaluations, its total growing as the searches go (on Ray: it counts searches)."""
    table = capacity_table(config, per_seed=args.per_seed)
    with _live(table, args, "capacity", "search" if args.ray else "eval", 0) as live:
        return capacity_grid(config, per_seed=args.per_seed, **live)


if __name__ == "__main__":
    raise SystemExit(main())
