"""The scenario library: named workload + tenants + SLOs + engine + cost model, with train/eval splits.

A scenario's ``source(split)`` gives the requests of one episode. Trace scenarios replay a window of
consecutive requests of a real trace: the first ``TRAIN_FRACTION`` of the trace's time is the training
part, the rest the evaluation part, so evaluation never replays what training saw. Synthetic scenarios draw
from disjoint random streams per split (and, for length files, from disjoint halves of the file). ``load``
multiplies the arrival rate relative to the scenario's nominal rate. SLO targets scale with the cost
model's unloaded decode step, so they stay meaningful when the hardware preset changes.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Protocol

import numpy as np

from llmsched_env.common.checks import is_finite_number
from llmsched_env.costs.base import CostModel, unloaded_decode_time_s
from llmsched_env.costs.loader import load_cost_model
from llmsched_env.engine.config import SLO_CLASSES, EngineConfig, SLOClass, TenantConfig
from llmsched_env.engine.remote_kv import RemoteKVConfig
from llmsched_env.engine.request import Request
from llmsched_env.workloads.lengths import LengthDist
from llmsched_env.workloads.public_traces import trace_dir, trace_path
from llmsched_env.workloads.trace_io import data_stem
from llmsched_env.workloads.traces import Trace, load_trace
from llmsched_env.workloads.workload import TenantWorkload, WorkloadConfig, generate

__all__ = [
    "SPLITS",
    "TRAIN_FRACTION",
    "RequestSource",
    "Scenario",
    "SyntheticSource",
    "TraceSource",
    "scenario_from_trace",
    "slo_scale",
    "trace_dir",
    "trace_path",
]

SPLITS = ("train", "eval")
TRAIN_FRACTION = 0.7
REFERENCE_COST_MODEL = "llama3-8b-h100"  # the hardware the literature's SLO targets were set for


def slo_scale(cost_model: CostModel) -> float:
    """Unloaded decode step of ``cost_model`` over that of the reference H100 preset."""
    return unloaded_decode_time_s(cost_model) / unloaded_decode_time_s(load_cost_model(REFERENCE_COST_MODEL))


class RequestSource(Protocol):
    """Draws the requests of one episode."""

    tenants: tuple[TenantConfig, ...]

    def sample(self, rng: np.random.Generator, num_requests: int, load: float) -> list[Request]: ...

    def nominal_rate_rps(self) -> float: ...


_SPLIT_STREAM = {"train": 0, "eval": 1}


@dataclass(frozen=True)
class SyntheticSource:
    """A generated workload; train and eval episodes use disjoint random streams."""

    workload: WorkloadConfig
    split: str

    @property
    def tenants(self) -> tuple[TenantConfig, ...]:
        return tuple(t.tenant for t in self.workload.tenants)

    def nominal_rate_rps(self) -> float:
        return self.workload.total_rate_rps

    def sample(self, rng: np.random.Generator, num_requests: int, load: float) -> list[Request]:
        stream = np.random.default_rng([_SPLIT_STREAM[self.split], int(rng.integers(2**63))])
        wl = replace(self.workload, num_requests=num_requests)
        return generate(wl.scaled(load) if load != 1.0 else wl, stream)


@dataclass(frozen=True)
class TraceSource:
    """Windows of consecutive requests of one part of a trace, replayed at ``rate_rps × load``."""

    trace: Trace
    tenant: TenantConfig
    rate_rps: float

    @property
    def tenants(self) -> tuple[TenantConfig, ...]:
        return (self.tenant,)

    def nominal_rate_rps(self) -> float:
        return self.rate_rps

    def sample(self, rng: np.random.Generator, num_requests: int, load: float) -> list[Request]:
        n = len(self.trace)
        if num_requests > n:
            raise ValueError(
                f"{self.trace.name}: an episode of {num_requests} requests does not fit in this split's "
                f"{n} requests; ask for fewer"
            )
        start = int(rng.integers(0, n - num_requests + 1))
        window = self.trace.slice(start, start + num_requests)
        scale = self.rate_rps / self.trace.mean_rate_rps() * load
        return window.to_requests(time_scale=scale, tenant_of=np.zeros(num_requests, dtype=np.int64))


@dataclass(frozen=True)
class Scenario:
    """A named, reproducible test situation for a scheduler."""

    name: str
    description: str
    make_source: Callable[[str, float], RequestSource] = field(repr=False)  # (split, slo scale) -> source
    engine: EngineConfig = field(default_factory=EngineConfig)
    cost_model: str = REFERENCE_COST_MODEL
    num_requests: int = 1000
    remote_kv: RemoteKVConfig | None = None

    def __post_init__(self) -> None:
        # Sources built so far, per (split, SLO scale): each scenario object keeps its own, so two scenarios
        # sharing a name (two user workloads, two trace files with the same stem) never share requests.
        object.__setattr__(self, "_sources", {})

    def source(self, split: str, cost_model: CostModel | None = None) -> RequestSource:
        """The request source of ``split`` ("train" or "eval"), SLOs scaled to ``cost_model``."""
        if split not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
        model = cost_model if cost_model is not None else load_cost_model(self.cost_model)
        key = (split, round(slo_scale(model), 9))
        sources: dict[tuple[str, float], RequestSource] = self._sources  # type: ignore[attr-defined]
        src = sources.get(key)
        if src is None:
            src = self.make_source(split, key[1])
            sources[key] = src
        return src


def scaled_tenant(
    name: str, slo_class: str | SLOClass, scale: float, weight: float = 1.0, priority: int = 0
) -> TenantConfig:
    """A tenant whose SLO class targets are multiplied by ``scale`` (see ``slo_scale``)."""
    slo = SLO_CLASSES[slo_class] if isinstance(slo_class, str) else slo_class
    return TenantConfig(name, slo=slo.scaled(scale), weight=weight, priority=priority)


def trace_split(trace: Trace, split: str) -> Trace:
    """The training (first ``TRAIN_FRACTION`` of the time) or evaluation (the rest) part of a timed trace."""
    cut = trace.duration_s() * TRAIN_FRACTION
    return trace.window(0.0, cut) if split == "train" else trace.window(cut, trace.duration_s() + 1.0)


def length_split(trace: Trace, split: str, max_prompt_len: int, max_output_len: int) -> LengthDist:
    """An empirical length distribution over the first ``TRAIN_FRACTION`` of ``trace``'s rows (train) or the
    rest (eval)."""
    cut = int(len(trace) * TRAIN_FRACTION)
    part = trace.slice(0, cut) if split == "train" else trace.slice(cut, None)
    return LengthDist.empirical(
        part.prompt_len,
        part.output_len,
        source=f"{trace.source}[{split}]",
        max_prompt_len=max_prompt_len,
        max_output_len=max_output_len,
    )


def scenario_from_trace(
    path: str | Path,
    fmt: str,
    rate_rps: float | None = None,
    slo_class: str = "chat",
    engine: EngineConfig | None = None,
    cost_model: str = REFERENCE_COST_MODEL,
    **options: object,
) -> Scenario:
    """A scenario replaying a user's trace file (``fmt``: azure, mooncake, lengths, generic), split in time
    into training and evaluation parts. A timed trace replays at its own mean rate unless ``rate_rps`` is
    given; a length-only file needs ``rate_rps`` for its Poisson arrivals."""
    path = Path(path)
    trace = load_trace(path, fmt, **options)  # fail now, with the file's own error, not at reset()
    if rate_rps is not None and not (is_finite_number(rate_rps) and rate_rps > 0):
        raise ValueError(f"{path}: the rate (--trace-rate) must be a finite number > 0, got {rate_rps!r}")
    engine = engine or EngineConfig()
    if trace.arrival_s is None:
        if rate_rps is None:
            raise ValueError(f"{path}: a length-only trace has no arrival times; give a rate (--trace-rate)")

        def make_lengths(split: str, scale: float) -> RequestSource:
            lengths = length_split(trace, split, engine.max_model_len - 1, engine.max_model_len - 1)
            tenant = TenantWorkload(scaled_tenant(slo_class, slo_class, scale), float(rate_rps), lengths)
            return SyntheticSource(WorkloadConfig((tenant,), 1000), split)

        make: Callable[[str, float], RequestSource] = make_lengths
    else:
        rate = float(rate_rps) if rate_rps is not None else trace.mean_rate_rps()
        if not math.isfinite(rate):
            raise ValueError(
                f"{path}: the trace's arrivals span no time ({len(trace)} request(s)), so it has no mean rate; "
                "give a rate (--trace-rate)"
            )

        def make_timed(split: str, scale: float) -> RequestSource:
            return TraceSource(trace_split(trace, split), scaled_tenant(slo_class, slo_class, scale), rate)

        make = make_timed
    num = min(1000, max(1, int(len(trace) * (1 - TRAIN_FRACTION)) - 1))
    name = data_stem(path)  # my.csv.gz is named "my", as my.csv is
    return Scenario(name, f"{fmt} trace {path}", make, engine=engine, cost_model=cost_model, num_requests=num)
