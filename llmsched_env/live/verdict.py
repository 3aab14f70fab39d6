"""The verdict of a paired live experiment: each policy against the ``fcfs`` control, live and as predicted, and
the targets met or not (``python -m llmsched_env.live.verdict OUT [--against tuned] [--replicates OLD]`` writes
``OUT/report.md`` and ``OUT/plots/``; ``--aa-coverage RUN ...`` prints the A/A coverage of runs). Reads
``experiment.json``, the predictions (a ``.sha256`` beside each) and every ``cells/<cell>/blocks.jsonl``;
``VerdictError`` names a bad file.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import math
import sys
import tarfile
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path, PurePosixPath
from typing import Any

import numpy as np

from llmsched_env.common.files import RECORD_BYTES, parse_json, read_bytes
from llmsched_env.common.outputs import replaced_atomically, write_text_atomically
from llmsched_env.evaluation.stats import mean_ci95
from llmsched_env.live.blocks import FRONTEND_FIGURES, LATE_SEND_S, METRICS
from llmsched_env.live.design import format_difference, paired_difference
from llmsched_env.live.frontend import FRONTEND_FILE, arm_figures, write_frontend
from llmsched_env.live.logs import SERVER_FILE
from llmsched_env.live.records import jsonl_records
from llmsched_env.live.split import (
    markdown_table,
    predicted_components,
    read_components,
    split_rows,
    split_table,
    worst,
)

__all__ = [
    "AA_ARM", "BLOCK_METRICS", "CONTROL", "PREDICTED_METRICS", "Block", "CellResult", "Experiment", "Interval",
    "PredictionFile", "Predictions", "Replication", "Target", "Verdict", "VerdictError", "aa_coverage",
    "aa_coverage_text", "analyse_cell", "build_verdict", "kendall_tau_b", "main", "opened_run", "paired_interval",
    "prediction_paths", "read_blocks", "read_experiment", "read_frontend", "read_predictions", "replication",
    "skill_rows", "skill_score",
]  # fmt: skip

CONTROL = "fcfs"
AA_ARM = "fcfs/aa"
PREDICTIONS_FORMAT = "llmsched-live-predictions"
BLOCK_METRICS = METRICS  # the client-side per-block figures of blocks.jsonl (live.blocks)  # fmt: skip
PREDICTED_METRICS = (*BLOCK_METRICS, "preemptions", "shed")
# the paired statistics (name, per-block metric): per round the arm's figure against the control's (latencies as
# a log ratio), the mean over rounds and its Student-t interval
STATISTICS = (("attainment", "slo_attainment"), ("goodput", "goodput_rps"), ("ttft_p90", "ttft_p90_s"),
              ("ttft_p99", "ttft_p99_s"))  # fmt: skip
MATERIAL_ATTAINMENT = 0.05  # a predicted difference the targets expect confirmed: 5 attainment points ...
MATERIAL_TTFT_P99 = 0.20  # ... or a TTFT p99 ratio at least 20% away from 1
SKILL_MIN, SKILL_STATISTIC = 0.5, "attainment"  # the simulator's squared error at most half a simple predictor's
CONFIRMED_SHARE = 0.75  # material predictions confirmed (3 of 4)
FIDELITY_P50, FIDELITY_P99 = 0.15, 0.25  # |predicted - live| / live, mean over cells
TAU_MIN = 0.6
FIDELITY_METRICS = {"p50": ("ttft_p50_s", "tpot_p50_s", "e2e_p50_s"), "p99": ("ttft_p99_s", "tpot_p99_s", "e2e_p99_s")}
REFERENCE_METRICS = ("slo_attainment", "goodput_rps", "ttft_p90_s", "ttft_p99_s")


Values = dict[str, dict[str, dict[str, float]]]  # cell -> arm -> metric -> predicted per-block mean


class VerdictError(ValueError):
    """A missing or malformed input, in one line that names the file."""


# ------------------------------------------------------------------------------------------------ inputs


def _read_raw(path: Path) -> bytes:
    """``path``'s bytes (a regular file within ``RECORD_BYTES``); ``VerdictError`` naming it otherwise."""
    try:
        return read_bytes(path, RECORD_BYTES)
    except FileNotFoundError:
        raise VerdictError(f"{path}: missing") from None
    except OSError as exc:
        raise VerdictError(f"{path}: cannot read: {exc.strerror}") from None
    except ValueError as exc:  # FileRefusedError names the file
        raise VerdictError(str(exc)) from None


def _read_json(path: Path) -> tuple[Any, bytes]:
    """``path`` parsed, and its bytes."""
    raw = _read_raw(path)
    try:
        return parse_json(raw.decode("utf-8")), raw
    except UnicodeDecodeError:
        raise VerdictError(f"{path}: not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        raise VerdictError(f"{path}:{exc.lineno}: not valid JSON: {exc.msg} (column {exc.colno})") from None


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _field(where: str, data: Mapping[str, Any], name: str, kind: str) -> Any:
    """``data[name]`` checked against ``kind`` (``str``, ``str?``, ``bool``, ``int``, ``count``, ``number``,
    ``number?``: a number, NaN or null, ``dict``, ``list``); ``VerdictError`` starting with ``where``."""
    if name not in data:
        raise VerdictError(f"{where}: missing field '{name}'")
    v = data[name]
    ok = {
        "str": isinstance(v, str), "str?": v is None or isinstance(v, str), "bool": isinstance(v, bool),
        "int": isinstance(v, int) and not isinstance(v, bool),
        "count": isinstance(v, int) and not isinstance(v, bool) and v >= 0,
        "number": _is_number(v) and math.isfinite(v), "number?": v is None or (_is_number(v) and not math.isinf(v)),
        "dict": isinstance(v, dict), "list": isinstance(v, list),
    }[kind]  # fmt: skip
    if not ok:
        raise VerdictError(f"{where}: field '{name}' must be {kind.replace('?', ' or null')}, got {v!r}")
    return v


def _figures(where: str, data: Mapping[str, Any], names: Sequence[str]) -> dict[str, float]:
    """``data``'s ``number?`` fields ``names`` as floats, NaN for null."""
    return {k: math.nan if (v := _field(where, data, k, "number?")) is None else float(v) for k in names}


def _names(where: str, v: Any, what: str) -> tuple[str, ...]:
    if not isinstance(v, list) or not v or not all(isinstance(x, str) and x for x in v) or len(set(v)) != len(v):
        raise VerdictError(f"{where}: '{what}' must be a non-empty list of distinct names, got {v!r}")
    return tuple(v)


@dataclass(frozen=True)
class Experiment:
    """What the verdict reads of ``experiment.json``; ``smoke_test``, ``unconfirmable`` (workload, the power
    note) and ``host`` (the host guard at the start; None: not recorded) are optional there."""

    cells: tuple[str, ...]
    arms: tuple[str, ...]
    reference: str | None = None
    finished: bool = True
    smoke_test: bool = False
    unconfirmable: tuple[tuple[str, str], ...] = ()
    host: dict[str, Any] | None = None

    @property
    def policies(self) -> tuple[str, ...]:
        """The arms ranked against each other: all but the A/A arm."""
        return tuple(a for a in self.arms if a != AA_ARM)


def read_experiment(path: Path) -> Experiment:
    """``experiment.json``'s ``cells``, ``arms`` (``fcfs`` first, two or more), ``reference``, ``finished``."""
    data, _ = _read_json(path)
    if not isinstance(data, dict):
        raise VerdictError(f"{path}: expected a JSON object")
    cells = _names(str(path), data.get("cells"), "cells")
    for c in cells:
        if "/" in c or c in (".", ".."):
            raise VerdictError(f"{path}: cell name {c!r} is not a folder name")
    arms = _names(str(path), data.get("arms"), "arms")
    if arms[0] != CONTROL or len(arms) < 2:
        raise VerdictError(f"{path}: 'arms' must start with the control '{CONTROL}' and hold another arm, got {arms}")
    reference = data.get("reference")
    if reference is not None and (not isinstance(reference, str) or not reference or reference in arms):
        raise VerdictError(f"{path}: 'reference' must be an arm name not in 'arms', got {reference!r}")
    finished = "started" not in data or data.get("finished") is not None
    smoke = bool(_field(str(path), data, "smoke_test", "bool")) if "smoke_test" in data else False
    unconfirmable = []
    workloads = _field(str(path), data, "workloads", "dict") if "workloads" in data else {}
    for w, info in workloads.items():
        where = f"{path}: workloads.{w}"
        if not isinstance(info, dict):
            raise VerdictError(f"{where}: expected a JSON object")
        if "confirmable" in info and not _field(where, info, "confirmable", "bool"):
            unconfirmable.append((w, _field(where, info, "power_note", "str")))
    host = _host_guard(f"{path}: host", data["host"]) if data.get("host") is not None else None
    return Experiment(cells, arms, reference, finished, smoke, tuple(unconfirmable), host)


def _host_guard(where: str, data: Any) -> dict[str, Any]:
    """``experiment.json``'s ``host``: ``override``, ``threshold`` and ``before`` (``others_share``,
    ``steal_share``: shares of the server's CPUs; ``load_average``)."""
    if not isinstance(data, dict):
        raise VerdictError(f"{where}: expected a JSON object")
    before = _field(where, data, "before", "dict")
    at = f"{where}.before"
    return {"override": _field(where, data, "override", "bool"),
            "threshold": _field(where, data, "threshold", "number"),
            "others_share": _field(at, before, "others_share", "number"),
            "steal_share": _field(at, before, "steal_share", "number"),
            "load_average": _field(at, before, "load_average", "list")}  # fmt: skip


@dataclass(frozen=True)
class PredictionFile:
    """One predictions file: its SHA-256, write time, the cells it predicts, whether a ``.sha256`` beside it matched."""

    path: Path
    sha256: str
    mtime: float
    cells: tuple[str, ...]
    recorded: bool
    stamped: bool = False


@dataclass(frozen=True)
class Predictions:
    """``values[cell][arm][metric]`` (NaN: none) and their files; an unpredicted A/A arm is the control."""

    values: Values
    files: tuple[PredictionFile, ...]

    def get(self, cell: str, arm: str, metric: str) -> float:
        arms = self.values[cell]
        return arms[arm if arm in arms else CONTROL][metric]


def prediction_paths(out: Path) -> list[Path]:
    """``OUT/predictions.json``, or else every ``OUT/predictions/*.json``; ``VerdictError`` when there is neither."""
    single = out / "predictions.json"
    if single.exists() or not (out / "predictions").is_dir():
        return [single]
    found = sorted((out / "predictions").glob("*.json"))
    if not found:
        raise VerdictError(f"{single}: missing, and {out / 'predictions'} holds no .json file")
    return found


def _recorded_sha(path: Path) -> str | None:
    """The SHA-256 ``path.with_suffix('.sha256')`` records (its first word), None without that file."""
    recorded_path = path.with_suffix(".sha256")
    if not recorded_path.exists():
        return None
    words = _read_raw(recorded_path).decode("ascii", errors="replace").split()
    recorded = words[0].lower() if words else ""
    if len(recorded) != 64 or any(ch not in "0123456789abcdef" for ch in recorded):
        raise VerdictError(f"{recorded_path}: expected a SHA-256 (64 hex digits), got {recorded[:80]!r}")
    return recorded


def _prediction_file(path: Path, experiment: Experiment) -> tuple[PredictionFile, Values]:
    data, raw = _read_json(path)
    where = str(path)
    if not isinstance(data, dict):
        raise VerdictError(f"{where}: expected a JSON object")
    if data.get("format") != PREDICTIONS_FORMAT or data.get("version") != 1:
        raise VerdictError(f"{where}: not a '{PREDICTIONS_FORMAT}' file of version 1")
    metrics = _field(where, data, "metrics", "list")
    if not all(isinstance(m, str) for m in metrics):
        raise VerdictError(f"{where}: 'metrics' must be a list of names")
    cells = _field(where, data, "cells", "dict")
    values: Values = {}
    for cell in (c for c in experiment.cells if c in cells):
        arms = cells[cell].get("arms") if isinstance(cells[cell], dict) else None
        if not isinstance(arms, dict):
            raise VerdictError(f"{where}: cells.{cell}: missing field 'arms' (an object)")
        values[cell] = {}
        for arm in (*experiment.arms, *([] if experiment.reference is None else [experiment.reference])):
            got = arms.get(arm)
            if got is None and arm in (AA_ARM, experiment.reference):
                continue  # the A/A arm is the control; the reference need not be predicted
            if not isinstance(got, dict):
                raise VerdictError(f"{where}: no predictions for arm '{arm}' of cell '{cell}'")
            values[cell][arm] = {**_figures(f"{where}: cells.{cell}.arms.{arm}", got, PREDICTED_METRICS),
                                 **predicted_components(f"{where}: cells.{cell}.arms.{arm}", got)}  # fmt: skip
    sha = hashlib.sha256(raw).hexdigest()
    recorded = _recorded_sha(path)
    if recorded is not None and recorded != sha:
        raise VerdictError(
            f"{path.with_suffix('.sha256')}: records {recorded} but {path.name}'s SHA-256 is {sha}: the predictions "
            "changed after the run began"
        )
    written = data.get("written")
    stamped = isinstance(written, (int, float)) and not isinstance(written, bool) and math.isfinite(written)
    when = float(written) if isinstance(written, (int, float)) and stamped else path.stat().st_mtime
    return PredictionFile(path, sha, when, tuple(values), recorded is not None, stamped), values


def read_predictions(paths: Sequence[Path], experiment: Experiment) -> Predictions:
    """The predictions files ``paths``, checked: every cell in exactly one file, every arm's ``PREDICTED_METRICS``
    (the A/A arm and the reference may be left out), the SHA-256 a ``.sha256`` beside a file records."""
    values: Values = {}
    files: list[PredictionFile] = []
    for path in paths:
        file, got = _prediction_file(path, experiment)
        for cell in got:
            if cell in values:
                other = next(f.path for f in files if cell in f.cells)
                raise VerdictError(f"{path}: predicts cell '{cell}' again (also in {other})")
        values.update(got)
        files.append(file)
    missing = [c for c in experiment.cells if c not in values]
    if missing:
        where = paths[0] if len(paths) == 1 else f"{paths[0].parent}/*.json"
        raise VerdictError(f"{where}: no predictions for cell '{missing[0]}' (cells.{missing[0]}.arms)")
    return Predictions(values, tuple(files))


@dataclass(frozen=True)
class Block:
    """One block of ``blocks.jsonl`` (``round`` -1: warm-up): ``metrics`` of ``BLOCK_METRICS``, the ``frontend``
    figures (empty: none), the host guard's ``host`` check (empty: none); counts NaN for vLLM's own scheduler,
    which logs none."""

    cell: str
    round: int
    arm: str
    policy: str | None
    warmup: bool
    stream_seed: int
    t_start: float
    t_end: float
    num_requests: int
    completed: int
    shed: float
    failed: int
    preemptions: float
    fallbacks: dict[str, int]
    steps: float
    step_time_median_s: float
    metrics: dict[str, float]
    line: int = 0
    frontend: dict[str, float] = field(default_factory=dict)
    host: dict[str, Any] = field(default_factory=dict)
    components: dict[str, dict[str, float]] | None = None  # each latency's parts (``live.split``); None: not logged

    @property
    def compared(self) -> bool:
        """A block of the paired comparison (not the warm-up)."""
        return not self.warmup and self.round >= 0


def _count_or_nan(where: str, data: Mapping[str, Any], name: str) -> float:
    """A count, or NaN for null (a figure only llmsched's adapter logs)."""
    if name in data and data[name] is None:
        return math.nan
    return float(_field(where, data, name, "count"))


def _host_check(where: str, data: Any) -> dict[str, Any]:
    """A block's ``host`` record: ``others_share``, ``steal_share`` (shares of the server's CPUs), ``step_ratio``
    (number or null), ``flag`` (the guard's reason, or null)."""
    if not isinstance(data, dict):
        raise VerdictError(f"{where}: expected a JSON object")
    kinds = (("others_share", "number"), ("steal_share", "number"), ("step_ratio", "number?"), ("flag", "str?"))
    return {k: _field(where, data, k, kind) for k, kind in kinds}


def _block(where: str, data: Any, cell: str) -> Block:
    if not isinstance(data, dict):
        raise VerdictError(f"{where}: expected a JSON object")
    if _field(where, data, "cell", "str") != cell:
        raise VerdictError(f"{where}: field 'cell' is {data['cell']!r}, the folder is cell '{cell}'")
    round_ = _field(where, data, "round", "int")
    if round_ < -1:
        raise VerdictError(f"{where}: field 'round' must be >= -1, got {round_}")
    fallbacks = _field(where, data, "fallbacks", "dict")
    for cause in fallbacks:
        _field(f"{where}: fallbacks", fallbacks, cause, "count")
    metrics = _figures(f"{where}: metrics", _field(where, data, "metrics", "dict"), BLOCK_METRICS)
    _field(where, data, "tenants", "dict")
    for i, r in enumerate(_field(where, data, "requests", "list")):
        at = f"{where}: requests[{i}]"
        if not isinstance(r, dict):
            raise VerdictError(f"{at}: expected a JSON object")
        _field(at, r, "tenant", "str")
        _field(at, r, "good", "bool")
        for name in ("ttft_s", "tpot_s", "e2e_s"):
            _field(at, r, name, "number?")
    host = _host_check(f"{where}: host", data["host"]) if data.get("host") is not None else {}
    step = _field(where, data, "step_time_median_s", "number?")
    front: dict[str, float] = {}
    if data.get("frontend") is not None:
        front = _figures(f"{where}: frontend", _field(where, data, "frontend", "dict"), FRONTEND_FIGURES)
    kinds = (("arm", "str"), ("policy", "str?"), ("warmup", "bool"), ("stream_seed", "int"), ("t_start", "number"),
             ("t_end", "number"), ("num_requests", "count"), ("completed", "count"), ("shed", None),
             ("failed", "count"), ("preemptions", None))  # fmt: skip
    f: dict[str, Any] = {k: _field(where, data, k, kind) if kind else _count_or_nan(where, data, k)
                          for k, kind in kinds}  # fmt: skip
    return Block(cell, round_, f["arm"], f["policy"], f["warmup"], f["stream_seed"], float(f["t_start"]),
                 float(f["t_end"]), f["num_requests"], f["completed"], f["shed"], f["failed"], f["preemptions"],
                 dict(fallbacks), _count_or_nan(where, data, "steps"), math.nan if step is None else float(step),
                 metrics, 0, front, host, read_components(where, data.get("components")))  # fmt: skip


def read_blocks(path: Path, cell: str, experiment: Experiment) -> list[Block]:
    """The blocks of ``cells/<cell>/blocks.jsonl`` in file order, checked (no (round, arm) compared twice)."""
    raw = _read_raw(path)
    known = set(experiment.arms) | ({experiment.reference} if experiment.reference else set())
    blocks: list[Block] = []
    seen: dict[tuple[int, str], int] = {}
    for n, data in jsonl_records(path, raw.decode("utf-8", errors="replace")):
        where = f"{path}:{n}"
        b = _block(where, data, cell)
        if b.arm not in known:
            raise VerdictError(f"{where}: arm '{b.arm}' is not an arm of experiment.json ({sorted(known)})")
        if b.compared and b.arm != experiment.reference:
            if (b.round, b.arm) in seen:
                raise VerdictError(f"{where}: round {b.round} of arm '{b.arm}' again (line {seen[(b.round, b.arm)]})")
            seen[(b.round, b.arm)] = n
        blocks.append(dataclasses.replace(b, line=n))
    if not blocks:
        raise VerdictError(f"{path}: no blocks")
    return blocks


def read_frontend(path: Path) -> dict[str, dict[float, dict[str, float]]]:
    """``frontend.json``'s figures per cell by block ``t_start``; empty when there is no such file."""
    if not path.exists():
        return {}
    data, _ = _read_json(path)
    if not isinstance(data, dict):
        raise VerdictError(f"{path}: expected a JSON object of cells")
    out: dict[str, dict[float, dict[str, float]]] = {}
    for cell, rows in data.items():
        if not isinstance(rows, list):
            raise VerdictError(f"{path}: cell '{cell}': expected a list of blocks")
        table: dict[float, dict[str, float]] = {}
        for i, row in enumerate(rows):
            where = f"{path}: cell '{cell}' entry {i}"
            if not isinstance(row, dict):
                raise VerdictError(f"{where}: expected a JSON object")
            t = float(_field(where, row, "t_start", "number"))  # checked first
            table[t] = _figures(where, row, FRONTEND_FIGURES)
        out[cell] = table
    return out


def _with_frontend(blocks: Sequence[Block], figures: Mapping[float, dict[str, float]]) -> list[Block]:
    """``blocks``, each without figures of its own given those of ``figures`` recorded at its ``t_start``."""
    out = []
    for b in blocks:
        found = figures.get(b.t_start)
        out.append(dataclasses.replace(b, frontend=found) if not b.frontend and found is not None else b)
    return out


# ------------------------------------------------------------------------------------------- statistics


@dataclass(frozen=True)
class Interval:
    """An estimate and its 95% interval over ``n`` rounds (NaN bounds: fewer than two rounds)."""

    estimate: float
    low: float
    high: float
    n: int

    @property
    def measured(self) -> bool:
        """Both bounds are known."""
        return math.isfinite(self.low) and math.isfinite(self.high)

    def contains(self, x: float) -> bool:
        """``x`` lies in the interval (False when either is NaN)."""
        return self.measured and self.low <= x <= self.high


def paired_interval(differences: Sequence[float]) -> Interval:
    """The mean of the finite ``differences`` (one per round) and its 95% Student-t interval."""
    d = [x for x in differences if math.isfinite(x)]
    if not d:
        return Interval(math.nan, math.nan, math.nan, 0)
    if len(d) < 2:
        return Interval(d[0], math.nan, math.nan, 1)
    mean, half = mean_ci95(d)
    return Interval(mean, mean - half, mean + half, len(d))


def kendall_tau_b(x: Sequence[float], y: Sequence[float]) -> float:
    """Kendall's tau-b of the pairs (x[i], y[i]) with both finite; NaN with fewer than two, or a side all ties."""
    if len(x) != len(y):
        raise ValueError(f"kendall_tau_b: {len(x)} values against {len(y)}")
    pts = [(a, b) for a, b in zip(x, y, strict=True) if math.isfinite(a) and math.isfinite(b)]
    n = len(pts)
    concordant = discordant = tied_x = tied_y = 0
    for i in range(n):
        for j in range(i + 1, n):
            dx, dy = pts[i][0] - pts[j][0], pts[i][1] - pts[j][1]
            tied_x += dx == 0
            tied_y += dy == 0
            if dx * dy > 0:
                concordant += 1
            elif dx * dy < 0:
                discordant += 1
    n0 = n * (n - 1) // 2
    denom = math.sqrt((n0 - tied_x) * (n0 - tied_y))
    return (concordant - discordant) / denom if denom > 0 else math.nan


# ------------------------------------------------------------------------------------------- the verdict


def _sign(x: float) -> int:
    return (x > 0) - (x < 0)


@dataclass
class CellResult:
    """One cell's figures (the rows of the report's tables, as dicts of plain values)."""

    name: str
    paired: list[dict[str, Any]] = field(default_factory=list)
    against: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # arm -> the paired rows against it
    tau: dict[str, float] = field(default_factory=dict)
    operations: list[dict[str, Any]] = field(default_factory=list)
    drift: dict[str, float] = field(default_factory=dict)
    fidelity: list[dict[str, Any]] = field(default_factory=list)
    reference: list[dict[str, Any]] = field(default_factory=list)
    frontend: list[dict[str, Any]] = field(default_factory=list)
    frontend_rho: float = math.nan
    host_checked: int = 0  # blocks with a host check
    split: list[dict[str, Any]] = field(default_factory=list)  # each latency's error by part (``live.split``)
    flagged: list[dict[str, Any]] = field(default_factory=list)  # the blocks the host guard flagged
    warnings: list[str] = field(default_factory=list)


def _by_round(blocks: Sequence[Block], arm: str) -> dict[int, Block]:
    return {b.round: b for b in blocks if b.compared and b.arm == arm}


def _paired_rows(
    cell: str, blocks: Sequence[Block], exp: Experiment, pred: Predictions, against: str = CONTROL
) -> list[dict[str, Any]]:
    """Each arm's paired differences against ``against`` (another arm than the control: the A/A arm left out)."""
    control = _by_round(blocks, against)
    rows = []
    arms = exp.arms[1:] if against == CONTROL else [a for a in exp.arms if a not in (against, AA_ARM)]
    for arm in arms:
        mine = _by_round(blocks, arm)
        rounds = sorted(set(control) & set(mine))
        for name, metric in STATISTICS:
            iv = paired_interval(
                [paired_difference(metric, mine[r].metrics[metric], control[r].metrics[metric]) for r in rounds]
            )
            predicted = paired_difference(metric, pred.get(cell, arm, metric), pred.get(cell, against, metric))
            known = math.isfinite(predicted) and math.isfinite(iv.estimate) and predicted != 0
            rows.append({"cell": cell, "arm": arm, "statistic": name, "metric": metric, "rounds": iv.n,
                         "live": iv.estimate, "low": iv.low, "high": iv.high, "predicted": predicted,
                         "sign_agrees": _sign(predicted) == _sign(iv.estimate) if known else None,
                         "inside": iv.contains(predicted) if iv.measured and math.isfinite(predicted) else None,
                         "excludes_zero": iv.measured and not iv.contains(0.0),
                         # levels: the arm's mean per-block figure over the paired rounds, its prediction, and
                         # the prediction of the arm it is paired with (the calibration-only predictor)
                         "live_level": _mean([mine[r].metrics[metric] for r in rounds]),
                         "predicted_level": pred.get(cell, arm, metric),
                         "calibration_level": pred.get(cell, against, metric)})  # fmt: skip
    return rows


def _mean(values: Sequence[float]) -> float:
    finite = [v for v in values if math.isfinite(v)]
    return float(np.mean(finite)) if finite else math.nan


def _operations(cell: str, blocks: Sequence[Block], exp: Experiment, pred: Predictions) -> list[dict[str, Any]]:
    rows = []
    arms = [*exp.arms, *([exp.reference] if exp.reference else [])]
    for arm in arms:
        # the reference's blocks (its own instance, outside the rounds) count unless warm-up; the others: compared
        mine = [b for b in blocks if b.arm == arm and (not b.warmup if arm == exp.reference else b.compared)]
        if not mine:
            continue
        causes: dict[str, float] = {}
        for b in mine:
            for cause, n in b.fallbacks.items():
                causes[cause] = causes.get(cause, 0.0) + n / len(mine)
        predicted = pred.values[cell].get(arm if arm != AA_ARM else CONTROL, {})
        rows.append({"arm": arm, "blocks": len(mine), "preemptions": _mean([b.preemptions for b in mine]),
                     "predicted_preemptions": predicted.get("preemptions", math.nan),
                     "shed": _mean([b.shed for b in mine]), "predicted_shed": predicted.get("shed", math.nan),
                     "failed": _mean([b.failed for b in mine]), "fallbacks": sum(causes.values()),
                     "fallback_causes": dict(sorted(causes.items()))})  # fmt: skip
    return rows


def _drift(blocks: Sequence[Block]) -> dict[str, float]:
    """The control's median step period per block: the medians of its first and last third of blocks, their
    relative change, the least-squares slope per hour relative to the mean; empty with fewer than three."""
    pts = sorted((b.t_start, b.step_time_median_s) for b in blocks if b.compared and b.arm == CONTROL)
    pts = [(t, s) for t, s in pts if math.isfinite(s)]
    if len(pts) < 3:
        return {}
    k = len(pts) // 3
    first = float(np.median([s for _, s in pts[:k]]))
    last = float(np.median([s for _, s in pts[-k:]]))
    hours = np.array([(t - pts[0][0]) / 3600 for t, _ in pts])
    steps = np.array([s for _, s in pts])
    slope = float(np.polyfit(hours, steps, 1)[0]) if hours[-1] > 0 else math.nan
    return {"blocks": float(len(pts)), "span_h": float(hours[-1]), "first_third_s": first, "last_third_s": last,
            "change": last / first - 1 if first > 0 else math.nan,
            "slope_per_h": slope / float(steps.mean()) if steps.mean() > 0 else math.nan}  # fmt: skip


def _fidelity(cell: str, blocks: Sequence[Block], exp: Experiment, pred: Predictions) -> list[dict[str, Any]]:
    """|predicted - live| / live per policy and latency at p50 and p99, and their means per quantile."""
    rows = []
    for arm in exp.policies:
        mine = [b for b in blocks if b.compared and b.arm == arm]
        row: dict[str, Any] = {"cell": cell, "arm": arm}
        for q, metrics in FIDELITY_METRICS.items():
            errors = []
            for m in metrics:
                live = _mean([b.metrics[m] for b in mine])
                err = abs(pred.get(cell, arm, m) - live) / live if live > 0 else math.nan
                row[m] = err
                errors.append(err)
            row[q] = _mean(errors) if all(math.isfinite(e) for e in errors) else math.nan
        rows.append(row)
    return rows


def _reference(blocks: Sequence[Block], exp: Experiment) -> list[dict[str, Any]]:
    """Per-block figures (mean, 95% t interval) of the reference and of the control on the reference's rounds."""
    if exp.reference is None:
        return []
    ref = [b for b in blocks if b.arm == exp.reference and not b.warmup]
    if not ref:
        return []
    rounds = {b.round for b in ref}
    rows = []
    for arm, mine in ((exp.reference, ref), (CONTROL, [b for b in blocks if b.compared and b.arm == CONTROL
                                                       and b.round in rounds])):  # fmt: skip
        row: dict[str, Any] = {"arm": arm, "blocks": len(mine)}
        for m in REFERENCE_METRICS:
            row[m] = paired_interval([b.metrics[m] for b in mine])  # the mean and t interval of the values
        rows.append(row)
    return rows


def _spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman's rank correlation (average ranks for ties); NaN with fewer than three pairs or a constant side."""
    pairs = [(a, b) for a, b in zip(x, y, strict=True) if math.isfinite(a) and math.isfinite(b)]
    if len(pairs) < 3:
        return math.nan

    def ranks(v: Sequence[float]) -> np.ndarray:
        arr = np.asarray(v, dtype=np.float64)
        order = arr.argsort(kind="stable")
        r = np.empty(len(arr))
        r[order] = np.arange(len(arr), dtype=np.float64)
        for value in np.unique(arr):  # ties share their mean rank
            r[arr == value] = r[arr == value].mean()
        return r

    rx, ry = ranks([a for a, _ in pairs]), ranks([b for _, b in pairs])
    if rx.std() == 0 or ry.std() == 0:
        return math.nan
    return float(np.corrcoef(rx, ry)[0, 1])


def _frontend(blocks: Sequence[Block], exp: Experiment) -> tuple[list[dict[str, Any]], float]:
    """``live.frontend.arm_figures`` per arm, and Spearman's correlation of steps/s and the late share."""
    rows = []
    for arm in exp.arms:
        mine = [b.frontend for b in blocks if b.compared and b.arm == arm and b.frontend]
        if mine:
            rows.append({"arm": arm, **arm_figures(mine)})
    compared = [b.frontend for b in blocks if b.compared and b.arm in exp.arms and b.frontend]
    rho = _spearman([f["steps_per_s"] for f in compared], [f["late_share"] for f in compared])
    return rows, rho


def _warnings(cell: str, blocks: Sequence[Block], exp: Experiment) -> list[str]:
    """Rounds an arm is missing from, and rounds whose blocks differ in stream or request count."""
    out = []
    rounds: dict[int, list[Block]] = {}
    for b in blocks:
        if b.compared and b.arm in exp.arms:
            rounds.setdefault(b.round, []).append(b)
    for r, bs in sorted(rounds.items()):
        missing = [a for a in exp.arms if a not in {b.arm for b in bs}]
        if missing:
            out.append(f"cell {cell}, round {r}: no block of {', '.join(missing)} (the round pairs without it)")
        if len({b.stream_seed for b in bs}) > 1 or len({b.num_requests for b in bs}) > 1:
            out.append(f"cell {cell}, round {r}: its blocks differ in stream_seed or num_requests (not one stream)")
    return out


def analyse_cell(
    cell: str, blocks: Sequence[Block], exp: Experiment, pred: Predictions, against: Sequence[str] = ()
) -> CellResult:
    """Every figure of one cell's blocks; ``against``: arms the others are also paired with (``--against``)."""
    result = CellResult(cell)
    result.paired = _paired_rows(cell, blocks, exp, pred)
    result.against = {arm: _paired_rows(cell, blocks, exp, pred, arm) for arm in against}
    for name in ("attainment", "goodput"):
        live = {r["arm"]: r["live"] for r in result.paired if r["statistic"] == name}
        predicted = {r["arm"]: r["predicted"] for r in result.paired if r["statistic"] == name}
        live[CONTROL] = predicted[CONTROL] = 0.0  # the control against itself
        arms = exp.policies
        result.tau[name] = kendall_tau_b([predicted[a] for a in arms], [live[a] for a in arms])
    result.operations = _operations(cell, blocks, exp, pred)
    result.drift = _drift(blocks)
    result.fidelity = _fidelity(cell, blocks, exp, pred)
    result.reference = _reference(blocks, exp)
    result.frontend, result.frontend_rho = _frontend(blocks, exp)
    result.host_checked = sum(1 for b in blocks if b.host)
    result.flagged = [{"round": b.round, "arm": b.arm, **b.host} for b in blocks if b.host.get("flag") is not None]
    result.warnings = _warnings(cell, blocks, exp)
    parts = {arm: [b.components for b in blocks if b.compared and b.arm == arm] for arm in exp.policies}
    predicted = pred.values.get(cell, {})
    result.split = split_rows(cell, parts, {arm: predicted.get(arm, predicted.get(CONTROL, {})) for arm in parts})
    return result


@dataclass(frozen=True)
class Target:
    """One of the issue's targets: ``status`` is ``met``, ``not met`` or ``not measurable``."""

    name: str
    statistic: str
    status: str
    detail: str


def _judge(passed: int, failed: int, unknown: int, share: float) -> str:
    """``met`` when ``share`` of the cases passed, ``not met`` when it cannot even if every unmeasured case
    passed, ``not measurable`` otherwise (or with no case)."""
    total = passed + failed + unknown
    if total == 0:
        return "not measurable"
    if passed >= share * total - 1e-9:
        return "met"
    return "not measurable" if passed + unknown >= share * total - 1e-9 else "not met"


def _material(r: Mapping[str, Any]) -> bool:
    """A paired row whose prediction the targets expect confirmed (``MATERIAL_ATTAINMENT``, ``MATERIAL_TTFT_P99``)."""
    p = r["predicted"]
    if r["statistic"] == "attainment":
        return abs(p) >= MATERIAL_ATTAINMENT - 1e-12
    return r["statistic"] == "ttft_p99" and abs(math.exp(p) - 1) >= MATERIAL_TTFT_P99 - 1e-12


def skill_score(errors: Sequence[float], reference_errors: Sequence[float]) -> tuple[float, int]:
    """``1 - sum e^2 / sum r^2`` over the pairs (e, r) of ``errors`` and ``reference_errors`` both finite, and the
    number of pairs; NaN with no pair or ``sum r^2`` 0."""
    if len(errors) != len(reference_errors):
        raise ValueError(f"skill_score: {len(errors)} errors against {len(reference_errors)}")
    pairs = [(e, r) for e, r in zip(errors, reference_errors, strict=True) if math.isfinite(e) and math.isfinite(r)]
    denominator = sum(r * r for _, r in pairs)
    if not pairs or denominator == 0:
        return math.nan, len(pairs)
    return 1.0 - sum(e * e for e, _ in pairs) / denominator, len(pairs)


def skill_rows(cells: Sequence[CellResult]) -> list[dict[str, Any]]:
    """Per statistic, over the (cell, arm other than the A/A arm) rows against the control: the simulator's skill
    against ``no difference`` (on the paired differences) and against the calibration-only predictor (the
    simulator's control for every arm, on the arms' levels), each with its number of rows."""
    rows = [r for c in cells for r in c.paired if r["arm"] != AA_ARM]
    out = []
    for name, metric in STATISTICS:
        mine = [r for r in rows if r["statistic"] == name]
        null = skill_score([r["predicted"] - r["live"] for r in mine], [-r["live"] for r in mine])
        calibration = skill_score(
            [paired_difference(metric, r["predicted_level"], r["live_level"]) for r in mine],
            [paired_difference(metric, r["calibration_level"], r["live_level"]) for r in mine],
        )
        out.append({"statistic": name, "metric": metric, "null": null[0], "null_rows": null[1],
                    "calibration": calibration[0], "calibration_rows": calibration[1]})  # fmt: skip
    return out


def _targets(cells: Sequence[CellResult], exp: Experiment, skills: Sequence[Mapping[str, Any]]) -> list[Target]:
    out = []
    # 1. A/A
    aa = [r for c in cells for r in c.paired if r["arm"] == AA_ARM]
    passed = sum(1 for r in aa if r["low"] <= 0 <= r["high"])
    unknown = sum(1 for r in aa if not math.isfinite(r["low"]))
    k = len(aa) - unknown  # measured: with no true difference all k contain 0 with probability 0.95^k
    detail = f"no A/A arm '{AA_ARM}' in the rounds"
    if aa:
        detail = f"{passed} of {len(aa)} A/A intervals contain 0" + (f", {unknown} not measured" if unknown else "")
        detail += f" (with no difference all {k} would with probability 0.95^{k} = {0.95**k:.2f})" if k else ""
    out.append(Target(
        "A/A intervals all contain 0",
        f"the '{AA_ARM}' arm's 95% intervals against '{CONTROL}' (paired t over rounds): attainment, goodput, "
        "TTFT p90 and p99",
        _judge(passed, len(aa) - passed - unknown, unknown, 1.0), detail))  # fmt: skip
    # 2. material predictions confirmed
    material = [r for c in cells for r in c.paired if r["arm"] != AA_ARM and _material(r)]
    ok = [r for r in material if r["sign_agrees"] and r["excludes_zero"]]
    unknown = sum(1 for r in material if not math.isfinite(r["low"]))
    listed = "; ".join(
        f"{r['cell']}/{r['arm']} {r['statistic']}: predicted {format_difference(r['metric'], r['predicted'])}, live "
        f"{format_difference(r['metric'], r['live'])} {_interval_text(r)}" + (" confirmed" if r in ok else "")
        for r in material
    )
    out.append(Target(
        f"predicted differences of >= {MATERIAL_ATTAINMENT * 100:.0f} attainment points or >= "
        f"{MATERIAL_TTFT_P99:.0%} in TTFT p99 confirmed in >= {CONFIRMED_SHARE:.0%} of cases",
        "per (cell, arm) so predicted: the live interval (paired t over rounds; TTFT p99: of the per-round log "
        "ratio of the blocks' p99s) excludes 0 and the live difference has the predicted sign",
        _judge(len(ok), len(material) - len(ok) - unknown, unknown, CONFIRMED_SHARE),
        f"{len(ok)} of {len(material)} confirmed" + (f": {listed}" if listed else " (no such prediction)"),
    ))  # fmt: skip
    # 3. skill against the simple predictors
    for key, name, formula in (
        ("null", "'no difference'", "1 - sum (predicted - live)^2 / sum (0 - live)^2 over the paired differences"),
        ("calibration", f"the calibration-only predictor (the simulator's '{CONTROL}' for every arm)",
         f"1 - sum (predicted - live)^2 / sum (predicted {CONTROL} - live)^2 over the arms' levels (live: the "
         "mean per-block figure over the paired rounds)"),
    ):  # fmt: skip
        main_skill = next(r for r in skills if r["statistic"] == SKILL_STATISTIC)[key]
        status = "not measurable" if not math.isfinite(main_skill) else "met" if main_skill >= SKILL_MIN else "not met"
        out.append(Target(
            f"skill against {name} >= {SKILL_MIN:g} on {SKILL_STATISTIC}",
            f"per statistic, every (cell, arm other than the A/A arm): {formula}, in the verdict's units "
            "(attainment as a fraction, goodput in req/s, latencies as log ratios); 1 is exact, 0 no better than "
            "the simple predictor",
            status, "; ".join(f"{r['statistic']} {_num(r[key], '.2f')} ({r[key + '_rows']} rows)" for r in skills),
        ))  # fmt: skip
    # 4. held-out fidelity
    limits = {"p50": FIDELITY_P50, "p99": FIDELITY_P99}
    failed = unknown = 0
    shown = []
    for arm in exp.policies:
        parts = []
        for q, limit in limits.items():
            errors = [r[q] for c in cells for r in c.fidelity if r["arm"] == arm]
            mean = _mean(errors)  # over the cells measured; a cell without a value makes it not measurable
            missing = sum(1 for e in errors if not math.isfinite(e))
            unknown += bool(missing) or not math.isfinite(mean)
            failed += not missing and math.isfinite(mean) and mean > limit
            parts.append(f"{q} {_pct(mean)}" + (f" ({missing} of {len(errors)} cells not measured)" if missing else ""))
        shown.append(f"{arm} " + ", ".join(parts))
    out.append(Target(
        f"held-out fidelity within {FIDELITY_P50:.0%} at p50 and {FIDELITY_P99:.0%} at p99",
        "per policy: |predicted - live| / live of TTFT, TPOT and E2E (per-block figure, mean over the arm's "
        "blocks), averaged over the three latencies per cell, then over cells",
        _judge(len(exp.policies) * len(limits) - failed - unknown, failed, unknown, 1.0), "; ".join(shown),
    ))  # fmt: skip
    # 5. rankings
    taus = [(c.name, c.tau["attainment"]) for c in cells]
    failed = sum(1 for _, t in taus if math.isfinite(t) and t < TAU_MIN)
    unknown = sum(1 for _, t in taus if not math.isfinite(t))
    out.append(Target(
        f"Kendall's tau >= {TAU_MIN} in every cell",
        "tau-b between the predicted and the live ranking of the policies (A/A arm left out, fcfs at 0) on "
        "the attainment difference",
        _judge(len(taus) - failed - unknown, failed, unknown, 1.0),
        "; ".join(f"{c} {_num(t, '.2f')}" for c, t in taus) + (" (NaN: a side all ties)" if unknown else ""),
    ))  # fmt: skip
    return out


# -------------------------------------------------------------------------------------------- the report


def _pct(x: float) -> str:
    return f"{x:.1%}" if math.isfinite(x) else "n/a"


def _num(x: float, spec: str = ".3g") -> str:
    return format(x, spec) if math.isfinite(x) else "n/a"


def _interval_text(r: Mapping[str, Any]) -> str:
    if not math.isfinite(r["low"]):
        return "n/a"
    return f"[{format_difference(r['metric'], r['low'])}, {format_difference(r['metric'], r['high'])}]"


def _yes(v: bool | None) -> str:
    return "n/a" if v is None else ("yes" if v else "**no**")


_md = markdown_table


def _paired_table(cells: Sequence[CellResult], against: str = CONTROL) -> str:
    header = ("cell", "arm", "statistic", "rounds", "live", "95% interval", "predicted", "sign agrees", "inside")
    rows = [
        [r["cell"], r["arm"], r["statistic"], str(r["rounds"]), format_difference(r["metric"], r["live"]),
         _interval_text(r), format_difference(r["metric"], r["predicted"]), _yes(r["sign_agrees"]), _yes(r["inside"])]
        for c in cells
        for r in (c.paired if against == CONTROL else c.against[against])
    ]  # fmt: skip
    return _md(header, rows)


def _targets_table(targets: Sequence[Target]) -> str:
    return _md(("target", "status", "numbers"), [[t.name, f"**{t.status}**", t.detail] for t in targets])


def _aa_table(cells: Sequence[CellResult]) -> str:
    rows = [
        [r["cell"], r["statistic"], str(r["rounds"]), format_difference(r["metric"], r["live"]), _interval_text(r),
         _yes(r["low"] <= 0 <= r["high"]) if math.isfinite(r["low"]) else "n/a"]
        for c in cells
        for r in c.paired
        if r["arm"] == AA_ARM
    ]  # fmt: skip
    return _md(("cell", "statistic", "rounds", "live", "95% interval", "contains 0"), rows)


def _operations_table(cells: Sequence[CellResult]) -> str:
    rows = []
    for c in cells:
        for r in c.operations:
            causes = ", ".join(f"{k} {v:.3g}" for k, v in r["fallback_causes"].items())
            rows.append(
                [c.name, r["arm"], str(r["blocks"]), _num(r["preemptions"]), _num(r["predicted_preemptions"]),
                 _num(r["shed"]), _num(r["predicted_shed"]), _num(r["failed"]),
                 _num(r["fallbacks"]) + (f" ({causes})" if causes else "")]
            )  # fmt: skip
    header = ("cell", "arm", "blocks", "preemptions", "predicted", "shed", "predicted", "failed", "fallbacks")
    return _md(header, rows)


def _drift_table(cells: Sequence[CellResult]) -> str:
    rows = []
    for c in cells:
        d = c.drift
        if not d:
            rows.append([c.name, "< 3", "", "", "", "", ""])
            continue
        rows.append(
            [c.name, _num(d["blocks"], ".0f"), _num(d["span_h"], ".2f"), _num(1e3 * d["first_third_s"]),
             _num(1e3 * d["last_third_s"]), _pct(d["change"]), _pct(d["slope_per_h"])]
        )  # fmt: skip
    header = ("cell", "blocks", "span (h)", "first third (ms)", "last third (ms)", "change", "slope (/h)")
    return _md(header, rows)


def _fidelity_table(cells: Sequence[CellResult]) -> str:
    metrics = [m for group in FIDELITY_METRICS.values() for m in group]
    rows = [
        [r["cell"], r["arm"], *(_pct(r[m]) for m in metrics), _pct(r["p50"]), _pct(r["p99"])]
        for c in cells
        for r in c.fidelity
    ]
    return _md(("cell", "arm", *(m.removesuffix("_s") for m in metrics), "mean p50", "mean p99"), rows)


def _reference_table(cells: Sequence[CellResult]) -> str:
    rows = []
    for c in cells:
        for r in c.reference:
            figures = [
                _num(iv.estimate, ".4g") + (f" ± {(iv.high - iv.low) / 2:.3g}" if iv.measured else "")
                for iv in (r[m] for m in REFERENCE_METRICS)
            ]
            rows.append([c.name, r["arm"], str(r["blocks"]), *figures])
    if not rows:
        return "No reference blocks."
    return _md(("cell", "arm", "blocks", "attainment", "goodput (req/s)", "TTFT p90 (s)", "TTFT p99 (s)"), rows)


def _frontend_table(cells: Sequence[CellResult]) -> str:
    rows = [
        [c.name, r["arm"], str(r["blocks"]), _pct(r["late_share"]), str(r["late_blocks"]), _num(r["send_lag_max_s"]),
         _num(1e3 * r["frontend_p90_s"]), _num(r["steps_per_s"], ".0f")]
        for c in cells
        for r in c.frontend
    ]  # fmt: skip
    header = ("cell", "arm", "blocks", "sent late", "blocks > 5% late", "largest lag (s)",
              "client - engine TTFT p90 (ms)", "engine steps/s")  # fmt: skip
    rho = "; ".join(f"{c.name} {_num(c.frontend_rho, '.2f')}" for c in cells if c.frontend)
    note = f"Spearman's correlation over the compared blocks, engine steps/s against the share sent late: {rho}."
    return _md(header, rows) + "\n\n" + note


def _skill_table(skills: Sequence[Mapping[str, Any]]) -> str:
    rows = [[r["statistic"], str(r["null_rows"]), _num(r["null"], ".2f"), str(r["calibration_rows"]),
             _num(r["calibration"], ".2f")] for r in skills]  # fmt: skip
    return _md(("statistic", "rows", "against 'no difference'", "rows", "against calibration-only"), rows)


def _inside_line(cells: Sequence[CellResult]) -> str:
    """How often the prediction, and how often 0, lies inside the live interval (a figure, not a target)."""
    rows = [r for c in cells for r in c.paired if r["arm"] != AA_ARM and math.isfinite(r["low"])]
    inside = sum(1 for r in rows if r["inside"])
    zero = sum(1 for r in rows if not r["excludes_zero"])
    return (f"The prediction inside the live 95% interval: {inside} of {len(rows)} inside; 'no difference' (0): "
            f"{zero} of {len(rows)} (not a target: a predictor of no difference meets it wherever the live "
            "intervals are wide).")  # fmt: skip


def _first_line(exp: Experiment, cells: Sequence[CellResult]) -> str:
    """What the run can and cannot do, from ``experiment.json`` and the blocks' host checks ("": nothing to say)."""
    parts = ["Smoke test (--quick): confirms nothing"] if exp.smoke_test else []
    parts += [f"This run can confirm nothing on {w}: {note.rstrip('.')}" for w, note in exp.unconfirmable]
    if exp.host is not None and exp.host["override"]:
        parts.append(f"Host guard overridden (others used {_pct(exp.host['others_share'])} of the server's CPUs at "
                     f"start, threshold {_pct(exp.host['threshold'])})")  # fmt: skip
    flagged = [c.name for c in cells if c.flagged]
    if flagged:
        n = sum(len(c.flagged) for c in cells)
        parts.append(f"{n} block{'s' if n > 1 else ''} flagged by the host guard (cells: {', '.join(flagged)})")
    return ". ".join(parts) + "." if parts else ""


def _host_text(exp: Experiment, cells: Sequence[CellResult]) -> str:
    """The host guard at the start and the blocks it flagged."""
    lines = []
    if exp.host is not None:
        h = exp.host
        load = ", ".join(_num(float(x), ".2f") if _is_number(x) else str(x) for x in h["load_average"])
        lines.append(f"At the start, other processes used {_pct(h['others_share'])} of the server's CPUs (steal "
                     f"{_pct(h['steal_share'])}, load average {load}); the guard's threshold "
                     f"{_pct(h['threshold'])}{', overridden' if h['override'] else ''}.")  # fmt: skip
    rows = [[c.name, str(r["round"]) if r["round"] >= 0 else "warm-up", r["arm"], r["flag"], _pct(r["others_share"]),
             _pct(r["steal_share"]), _num(r["step_ratio"], ".2f") if r["step_ratio"] is not None else "n/a"]
            for c in cells for r in c.flagged]  # fmt: skip
    checked = sum(c.host_checked for c in cells)
    if not rows:
        return "\n\n".join([*lines, f"No block flagged by the host guard ({checked} checked)."])
    header = ("cell", "round", "arm", "flag", "others' share", "steal share", "step ratio")
    return "\n\n".join([*lines, f"The blocks the host guard flagged ({len(rows)} of {checked} checked):",
                         _md(header, rows)])  # fmt: skip


def _render(out: Path, exp: Experiment, pred: Predictions, verdict: Verdict) -> str:
    cells, targets = verdict.cells, verdict.targets
    files = [
        f"- predictions: `{f.path.relative_to(out) if f.path.is_relative_to(out) else f.path}` ({', '.join(f.cells)}), "
        f"sha256 `{f.sha256}`" + (" (matches the `.sha256` recorded beside it)" if f.recorded else " (no `.sha256`)")
        for f in pred.files
    ]
    reference = f"; reference `{exp.reference}` (absolute figures only)" if exp.reference else ""
    blocks = [  # joined by blank lines
        *([verdict.first_line] if verdict.first_line else []),
        f"# Live verdict: {out.name}",
        "\n".join([*files, f"- cells: {', '.join(exp.cells)}; arms: {', '.join(exp.arms)} (control `{CONTROL}`, "
                              f"A/A arm `{AA_ARM}`){reference}"]),
        *(f"**WARNING: {w}**" for w in verdict.warnings),
        "## Targets", _targets_table(targets), "The statistic each target uses:",
        "\n".join(f"- {t.name}: {t.statistic}." for t in targets),
        "## Paired differences against fcfs",
        "Per round, the arm's block against the control's block of the same round (warm-up excluded). "
        "Attainment in points and goodput in req/s: mean difference, 95% Student-t interval. TTFT p90 and p99 "
        "(each block's own percentile): mean of the per-round log ratio, t interval, shown as a ratio. Predicted: "
        "the same difference of the simulator's per-block means.",
        _paired_table(cells),
        *(line for arm in (cells[0].against if cells else ())
          for line in (f"## Paired differences against {arm}", f"As above, with `{arm}`'s block of each round as the "
                       "control (the A/A arm left out).", _paired_table(cells, arm))),
        "## Skill: the simulator against simple predictors",
        "Per statistic, over every (cell, arm other than the A/A arm) paired with fcfs, in the verdict's units "
        "(attainment as a fraction, goodput in req/s, latencies as log ratios). Against 'no difference': "
        "1 - Σ(predicted - live)² / Σ(0 - live)² on the paired differences. Against the calibration-only "
        "predictor (the simulator's fcfs figure for every arm): 1 - Σ(predicted - live)² / Σ(predicted fcfs - "
        "live)² on the arms' levels (live: the arm's mean per-block figure over the paired rounds). 1: exact; 0: "
        "no better than the simple predictor; below 0: worse.",
        _skill_table(verdict.skills), _inside_line(cells),
        "## Rankings: Kendall's tau-b, predicted against live",
        _md(("cell", "attainment", "goodput"), [[c.name, _num(c.tau["attainment"], ".2f"),
                                                _num(c.tau["goodput"], ".2f")] for c in cells]),
        "## A/A: fcfs against fcfs", _aa_table(cells),
        "## Preemptions, shed and failed requests and fallbacks per block", _operations_table(cells),
        "## Step-time drift of the fcfs control",
        "The server's median engine-step period per fcfs block, by block start: the median over the first and "
        "the last third of the blocks, and the least-squares slope relative to the mean.",
        _drift_table(cells),
        "## Held-out fidelity: |predicted - live| / live",
        "Live: the mean over the arm's compared blocks of the per-block figure, as predicted.",
        _fidelity_table(cells),
    ]  # fmt: skip
    if any(c.frontend for c in cells):
        blocks += [
            "## The front end: did the requests reach the engine on time?",
            f"Per block: the share of requests the client sent more than {LATE_SEND_S * 1e3:.0f} ms after their "
            "planned time (the client shares a CPU with the API server and the engine core), the largest such lag, "
            "the client's TTFT minus the engine's (HTTP, the API server, streaming) and the engine's busy steps "
            "per second; per arm the mean share, the number of blocks with more than 5% sent late, and the median "
            "or mean over blocks. The simulator replays the planned arrivals: where the client sends late, the "
            "live block served another stream than the predicted one.",
            _frontend_table(cells),
        ]
    split = [r for c in cells for r in c.split]
    if split:
        blocks += [
            "## Where the latencies miss: front end, engine wait, engine steps",
            "Per arm and latency, the mean over its compared blocks of each part, live → predicted, and the part's "
            "share of the mean's relative error (the shares add up to it). Front end: the client's latency minus "
            "the engine's (HTTP, the API server, streaming); engine wait: vLLM's arrival to the first scheduling; "
            "engine steps: from there to the first token (TTFT) or the finish (E2E); from vLLM's own per-request "
            "timestamps. A miss in the wait points to queueing, in the steps to the fitted step costs, in the front "
            "end to the client or API server.",
            split_table(split), worst(split),
        ]  # fmt: skip
    if exp.host is not None or any(c.host_checked for c in cells):
        blocks += ["## Host guard", _host_text(exp, cells)]
    if exp.reference:
        blocks += [
            f"## Reference: `{exp.reference}` (its own server instance; absolute per-block figures, mean ± 95%)",
            f"`{CONTROL}` on the rounds (streams) the reference played; the two instances are not paired.",
            _reference_table(cells),
        ]
    return "\n\n".join(blocks) + "\n"


def _plot(cell: CellResult, path: Path) -> Path:
    """Per arm, the live paired difference, its interval and the prediction: attainment, TTFT p99."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    arms = list(dict.fromkeys(r["arm"] for r in cell.paired))
    fig = Figure(figsize=(10, 1.5 + 0.5 * len(arms)))
    FigureCanvasAgg(fig)
    panels = (("attainment", "attainment difference (points)"), ("ttft_p99", "TTFT p99 ratio"))
    for k, (stat, label) in enumerate(panels):
        ax = fig.add_subplot(1, 2, k + 1)
        ratio = stat == "ttft_p99"

        def shown(v: float, ratio: bool = ratio) -> float:
            return math.exp(v) if ratio else 100 * v

        rows = [r for r in cell.paired if r["statistic"] == stat]
        for y, r in enumerate(rows):
            if math.isfinite(r["low"]):
                ax.plot([shown(r["low"]), shown(r["high"])], [y, y], color="tab:blue", lw=2)
            ax.plot([shown(r["live"])], [y], "o", color="tab:blue", label="live, 95% interval" if y == 0 else None)
            ax.plot([shown(r["predicted"])], [y], "x", color="tab:red", ms=9, label="predicted" if y == 0 else None)
        ax.axvline(1.0 if ratio else 0.0, color="grey", lw=0.8)
        if ratio:  # a log axis, so x0.5 and x2 lie as far from 1; ticks at plain ratios, not powers of ten
            ax.set_xscale("log")
            lo, hi = ax.get_xlim()
            ticks = [t for t in (0.25, 0.5, 0.67, 0.8, 0.9, 1.0, 1.1, 1.25, 1.5, 2.0, 4.0) if lo <= t <= hi]
            ax.set_xticks(ticks, [f"×{t:g}" for t in ticks])
            ax.minorticks_off()
        ax.set_yticks(range(len(rows)), [r["arm"] for r in rows])
        ax.invert_yaxis()  # the arms top to bottom, as in the tables
        ax.set_xlabel(label)
        ax.grid(True, axis="x", alpha=0.3)
        if k == 0:
            ax.legend(fontsize="small")
    fig.suptitle(f"cell {cell.name}: each arm against {CONTROL}")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    with replaced_atomically(path) as tmp:
        fig.savefig(tmp, dpi=100, format="png")
    return path


@dataclass(frozen=True)
class Verdict:
    """A run folder judged: cells, targets, warnings, ``markdown`` (``report.md``) and the printed ``table``."""

    cells: list[CellResult]
    targets: list[Target]
    warnings: list[str]
    markdown: str = ""
    table: str = ""
    skills: list[dict[str, Any]] = field(default_factory=list)
    first_line: str = ""  # what the run can and cannot do ("": nothing to say)


def _late_predictions(pred: Predictions, blocks: Mapping[str, Sequence[Block]], exp: Experiment) -> list[str]:
    """A warning per predictions file written at or after the first compared block of its cells began."""
    out = []
    for f in pred.files:
        starts = [b.t_start for c in f.cells for b in blocks[c] if b.compared and b.arm in exp.arms]
        if starts and f.mtime >= min(starts):
            out.append(
                f"{f.path.name} was {'written' if f.stamped else 'last modified'} at {_stamp(f.mtime)}"
                f"{' (its written field)' if f.stamped else ''}, after the first compared block of its cells "
                f"began ({_stamp(min(starts))}): the predictions may not have been made before the run"
            )
    return out


def _stamp(t: float) -> str:
    return datetime.fromtimestamp(t, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def build_verdict(out: str | Path, against: Sequence[str] = ()) -> Verdict:
    """Read the run folder ``out`` and judge it (writes nothing); ``against``: arms every other arm is also paired
    with, a table each. ``VerdictError`` for a bad file, a SHA-256 mismatch or an ``against`` not compared."""
    out = Path(out)
    exp = read_experiment(out / "experiment.json")
    for arm in against:
        if arm in (CONTROL, AA_ARM) or arm not in exp.arms:
            compared = ", ".join(a for a in exp.arms if a not in (CONTROL, AA_ARM))
            raise VerdictError(f"--against {arm!r}: not a compared arm of {out} (one of: {compared})")
    stopped: list[str] = []
    if not exp.finished:  # a run that stopped early: the cells it never reached (no blocks) are left out
        reached = tuple(c for c in exp.cells if (out / "cells" / c / "blocks.jsonl").exists())
        stopped = [
            f"the run stopped before its end (experiment.json has no 'finished'): cell {c} has no blocks, left out"
            for c in exp.cells
            if c not in reached
        ]
        exp = dataclasses.replace(exp, cells=reached or exp.cells)
    pred = read_predictions(prediction_paths(out), exp)
    blocks = {c: read_blocks(out / "cells" / c / "blocks.jsonl", c, exp) for c in exp.cells}
    front = read_frontend(out / FRONTEND_FILE)
    blocks = {c: _with_frontend(bs, front.get(c, {})) for c, bs in blocks.items()}
    cells = [analyse_cell(c, blocks[c], exp, pred, against) for c in exp.cells]
    warnings = stopped + _late_predictions(pred, blocks, exp) + [w for c in cells for w in c.warnings]
    skills = skill_rows(cells)
    verdict = Verdict(cells, _targets(cells, exp, skills), warnings, skills=skills, first_line=_first_line(exp, cells))
    tables = [_paired_table(cells), *(f"against {arm}:\n{_paired_table(cells, arm)}" for arm in against)]
    table = "\n\n".join([*([verdict.first_line] if verdict.first_line else []), *tables,
                          _targets_table(verdict.targets)])  # fmt: skip
    return dataclasses.replace(verdict, markdown=_render(out, exp, pred, verdict), table=table)


# ------------------------------------------------------------------------------ across runs: A/A, replication


@contextmanager
def opened_run(path: Path) -> Iterator[Path]:
    """The run folder ``path``, or the one run folder a ``.tar.gz`` of it holds, extracted to a temporary folder
    (plain files and folders only) removed after; ``VerdictError`` naming the archive otherwise."""
    if not path.name.endswith(".tar.gz"):
        if not path.is_dir():
            raise VerdictError(f"{path}: not a run folder or a .tar.gz of one")
        yield path
        return
    with tempfile.TemporaryDirectory(prefix="llmsched-verdict-") as tmp:
        root = Path(tmp)
        try:
            with tarfile.open(path, mode="r:gz") as tar:
                for info in tar:
                    name = PurePosixPath(info.name)
                    if not (info.isfile() or info.isdir()) or name.is_absolute() or ".." in name.parts:
                        raise VerdictError(f"{path}: member {info.name!r} is not a plain file inside the archive")
                    target = root.joinpath(*name.parts)
                    if info.isdir():
                        target.mkdir(parents=True, exist_ok=True)
                        continue
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_bytes(tar.extractfile(info).read())  # type: ignore[union-attr]
        except (tarfile.TarError, OSError, EOFError) as exc:
            raise VerdictError(f"{path}: not a readable .tar.gz archive ({exc})") from None
        found = sorted(p.parent for p in root.glob("*/experiment.json")) or sorted(root.glob("experiment.json"))
        if len(found) != 1:
            raise VerdictError(f"{path}: expected one run folder (with experiment.json), found {len(found)}")
        yield found[0] if found[0].name != "experiment.json" else root


def aa_coverage(verdict: Verdict) -> tuple[int, int]:
    """How many of the A/A arm's intervals against the control contain 0, of how many measured."""
    aa = [r for c in verdict.cells for r in c.paired if r["arm"] == AA_ARM and math.isfinite(r["low"])]
    return sum(1 for r in aa if r["low"] <= 0 <= r["high"]), len(aa)


def aa_coverage_text(runs: Sequence[Path]) -> str:
    """Per run (a folder or a ``.tar.gz`` of one) and in total, the A/A intervals that contain 0."""
    rows, total = [], [0, 0]
    for run in runs:
        with opened_run(run) as folder:
            contained, measured = aa_coverage(build_verdict(folder))
        total[0] += contained
        total[1] += measured
        rows.append([str(run), f"{contained} of {measured}", _pct(contained / measured if measured else math.nan)])
    rows.append(["total", f"{total[0]} of {total[1]}", _pct(total[0] / total[1] if total[1] else math.nan)])
    table = _md(("run", "A/A intervals containing 0", "coverage"), rows)
    return f"{table}\n\nNominal coverage: 95% (every cell x statistic of `{AA_ARM}` against `{CONTROL}`)."


def _side(r: Mapping[str, Any]) -> int | None:
    """-1 or +1: the interval excludes 0 below or above; 0: it contains 0; None: not measured."""
    if not math.isfinite(r["low"]):
        return None
    return 0 if not r["excludes_zero"] else _sign(r["live"])


@dataclass(frozen=True)
class Replication:
    """A run judged again by another: ``rows`` per (cell, arm, statistic) in both, OLD's confirmed material
    differences and how many NEW confirms, the ``target`` and the Markdown section."""

    rows: list[dict[str, Any]]
    confirmed_old: int
    confirmed_again: int
    target: Target
    markdown: str


def replication(new: Verdict, old: Verdict, old_name: str = "OLD") -> Replication:
    """NEW's paired rows against OLD's (``old_name`` in the text), matched by cell name, arm and statistic: the
    estimates, whether the signs agree and whether the intervals agree (both exclude 0 on the same side, or both
    contain it); OLD's material differences confirmed, and how many NEW confirms again with the same sign."""
    theirs = {(r["cell"], r["arm"], r["statistic"]): r for c in old.cells for r in c.paired}
    rows: list[dict[str, Any]] = []
    for c in new.cells:
        for r in c.paired:
            o = theirs.get((r["cell"], r["arm"], r["statistic"]))
            if o is None:
                continue
            sides = (_side(o), _side(r))
            signs = (_sign(o["live"]), _sign(r["live"]))
            known = math.isfinite(o["live"]) and math.isfinite(r["live"]) and 0 not in signs
            rows.append({"old": o, "new": r, "sign_agrees": signs[0] == signs[1] if known else None,
                         "interval_agrees": sides[0] == sides[1] if None not in sides else None,
                         "confirmed_old": o["arm"] != AA_ARM and _material(o) and bool(o["sign_agrees"])
                         and o["excludes_zero"]})  # fmt: skip
    mine = [x for x in rows if x["confirmed_old"]]
    again = [x for x in mine if _side(x["new"]) == _side(x["old"])]
    absent = [o for o in theirs.values() if o["arm"] != AA_ARM and _material(o) and o["sign_agrees"]
              and o["excludes_zero"] and o["cell"] not in {c.name for c in new.cells}]  # fmt: skip
    status = _judge(len(again), len(mine) - len(again), 0, CONFIRMED_SHARE)
    detail = f"{len(again)} of {len(mine)} confirmed again" + (
        f"; {len(absent)} in cells this run lacks, left out" if absent else "")  # fmt: skip
    target = Target(
        f"{old_name}'s confirmed material differences confirmed again with the same sign in >= "
        f"{CONFIRMED_SHARE:.0%}",
        f"{old_name}'s (cell, arm) rows of attainment or TTFT p99 whose prediction was material and whose live "
        "interval excluded 0 with the predicted sign; this run's interval for the same row excludes 0 on the same "
        "side", status, detail,
    )  # fmt: skip
    table = _md(
        ("cell", "arm", "statistic", "then", "then 95% interval", "now", "now 95% interval", "sign agrees",
         "interval agrees", "confirmed then"),
        [[x["new"]["cell"], x["new"]["arm"], x["new"]["statistic"],
          format_difference(x["old"]["metric"], x["old"]["live"]), _interval_text(x["old"]),
          format_difference(x["new"]["metric"], x["new"]["live"]), _interval_text(x["new"]), _yes(x["sign_agrees"]),
          _yes(x["interval_agrees"]), "yes" if x["confirmed_old"] else ""] for x in rows],
    )  # fmt: skip
    markdown = "\n\n".join([
        f"## Replication of `{old_name}`",
        f"Cell by cell (matched by name), every (arm, statistic) of the paired table against fcfs in both runs: "
        f"then ({old_name}) and now (this run). Interval agrees: both exclude 0 on the same side, or both contain 0.",
        _targets_table([target]), table,
    ])  # fmt: skip
    return Replication(rows, len(mine), len(again), target, markdown)


def main(argv: Sequence[str] | None = None) -> int:
    """The command: writes the report and plots, prints the tables and warnings (``--aa-coverage``: prints the
    A/A coverage of runs, writes nothing); 1 after a one-line error."""
    p = argparse.ArgumentParser(
        prog="python -m llmsched_env.live.verdict",
        description="The verdict of a paired live experiment: writes OUT/report.md and OUT/plots/<cell>.png.",
    )
    p.add_argument("out", type=Path, nargs="?", help="the run folder (experiment.json, predictions, cells/)")
    p.add_argument("--no-plots", action="store_true", help="write the report only (default: off)")
    p.add_argument(
        "--against", default="", help="comma list of compared arms to pair every other arm with as well (e.g. tuned)"
    )
    p.add_argument("--replicates", type=Path, metavar="OLD", default=None,
                   help="a run folder or .tar.gz this run repeats: the agreement, cell by cell, appended to the "
                        "report")  # fmt: skip
    p.add_argument("--aa-coverage", type=Path, nargs="+", metavar="RUN", default=None,
                   help="print, per run (a folder or .tar.gz of one) and in total, the A/A intervals containing 0 "
                        "(instead of OUT)")  # fmt: skip
    args = p.parse_args(argv)
    against = [a for a in args.against.split(",") if a]
    if args.aa_coverage is not None:
        if args.out is not None or against or args.replicates is not None:
            p.error("--aa-coverage takes the runs alone (no OUT, --against or --replicates)")
        try:
            print(aa_coverage_text(args.aa_coverage))
        except (ValueError, OSError) as exc:
            print(f"llmsched verdict: {exc}", file=sys.stderr)
            return 1
        return 0
    if args.out is None:
        p.error("the run folder OUT is required (or --aa-coverage RUN ...)")
    try:
        if any((args.out / "workloads").glob(f"*/*/blocks/server-log/{SERVER_FILE}")):
            write_frontend(args.out)  # the raw folders are there: the front end's figures recomputed (live.frontend)
        verdict = build_verdict(args.out, against)
        markdown, extra = verdict.markdown, ""
        if args.replicates is not None:
            with opened_run(args.replicates) as folder:
                extra = replication(verdict, build_verdict(folder), folder.name).markdown
            markdown += "\n" + extra + "\n"
    except (ValueError, OSError) as exc:  # VerdictError is a ValueError
        print(f"llmsched verdict: {exc}", file=sys.stderr)
        return 1
    write_text_atomically(args.out / "report.md", markdown)
    written = [args.out / "report.md"]
    if not args.no_plots:
        written += [_plot(c, args.out / "plots" / f"{c.name}.png") for c in verdict.cells]
    print(verdict.table)
    if extra:
        print("\n" + extra)
    for w in verdict.warnings:
        print(f"WARNING: {w}")
    print("wrote " + ", ".join(str(w) for w in written))
    return 0


if __name__ == "__main__":
    sys.exit(main())
