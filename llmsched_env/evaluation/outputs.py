"""What an evaluation shows and writes: the live results table, the summary table, result files, TensorBoard.
Terminal tables show ``TABLE_COLUMNS``; files keep every metric, each written atomically. ``EVALUATION_FILES``:
every file an evaluation writes into its folder (``clear_outputs``).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from llmsched_env.common.outputs import COMPLETE_NAME, remove_outputs, write_csv, write_text_atomically
from llmsched_env.evaluation.config import EvalConfig, Row
from llmsched_env.evaluation.fallbacks import fallback_mark
from llmsched_env.evaluation.grid import KEY_COLUMNS
from llmsched_env.evaluation.identity import policy_label
from llmsched_env.evaluation.resume import RECORD_NAME, ROWS_NAME
from llmsched_env.evaluation.stats import SUMMARY_METRICS
from llmsched_env.evaluation.tables import format_cell, format_line, format_table

__all__ = ["CAPACITY_COLUMNS", "EVALUATION_FILES", "FINISHED_FILES", "PLOT_FILES", "RESULTS_TITLE", "RESULT_FILES",
           "TABLE_COLUMNS", "LiveTable", "capacity_table", "clear_outputs", "format_capacity_summary", "format_summary",
           "results_table", "tensorboard_run", "tensorboard_runs", "write_results", "write_tensorboard"]  # fmt: skip

# metric key -> short column header of the terminal table (every metric goes to results.csv)
TABLE_COLUMNS = {
    "slo_attainment": "attain",
    "goodput_rps": "goodput/s",
    "ttft_p50_s": "ttft p50",
    "ttft_p99_s": "ttft p99",
    "tpot_p50_s": "tpot p50",
    "tpot_p99_s": "tpot p99",
    "itl_p99_s": "itl p99",
    "e2el_p50_s": "e2e p50",
    "request_throughput_rps": "req/s",
    "jain_fairness": "jain",
    "preemptions": "preempt",
    "rejection_rate": "reject",
    "kv_usage_mean": "kv mean",
}
RESULTS_TITLE = "llmsched evaluation (times in seconds)"
RESULT_FILES = ("results.csv", "results.json", "summary.csv")  # what write_results writes into --out, with:
PLOT_FILES = ("ttft_cdf.png", "tpot_cdf.png", "kv_usage.png", "attainment_vs_load.png", "tenant_service.png",
              "capacity.png")  # fmt: skip
# every file an evaluation writes into --out: cleared when a new one starts there (``clear_outputs``)
EVALUATION_FILES = (*RESULT_FILES, *PLOT_FILES, ROWS_NAME, RECORD_NAME, COMPLETE_NAME)
# an earlier evaluation's finished results: kept while a new one runs, replaced (or removed) once it has its own
FINISHED_FILES = (*RESULT_FILES, *PLOT_FILES)
CAPACITY_COLUMNS = ("policy", "scenario", "capacity_load", "capacity_rps")


class LiveTable:
    """A fixed-width table printed a row at a time; a wider value pushes its line right, never cut."""

    def __init__(
        self,
        columns: Sequence[str],
        known: Mapping[str, Sequence[Any]],
        headers: Mapping[str, str] | None = None,
        min_width: int = 6,
    ) -> None:
        self.columns = list(columns)
        self.headers = [(headers or {}).get(c, c) for c in self.columns]
        self.numeric = [not any(isinstance(v, str) for v in known.get(c, ())) for c in self.columns]
        self.widths = [
            max([len(h)] + [len(format_cell(v)) for v in known[c]]) if c in known else max(len(h), min_width)
            for c, h in zip(self.columns, self.headers, strict=True)
        ]

    def head(self) -> list[str]:
        """The header line and the rule under it."""
        rule = ["-" * w for w in self.widths]
        return [format_line(self.headers, self.widths, self.numeric), format_line(rule, self.widths, self.numeric)]

    def format(self, row: Mapping[str, Any]) -> str:
        """One line for ``row`` (a missing column blank; a window-limited capacity as ``≥ X``)."""
        return format_line([_cell(row, c) for c in self.columns], self.widths, self.numeric)


def _cell(row: Mapping[str, Any], column: str) -> str:
    """``row[column]`` as a cell: a lower-bound capacity prefixed ``≥``, a fallen-back policy marked."""
    text = format_cell(row.get(column))
    if column == "policy":
        return text + fallback_mark(row)
    limited = row.get("window_limited") or row.get("num_window_limited")
    return f"≥ {text}" if limited and column.startswith("capacity") and "±" not in column else text


def results_table(config: EvalConfig, sustained: bool = False) -> LiveTable:
    """The live table of a grid's runs: the keys, ``TABLE_COLUMNS``, and with ``sustained`` that column."""
    known: dict[str, Sequence[Any]] = {**_names(config), "load": list(config.loads), "seed": list(config.seeds)}
    columns = [*KEY_COLUMNS, *(["sustained"] if sustained else []), *TABLE_COLUMNS]
    return LiveTable(columns, {**known, "sustained": [True, False]} if sustained else known, TABLE_COLUMNS)


def capacity_table(config: EvalConfig, per_seed: bool = False) -> LiveTable:
    """The live table of a capacity search: one row per (scenario, policy), or per (scenario, policy, seed)."""
    if per_seed:
        known: dict[str, Sequence[Any]] = {**_names(config), "seed": list(config.seeds)}
        return LiveTable(["policy", "scenario", "seed", *CAPACITY_COLUMNS[2:]], known)
    return LiveTable(CAPACITY_COLUMNS, _names(config))


def format_capacity_summary(summary: Sequence[Row]) -> str:
    """The per-seed capacities' summary table (mean and 95% half-width), merged policies labelled."""
    columns = ["policy", "scenario", "seeds", "capacity", "capacity ±", "req/s", "req/s ±"]
    short = [
        {"policy": policy_label(a) + fallback_mark(a), "scenario": a["scenario"], "seeds": a["num_seeds"],
         "capacity": a["capacity_load_mean"], "capacity ±": a["capacity_load_ci95"],
         "req/s": a["capacity_rps_mean"], "req/s ±": a["capacity_rps_ci95"]}
        for a in summary
    ]  # fmt: skip
    for a, row in zip(summary, short, strict=True):  # a mean over window-limited seeds is a lower bound
        if a.get("num_window_limited"):
            row["capacity"], row["req/s"] = _cell(a, "capacity_load_mean"), _cell(a, "capacity_rps_mean")
    notes = ""
    if any("ratio_to_tuned_mean" in a for a in summary):  # capacity.summarize_capacity's comparison with tuned
        columns += ["× tuned", "× tuned ±"]
        for a, row in zip(summary, short, strict=True):
            row["× tuned"], row["× tuned ±"] = a.get("ratio_to_tuned_mean", ""), a.get("ratio_to_tuned_ci95", "")
        notes += "\n× tuned: capacity / tuned's, paired seed by seed (mean ± 95% half-width)"
    if any("gap_closed" in a for a in summary):
        columns.append("gap closed")
        for a, row in zip(summary, short, strict=True):
            gap = a.get("gap_closed")
            row["gap closed"] = "" if gap is None else f"{100 * gap:.0f}%"
        notes += "\ngap closed: the share of the gap from tuned to the lookahead bound (clairvoyant), on the means"
    title = "capacity: mean over seeds ± 95% confidence half-width (Student t)"
    return title + notes + "\n" + format_table(short, columns)


def _names(config: EvalConfig) -> dict[str, list[str]]:
    """The ``policy`` and ``scenario`` names of ``config``: what every live table knows in advance."""
    return {
        "policy": [spec.name for spec in config.policies],
        "scenario": [s.name for s in config.scenarios],
    }


def format_summary(summary: Sequence[Row]) -> str:
    """The summary table of ``stats.summarize`` rows (mean ± 95% half-width), merged policies labelled."""
    columns = ["policy", "scenario", "load", "seeds"]
    if any(agg.get("sustained") is False for agg in summary):
        columns.append("sustained")
    short = []
    for agg in summary:
        row = {"policy": policy_label(agg) + fallback_mark(agg), "scenario": agg["scenario"], "load": agg["load"],
               "seeds": agg["num_seeds"]}  # fmt: skip
        row["sustained"] = agg.get("sustained")
        for key, head in SUMMARY_METRICS.items():
            row[head], row[f"{head} ±"] = agg[f"{key}_mean"], agg[f"{key}_ci95"]
        short.append(row)
    for head in SUMMARY_METRICS.values():
        columns += [head, f"{head} ±"]
    return "mean over seeds ± 95% confidence half-width (Student t)\n" + format_table(short, columns)


def write_results(
    out: Path,
    rows: Sequence[Row],
    *,
    summary: Sequence[Row] = (),
    details: Sequence[Mapping[str, Any]] = (),
    plots: bool = False,
) -> list[Path]:
    """Write the results, summary and (``plots``) PNG files into ``out``, each atomically; returns the files written."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    write_csv(rows, out / "results.csv")
    write_text_atomically(out / "results.json", json.dumps(list(rows), indent=1))
    written = [out / "results.csv", out / "results.json"]
    if summary:
        write_csv(summary, out / "summary.csv")
        written.append(out / "summary.csv")
    if plots:
        from llmsched_env.evaluation.plots import plot_capacity, write_plots  # matplotlib only when plotting

        if rows and "capacity_load" in rows[0]:
            written.append(plot_capacity(rows, out / "capacity.png"))
        else:
            written += write_plots(out, rows, summary, details)
    return written


def clear_outputs(out: Path, keep: Sequence[str] = ()) -> list[Path]:
    """Remove from ``out`` the ``EVALUATION_FILES`` but ``keep`` and a killed write's temporaries; returns them."""
    return remove_outputs(out, EVALUATION_FILES, keep)


def _safe_name(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text) or "_"


def tensorboard_run(logdir: Path, row: Mapping[str, Any]) -> Path:
    """The folder of ``row``'s scalars under ``logdir`` (``write_tensorboard``): POLICY/SCENARIO[/load_LOAD]."""
    run = Path(logdir) / _safe_name(str(row["policy"])) / _safe_name(str(row["scenario"]))
    return run / f"load_{row['load']:g}" if "load" in row else run


def tensorboard_runs(logdir: Path, config: EvalConfig, capacity: bool = False) -> list[Path]:
    """Every folder ``write_tensorboard`` writes under ``logdir`` for the runs of ``config`` (a grid's, or with
    ``capacity`` its capacity searches')."""
    loads: list[dict[str, float]] = [{}] if capacity else [{"load": load} for load in config.loads]
    keys = [{"policy": p.name, "scenario": s.name, **load} for p in config.policies for s in config.scenarios
            for load in loads]  # fmt: skip
    return list(dict.fromkeys(tensorboard_run(logdir, key) for key in keys))


def write_tensorboard(rows: Sequence[Row], logdir: Path) -> list[Path]:
    """Every numeric column of ``rows`` as scalar ``eval/COLUMN``, a folder per (policy, scenario, load), step = seed.
    Returns the folders. A write that fails in the writers' threads (a full disk) is raised here."""
    from tensorboard.compat.proto.event_pb2 import Event
    from tensorboard.compat.proto.summary_pb2 import Summary
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    writers: dict[Path, EventFileWriter] = {}
    run = Path(logdir)
    failed = True
    try:
        for row in rows:
            run = tensorboard_run(logdir, row)
            if run not in writers:
                run.mkdir(parents=True, exist_ok=True)
                writers[run] = EventFileWriter(str(run))
            values = [
                Summary.Value(tag=f"eval/{key}", simple_value=float(v))
                for key, v in row.items()
                if key not in KEY_COLUMNS and isinstance(v, (int, float)) and not isinstance(v, bool)
            ]
            event = Event(wall_time=time.time(), step=int(row.get("seed", 0)), summary=Summary(value=values))
            writers[run].add_event(event)
        for folder, writer in writers.items():
            run = folder  # named if it fails
            writer.flush()  # raises what a writer's thread met; its close() would not
        failed = False
    except OSError as exc:  # a writer thread's error names no file: the folder it wrote is named here
        if exc.filename is not None:
            raise
        raise OSError(exc.errno, exc.strerror, str(run)) from exc
    finally:
        for writer in writers.values():
            try:
                writer.close()
            except OSError:
                if not failed:
                    raise
    return list(writers)
