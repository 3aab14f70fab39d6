"""Evaluate scheduling policies on llmsched workloads and print a metrics table.

    llmsched-evaluate --policies fcfs,slo_aware,mine=runs/ppo0 --seeds 0,1,2 --out results/
    python evaluate.py ...            (the same command, from a checkout)

Runs every (policy, scenario, load, seed) episode through ``LLMSched-v1`` (``--capacity``: searches each
policy's highest load with attainment >= 90% instead). A policy is a baseline name or an exported policy (a run
folder or its ``policy.json``), optionally ``alias=path``. One row per run as it finishes (a bar on stderr),
then, with several seeds, the mean and 95% interval. ``--out`` gets results.csv/.json, summary.csv and plots,
held by one evaluation at a time, written atomically and marked ``complete.json`` last; each run is appended to
``rows.jsonl`` as it ends, so ``--resume`` continues a killed evaluation (docs/reliability.md). ``--engine vllm``
also runs vLLM's real scheduler; ``--backend runtime`` serves the episodes on the torch runtime. A run whose
policy fell back on more than 1% of its decisions is marked ``[fallback N%]``. From Python:
``llmsched_env.evaluation`` (``EvalConfig``, ``run_grid``, ``capacity_grid``, ``summarize``, ``write_results``).
"""

from __future__ import annotations

import shlex
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any, NoReturn

from llmsched_env.commands.entry import command, keep
from llmsched_env.commands.evaluate_args import PROG, Evaluation, evaluation
from llmsched_env.commands.help import program
from llmsched_env.common.outputs import is_complete, locked_output, mark_complete
from llmsched_env.evaluation import (
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
from llmsched_env.evaluation.capacity import capacity_notes, verdict_notes
from llmsched_env.evaluation.fallbacks import fallback_warning
from llmsched_env.evaluation.grid import KEY_COLUMNS, FinishedRun, ForeignRunError
from llmsched_env.evaluation.outputs import CAPACITY_COLUMNS, FINISHED_FILES, RESULTS_TITLE, LiveTable, clear_outputs
from llmsched_env.evaluation.progress import Progress
from llmsched_env.evaluation.resume import RECORD_NAME, ROWS_NAME, RowsLog, check_resumable, evaluation_record
from llmsched_env.evaluation.stats import SUMMARY_METRICS
from llmsched_env.evaluation.sustained import absent_tenant_notes, overlong_notes, unsustained


def parse(argv: Sequence[str] | None = None) -> Evaluation:
    """The checked ``Evaluation`` of a command line; a bad one exits (status 2) with a usage line."""
    return evaluation(argv, __doc__ or "")


@command(*PROG)
def main(argv: Sequence[str] | None = None) -> int:
    """Run ``llmsched-evaluate`` with ``argv`` (default: the process's arguments); 0 on success; Ctrl-C, a signal or
    a full disk: one line saying what is kept (``entry.command``)."""
    return run(parse(argv))


def run(ev: Evaluation) -> int:
    """Run a parsed evaluation; a bad input found when a run starts is one line, status 1."""
    config = ev.config
    if ev.describe:
        for scenario in config.scenarios:
            for load in config.loads:
                print(format_description(scenario, config.split, load, config.seeds[0], config.num_requests,
                                         config.cost_model))  # fmt: skip
        return 0
    for spec in config.policies:
        if spec.path is not None:
            exported = spec.load()
            print(f"policy {spec.name}: {exported.path} ({exported.meta.get('algo', '?')})")
    # whether --out held an evaluation: only then are the earlier results this one does not write removed at the
    # end (a folder of the user's own files named like an evaluation's, without its marks, keeps them)
    held = ev.out is not None and ((ev.out / RECORD_NAME).exists() or is_complete(ev.out))
    if ev.out is None:
        keep("no --out, so no run is kept", "rerun it")
    elif ev.engine == "vllm":  # the results are written once every run has ended
        keep(f"--out {ev.out} is as it was (--engine vllm writes its results at the end)", "rerun it")
    else:
        keep(f"the runs finished before it are kept in {ev.out / ROWS_NAME}", "rerun with --resume")
    if ev.engine == "vllm":
        with _holding(ev.out):  # before any episode: one evaluation per --out
            return _vllm(ev, held)
    record = None if ev.out is None else evaluation_record(ev.options, config, ev.files)
    if ev.out is not None and record is not None and ev.resume:  # another evaluation there: refused now
        _resumable(ev.out, record)
    killed = ev.out is not None and (ev.out / ROWS_NAME).is_file() and not is_complete(ev.out)
    with _holding(ev.out):
        return _evaluate(ev, held, record, killed)


def _evaluate(ev: Evaluation, held: bool, record: dict[str, Any] | None = None, killed: bool = False) -> int:
    """The grid or the capacity searches with ``--out`` held (``held``: an earlier evaluation's)."""
    config = ev.config
    windows = len(config.scenarios) * len(config.loads) * len(config.seeds)
    if not ev.capacity and windows > 10_000:  # about a millisecond each: say so before a long silence
        _note(f"checking that the {windows:,} windows of the grid are sustained (about {windows // 3_000 + 1} s)")
    flagged = [] if ev.capacity else unsustained(config)
    notes = absent_tenant_notes(config) + overlong_notes(config) + [f"unsustained windows: {text}" for text in flagged]
    for note in notes + (capacity_notes(config, ev.per_seed) if ev.capacity else []):
        _note(note)
    summary: list[Row] = []
    details: list[Row] = []
    log, finished = _rows_log(ev, record, killed)
    try:
        if config.runtime is not None and ev.speed_check:
            _speed_check(ev)  # builds the model: a bad weights file is an InputError here
        if ev.capacity:
            rows = _capacity(ev, log, [run.row for run in finished])
            for note in verdict_notes(config, rows):
                _note(note)
            if ev.per_seed:
                summary = summarize_capacity(rows)
                print(format_capacity_summary(summary), flush=True)
        else:
            rows, details = _grid(ev, bool(flagged), log, finished)
            summary = summarize(rows)
            if len(config.seeds) > 1:
                print(format_summary(summary), flush=True)
    except InputError as exc:  # found only when a run starts (a weights file): one line, no traceback
        _fail(exc)
    except ForeignRunError as exc:  # a line of the rows file that is no run of this evaluation (--resume)
        _fail(ValueError(f"--resume: {ev.out / ROWS_NAME if ev.out else ROWS_NAME}: {exc}; remove that line or "
                         "start afresh without --resume"))  # fmt: skip
    finally:
        if log is not None:
            log.close()
    out = ev.out
    if out is not None:
        _finish(out, lambda: write_results(out, rows, summary=summary, details=details, plots=ev.plots), held)
    if ev.tensorboard is not None:
        write_tensorboard(rows, ev.tensorboard)
        print(f"wrote TensorBoard events under {ev.tensorboard} (tensorboard --logdir {ev.tensorboard})")
    if out is not None:  # last: a folder without it holds an evaluation killed or still going
        taken = len(rows) - (log.appended if log is not None else 0)  # rows an earlier run made (--resume)
        mark_complete(out, {"command": shlex.join(ev.line), "rows": len(rows), "resumed_rows": taken})
    return 0


def _finish(out: Path, write: Callable[[], list[Path]], earlier: bool = True) -> None:
    """Write the results into ``out``, then remove an ``earlier`` evaluation's files not written again."""
    try:
        written = write()
    except OSError as exc:  # a full disk, a file made immutable, a folder made read-only since the check
        what = f"{exc.strerror or exc}" + (f" ({exc.filename})" if exc.filename else "")
        _fail(ValueError(f"--out {out}: {what} while writing the results; the earlier results there are as they "
                         "were"))  # fmt: skip
    clear_outputs(out, keep=(ROWS_NAME, RECORD_NAME, *(p.name for p in written), *(() if earlier else FINISHED_FILES)))
    print("wrote " + ", ".join(str(p) for p in written))


def _fail(exc: Exception) -> NoReturn:
    """Exit (status 1) with one line, as argparse names the program: ``PROG: error: EXC``."""
    raise SystemExit(f"{program(*PROG)}: error: {exc}") from None


def _note(text: str) -> None:
    print(f"{program(*PROG)}: {text}", file=sys.stderr, flush=True)


@contextmanager
def _holding(out: Path | None) -> Iterator[None]:
    """``out`` locked for this process while the block runs; held by another: one error line."""
    if out is None:
        yield
        return
    stack = ExitStack()
    try:
        stack.enter_context(locked_output(out, PROG[0]))
    except ValueError as exc:
        _fail(exc)
    except OSError as exc:  # the folder cannot be made (a permission, a read-only filesystem)
        _fail(ValueError(f"--out {out}: cannot be written ({exc.strerror or exc})"))
    with stack:
        yield


def _resumable(out: Path, record: dict[str, Any]) -> bool:
    """Whether ``out`` holds an evaluation ``record`` resumes (another one: one error line)."""
    try:
        return check_resumable(out, record)
    except ValueError as exc:
        _fail(ValueError(f"--resume: {exc}; give the options it ran with, or drop --resume to start afresh"))


def _rows_log(
    ev: Evaluation, record: dict[str, Any] | None, killed: bool = False
) -> tuple[RowsLog | None, list[FinishedRun]]:
    """The rows file of ``--out``: on ``--resume`` reopened with its finished runs, else a new one."""
    out = ev.out
    if out is None or record is None:
        return None, []
    rows_path = out / ROWS_NAME
    if ev.resume and _resumable(out, record):
        try:
            required = CAPACITY_COLUMNS if ev.capacity else (*KEY_COLUMNS, *SUMMARY_METRICS)
            log, finished = RowsLog.resume(out, record, required)
        except ValueError as exc:  # a rows file that is not one
            _fail(ValueError(f"--resume: {exc}"))
        clear_outputs(out, keep=(ROWS_NAME, RECORD_NAME, *FINISHED_FILES))
        one, many = ("capacity search", "capacity searches") if ev.capacity else ("run", "runs")
        _note(f"resuming: {len(finished)} finished {one if len(finished) == 1 else many} in {rows_path}")
        return log, finished
    if ev.resume:
        _note(f"--resume: no evaluation to resume in {out}; starting one")
    elif killed and rows_path.stat().st_size > 0:
        _note(f"{out} held the rows of an evaluation that did not finish; starting afresh (--resume continues it)")
    clear_outputs(out, keep=FINISHED_FILES)  # an earlier run's results stay until this one has its own
    full = {**record, "command": shlex.join(ev.line), "started": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    return RowsLog.start(out, full), []


def _vllm(ev: Evaluation, held: bool) -> int:
    """``--engine vllm``: every run on the simulator and on vLLM's scheduler, a table of both attainments."""
    from llmsched_env.evaluation.vllm_engine import compare_engines, format_comparison

    out = ev.out
    if out is not None:
        clear_outputs(out, keep=FINISHED_FILES)  # an earlier run's results stay until this one has its own
    try:
        rows = compare_engines(ev.config, policy_timeout_s=ev.policy_timeout_s)
    except ValueError as exc:
        _fail(exc)
    print(format_comparison(rows), flush=True)
    for row in rows:
        _warn_fallbacks(row)
    if out is not None:
        _finish(out, lambda: write_results(out, rows, plots=False), held)
        mark_complete(out, {"command": shlex.join(ev.line), "rows": len(rows)})
    return 0


def _speed_check(ev: Evaluation) -> None:
    """Profile this machine against the runtime's cost model: the ratio on stderr, a warning if far from 1."""
    from llmsched_env.evaluation.runtime_backend import Runners, speed_check, speed_message

    config = ev.config
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
    table: LiveTable,
    ev: Evaluation,
    desc: str,
    unit: str,
    total: int,
    title: str | None = None,
    done: Sequence[Row] = (),
) -> Iterator[tuple[dict[str, Any], Callable[[Row], None]]]:
    """A bar, the table's head and the ``done`` rows; yields ``run_grid``'s keyword arguments and ``on_row``."""
    for row in done:
        _warn_fallbacks(row)
    with Progress(total=total, desc=desc, unit=unit, enabled=ev.progress) as bar:
        for line in ([title] if title else []) + table.head() + [table.format(row) for row in done]:
            bar.print(line)

        def on_row(row: Row) -> None:
            bar.print(table.format(row))
            _warn_fallbacks(row, bar.note)

        yield {"ray": ev.ray, "ray_cpus": ev.ray_cpus, "progress": bar}, on_row


def _grid(
    ev: Evaluation, sustained_column: bool = False, log: RowsLog | None = None, finished: Sequence[FinishedRun] = ()
) -> tuple[list[Row], list[Row]]:
    """Every run not ``finished``, each printed as it comes and appended to ``log``."""
    table = results_table(ev.config, sustained=sustained_column)
    done = [run.row for run in finished]
    unit = "cell" if ev.ray else "run"
    with _live(table, ev, "grid", unit, ev.config.num_runs, RESULTS_TITLE, done) as (live, on_row):
        on_run = log.append if log is not None else None
        result = run_grid(ev.config, details=ev.plots, finished=finished, on_run=on_run, on_row=on_row, **live)
    return result.rows, result.details


def _warn_fallbacks(row: Row, note: Callable[[str], None] | None = None) -> None:
    """One line on stderr (through a bar's ``note`` when given) for a run whose policy fell back too often."""
    warning = fallback_warning(row)
    if warning is not None and note is not None:
        note(f"{program(*PROG)}: {warning}")
    elif warning is not None:
        _note(warning)


def _capacity(ev: Evaluation, log: RowsLog | None = None, finished: Sequence[Row] = ()) -> list[Row]:
    """Every capacity search not ``finished``, each appended to ``log`` and printed as it ends."""
    table = capacity_table(ev.config, per_seed=ev.per_seed)
    with _live(table, ev, "capacity", "search" if ev.ray else "eval", 0, done=finished) as (live, show):

        def on_row(row: Row) -> None:
            if log is not None:
                log.append(row)  # on disk before the next search starts
            show(row)

        return capacity_grid(ev.config, per_seed=ev.per_seed, finished=finished, on_row=on_row, **live)


if __name__ == "__main__":
    raise SystemExit(main())
