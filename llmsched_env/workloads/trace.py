"""The ``Trace`` type: a serving trace as read-only numpy arrays, one entry per request, sliced, windowed and
replayed as ``Request``s (``traces`` reads the files)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from llmsched_env.common.checks import check_int, is_finite_number
from llmsched_env.engine.request import Request

MOONCAKE_PREFIX_ID_TOKENS = 512  # Mooncake's hash_ids each name a block of 512 prompt tokens


def make_requests(arrivals: Sequence[float], prompts: Sequence[int], outputs: Sequence[int], tenants: Sequence[int],
                  prefix_ids: Sequence[tuple[int, ...] | None], prefix_id_tokens: int,
                  first_id: int = 0) -> list[Request]:
    """One ``Request`` per row of the columns, ids from ``first_id`` on."""
    rows = zip(arrivals, prompts, outputs, tenants, prefix_ids, strict=True)
    return [Request(first_id + i, a, p, o, k, ids, prefix_id_tokens) for i, (a, p, o, k, ids) in enumerate(rows)]


def _frozen(values: Any, dtype: type, owner: str) -> np.ndarray:
    arr: np.ndarray = np.asarray(values, dtype=dtype)
    if arr.ndim != 1:
        raise ValueError(f"Trace.{owner} must be 1-D, got shape {arr.shape}")
    if arr is values and arr.flags.writeable:
        arr = arr.copy()  # never alias a caller's writable array
    arr.setflags(write=False)
    return arr


@dataclass(frozen=True, eq=False, repr=False)
class Trace:
    """Requests in arrival order (lengths in tokens >= 1)."""

    name: str
    source: str
    arrival_s: np.ndarray | None  # seconds from the first (None: lengths only)
    prompt_len: np.ndarray
    output_len: np.ndarray
    prefix_ids: tuple[tuple[int, ...], ...] | None = None  # per request, ids of its prompt's blocks
    prefix_id_tokens: int = MOONCAKE_PREFIX_ID_TOKENS  # tokens per prefix block
    tenant: np.ndarray | None = None  # codes into ``tenant_names``
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
        check_int("Trace", "prefix_id_tokens", self.prefix_id_tokens, 1)
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
        return (f"Trace({self.name!r}, num_requests={len(self)}, {timing}, prefix_ids={self.prefix_ids is not None}, "
                f"tenants={len(self.tenant_names)})")

    def _arrivals(self, what: str) -> np.ndarray:
        if self.arrival_s is None:
            raise ValueError(f"trace {self.name!r} has no arrival times (a length-only file), so {what} is undefined; "
                             "let an arrival process supply the times")
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
        """The requests at ``indices`` (ints in increasing order, or a boolean mask), arrivals rebased to 0."""
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
        return Trace(self.name, self.source, arrival, self.prompt_len[idx], self.output_len[idx], prefix,
                     self.prefix_id_tokens, None if self.tenant is None else self.tenant[idx],
                     self.tenant_names if self.tenant is not None else ())

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

    def to_requests(self, first_id: int = 0, arrival_offset_s: float = 0.0, time_scale: float = 1.0,
                    tenant_of: Sequence[int] | np.ndarray | None = None) -> list[Request]:
        """One ``Request`` per row (ids from ``first_id``) at ``arrival_offset_s + arrival_s / time_scale``, tenant
        ``tenant_of[i]``, else the trace's code, else 0."""
        arrival = self._arrivals("to_requests")
        if not is_finite_number(time_scale) or time_scale <= 0:
            raise ValueError(f"time_scale must be a finite number > 0, got {time_scale!r}")
        if not is_finite_number(arrival_offset_s):
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
        columns = (times, self.prompt_len.tolist(), self.output_len.tolist(), tenants.tolist(), prefix)
        return make_requests(*columns, self.prefix_id_tokens, first_id)

    def describe(self) -> dict[str, float]:
        """Summary statistics, nan where undefined; ``prefix_reuse_share``: the share of prefix-id occurrences
        seen earlier in the trace (an unlimited prefix cache's hits)."""
        nan = math.nan
        out: dict[str, float] = {"num_requests": float(len(self))}
        arrival_s = self.arrival_s
        timed = arrival_s is not None
        out["duration_s"] = self.duration_s() if timed else nan
        out["mean_rate_rps"] = self.mean_rate_rps() if timed else nan
        for side, values in (("prompt", self.prompt_len), ("output", self.output_len)):
            out[f"{side}_mean"] = float(values.mean()) if values.size else nan
            for q in (50, 90, 99):
                out[f"{side}_p{q}"] = float(np.percentile(values, q)) if values.size else nan
        gaps = np.diff(arrival_s) if arrival_s is not None else np.empty(0)
        out["interarrival_cv"] = float(gaps.std() / gaps.mean()) if gaps.size and gaps.mean() > 0 else nan
        out["prefix_reuse_share"] = nan
        if self.prefix_ids is not None:
            total = sum(len(ids) for ids in self.prefix_ids)
            if total:
                distinct = len(set().union(*self.prefix_ids))
                out["prefix_reuse_share"] = (total - distinct) / total
        out["num_tenants"] = float(len(self.tenant_names))
        return out
