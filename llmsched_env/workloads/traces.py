"""Real serving traces as immutable ``Trace``s: ``load_azure``, ``load_mooncake``, ``load_lengths``,
``load_generic`` (a column mapping) and ``load_trace`` (by format name), plain or ``.gz``, cached per file and
options, with reads bounded (``common.files``; a ``.gz`` file is decompressed as a stream, so a gzip bomb stops at
``TRACE_BYTES``). Every value is checked; every problem is a ``TraceError`` naming the file, the 1-based line and the
field (blank lines are skipped, no row dropped silently).
"""

from __future__ import annotations

import csv
import gzip
import inspect
import io
import json
import math
import os
import zlib
from collections import Counter, OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any

import numpy as np

from llmsched_env.common.checks import clipped, shown
from llmsched_env.common.files import (
    TRACE_BYTES,
    TRACE_LINE_BYTES,
    BoundedReader,
    FileRefusedError,
    InputFileError,
    check_regular_file,
    link_problem,
    open_regular,
    parse_json,
    resolved,
)
from llmsched_env.common.tenants import MAX_TENANTS, tenant_name_problem, too_many_tenants
from llmsched_env.workloads.trace import MOONCAKE_PREFIX_ID_TOKENS, Trace, is_finite_number

GZIP_SUFFIX = ".gz"
# What a damaged or mislabelled .gz file raises while it is read (BadGzipFile is an OSError; a truncated
# stream ends in EOFError; corrupt deflate data in zlib.error).
DECOMPRESS_ERRORS: tuple[type[Exception], ...] = (gzip.BadGzipFile, EOFError, zlib.error)


def is_gzip(path: Path) -> bool:
    """True when ``path``'s name ends in ``.gz`` (any case): the file is read through gzip."""
    return path.suffix.lower() == GZIP_SUFFIX


def data_suffix(path: Path) -> str:
    """The lower-case suffix that names the format, ``.gz`` set aside: ``.csv`` for ``a.csv`` and ``a.csv.gz``."""
    return Path(path.stem).suffix.lower() if is_gzip(path) else path.suffix.lower()


def data_stem(path: Path) -> str:
    """The file's name without its format suffix, ``.gz`` set aside: ``a`` for ``a.csv`` and ``a.csv.gz``."""
    return Path(path.stem).stem if is_gzip(path) else path.stem


def open_bytes(path: Path) -> io.BufferedReader:
    """The file opened for reading bytes, decompressed when ``.gz``, bounded: a refusal is a ``FileRefusedError``
    naming the file, the limit and its variable (here, or while reading)."""
    raw = open_regular(path, TRACE_BYTES)
    try:
        if is_gzip(path):
            unzipped = gzip.GzipFile(fileobj=raw, mode="rb")  # closing it leaves raw open: BoundedReader closes both
            bounded = BoundedReader(unzipped, path, TRACE_BYTES, TRACE_LINE_BYTES, decompressed=True, underlying=raw)
        else:
            bounded = BoundedReader(raw, path, TRACE_BYTES, TRACE_LINE_BYTES)
    except BaseException:
        raw.close()
        raise
    return io.BufferedReader(bounded, buffer_size=1 << 20)


def read_bytes(path: Path) -> bytes:
    """The file's content (``open_bytes``): ``OSError``, one of ``DECOMPRESS_ERRORS`` or ``FileRefusedError``."""
    with open_bytes(path) as f:
        return f.read()


def bad_gzip_message(path: Path, error: Exception) -> str:
    """The one-line message for one of ``DECOMPRESS_ERRORS`` raised while reading ``path``."""
    return f"{path}: not a valid gzip file ({error}); a name ending in .gz must hold gzip data"


OVERLONG_OPTIONS = ("reject", "truncate", "error")
# Our fields, in the order of ``load_generic``'s ``columns`` mapping; the first and last two are optional.
GENERIC_FIELDS = ("arrival", "prompt_len", "output_len", "prefix_ids", "tenant")
TIME_UNITS: dict[str, float] = {"s": 1.0, "ms": 1e-3}  # unit -> seconds
_AZURE_COLUMNS = {"arrival": "TIMESTAMP", "prompt_len": "ContextTokens", "output_len": "GeneratedTokens"}
_MOONCAKE_KEYS = {"arrival": "timestamp", "prompt_len": "input_length", "output_len": "output_length",
                  "prefix_ids": "hash_ids"}  # fmt: skip
_LENGTHS_COLUMNS = {"prompt_len": "num_prefill_tokens", "output_len": "num_decode_tokens"}
# Length files (``lengths.load_length_file``), told apart by their header: the ShareGPT stats CSV and Azure's trace.
LENGTH_FILE_COLUMNS = {"sharegpt": _LENGTHS_COLUMNS, "azure_llm_2023": {k: _AZURE_COLUMNS[k] for k in _LENGTHS_COLUMNS}}
_MAX_TOKENS = 2**40  # lengths above this are corrupt data (and would overflow int64 sums)
_MAX_PREFIX_ID = 2**63  # prefix ids are stored as int64


class TraceError(InputFileError):
    """A trace file or a loader option is invalid. The message names the file, the 1-based line and the field."""


# ------------------------------------------------------------------------------------------- parsing helpers


def _unreadable(path: Path, error: OSError) -> TraceError:
    problem = link_problem(path)
    if problem is not None:  # a link loop, a link to nothing
        return TraceError(f"{path}: {problem}; give the trace file itself")
    if isinstance(error, FileNotFoundError):
        return TraceError(f"{clipped(str(path), 200)}: trace file not found; check the path")
    return TraceError(f"{clipped(str(path), 200)}: cannot read trace file ({error.strerror})")


def _read_lines(path: Path) -> list[str]:
    """The file's lines without line ends (decompressed for ``.gz``), bounded (``open_bytes``)."""
    try:
        data = read_bytes(path)
    except FileRefusedError as e:
        raise TraceError(str(e)) from None
    except DECOMPRESS_ERRORS as e:  # before OSError: BadGzipFile is one
        raise TraceError(bad_gzip_message(path, e)) from None
    except OSError as e:
        raise _unreadable(path, e) from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise TraceError(f"{path}:{line}: not UTF-8 text ({e.reason}); is this a trace file?") from None
    lines = text.replace("\r\n", "\n").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return lines


def _as_int(value: Any) -> int | None:
    """An integer from an int, an integral float or a numeric string; None otherwise."""
    if type(value) is int:
        return value
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            pass
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return int(number) if number.is_integer() else None


def _as_time(value: Any) -> float | None:
    """A finite float from an int, a float or a numeric string; None otherwise."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return None
    try:
        number = float(value)
    except ValueError:
        return None
    return number if math.isfinite(number) else None


def _as_ids(value: Any) -> tuple[int, ...] | None:
    """Prefix ids from a list of ints, a JSON list text or space-separated ints; None when malformed."""
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            try:
                value = parse_json(text)
            except ValueError:
                return None
        else:
            try:
                return tuple(int(tok) for tok in text.replace(",", " ").split())
            except ValueError:
                return None
    if not isinstance(value, list) or not all(type(h) is int for h in value):
        return None
    return tuple(value)


def _wallclock(text: str, days: dict[str, int]) -> tuple[int, float] | None:
    """``YYYY-MM-DD HH:MM:SS[.fraction]`` as (whole seconds since 0001-01-01, fraction); None when malformed (a
    leap second too). ~10x faster than datetime.strptime; ``days`` caches date ordinals."""
    day, sep, clock = text.strip().partition(" ")
    if not sep:
        day, sep, clock = text.strip().partition("T")
    ordinal = days.get(day)
    if ordinal is None:
        try:
            y, mo, d = day.split("-")
            ordinal = days[day] = date(int(y), int(mo), int(d)).toordinal()
        except ValueError:
            return None
    hms, _, frac = clock.partition(".")
    try:
        h, m, s = (int(part) for part in hms.split(":"))
    except ValueError:
        return None
    if not (0 <= h < 24 and 0 <= m < 60 and 0 <= s < 60) or (frac and not frac.isdigit()):
        return None
    return ordinal * 86400 + h * 3600 + m * 60 + s, (int(frac) / 10 ** len(frac) if frac else 0.0)


@dataclass
class _Rows:
    """Parsed values in file order; ``names`` maps our fields to the file's column/key names, for messages."""

    path: Path
    names: dict[str, str]
    kind: str  # "column" (CSV) or "key" (JSON), for messages
    lines: list[int]
    times: list[float] | None
    prompts: list[int]
    outputs: list[int]
    prefix: list[tuple[int, ...]] | None
    tenants: list[str] | None


def _field_label(names: Mapping[str, str], fld: str, kind: str) -> str:
    own = names[fld]
    return f"{kind} {shown(own)}" + (f" ({fld})" if own != fld else "")


class _Parser:
    """Turns raw values into typed ones, raising ``TraceError`` that names file, line and field."""

    def __init__(self, path: Path, names: Mapping[str, str], kind: str, clock: bool = False,
                 prefix_id_tokens: int = MOONCAKE_PREFIX_ID_TOKENS) -> None:  # fmt: skip
        self.path, self.names, self.kind = path, dict(names), kind
        self.prefix_id_tokens = prefix_id_tokens  # tokens per prefix id: a prompt of n tokens has ceil(n / it) ids
        fields = names.keys()
        self.rows = _Rows(path, self.names, kind, [], [] if "arrival" in fields else None, [], [],
                          [] if "prefix_ids" in fields else None, [] if "tenant" in fields else None)  # fmt: skip
        self.clock = clock  # arrival is a wall-clock string (Azure), relative to the first row
        self._tenants: set[str] = set()  # the distinct tenants so far
        try:
            self._max_tenants = MAX_TENANTS.value() if "tenant" in fields else 0
        except ValueError as e:  # $LLMSCHED_MAX_TENANTS is no whole number > 0
            raise TraceError(f"{path}: {e}") from None
        self._days: dict[str, int] = {}
        self._base: int | None = None

    def _new_tenant(self, line: int, name: str) -> None:
        """Admit the tenant ``name``, first seen on ``line``: a valid name, within ``MAX_TENANTS`` distinct ones."""
        problem = tenant_name_problem(name)
        if problem is not None:
            raise self.error(line, "tenant", problem)
        self._tenants.add(name)
        count = len(self._tenants)
        if count > self._max_tenants:
            raise self.error(line, "tenant", f"brings the trace to {too_many_tenants(count, self._max_tenants)}")

    def error(self, line: int, fld: str, problem: str) -> TraceError:
        return TraceError(f"{self.path}:{line}: {_field_label(self.names, fld, self.kind)} {problem}")

    def add_record(self, line: int, record: Any, where: Mapping[str, Any], missing: Callable[[Any], str]) -> None:
        """``add`` the row whose field ``fld`` is ``record[where[fld]]`` (else the error ``missing(record)``)."""
        values = {}
        for fld, at in where.items():
            try:
                values[fld] = record[at]
            except (IndexError, KeyError):
                raise self.error(line, fld, missing(record)) from None
        self.add(line, values)

    def add(self, line: int, values: Mapping[str, Any]) -> None:
        rows = self.rows
        for fld, dest in (("prompt_len", rows.prompts), ("output_len", rows.outputs)):
            number = _as_int(values[fld])
            if number is None or not 1 <= number <= _MAX_TOKENS:
                problem = f"must be a positive integer (1 to 2**40 tokens), got {shown(values[fld], 60)}"
                raise self.error(line, fld, problem)
            dest.append(number)
        if rows.times is not None:
            raw = values["arrival"]
            if self.clock:
                parsed = _wallclock(raw, self._days)
                if parsed is None:
                    problem = f"must be a time like '2023-11-16 18:15:46.6805900' (seconds 00-59), got {shown(raw, 60)}"
                    raise self.error(line, "arrival", problem)
                if self._base is None:
                    self._base = parsed[0]
                rows.times.append((parsed[0] - self._base) + parsed[1])
            else:
                seconds = _as_time(raw)
                if seconds is None:
                    raise self.error(line, "arrival", f"must be a finite number, got {shown(raw, 60)}")
                if seconds < 0:
                    raise self.error(line, "arrival", f"must not be negative, got {shown(raw, 60)}")
                rows.times.append(seconds)
        if rows.prefix is not None:
            ids = _as_ids(values["prefix_ids"])
            if ids is None:
                got = shown(values["prefix_ids"], 60)
                problem = f"must be a list of integer ids (JSON list or space-separated integers), got {got}"
                raise self.error(line, "prefix_ids", problem)
            bad = next((h for h in ids if not 0 <= h < _MAX_PREFIX_ID), None)
            if bad is not None:
                raise self.error(line, "prefix_ids", f"ids must be integers from 0 to 2**63 - 1, got {shown(bad, 60)}")
            blocks = -(-rows.prompts[-1] // self.prefix_id_tokens)
            if len(ids) > blocks:
                problem = (f"has {len(ids)} ids but the prompt of {rows.prompts[-1]} tokens has only {blocks} block(s) "
                           f"of {self.prefix_id_tokens} tokens (one id per block)")  # fmt: skip
                raise self.error(line, "prefix_ids", problem)
            rows.prefix.append(ids)
        if rows.tenants is not None:
            tenant = values["tenant"]
            if isinstance(tenant, bool) or not isinstance(tenant, (str, int)) or tenant == "":
                raise self.error(line, "tenant", f"must be a non-empty string or integer, got {shown(tenant, 60)}")
            name = str(tenant)
            if name not in self._tenants:
                self._new_tenant(line, name)
            rows.tenants.append(name)
        rows.lines.append(line)


def _parse_csv(path: Path, given: Mapping[str, Any], clock: bool = False,
               prefix_id_tokens: int = MOONCAKE_PREFIX_ID_TOKENS) -> _Rows:
    """The rows of a CSV file whose header holds the columns ``given`` maps our fields to; or, with ``given``
    mapping format names to such mappings, the first format whose columns the header holds."""
    lines = _read_lines(path)
    header_i = next((i for i, line in enumerate(lines) if line.strip()), None)
    if header_i is None:
        raise TraceError(f"{path}:1: trace file is empty; expected a CSV header")
    header = [h.strip() for h in _split_csv(lines[header_i])]
    names: Mapping[str, str] = given
    if all(isinstance(v, Mapping) for v in given.values()):  # alternative formats
        names = next((n for n in given.values() if all(c in header for c in n.values())), {})
        if not names:
            accepted = "; ".join(f"{fmt}: {','.join(n.values())}" for fmt, n in given.items())
            raise TraceError(f"{path}:1: unknown header {shown(header, 200)}; expected columns including one of: "
                             f"{accepted}")
    expected = list(names.values())
    twice = sorted(col for col, n in Counter(header).items() if col and n > 1)  # one pass: a header may be 1 MiB
    if twice:
        raise TraceError(f"{path}:{header_i + 1}: column(s) {shown(twice, 200)} appear more than once in the CSV "
                         f"header; which one holds the data is ambiguous, rename or drop the duplicates")
    missing = [col for col in expected if col not in header]
    if missing:
        raise TraceError(f"{path}:{header_i + 1}: missing column(s) {missing} in the CSV header; found columns "
                         f"{shown(header, 200)}, expected {expected}")
    index = {fld: header.index(col) for fld, col in names.items()}
    parser = _Parser(path, names, "column", clock=clock, prefix_id_tokens=prefix_id_tokens)

    def missing_cell(cells: list[str]) -> str:
        return f"has no value (the row has {len(cells)} fields, the header {len(header)})"

    for i in range(header_i + 1, len(lines)):
        line = lines[i]
        if not line.strip():
            continue  # blank line
        try:
            row = _split_csv(line)
        except csv.Error as e:
            raise TraceError(f"{path}:{i + 1}: malformed CSV row ({e})") from None
        if len(row) > len(header) and any(cell.strip() for cell in row[len(header) :]):
            raise TraceError(f"{path}:{i + 1}: the row has {len(row)} fields but the header {len(header)}; "
                             f"{shown(row[len(header) :], 60)} belong(s) to no column (a stray comma, or a column "
                             f"missing from the header?)")
        parser.add_record(i + 1, [cell.strip() for cell in row], index, missing_cell)
    if not parser.rows.lines:
        raise TraceError(f"{path}:{header_i + 2}: no data rows after the header on line {header_i + 1}")
    return parser.rows


def _split_csv(line: str) -> list[str]:
    return line.split(",") if '"' not in line else next(csv.reader([line]))


def _parse_jsonl(path: Path, names: Mapping[str, str], prefix_id_tokens: int = MOONCAKE_PREFIX_ID_TOKENS) -> _Rows:
    lines = _read_lines(path)
    parser = _Parser(path, names, "key", prefix_id_tokens=prefix_id_tokens)

    def missing_key(obj: dict[str, Any]) -> str:
        return f"is missing; found keys {shown(sorted(obj), 200)}, expected {list(names.values())}"

    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            obj = parse_json(line)  # nested too deeply, an integer of over 4,300 digits: a JSONDecodeError
        except json.JSONDecodeError as e:
            raise TraceError(f"{path}:{i + 1}: invalid JSON ({e.msg} at column {e.colno})") from None
        if not isinstance(obj, dict):
            raise TraceError(f"{path}:{i + 1}: expected a JSON object per line, got {type(obj).__name__}")
        parser.add_record(i + 1, obj, names, missing_key)
    if not parser.rows.lines:
        raise TraceError(f"{path}:1: trace file is empty (no JSON lines)")
    return parser.rows


# ----------------------------------------------------------------------------------------------- assembling


def _check_int(path: Path, name: str, value: Any, minimum: int, none_ok: bool = False) -> None:
    if none_ok and value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise TraceError(f"{path}: {name} must be {'None or ' * none_ok}an integer >= {minimum}, got {value!r}")


def _check_common(path: Path, max_context: int | None, overlong: str, sort: bool) -> None:
    if overlong not in OVERLONG_OPTIONS:
        raise TraceError(f"{path}: unknown overlong option {overlong!r}; expected one of {OVERLONG_OPTIONS}")
    _check_int(path, "max_context", max_context, 2, none_ok=True)
    if not isinstance(sort, bool):
        raise TraceError(f"{path}: sort must be True or False, got {sort!r}")


def _build(rows: _Rows, *, max_context: int | None, overlong: str, sort: bool, time_to_s: float = 1.0,
           prefix_id_tokens: int = MOONCAKE_PREFIX_ID_TOKENS, tick: float | None = None,
           seed: int = 0) -> Trace:  # fmt: skip
    """The ``Trace`` of parsed rows: apply ``overlong``, check or sort the order, spread each request over
    ``[t, t + tick)`` (file time units; Mooncake's coarse ticks), rebase times."""
    path, names = rows.path, rows.names
    lines = np.asarray(rows.lines, dtype=np.int64)
    prompt = np.asarray(rows.prompts, dtype=np.int64)
    output = np.asarray(rows.outputs, dtype=np.int64)
    prefix = rows.prefix
    if max_context is not None:
        over = np.flatnonzero(prompt + output > max_context)
        if over.size and overlong == "error":
            i = int(over[0])
            raise TraceError(f"{path}:{lines[i]}: {_field_label(names, 'prompt_len', rows.kind)} + "
                             f"{_field_label(names, 'output_len', rows.kind)} = {prompt[i]} + {output[i]} exceeds "
                             f"max_context={max_context} (overlong='error'; use 'reject' to let the engine reject it "
                             f"or 'truncate' to cut it)")
        if over.size and overlong == "truncate":
            new_prompt = np.maximum(max_context - output[over], 1)  # cut the prompt first, the output if needed
            output[over] = max_context - new_prompt
            prompt[over] = new_prompt
            if prefix is not None:  # ids past the shortened prompt name blocks that no longer exist
                prefix = list(prefix)
                for i, p in zip(over.tolist(), new_prompt.tolist(), strict=True):
                    prefix[i] = prefix[i][: -(-p // prefix_id_tokens)]
    codes: np.ndarray | None = None
    tenant_names: tuple[str, ...] = ()
    if rows.tenants is not None:
        lookup: dict[str, int] = {}
        codes = np.asarray([lookup.setdefault(t, len(lookup)) for t in rows.tenants], dtype=np.int64)
        tenant_names = tuple(lookup)
    arrival = None
    order: np.ndarray | None = None
    if rows.times is not None:
        times = np.asarray(rows.times, dtype=np.float64)
        back = np.flatnonzero(np.diff(times) < 0)
        if back.size and not sort:
            i = int(back[0]) + 1
            raise TraceError(
                f"{path}:{lines[i]}: {_field_label(names, 'arrival', rows.kind)} is earlier than on line "
                f"{lines[i - 1]} (timestamps out of order); pass sort=True to sort the requests by arrival"
            )
        if back.size:
            order = np.argsort(times, kind="stable")
            times = times[order]
        if tick:  # each request lands uniformly inside its tick; a stable sort then orders them
            times = times + np.random.default_rng(seed).random(times.size) * tick
            spread_order = np.argsort(times, kind="stable")
            times = times[spread_order]
            order = spread_order if order is None else order[spread_order]
        arrival = (times - times[0]) * time_to_s
    if order is not None:
        prompt, output = prompt[order], output[order]
        codes = None if codes is None else codes[order]
        prefix = None if prefix is None else [prefix[i] for i in order.tolist()]
    prefixes = None if prefix is None else tuple(prefix)
    return Trace(data_stem(path), str(path), arrival, prompt, output, prefixes, prefix_id_tokens, codes, tenant_names)


# -------------------------------------------------------------------------------------------------- formats


def read_azure(p: Path, max_context: int | None, overlong: str, sort: bool) -> Trace:
    """``load_azure``'s work on the resolved path ``p``: check the options, parse, assemble."""
    _check_common(p, max_context, overlong, sort)
    rows = _parse_csv(p, _AZURE_COLUMNS, clock=True)
    return _build(rows, max_context=max_context, overlong=overlong, sort=sort)


def read_mooncake(p: Path, seed: int, tick_s: float | None, max_context: int | None, overlong: str,
                  sort: bool) -> Trace:  # fmt: skip
    """``load_mooncake``'s work on the resolved path ``p``: check the options, parse, detect the tick, assemble."""
    _check_common(p, max_context, overlong, sort)
    _check_int(p, "seed", seed, 0)
    if tick_s is not None and (not is_finite_number(tick_s) or tick_s < 0):
        raise TraceError(f"{p}: tick_s must be None or a finite number >= 0, got {tick_s!r}")
    rows = _parse_jsonl(p, _MOONCAKE_KEYS)
    if tick_s is None:
        distinct = np.unique(np.asarray(rows.times))
        tick_ms = float(np.median(np.diff(distinct))) if distinct.size > 1 else 0.0
    else:
        tick_ms = float(tick_s) * 1000.0
    limits = {"max_context": max_context, "overlong": overlong, "sort": sort}
    return _build(rows, **limits, time_to_s=1e-3, tick=tick_ms, seed=int(seed))  # type: ignore[arg-type]


def read_length_file(p: Path) -> Trace:
    """The length-only trace of the length file ``p`` (a format of ``LENGTH_FILE_COLUMNS``, told by its header)."""
    return _build(_parse_csv(p, LENGTH_FILE_COLUMNS), max_context=None, overlong="reject", sort=False)


def read_lengths(p: Path, max_context: int | None, overlong: str, sort: bool) -> Trace:
    """``load_lengths``'s work on the resolved path ``p``: check the options, parse, assemble."""
    _check_common(p, max_context, overlong, sort)
    rows = _parse_csv(p, _LENGTHS_COLUMNS)
    return _build(rows, max_context=max_context, overlong=overlong, sort=sort)


def read_generic(p: Path, columns: Mapping[str, str], time_unit: str, prefix_id_tokens: int, max_context: int | None,
                 overlong: str, sort: bool) -> Trace:  # fmt: skip
    """``load_generic``'s work on the resolved path ``p``: check the mapping and options, parse by suffix, assemble."""
    _check_common(p, max_context, overlong, sort)
    if not isinstance(columns, Mapping):
        raise TraceError(f"{p}: columns must be a mapping from our fields {GENERIC_FIELDS} to the file's names")
    unknown = [k for k in columns if k not in GENERIC_FIELDS]
    missing = [k for k in ("prompt_len", "output_len") if k not in columns]
    if unknown or missing:
        raise TraceError(f"{p}: columns mapping has unknown field(s) {unknown} / lacks required {missing}; fields are "
                         f"{GENERIC_FIELDS} (prompt_len and output_len required)")
    if not all(isinstance(v, str) and v for v in columns.values()):
        raise TraceError(f"{p}: columns mapping values must be non-empty column names, got {dict(columns)}")
    shared = [c for c in dict.fromkeys(columns.values()) if list(columns.values()).count(c) > 1]
    if shared:  # one column read as two fields (output_len=prompt_len) would run a trace nobody recorded
        both = " and ".join(k for k in columns if columns[k] == shared[0])
        raise TraceError(f"{p}: columns mapping reads the column {shared[0]!r} as {both}; map each field to its own")
    if time_unit not in TIME_UNITS:
        raise TraceError(f"{p}: unknown time_unit {time_unit!r}; expected one of {tuple(TIME_UNITS)}")
    _check_int(p, "prefix_id_tokens", prefix_id_tokens, 1)
    names = {fld: columns[fld] for fld in GENERIC_FIELDS if fld in columns}
    suffix = data_suffix(p)
    if suffix == ".csv":
        rows = _parse_csv(p, names, prefix_id_tokens=int(prefix_id_tokens))
    elif suffix in (".jsonl", ".json"):
        rows = _parse_jsonl(p, names, prefix_id_tokens=int(prefix_id_tokens))
    else:
        raise TraceError(
            f"{p}: unknown file type {suffix!r}; expected .csv, .jsonl or .json (JSON lines), each optionally .gz"
        )
    return _build(rows, max_context=max_context, overlong=overlong, sort=sort, time_to_s=TIME_UNITS[time_unit],
                  prefix_id_tokens=int(prefix_id_tokens))  # fmt: skip


# --------------------------------------------------------------------------------------------------- loading
TRACE_FORMATS = ("azure", "mooncake", "lengths", "generic")
_CACHE_MAX_ENTRIES = 32
_CACHE: OrderedDict[tuple[Any, ...], Trace] = OrderedDict()


def cached_load(path: str | os.PathLike[str], fmt: str, reader: Callable[..., Trace], **options: Any) -> Trace:
    """``reader(resolved path, **options)``, cached per (path, mtime, size, ``fmt``, options); ``TypeError`` for a
    ``path`` that is no path."""
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a str or os.PathLike (the trace file), got {shown(path)}")
    given = Path(path).expanduser()
    try:
        p = resolved(given)
        st = p.stat()
    except FileRefusedError as e:  # a link loop on the way
        raise TraceError(str(e)) from None
    except OSError as e:
        raise _unreadable(given, e) from None
    try:  # named as given: a link to /dev/zero is refused naming the link (the read checks again, bounded)
        check_regular_file(given, TRACE_BYTES)
    except FileRefusedError as e:
        raise TraceError(str(e)) from None

    def frozen_value(v: Any) -> Any:  # a mapping's items in the order of their keys' text (keys of mixed types)
        return tuple(sorted(v.items(), key=lambda item: repr(item[0]))) if isinstance(v, Mapping) else v

    frozen = tuple(sorted((k, frozen_value(v)) for k, v in options.items()))
    key = (str(p), st.st_mtime_ns, st.st_size, fmt, frozen)
    try:
        hash(key)
    except TypeError:
        return reader(p, **options)  # an unhashable option value: parse without caching
    trace = _CACHE.get(key)
    if trace is None:
        trace = _CACHE[key] = reader(p, **options)
        while len(_CACHE) > _CACHE_MAX_ENTRIES:
            _CACHE.popitem(last=False)
    _CACHE.move_to_end(key)
    return trace


def clear_trace_cache() -> None:
    """Forget every parsed trace (they are re-read on the next load)."""
    _CACHE.clear()


# -------------------------------------------------------------------------------------------------- loaders


def load_azure(path: str | os.PathLike[str], *, max_context: int | None = None, overlong: str = "reject",
               sort: bool = False) -> Trace:
    """The Azure LLM inference 2023 CSV (``TIMESTAMP,ContextTokens,GeneratedTokens``; wall-clock timestamps)."""
    return cached_load(path, "azure", read_azure, max_context=max_context, overlong=overlong, sort=sort)


def load_mooncake(path: str | os.PathLike[str], seed: int = 0, tick_s: float | None = None, *,
                  max_context: int | None = None, overlong: str = "reject", sort: bool = False) -> Trace:
    """The Mooncake FAST'25 JSONL, each request spread at random (``seed``) over its ~3 s tick ``[t, t + tick_s)``
    (None: the median gap between distinct timestamps; 0: the raw timestamps), then sorted."""
    limits = {"max_context": max_context, "overlong": overlong, "sort": sort}
    return cached_load(path, "mooncake", read_mooncake, seed=seed, tick_s=tick_s, **limits)


def load_lengths(path: str | os.PathLike[str], *, max_context: int | None = None, overlong: str = "reject",
                 sort: bool = False) -> Trace:
    """Paired lengths (no arrival times) from a CSV with ``num_prefill_tokens`` and ``num_decode_tokens`` columns."""
    return cached_load(path, "lengths", read_lengths, max_context=max_context, overlong=overlong, sort=sort)


def load_generic(path: str | os.PathLike[str], columns: Mapping[str, str], time_unit: str = "s", *,
                 prefix_id_tokens: int = MOONCAKE_PREFIX_ID_TOKENS, max_context: int | None = None,
                 overlong: str = "reject", sort: bool = False) -> Trace:
    """Your own CSV or JSON-lines file (plain or ``.gz``) read through ``columns`` (our field -> its column or key):
    ``prompt_len``, ``output_len`` (required), ``arrival`` (in ``time_unit``; none: length-only), ``prefix_ids``
    (a JSON list or space-separated integers), ``tenant`` (any string)."""
    limits = {"max_context": max_context, "overlong": overlong, "sort": sort}
    options = {"columns": columns, "time_unit": time_unit, "prefix_id_tokens": prefix_id_tokens}
    return cached_load(path, "generic", read_generic, **options, **limits)


_LOADERS: dict[str, Callable[..., Trace]] = {"azure": load_azure, "mooncake": load_mooncake, "lengths": load_lengths,
                                             "generic": load_generic}


def load_trace(path: str | os.PathLike[str], format: str, **options: Any) -> Trace:
    """Load ``path`` with the loader of ``format`` (one of ``TRACE_FORMATS``), passing ``options`` on; ``TypeError``
    for a ``path`` or ``format`` of the wrong type."""
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a str or os.PathLike (the trace file), got {shown(path)}")
    if not isinstance(format, str):
        raise TypeError(f"format must be a str, one of {TRACE_FORMATS}, got {shown(format)}")
    loader = _LOADERS.get(format)
    if loader is None:
        raise TraceError(f"{path}: unknown trace format {format!r}; expected one of {TRACE_FORMATS}")
    accepted = [name for name in inspect.signature(loader).parameters if name != "path"]
    unknown = sorted(set(options) - set(accepted))
    if unknown:
        raise TraceError(f"{path}: unknown option(s) {unknown} for format {format!r}; accepted: {accepted}")
    if format == "generic" and "columns" not in options:
        raise TraceError(f"{path}: format 'generic' needs a columns mapping (our field -> the file's column)")
    return loader(path, **options)
