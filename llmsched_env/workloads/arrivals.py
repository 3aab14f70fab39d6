"""Arrival processes: frozen, validated dataclasses with ``mean_rate_rps``, ``sample(rng, n, start_s)`` (``n``
sorted times > ``start_s``, functions of absolute time), ``scaled(load)`` (the rate function times ``load``;
periods stay, a ``TraceReplay`` compresses time) and ``to_dict()`` (``arrival_from_dict`` reads it back).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any, ClassVar, Protocol, TypeVar, runtime_checkable

import numpy as np

from llmsched_env.common.checks import MAX_RATE_RPS, check_int, check_positive
from llmsched_env.common.fields import from_fields, to_fields


@runtime_checkable
class ArrivalProcess(Protocol):
    """What the workload generator needs from an arrival process."""

    @property
    def mean_rate_rps(self) -> float: ...

    def sample(self, rng: np.random.Generator, n: int, start_s: float = 0.0) -> np.ndarray: ...

    def scaled(self, load: float) -> ArrivalProcess: ...

    def to_dict(self) -> dict[str, Any]: ...


def _check_sample(owner: str, rng: np.random.Generator, n: int, start_s: float) -> None:
    if not isinstance(rng, np.random.Generator):
        raise ValueError(f"{owner}.sample: rng must be a np.random.Generator, got {type(rng).__name__}")
    check_int(f"{owner}.sample", "n", n, 0)
    check_positive(f"{owner}.sample", "start_s", start_s, allow_zero=True)


def _after(times: np.ndarray, start_s: float) -> np.ndarray:
    # A zero gap (or rounding at a large start_s) would put an arrival at start_s; the contract is > start_s.
    return np.maximum(times, np.nextafter(float(start_s), math.inf), out=times)


_P = TypeVar("_P", bound="_Process")


class _Process:
    """Shared plumbing: float fields checked (> 0, or >= 0 for ``_may_be_zero``) and coerced with named errors,
    ``scaled`` over ``_rate_fields``, ``to_dict``."""

    kind: ClassVar[str]
    _rate_fields: ClassVar[tuple[str, ...]] = ("rate_rps",)
    _may_be_zero: ClassVar[tuple[str, ...]] = ()
    __dataclass_fields__: ClassVar[dict[str, Any]]  # each process is a dataclass (``scaled`` replaces fields)

    def _set_float(self, name: str, *, allow_zero: bool = False) -> None:
        value = getattr(self, name)
        rate = name.endswith("rate_rps")  # a rate in requests/s: within its physical range (``MAX_RATE_RPS``)
        maximum, unit = (MAX_RATE_RPS, "requests/s") if rate else (None, "")
        check_positive(type(self).__name__, name, value, allow_zero=allow_zero, maximum=maximum, unit=unit)
        object.__setattr__(self, name, float(value))

    def __post_init__(self) -> None:
        for f in fields(self):
            self._set_float(f.name, allow_zero=f.name in self._may_be_zero)

    def sample(self, rng: np.random.Generator, n: int, start_s: float = 0.0) -> np.ndarray:
        """``n`` arrival times after ``start_s``, non-decreasing, drawn with ``rng`` (arguments checked)."""
        _check_sample(type(self).__name__, rng, n, start_s)
        return _after(self._times(rng, n, start_s), start_s)

    def _times(self, rng: np.random.Generator, n: int, start_s: float) -> np.ndarray:
        """The process's ``n`` arrival times from ``start_s`` on (arguments already checked)."""
        raise NotImplementedError

    def scaled(self: _P, load: float) -> _P:
        """The same process with its rate function multiplied by ``load`` > 0 (see the module docstring)."""
        check_positive(f"{type(self).__name__}.scaled", "load", load)
        return replace(self, **{name: getattr(self, name) * load for name in self._rate_fields})

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able data; ``arrival_from_dict`` inverts it."""
        return {"kind": self.kind, **to_fields(self)}


@dataclass(frozen=True)
class Poisson(_Process):
    """Homogeneous Poisson arrivals: independent exponential gaps of mean ``1 / rate_rps``."""

    rate_rps: float
    kind: ClassVar[str] = "poisson"

    @property
    def mean_rate_rps(self) -> float:
        return self.rate_rps

    def _times(self, rng: np.random.Generator, n: int, start_s: float) -> np.ndarray:
        return start_s + np.cumsum(rng.exponential(1.0 / self.rate_rps, size=n))


@dataclass(frozen=True)
class GammaArrivals(_Process):
    """Renewal process with Gamma gaps of mean ``1 / rate_rps`` and coefficient of variation ``cv`` (1: Poisson,
    > 1 bursty, < 1 regular); the renewal starts afresh at ``start_s``."""

    rate_rps: float
    cv: float
    kind: ClassVar[str] = "gamma"

    @property
    def mean_rate_rps(self) -> float:
        return self.rate_rps

    def _times(self, rng: np.random.Generator, n: int, start_s: float) -> np.ndarray:
        cv2 = self.cv * self.cv
        return start_s + np.cumsum(rng.gamma(1.0 / cv2, cv2 / self.rate_rps, size=n))


@dataclass(frozen=True)
class OnOff(_Process):
    """Poisson at ``rate_rps`` for ``on_s`` seconds, then silent for ``off_s``; at time t the cycle is
    ``(t + phase_s) mod (on_s + off_s)`` in. Sampled exactly: Poisson on the on-time clock, mapped back."""

    rate_rps: float
    on_s: float
    off_s: float
    phase_s: float = 0.0
    kind: ClassVar[str] = "on_off"
    _may_be_zero: ClassVar[tuple[str, ...]] = ("off_s", "phase_s")

    @property
    def cycle_s(self) -> float:
        return self.on_s + self.off_s

    @property
    def mean_rate_rps(self) -> float:
        return self.rate_rps * self.on_s / self.cycle_s

    def rate_at(self, t_s: np.ndarray | float) -> np.ndarray:
        """The instantaneous rate at time(s) ``t_s``."""
        into = np.mod(np.asarray(t_s, dtype=np.float64) + self.phase_s, self.cycle_s)
        return np.where(into < self.on_s, self.rate_rps, 0.0)

    def _times(self, rng: np.random.Generator, n: int, start_s: float) -> np.ndarray:
        cycle, on = self.cycle_s, self.on_s
        s0 = start_s + self.phase_s
        num_cycles0, into0 = divmod(s0, cycle)
        on_time0 = num_cycles0 * on + min(into0, on)  # on-time elapsed by start_s
        on_time = on_time0 + np.cumsum(rng.exponential(1.0 / self.rate_rps, size=n))
        num_cycles = np.floor(on_time / on)
        into = np.maximum(on_time - num_cycles * on, 0.0)
        return num_cycles * cycle + into - self.phase_s


@dataclass(frozen=True)
class Diurnal(_Process):
    """Poisson with rate(t) = ``mean_rate_rps * (1 + amplitude * sin(2π (t + phase_s) / period_s))``, amplitude in
    [0, 1]. Sampled exactly by thinning candidates drawn at the peak rate."""

    mean_rate_rps: float
    amplitude: float
    period_s: float
    phase_s: float = 0.0
    kind: ClassVar[str] = "diurnal"
    _rate_fields: ClassVar[tuple[str, ...]] = ("mean_rate_rps",)
    _may_be_zero: ClassVar[tuple[str, ...]] = ("amplitude", "phase_s")

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.amplitude > 1:
            raise ValueError(f"Diurnal.amplitude must be in [0, 1] so the rate stays >= 0, got {self.amplitude}")

    def rate_at(self, t_s: np.ndarray | float) -> np.ndarray:
        """The instantaneous rate at time(s) ``t_s``."""
        angle = 2.0 * np.pi * (np.asarray(t_s, dtype=np.float64) + self.phase_s) / self.period_s
        return self.mean_rate_rps * (1.0 + self.amplitude * np.sin(angle))

    def _times(self, rng: np.random.Generator, n: int, start_s: float) -> np.ndarray:
        peak = self.mean_rate_rps * (1.0 + self.amplitude)
        kept: list[np.ndarray] = []
        num_kept, t = 0, float(start_s)
        while num_kept < n:
            # About 1/(1 + amplitude) of the candidates survive; draw a margin more so one round usually does.
            size = int((n - num_kept) * (1.0 + self.amplitude) * 1.1) + 64
            candidates = t + np.cumsum(rng.exponential(1.0 / peak, size=size))
            batch = candidates[rng.random(size) * peak < self.rate_at(candidates)]
            kept.append(batch)
            num_kept += batch.size
            t = float(candidates[-1])
        return np.concatenate(kept)[:n] if kept else np.empty(0, dtype=np.float64)


@dataclass(frozen=True)
class Ramp(_Process):
    """Poisson with a rate going linearly from ``start_rate_rps`` at t = 0 to ``end_rate_rps`` (> 0, the long-run
    rate) at ``duration_s``, then staying there. Sampled exactly by inverting the cumulative intensity."""

    start_rate_rps: float
    end_rate_rps: float
    duration_s: float
    kind: ClassVar[str] = "ramp"
    _rate_fields: ClassVar[tuple[str, ...]] = ("start_rate_rps", "end_rate_rps")
    _may_be_zero: ClassVar[tuple[str, ...]] = ("start_rate_rps",)

    @property
    def mean_rate_rps(self) -> float:
        return self.end_rate_rps

    def rate_at(self, t_s: np.ndarray | float) -> np.ndarray:
        """The instantaneous rate at time(s) ``t_s`` >= 0."""
        frac = np.clip(np.asarray(t_s, dtype=np.float64) / self.duration_s, 0.0, 1.0)
        return self.start_rate_rps + (self.end_rate_rps - self.start_rate_rps) * frac

    def _cumulative(self, t_s: float) -> float:
        s, e, d = self.start_rate_rps, self.end_rate_rps, self.duration_s
        on_ramp = min(t_s, d)
        return s * on_ramp + (e - s) * on_ramp * on_ramp / (2.0 * d) + e * max(t_s - d, 0.0)

    def _inverse(self, x: np.ndarray) -> np.ndarray:
        s, e, d = self.start_rate_rps, self.end_rate_rps, self.duration_s
        x_ramp_end = 0.5 * (s + e) * d
        xr = np.minimum(x, x_ramp_end)
        # Root of (e - s)/(2d) t^2 + s t = x in the form 2x / (s + sqrt(...)): stable for e ≈ s and e < s.
        denom = s + np.sqrt(np.maximum(s * s + 2.0 * (e - s) * xr / d, 0.0))
        with np.errstate(divide="ignore", invalid="ignore"):
            t_ramp = np.where(denom > 0, 2.0 * xr / denom, 0.0)
        return np.where(x <= x_ramp_end, t_ramp, d + (x - x_ramp_end) / e)

    def _times(self, rng: np.random.Generator, n: int, start_s: float) -> np.ndarray:
        x = self._cumulative(float(start_s)) + np.cumsum(rng.exponential(1.0, size=n))
        return self._inverse(x)


@dataclass(frozen=True, eq=False, repr=False)
class TraceReplay(_Process):
    """Replays recorded times: ``start_s + timestamps_s[:n] / rate_multiplier`` (``rng`` unused); ``timestamps_s``
    sorted, finite, >= 0 and spanning a positive time, kept as a read-only float64 copy."""

    timestamps_s: np.ndarray
    rate_multiplier: float = 1.0
    kind: ClassVar[str] = "trace_replay"
    _rate_fields: ClassVar[tuple[str, ...]] = ("rate_multiplier",)

    def __post_init__(self) -> None:
        try:
            ts = np.array(self.timestamps_s, dtype=np.float64) + 0.0  # a copy; + 0.0 turns -0.0 into 0.0
        except (TypeError, ValueError) as exc:
            raise ValueError(f"TraceReplay.timestamps_s must be a 1-D sequence of numbers ({exc})") from None
        if ts.ndim != 1 or ts.size < 2:
            raise ValueError(f"TraceReplay.timestamps_s must be 1-D with >= 2 entries, got shape {ts.shape}")
        if not np.all(np.isfinite(ts)) or ts[0] < 0:
            raise ValueError("TraceReplay.timestamps_s must be finite and >= 0")
        drops = np.flatnonzero(np.diff(ts) < 0)
        if drops.size:
            i = int(drops[0])
            raise ValueError(f"TraceReplay.timestamps_s must be sorted, but [{i + 1}]={ts[i + 1]} < [{i}]={ts[i]}")
        if ts[-1] <= ts[0]:
            raise ValueError("TraceReplay.timestamps_s must span a positive time to define a rate")
        ts.setflags(write=False)
        object.__setattr__(self, "timestamps_s", ts)
        self._set_float("rate_multiplier")

    @property
    def num_arrivals(self) -> int:
        return int(self.timestamps_s.size)

    @property
    def mean_rate_rps(self) -> float:
        ts = self.timestamps_s
        return (ts.size - 1) / float(ts[-1] - ts[0]) * self.rate_multiplier

    def _times(self, rng: np.random.Generator, n: int, start_s: float) -> np.ndarray:
        if n > self.num_arrivals:
            raise ValueError(f"TraceReplay.sample: asked for n={n} arrivals but the trace has {self.num_arrivals}")
        return start_s + self.timestamps_s[:n] / self.rate_multiplier

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "timestamps_s": self.timestamps_s.tolist(), "rate_multiplier": self.rate_multiplier}

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TraceReplay):
            return NotImplemented
        return self.rate_multiplier == other.rate_multiplier and np.array_equal(self.timestamps_s, other.timestamps_s)

    def __hash__(self) -> int:
        return hash((self.rate_multiplier, self.timestamps_s.tobytes()))

    def __repr__(self) -> str:
        span = float(self.timestamps_s[-1] - self.timestamps_s[0])
        return (
            f"TraceReplay(num_arrivals={self.num_arrivals}, span_s={span:.6g}, rate_multiplier={self.rate_multiplier})"
        )


_PROCESSES = (Poisson, GammaArrivals, OnOff, Diurnal, Ramp, TraceReplay)
_KINDS: dict[str, type[ArrivalProcess]] = {c.kind: c for c in _PROCESSES}
ARRIVAL_KINDS = tuple(_KINDS)


def arrival_from_dict(d: Mapping[str, Any]) -> ArrivalProcess:
    """The process ``d`` describes: ``{"kind": one of ARRIVAL_KINDS, **fields}``, as ``to_dict`` writes it."""
    if not isinstance(d, Mapping):
        raise ValueError(f"arrival_from_dict: expected a mapping with a 'kind' key, got {type(d).__name__}")
    if "kind" not in d:
        raise ValueError(f"arrival_from_dict: missing field 'kind' (one of {ARRIVAL_KINDS})")
    cls = _KINDS.get(d["kind"]) if isinstance(d["kind"], str) else None
    if cls is None:
        raise ValueError(f"arrival_from_dict: unknown kind {d['kind']!r}, expected one of {ARRIVAL_KINDS}")
    return from_fields(cls, f"arrival_from_dict: {cls.__name__}", d, ignore=("kind",))


def interarrival_cv(times: np.ndarray) -> float:
    """Coefficient of variation (std / mean) of the gaps between consecutive ``times``: 1 for Poisson."""
    gaps = np.diff(np.asarray(times, dtype=np.float64))
    if gaps.size < 2:
        raise ValueError(f"interarrival_cv: times needs >= 3 arrivals, got {gaps.size + 1}")
    mean = float(gaps.mean())
    if not mean > 0:
        raise ValueError(f"interarrival_cv: times must increase overall, mean gap is {mean}")
    return float(gaps.std()) / mean
