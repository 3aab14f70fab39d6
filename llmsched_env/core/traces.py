"""Real serving traces as immutable, numpy-backed ``Trace``s, read from the files their publishers release.

Loaders: ``load_azure`` (Azure LLM inference 2023 CSV), ``load_mooncake`` (Mooncake FAST'25 JSONL, with
prefix-block ids), ``load_lengths`` (ShareGPT stats CSV: lengths only), ``load_generic`` (your own CSV/JSONL
through a column mapping) and ``load_trace`` (dispatch on a format name). Every loader accepts
``max_context``/``overlong`` (what to do with a request whose prompt + output exceeds the context) and ``sort``
(sort out-of-order timestamps instead of failing). Every problem in a file raises ``TraceError`` naming the
file, the 1-based line and the field; no row is ever dropped silently (blank lines are skipped). Parsed traces
are cached per (absolute path, mtime, size, format, options). Stdlib and numpy only.
"""

from __future__ import annotations

import csv
import inspect
import json
import math
import os
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any

import numpy as np

from llmsched_env.core.request import Request

__all__ = [
    "GENERIC_FIELDS",
    "MOONCAKE_PREFIX_ID_TOKENS",
    "OVERLONG_OPTIONS",
    "TIME_UNITS",
    "TRACE_FORMATS",
    "Trace",
    "TraceError",
    "clear_trace_cache",
    "load_azure",
    "load_generic",
    "load_lengths",
    "load_mooncake",
    "load_trace",
]

TRACE_FORMATS = ("azure", "mooncake", "lengths", "generic")
OVERLONG_OPTIONS = ("reject", "truncate", "error")
# Our fields, in the order of ``load_generic``'s ``columns`` mapping; the first and last two are optional.
GENERIC_FIELDS = ("arrival", "prompt_len", "output_len", "prefix_ids", "tenant")
TIME_UNITS: dict[str, float] = {"s": 1.0, "ms": 1e-3}  # unit -> seconds
MOONCAKE_PREFIX_ID_TOKENS = 512  # Mooncake's hash_ids each name a block of 512 prompt tokens
_AZURE_COLUMNS = {"arrival": "TIMESTAMP", "prompt_len": "ContextTokens", "output_len": "GeneratedTokens"}
_MOONCAKE_KEYS = {
    "arrival": "timestamp",
    "prompt_len": "input_length",
    "output_len": "output_length",
    "prefix_ids": "hash_ids",
}
_LENGTHS_COLUMNS = {"prompt_len": "num_prefill_tokens", "output_len": "num_decode_tokens"}
_MAX_TOKENS = 2**40  # lengths above this are corrupt data (and would overflow int64 sums)
_CACHE_MAX_ENTRIES = 32
_CACHE: OrderedDict[tuple[Any, ...], Trace] = OrderedDict()


class TraceError(ValueError):
    """A trace file or a loader option is invalid. The message names the file, the 1-based line and the field."""


# ---------------------------------------------------------------------------------------------------- Trace


def _frozen(values: Any, dtype: type, owner: str) -> np.ndarray:
    arr = np.asarray(values, dtype=dtype)
    if arr.ndim != 1:
        raise ValueError(f"Trace.{owner} must be 1-D, got shape {arr.shape}")
    if arr is values and arr.flags.writeable:
        arr = arr.copy()  # never alias a caller's writable array
    arr.setflags(write=False)
    return arr


@dataclass(frozen=True, eq=False, repr=False)
class Trace:
    """A sequence of requests in arrival order; every array is read-only and has one entry per request.

    - ``arrival_s``: float64 seconds from the first request (sorted, first 0), or None for a length-only file;
    - ``prompt_len`` / ``output_len``: int64 tokens, each >= 1;
    - ``prefix_ids``: per request, ids of consecutive prompt blocks of ``prefix_id_tokens`` tokens (Mooncake's
      ``hash_ids``; equal ids = equal content), or None;
    - ``tenant``: int codes into ``tenant_names``, or None (tenants then come from the workload).
    """

    name: str
    source: str
    arrival_s: np.ndarray | None
    prompt_len: np.ndarray
    output_len: np.ndarray
    prefix_ids: tuple[tuple[int, ...], ...] | None = None
    prefix_id_tokens: int = MOONCAKE_PREFIX_ID_TOKENS
    tenant: np.ndarray | None = None
    tenant_names: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        prompt = _frozen(self.prompt_len, np.int64, "prompt_len")
        output = _frozen(self.output_len, np.int64, "output_len")
        n = prompt.size
        if output.size != n:
            raise ValueError(f"Trace.output_len has {output.size} entries, prompt_len {n}")
        if n and (prompt.min() < 1 or output.min() < 1):
            raise ValueError("Trace.prompt_len and output_len must all be >= 1")
        object.__setattr__(self, "prompt_len", prompt)
        object.__setattr__(self, "output_len", output)
        if self.arrival_s is not None:
            arrival = _frozen(self.arrival_s, np.float64, "arrival_s")
            if arrival.size != n:
                raise ValueError(f"Trace.arrival_s has {arrival.size} entries, prompt_len {n}")
            if n and (not np.all(np.isfinite(arrival)) or arrival[0] != 0.0 or np.any(np.diff(arrival) < 0)):
                raise ValueError("Trace.arrival_s must be finite, sorted and start at 0 (rebase it first)")
            object.__setattr__(self, "arrival_s", arrival)
        if self.prefix_ids is not None:
            ids = tuple(p if type(p) is tuple else tuple(p) for p in self.prefix_ids)
            if len(ids) != n:
                raise ValueError(f"Trace.prefix_ids has {len(ids)} entries, prompt_len {n}")
            object.__setattr__(self, "prefix_ids", ids)
        if (
            isinstance(self.prefix_id_tokens, bool)
            or not isinstance(self.prefix_id_tokens, (int, np.integer))
            or self.prefix_id_tokens < 1
        ):
            raise ValueError(f"Trace.prefix_id_tokens must be an integer >= 1, got {self.prefix_id_tokens!r}")
        object.__setattr__(self, "tenant_names", tuple(str(t) for t in self.tenant_names))
        if self.tenant is not None:
            codes = _frozen(self.tenant, np.int64, "tenant")
            if codes.size != n:
                raise ValueError(f"Trace.tenant has {codes.size} entries, prompt_len {n}")
            if n and (codes.min() < 0 or codes.max() >= len(self.tenant_names)):
                raise ValueError(f"Trace.tenant codes must index tenant_names ({len(self.tenant_names)} names)")
            object.__setattr__(self, "tenant", codes)
        elif self.tenant_names:
            raise ValueError("Trace.tenant_names given without tenant codes")

    def __len__(self) -> int:
        return int(self.prompt_len.size)

    def __repr__(self) -> str:
        timing = "lengths only" if self.arrival_s is None else f"duration_s={self.duration_s():.1f}"
        return (
            f"Trace({self.name!r}, num_requests={len(self)}, {timing}, prefix_ids={self.prefix_ids is not None}, "
            f"tenants={len(self.tenant_names)})"
        )

    def _arrivals(self, what: str) -> np.ndarray:
        if self.arrival_s is None:
            raise ValueError(
                f"trace {self.name!r} has no arrival times (a length-only file), so {what} is undefined; "
                "let an arrival process supply the times"
            )
        return self.arrival_s

    def duration_s(self) -> float:
        """Seconds from the first to the last arrival (0.0 for an empty or one-request trace)."""
        arrival = self._arrivals("duration_s")
        return float(arrival[-1]) if arrival.size else 0.0

    def mean_rate_rps(self) -> float:
        """Arrivals per second, ``(n - 1) / duration_s`` (n - 1 gaps span the duration); nan when n < 2."""
        duration = self.duration_s()
        if len(self) < 2:
            return math.nan
        return (len(self) - 1) / duration if duration > 0 else math.inf

    def select(self, indices: Sequence[int] | np.ndarray) -> Trace:
        """The requests at ``indices`` (ints, or a boolean mask), in the given order, arrivals rebased to start
        at 0. For a timed trace the selected arrivals must stay sorted (pass indices in increasing order)."""
        idx = np.asarray(indices)
        if idx.dtype == bool:
            if idx.shape != (len(self),):
                raise ValueError(f"a boolean mask must have shape ({len(self)},), got {idx.shape}")
            idx = np.flatnonzero(idx)
        elif idx.size == 0:
            idx = idx.astype(np.intp)
        elif idx.dtype.kind not in "iu" or idx.ndim != 1:
            raise ValueError(f"indices must be a 1-D array of integers or a boolean mask, got {idx.dtype}{idx.shape}")
        arrival = None
        if self.arrival_s is not None:
            arrival = self.arrival_s[idx]
            if np.any(np.diff(arrival) < 0):
                raise ValueError("selected arrivals are out of order; pass the indices in increasing order")
            arrival = arrival - arrival[0] if arrival.size else arrival
        prefix = None if self.prefix_ids is None else tuple(self.prefix_ids[i] for i in idx.tolist())
        return Trace(
            self.name,
            self.source,
            arrival,
            self.prompt_len[idx],
            self.output_len[idx],
            prefix,
            self.prefix_id_tokens,
            None if self.tenant is None else self.tenant[idx],
            self.tenant_names if self.tenant is not None else (),
        )

    def slice(self, i: int | None = None, j: int | None = None) -> Trace:
        """Requests ``i:j`` (Python slice semantics), arrivals rebased to start at 0."""
        return self.select(np.arange(len(self))[i:j])

    def window(self, start_s: float, end_s: float) -> Trace:
        """Requests arriving in ``[start_s, end_s)`` (seconds of this trace), arrivals rebased to start at 0."""
        arrival = self._arrivals("window")
        if not (math.isfinite(start_s) and math.isfinite(end_s)) or end_s < start_s:
            raise ValueError(f"window needs finite start_s <= end_s, got [{start_s}, {end_s})")
        lo, hi = np.searchsorted(arrival, [start_s, end_s], side="left")
        return self.select(np.arange(lo, hi))

    def to_requests(
        self,
        first_id: int = 0,
        arrival_offset_s: float = 0.0,
        time_scale: float = 1.0,
        tenant_of: Sequence[int] | np.ndarray | None = None,
    ) -> list[Request]:
        """One ``Request`` per row, ids ``first_id, first_id + 1, ...``, arriving at
        ``arrival_offset_s + arrival_s / time_scale`` (``time_scale`` 2.0 replays at twice the rate). Tenants are
        ``tenant_of[i]`` when given, else the trace's codes, else 0."""
        arrival = self._arrivals("to_requests")
        if _as_time(time_scale) is None or isinstance(time_scale, str) or time_scale <= 0:
            raise ValueError(f"time_scale must be a finite number > 0, got {time_scale!r}")
        if _as_time(arrival_offset_s) is None or isinstance(arrival_offset_s, str):
            raise ValueError(f"arrival_offset_s must be finite, got {arrival_offset_s!r}")
        if tenant_of is not None:
            tenants = np.asarray(tenant_of)
            bad_codes = tenants.size and (tenants.dtype.kind not in "iu" or tenants.min() < 0)
            if tenants.shape != (len(self),) or bad_codes:
                raise ValueError(f"tenant_of must be {len(self)} integers >= 0, got {tenants.dtype}{tenants.shape}")
        elif self.tenant is not None:
            tenants = self.tenant
        else:
            tenants = np.zeros(len(self), dtype=np.int64)
        times = (arrival_offset_s + arrival / time_scale).tolist()
        prefix = self.prefix_ids if self.prefix_ids is not None else (None,) * len(self)
        pit = self.prefix_id_tokens
        return [
            Request(first_id + i, a, p, o, k, ids, pit)
            for i, (a, p, o, k, ids) in enumerate(
                zip(times, self.prompt_len.tolist(), self.output_len.tolist(), tenants.tolist(), prefix, strict=True)
            )
        ]

    def describe(self) -> dict[str, float]:
        """Summary statistics; nan where undefined (no arrivals, no prefix ids, empty trace).

        ``prefix_reuse_share`` is the fraction of all prefix-id occurrences whose id appeared earlier in the trace
        (the best case for a prefix cache of unlimited size)."""
        nan = math.nan
        out: dict[str, float] = {"num_requests": float(len(self))}
        timed = self.arrival_s is not None
        out["duration_s"] = self.duration_s() if timed else nan
        out["mean_rate_rps"] = self.mean_rate_rps() if timed else nan
        for side, values in (("prompt", self.prompt_len), ("output", self.output_len)):
            out[f"{side}_mean"] = float(values.mean()) if values.size else nan
            for q in (50, 90, 99):
                out[f"{side}_p{q}"] = float(np.percentile(values, q)) if values.size else nan
        gaps = np.diff(self.arrival_s) if timed else np.empty(0)
        out["interarrival_cv"] = float(gaps.std() / gaps.mean()) if gaps.size and gaps.mean() > 0 else nan
        out["prefix_reuse_share"] = nan
        if self.prefix_ids is not None:
            total = sum(len(ids) for ids in self.prefix_ids)
            if total:
                distinct = len(set().union(*self.prefix_ids))
                out["prefix_reuse_share"] = (total - distinct) / total
        out["num_tenants"] = float(len(self.tenant_names))
        return out


# ------------------------------------------------------------------------------------------- parsing helpers


def _unreadable(path: Path, error: OSError) -> TraceError:
    if isinstance(error, FileNotFoundError):
        return TraceError(f"{path}: trace file not found; check the path (traces are not shipped in the repository)")
    return TraceError(f"{path}: cannot read trace file ({error.strerror})")


def _read_lines(path: Path) -> list[str]:
    """The file's lines without line ends; line i (0-based) is file line i + 1."""
    try:
        data = path.read_bytes()
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
                value = json.loads(text)
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
    """``YYYY-MM-DD HH:MM:SS[.fraction]`` as (whole seconds since 0001-01-01, fraction); None when malformed.
    Faster than datetime.strptime by ~10x; ``days`` caches date ordinals."""
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
    if not (0 <= h < 24 and 0 <= m < 60 and 0 <= s < 61) or (frac and not frac.isdigit()):
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
    return f"{kind} {own!r}" + (f" ({fld})" if own != fld else "")


class _Parser:
    """Turns raw values into typed ones, raising ``TraceError`` that names file, line and field."""

    def __init__(self, path: Path, names: Mapping[str, str], kind: str, clock: bool = False) -> None:
        self.path, self.names, self.kind = path, dict(names), kind
        fields = names.keys()
        self.rows = _Rows(
            path,
            self.names,
            kind,
            [],
            [] if "arrival" in fields else None,
            [],
            [],
            [] if "prefix_ids" in fields else None,
            [] if "tenant" in fields else None,
        )
        self.clock = clock  # arrival is a wall-clock string (Azure), relative to the first row
        self._days: dict[str, int] = {}
        self._base: int | None = None

    def error(self, line: int, fld: str, problem: str) -> TraceError:
        return TraceError(f"{self.path}:{line}: {_field_label(self.names, fld, self.kind)} {problem}")

    def add(self, line: int, values: Mapping[str, Any]) -> None:
        rows = self.rows
        for fld, dest in (("prompt_len", rows.prompts), ("output_len", rows.outputs)):
            number = _as_int(values[fld])
            if number is None or not 1 <= number <= _MAX_TOKENS:
                problem = f"must be a positive integer (1 to 2**40 tokens), got {_short(values[fld])}"
                raise self.error(line, fld, problem)
            dest.append(number)
        if rows.times is not None:
            raw = values["arrival"]
            if self.clock:
                parsed = _wallclock(raw, self._days)
                if parsed is None:
                    problem = f"must be a time like '2023-11-16 18:15:46.6805900', got {_short(raw)}"
                    raise self.error(line, "arrival", problem)
                if self._base is None:
                    self._base = parsed[0]
                rows.times.append((parsed[0] - self._base) + parsed[1])
            else:
                number = _as_time(raw)
                if number is None:
                    raise self.error(line, "arrival", f"must be a finite number, got {_short(raw)}")
                if number < 0:
                    raise self.error(line, "arrival", f"must not be negative, got {raw!r}")
                rows.times.append(number)
        if rows.prefix is not None:
            ids = _as_ids(values["prefix_ids"])
            if ids is None:
                raise self.error(
                    line,
                    "prefix_ids",
                    "must be a list of integer ids (JSON list or space-separated "
                    f"integers), got {_short(values['prefix_ids'])}",
                )
            rows.prefix.append(ids)
        if rows.tenants is not None:
            tenant = values["tenant"]
            if isinstance(tenant, bool) or not isinstance(tenant, (str, int)) or tenant == "":
                raise self.error(line, "tenant", f"must be a non-empty string or integer, got {_short(tenant)}")
            rows.tenants.append(str(tenant))
        rows.lines.append(line)


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _parse_csv(path: Path, names: Mapping[str, str], clock: bool = False) -> _Rows:
    lines = _read_lines(path)
    header_i = next((i for i, line in enumerate(lines) if line.strip()), None)
    expected = list(names.values())
    if header_i is None:
        raise TraceError(f"{path}:1: trace file is empty; expected a CSV header with columns {expected}")
    header = [h.strip() for h in _split_csv(lines[header_i])]
    missing = [col for col in expected if col not in header]
    if missing:
        raise TraceError(
            f"{path}:{header_i + 1}: missing column(s) {missing} in the CSV header; found columns {header}, "
            f"expected {expected}"
        )
    index = {fld: header.index(col) for fld, col in names.items()}
    parser = _Parser(path, names, "column", clock=clock)
    for i in range(header_i + 1, len(lines)):
        line = lines[i]
        if not line.strip():
            continue  # blank line
        try:
            row = _split_csv(line)
        except csv.Error as e:
            raise TraceError(f"{path}:{i + 1}: malformed CSV row ({e})") from None
        values = {}
        for fld, col_i in index.items():
            if col_i >= len(row):
                problem = f"has no value (the row has {len(row)} fields, the header {len(header)})"
                raise parser.error(i + 1, fld, problem)
            values[fld] = row[col_i].strip()
        parser.add(i + 1, values)
    if not parser.rows.lines:
        raise TraceError(f"{path}:{header_i + 2}: no data rows after the header on line {header_i + 1}")
    return parser.rows


def _split_csv(line: str) -> list[str]:
    return line.split(",") if '"' not in line else next(csv.reader([line]))


def _parse_jsonl(path: Path, names: Mapping[str, str]) -> _Rows:
    lines = _read_lines(path)
    parser = _Parser(path, names, "key")
    keys = list(names.items())
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError as e:
            detail = f"{e.msg} at column {e.colno}" if isinstance(e, json.JSONDecodeError) else str(e)
            raise TraceError(f"{path}:{i + 1}: invalid JSON ({detail})") from None
        except RecursionError:
            raise TraceError(f"{path}:{i + 1}: invalid JSON (nested too deeply)") from None
        if not isinstance(obj, dict):
            raise TraceError(f"{path}:{i + 1}: expected a JSON object per line, got {type(obj).__name__}")
        values = {}
        for fld, key in keys:
            if key not in obj:
                raise parser.error(i + 1, fld, f"is missing; found keys {sorted(obj)}, expected {list(names.values())}")
            values[fld] = obj[key]
        parser.add(i + 1, values)
    if not parser.rows.lines:
        raise TraceError(f"{path}:1: trace file is empty (no JSON lines)")
    return parser.rows


# ----------------------------------------------------------------------------------------------- assembling


def _check_common(path: Path, max_context: int | None, overlong: str, sort: bool) -> None:
    if overlong not in OVERLONG_OPTIONS:
        raise TraceError(f"{path}: unknown overlong option {overlong!r}; expected one of {OVERLONG_OPTIONS}")
    if max_context is not None and (
        isinstance(max_context, bool) or not isinstance(max_context, (int, np.integer)) or max_context < 2
    ):
        raise TraceError(f"{path}: max_context must be None or an integer >= 2, got {max_context!r}")
    if not isinstance(sort, bool):
        raise TraceError(f"{path}: sort must be True or False, got {sort!r}")


def _build(
    rows: _Rows,
    *,
    max_context: int | None,
    overlong: str,
    sort: bool,
    time_to_s: float = 1.0,
    prefix_id_tokens: int = MOONCAKE_PREFIX_ID_TOKENS,
    tick: float | None = None,
    seed: int = 0,
) -> Trace:
    """A ``Trace`` from parsed rows: apply ``overlong``, check or sort the order, spread ticks, rebase times.

    ``tick`` (file time units): spread each request uniformly over ``[t, t + tick)`` (Mooncake's coarse ticks);
    None or 0 keeps the timestamps as they are."""
    path, names = rows.path, rows.names
    lines = np.asarray(rows.lines, dtype=np.int64)
    prompt = np.asarray(rows.prompts, dtype=np.int64)
    output = np.asarray(rows.outputs, dtype=np.int64)
    prefix = rows.prefix
    if max_context is not None:
        over = np.flatnonzero(prompt + output > max_context)
        if over.size and overlong == "error":
            i = int(over[0])
            raise TraceError(
                f"{path}:{lines[i]}: {_field_label(names, 'prompt_len', rows.kind)} + "
                f"{_field_label(names, 'output_len', rows.kind)} = {prompt[i]} + {output[i]} exceeds "
                f"max_context={max_context} (overlong='error'; use 'reject' to let the engine reject it or "
                "'truncate' to cut it)"
            )
        if over.size and overlong == "truncate":
            new_prompt = np.maximum(max_context - output[over], 1)  # cut the prompt first, the output if needed
            output[over] = max_context - new_prompt
            prompt[over] = new_prompt
            if prefix is not None:  # ids past the shortened prompt name blocks that no longer exist
                prefix = list(prefix)
                for i, p in zip(over.tolist(), new_prompt.tolist(), strict=True):
                    prefix[i] = prefix[i][: -(-p // prefix_id_tokens)]
    codes, tenant_names = None, ()
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
    return Trace(
        path.stem,
        str(path),
        arrival,
        prompt,
        output,
        None if prefix is None else tuple(prefix),
        prefix_id_tokens,
        codes,
        tenant_names,
    )


def _cached(path: str | os.PathLike[str], fmt: str, options: dict[str, Any], parse: Callable[[Path], Trace]) -> Trace:
    p = Path(path).expanduser().resolve()
    try:
        st = p.stat()
    except OSError as e:
        raise _unreadable(p, e) from None
    frozen = tuple(sorted((k, tuple(sorted(v.items())) if isinstance(v, Mapping) else v) for k, v in options.items()))
    key = (str(p), st.st_mtime_ns, st.st_size, fmt, frozen)
    try:
        hash(key)
    except TypeError:
        return parse(p)  # an unhashable option value: parse without caching
    trace = _CACHE.get(key)
    if trace is None:
        trace = _CACHE[key] = parse(p)
        while len(_CACHE) > _CACHE_MAX_ENTRIES:
            _CACHE.popitem(last=False)
    _CACHE.move_to_end(key)
    return trace


def clear_trace_cache() -> None:
    """Forget every parsed trace (they are re-read on the next load)."""
    _CACHE.clear()


# -------------------------------------------------------------------------------------------------- loaders


def load_azure(
    path: str | os.PathLike[str], *, max_context: int | None = None, overlong: str = "reject", sort: bool = False
) -> Trace:
    """The Azure LLM inference 2023 CSV (``TIMESTAMP,ContextTokens,GeneratedTokens``; wall-clock timestamps)."""

    def parse(p: Path) -> Trace:
        _check_common(p, max_context, overlong, sort)
        rows = _parse_csv(p, _AZURE_COLUMNS, clock=True)
        return _build(rows, max_context=max_context, overlong=overlong, sort=sort)

    return _cached(path, "azure", {"max_context": max_context, "overlong": overlong, "sort": sort}, parse)


def load_mooncake(
    path: str | os.PathLike[str],
    seed: int = 0,
    tick_s: float | None = None,
    *,
    max_context: int | None = None,
    overlong: str = "reject",
    sort: bool = False,
) -> Trace:
    """The Mooncake FAST'25 JSONL (``timestamp`` ms, ``input_length``, ``output_length``, ``hash_ids``).

    Timestamps come in ~3 s ticks: each request is spread uniformly at random over ``[t, t + tick_s)`` with
    ``np.random.default_rng(seed)``, then sorted. ``tick_s=None`` detects the tick as the median gap between
    distinct timestamps (0 with fewer than two distinct ones); ``tick_s=0`` keeps the raw timestamps."""

    def parse(p: Path) -> Trace:
        _check_common(p, max_context, overlong, sort)
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
            raise TraceError(f"{p}: seed must be an integer >= 0, got {seed!r}")
        if tick_s is not None and (_as_time(tick_s) is None or isinstance(tick_s, str) or tick_s < 0):
            raise TraceError(f"{p}: tick_s must be None or a finite number >= 0, got {tick_s!r}")
        rows = _parse_jsonl(p, _MOONCAKE_KEYS)
        if tick_s is None:
            distinct = np.unique(np.asarray(rows.times))
            tick_ms = float(np.median(np.diff(distinct))) if distinct.size > 1 else 0.0
        else:
            tick_ms = float(tick_s) * 1000.0
        return _build(
            rows, max_context=max_context, overlong=overlong, sort=sort, time_to_s=1e-3, tick=tick_ms, seed=int(seed)
        )

    options = {"seed": seed, "tick_s": tick_s, "max_context": max_context, "overlong": overlong, "sort": sort}
    return _cached(path, "mooncake", options, parse)


def load_lengths(
    path: str | os.PathLike[str], *, max_context: int | None = None, overlong: str = "reject", sort: bool = False
) -> Trace:
    """Paired lengths from a CSV with ``num_prefill_tokens`` and ``num_decode_tokens`` columns (the ShareGPT
    stats file); ``arrival_s`` is None, an arrival process supplies the times. ``sort`` has nothing to sort."""

    def parse(p: Path) -> Trace:
        _check_common(p, max_context, overlong, sort)
        rows = _parse_csv(p, _LENGTHS_COLUMNS)
        return _build(rows, max_context=max_context, overlong=overlong, sort=sort)

    return _cached(path, "lengths", {"max_context": max_context, "overlong": overlong, "sort": sort}, parse)


def load_generic(
    path: str | os.PathLike[str],
    columns: Mapping[str, str],
    time_unit: str = "s",
    *,
    prefix_id_tokens: int = MOONCAKE_PREFIX_ID_TOKENS,
    max_context: int | None = None,
    overlong: str = "reject",
    sort: bool = False,
) -> Trace:
    """Your own CSV (``.csv``) or JSON-lines (``.jsonl``/``.json``) file, read through ``columns``: our field ->
    the file's column (CSV) or key (JSONL). Fields: ``prompt_len``, ``output_len`` (required), ``arrival``
    (numeric, absolute or relative, in ``time_unit`` "s" or "ms"; rebased to the first), ``prefix_ids`` (a JSON
    list, or space-separated integers in a CSV cell), ``tenant`` (any string; codes in order of first
    appearance). Without ``arrival`` the trace is length-only."""

    def parse(p: Path) -> Trace:
        _check_common(p, max_context, overlong, sort)
        if not isinstance(columns, Mapping):
            raise TraceError(f"{p}: columns must be a mapping from our fields {GENERIC_FIELDS} to the file's names")
        unknown = [k for k in columns if k not in GENERIC_FIELDS]
        missing = [k for k in ("prompt_len", "output_len") if k not in columns]
        if unknown or missing:
            raise TraceError(
                f"{p}: columns mapping has unknown field(s) {unknown} / lacks required {missing}; fields are "
                f"{GENERIC_FIELDS} (prompt_len and output_len required)"
            )
        if not all(isinstance(v, str) and v for v in columns.values()):
            raise TraceError(f"{p}: columns mapping values must be non-empty column names, got {dict(columns)}")
        if time_unit not in TIME_UNITS:
            raise TraceError(f"{p}: unknown time_unit {time_unit!r}; expected one of {tuple(TIME_UNITS)}")
        if (
            isinstance(prefix_id_tokens, bool)
            or not isinstance(prefix_id_tokens, (int, np.integer))
            or prefix_id_tokens < 1
        ):
            raise TraceError(f"{p}: prefix_id_tokens must be an integer >= 1, got {prefix_id_tokens!r}")
        names = {fld: columns[fld] for fld in GENERIC_FIELDS if fld in columns}
        suffix = p.suffix.lower()
        if suffix == ".csv":
            rows = _parse_csv(p, names)
        elif suffix in (".jsonl", ".json"):
            rows = _parse_jsonl(p, names)
        else:
            raise TraceError(f"{p}: unknown file type {suffix!r}; expected .csv, .jsonl or .json (JSON lines)")
        return _build(
            rows,
            max_context=max_context,
            overlong=overlong,
            sort=sort,
            time_to_s=TIME_UNITS[time_unit],
            prefix_id_tokens=int(prefix_id_tokens),
        )

    options = {
        "columns": dict(columns) if isinstance(columns, Mapping) else columns,
        "time_unit": time_unit,
        "prefix_id_tokens": prefix_id_tokens,
        "max_context": max_context,
        "overlong": overlong,
        "sort": sort,
    }
    return _cached(path, "generic", options, parse)


_LOADERS: dict[str, Callable[..., Trace]] = {
    "azure": load_azure,
    "mooncake": load_mooncake,
    "lengths": load_lengths,
    "generic": load_generic,
}


def load_trace(path: str | os.PathLike[str], format: str, **options: Any) -> Trace:
    """Load ``path`` with the loader of ``format`` (one of ``TRACE_FORMATS``), passing ``options`` on."""
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
