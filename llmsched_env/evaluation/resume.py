"""Resumable evaluations: each finished run (or capacity search) kept on disk as it ends, and read back
(docs/reliability.md). ``OUT/evaluation.json`` records the options and input digests that decide the rows;
``OUT/rows.jsonl`` one digested, fsynced line per run. Resuming refuses other options or inputs, an edited or
foreign line; a last line cut short by a kill is ignored (and cut off before appending).
"""

from __future__ import annotations

import errno
import hashlib
import json
import math
import os
import re
import secrets
import stat
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

import numpy as np

from llmsched_env.common.files import CONFIG_BYTES, RECORD_BYTES, file_kind, parse_json, read_bytes, read_text
from llmsched_env.common.outputs import replaced_atomically, write_text_atomically
from llmsched_env.decision.policy_file import FIELDS_KEY
from llmsched_env.evaluation.config import EvalConfig, Row
from llmsched_env.evaluation.grid import FinishedRun, shown_value

__all__ = ["RECORD_FORMAT", "RECORD_NAME", "RECORD_VERSION", "ROWS_NAME", "RowsLog", "check_details",
           "check_resumable", "check_row", "differences", "evaluation_id", "evaluation_record", "file_digest",
           "read_record", "read_rows"]  # fmt: skip

DIGEST_KEY = "sha256"  # in each line of the rows file: the digest of the rest of the line (``_entry_digest``)
ROWS_NAME = "rows.jsonl"  # in --out: one line per finished run (or capacity search)
RECORD_NAME = "evaluation.json"  # in --out: what the evaluation runs, checked by --resume
RECORD_FORMAT = "llmsched-evaluation"
RECORD_VERSION = 2  # 2: each line of the rows file carries the sha256 of its run
_COMPARED = ("format", "version", "options", "inputs")  # what must match to resume (the rest is for people)


def _digest(chunks: Iterable[bytes]) -> str:
    h = hashlib.sha256()
    for chunk in chunks:
        h.update(chunk)
    return h.hexdigest()[:16]


def file_digest(path: str | Path) -> str:
    """The first 16 hex digits of the SHA-256 of the file ``path`` (an input's record: ``evaluation.json``, a
    training's ``args.json``)."""
    return _digest(_file_chunks(Path(path)))


def _file_chunks(path: Path) -> Iterable[bytes]:
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            yield chunk


def _plain(value: Any) -> Any:
    """``value`` as JSON has it (paths as strings, tuples as lists): what a record read back holds."""
    return json.loads(json.dumps(value, default=str))


def evaluation_record(
    options: Mapping[str, Any], config: EvalConfig, files: Mapping[str, str | Path | None] | None = None
) -> dict[str, Any]:
    """An evaluation's record: ``options`` (flag -> value) and a digest of every input file, policy and tuned table."""
    inputs: dict[str, str] = {}
    for flag, path in (files or {}).items():
        if path is not None and Path(path).is_file():
            inputs[flag] = file_digest(path)
    for spec in config.policies:
        if spec.path is not None:
            exported = spec.load()
            # the fields' record is left out: it is made of the other fields (a file sealed since is the same input)
            fields = {k: v for k, v in exported.meta.items() if k != FIELDS_KEY}
            meta = json.dumps(fields, sort_keys=True, default=str).encode()
            weights = (np.ascontiguousarray(a).tobytes() for pair in exported.weights for a in pair)
            inputs[f"policy {spec.name}"] = _digest([meta, *weights])
        elif isinstance(spec.table, (str, Path)):
            inputs[f"policy {spec.name}"] = _digest(_file_chunks(Path(spec.table)))
        elif spec.table is not None:
            entries = json.dumps(dict(spec.table.entries), sort_keys=True, default=str).encode()
            inputs[f"policy {spec.name}"] = _digest([entries])
    return {"format": RECORD_FORMAT, "version": RECORD_VERSION, "options": _plain(dict(options)), "inputs": inputs}


def _shown(value: Any) -> str:
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, list):
        return ",".join(map(str, value))
    return str(value)


def differences(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """What differs between two records (``old`` on disk), a phrase each: an option's values, or an input file."""
    if (old.get("format"), old.get("version")) != (new.get("format"), new.get("version")):
        return [f"record format {old.get('format')} {old.get('version')}, not {new['format']} {new['version']}"]
    out = []
    old_options, new_options = old.get("options") or {}, _plain(new.get("options") or {})
    for flag in [*old_options, *(f for f in new_options if f not in old_options)]:
        if old_options.get(flag) != new_options.get(flag):
            out.append(f"{flag} {_shown(old_options.get(flag))} there, {_shown(new_options.get(flag))} here")
    old_inputs, new_inputs = old.get("inputs") or {}, new.get("inputs") or {}
    for name in [*old_inputs, *(n for n in new_inputs if n not in old_inputs)]:
        if name not in new_inputs or name not in old_inputs:
            out.append(f"{name}: a file {'there only' if name in old_inputs else 'here only'}")
        elif old_inputs[name] != new_inputs[name]:
            out.append(f"{name}: the file changed since")
    return out


def read_record(out: Path) -> dict[str, Any] | None:
    """The record in ``out``, or None; ``ValueError`` naming the file when it is not one."""
    path = Path(out) / RECORD_NAME
    if not os.path.lexists(path):
        return None
    try:  # bounded, and only a regular file (a FIFO put there is refused, not waited on)
        record = parse_json(read_text(path, CONFIG_BYTES))
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path}: cannot be read as an evaluation record ({exc})") from None
    if not isinstance(record, dict) or record.get("format") != RECORD_FORMAT:
        raise ValueError(f'{path}: not an evaluation record (no "format": "{RECORD_FORMAT}")')
    return record


def check_resumable(out: Path, record: Mapping[str, Any]) -> bool:
    """Whether ``out`` holds an evaluation to resume (reads only); ``ValueError`` naming each difference."""
    old = read_record(out)
    if old is None:
        return False
    diff = differences({k: old.get(k) for k in _COMPARED}, {k: record.get(k) for k in _COMPARED})
    if diff:
        raise ValueError(f"{out} holds another evaluation: " + "; ".join(diff))
    return True


def evaluation_id(out: Path) -> str:
    """The id of the evaluation in ``out`` ("" without one), folded into every line's digest."""
    record = read_record(out)
    return str(record.get("id") or "") if record is not None else ""


def read_rows(path: Path, salt: str | None = None, required: Sequence[str] = ()) -> tuple[list[FinishedRun], int]:
    """The runs in the rows file ``path`` and the bytes of its whole lines (a last line cut short is ignored).
    ``ValueError`` naming the file and line for a bad JSON line, digest (``salt``: the record's id), row or details."""
    if not os.path.lexists(path):
        return [], 0
    salt = evaluation_id(Path(path).parent) if salt is None else salt
    data = read_bytes(path, RECORD_BYTES)  # bounded, and only a regular file
    lines = data.split(b"\n")
    runs: list[FinishedRun] = []
    kept = 0
    for number, raw in enumerate(lines[:-1], start=1):  # lines[-1]: after the last newline, b"" or cut short
        try:
            entry = parse_json(raw.decode("utf-8"))  # a line nested too deeply is a ValueError, not a RecursionError
        except ValueError:
            if number == len(lines) - 1 and not lines[-1]:  # the last line, cut short: ignored
                break
            raise ValueError(f"{path}:{number}: not a line of an evaluation's rows file (not JSON)") from None
        recorded = entry.pop(DIGEST_KEY, None) if isinstance(entry, dict) else None
        if isinstance(entry, dict) and recorded != _entry_digest(entry, salt):
            raise ValueError(
                f"{path}:{number}: the line was changed since its run wrote it, or another evaluation wrote it (its "
                f"{DIGEST_KEY} {'is missing' if recorded is None else 'does not match'}"
                f"{'' if salt else f'; {RECORD_NAME} has no id'}); remove that line (its run runs again) or start "
                "afresh without --resume"
            )
        row = entry.get("row") if isinstance(entry, dict) else None
        details = entry.get("details") if isinstance(entry, dict) else None
        if not isinstance(row, dict) or not {"policy", "scenario"} <= set(row) or not isinstance(details, dict | None):
            raise ValueError(f'{path}:{number}: not a line of an evaluation\'s rows file (no "row" object)')
        problem = check_row(row, required) or (check_details(details, row) if details is not None else None)
        if problem is not None:
            raise ValueError(
                f"{path}:{number}: {problem}, which no finished run gives: the rows file was changed; remove that "
                "line (its run runs again) or start afresh without --resume"
            )
        arrays = None if details is None else {k: _array(v) for k, v in details.items()}
        runs.append(FinishedRun(row, arrays))
        kept += len(raw) + 1
    return runs, kept


# the row columns whose values are shares (in [0, 1]), those that are never negative (times, counts, rates),
# those that count (whole numbers) and those that are booleans; no figure of a run is as large as _MAX_VALUE
_SHARE = re.compile(r"(attainment|_rate|jain_fairness|kv_usage_mean|kv_usage_peak|_share)$")
_NON_NEGATIVE = re.compile(r"(_s|_rps|_tps|^num_[a-z_]+|/num_[a-z_]+|^load|^capacity_[a-z]+|^seed|preemptions|"
                           r"window_requests|max_sustained_load|/service)$")  # fmt: skip
_COUNT = re.compile(r"(^num_[a-z_]+|/num_[a-z_]+|^seed|preemptions|window_requests)$")
_BOOLEAN = ("sustained", "window_limited")
_MAX_VALUE = 1e15


def check_row(row: Mapping[str, Any], required: Sequence[str] = ()) -> str | None:
    """What is wrong with a row read back (None: nothing): names and ``required`` columns present, values
    strings, booleans, None or finite numbers (|x| <= 1e15), shares in [0, 1], times and counts >= 0 and whole."""
    for key in ("policy", "scenario"):
        if not isinstance(row.get(key), str) or not row[key]:
            return f"{key} is {shown_value(row.get(key))}, not a name"
    missing = [key for key in required if key not in row]
    if missing:
        return f"no {', '.join(missing)}"
    for key, value in row.items():
        if key in _BOOLEAN:
            if not isinstance(value, bool):
                return f"{key} is {shown_value(value)}, not true or false"
            continue
        numeric = bool(_SHARE.search(key) or _NON_NEGATIVE.search(key))
        if value is None or (isinstance(value, str) and not numeric):
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return f"{key} is {shown_value(value)}, not a number"
        if not math.isfinite(value) or abs(value) > _MAX_VALUE:
            return f"{key} is {value!r}"
        if _SHARE.search(key) and not 0.0 <= value <= 1.0:
            return f"{key} is {value!r}, outside [0, 1]"
        if _NON_NEGATIVE.search(key) and value < 0:
            return f"{key} is {value!r}, below 0"
        if _COUNT.search(key) and not float(value).is_integer():
            return f"{key} is {value!r}, not a whole number"
    return None


_LATENCIES = ("ttft_s", "tpot_s")  # a run's details: its latencies, and for one run of a grid the KV series
_KV_SERIES = ("kv_time_s", "kv_usage")


def check_details(details: Mapping[str, Any], row: Mapping[str, Any] | None = None) -> str | None:
    """What is wrong with a run's details read back (None: nothing): ``episode_details``'s keys only, ``row``'s
    key, lists of finite numbers >= 0, and the KV series paired (usage at most 1) or absent."""
    keys = ("policy", "scenario", "load", "seed")
    unknown = [k for k in details if k not in (*keys, *_LATENCIES, *_KV_SERIES)]
    if unknown:
        return f"details hold {shown_value(unknown[0])}, which no run keeps"
    for key in keys:
        if row is not None and details.get(key) != row.get(key):
            return f"details {key!r} is {shown_value(details.get(key))}, not the row's {shown_value(row.get(key))}"
    present = [k for k in _KV_SERIES if k in details]
    for key in (*_LATENCIES, *present):
        value = details.get(key)
        if key not in details:
            return f"details have no {key!r}"
        if not isinstance(value, list) or not all(
            isinstance(x, (int, float)) and not isinstance(x, bool) and 0 <= x < math.inf for x in value
        ):
            return f"details {key!r} is not a list of finite numbers >= 0"
    if present and (len(present) == 1 or len(details["kv_time_s"]) != len(details["kv_usage"])):
        return "details hold a KV series whose times and usages do not pair up"
    if present and any(x > 1 for x in details["kv_usage"]):
        return "details 'kv_usage' holds a usage above 1"
    return None


def _not_appendable(path: Path, st: os.stat_result) -> str:
    """Why the rows file may not be appended to or cut ("" when it may): not regular, or another hard link."""
    if not stat.S_ISREG(st.st_mode):
        return f"{path}: {file_kind(st.st_mode)}; the rows file must be a regular file"
    if st.st_nlink > 1:
        return (f"{path}: has {st.st_nlink - 1} other hard link(s), so appending to it would write a file elsewhere; "
                "copy it to a file of its own (cp, then mv over it) to resume")  # fmt: skip
    return ""


def _entry_digest(entry: Mapping[str, Any], salt: str = "") -> str:
    """32 hex digits of the sha256 of ``salt`` and an entry's canonical JSON (alike when read back)."""
    text = json.dumps(entry, sort_keys=True, separators=(",", ":"), default=_json_default)
    return hashlib.sha256((salt + "\n" + text).encode("utf-8")).hexdigest()[:32]


def _array(value: Any) -> Any:
    """A details value read back: a list of numbers as the float64 array it was, anything else as it is."""
    return np.asarray(value, dtype=np.float64) if isinstance(value, list) else value


def _json_default(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


class RowsLog:
    """``OUT/rows.jsonl`` open for appending (``start`` a new evaluation, ``resume`` one); ``append`` a run."""

    def __init__(self, path: Path, salt: str = "") -> None:
        self.path = Path(path)
        self.salt = salt  # the evaluation's id, in each line's digest
        self.appended = 0  # lines appended through this object
        # opened non-blocking and checked on the descriptor: a FIFO put at the name is refused, not waited on
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            if exc.errno != errno.ENXIO:  # ENXIO: a FIFO nothing reads
                raise
            raise ValueError(f"{self.path}: a FIFO (named pipe); the rows file must be a regular file") from None
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_nlink > 1:
            os.close(fd)
            raise ValueError(_not_appendable(self.path, st))
        os.set_blocking(fd, True)
        self._file: IO[str] | None = os.fdopen(fd, "a", encoding="utf-8")

    @classmethod
    def start(cls, out: Path, record: Mapping[str, Any]) -> RowsLog:
        """A new evaluation in ``out``: its record, then an empty rows file (after ``outputs.clear_outputs``)."""
        out = Path(out)
        record = {**record, "id": record.get("id") or secrets.token_hex(8)}  # this evaluation's, in every digest
        write_text_atomically(out / RECORD_NAME, json.dumps(dict(record), indent=1, default=str) + "\n")
        with replaced_atomically(out / ROWS_NAME) as tmp:
            tmp.write_bytes(b"")
        return cls(out / ROWS_NAME, str(record["id"]))

    @classmethod
    def resume(
        cls, out: Path, record: Mapping[str, Any], required: Sequence[str] = ()
    ) -> tuple[RowsLog, list[FinishedRun]]:
        """The evaluation in ``out`` continued (a torn last line cut) and its runs; ``ValueError`` as above."""
        out = Path(out)
        if not check_resumable(out, record):
            raise ValueError(f"{out}: no {RECORD_NAME}, so no evaluation to resume there")
        path = out / ROWS_NAME
        salt = evaluation_id(out)
        runs, kept = read_rows(path, salt, required)
        if os.path.lexists(path) and (problem := _not_appendable(path, os.stat(path))):
            raise ValueError(problem)  # before the torn line is cut: nothing is written through another link
        if path.is_file() and path.stat().st_size != kept:
            with path.open("r+b") as f:  # the torn last line, so that the next one starts on a line of its own
                f.truncate(kept)
                os.fsync(f.fileno())
        return cls(path, salt), runs

    def append(self, row: Row, details: Mapping[str, Any] | None = None) -> None:
        """One line ``{"row": row[, "details": details]}`` on disk before this returns (flushed, fsynced)."""
        if self._file is None:
            raise ValueError(f"{self.path}: closed")
        entry: dict[str, Any] = {"row": row} if details is None else {"row": row, "details": details}
        entry[DIGEST_KEY] = _entry_digest(entry, self.salt)
        self._file.write(json.dumps(entry, default=_json_default) + "\n")
        self._file.flush()
        os.fsync(self._file.fileno())
        self.appended += 1

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def __enter__(self) -> RowsLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
