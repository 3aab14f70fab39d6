"""Scenarios: named workload + tenants + SLOs + engine + cost model, with train/val/test splits (a trace's first
70% of time, the next 15%, the last 15%; on val and test seed ``s`` replays the ``s``-th window). ``load``
multiplies the nominal rate; SLO targets scale with the cost model's unloaded decode step.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Protocol

import numpy as np

from llmsched_env.common.checks import MAX_RATE_RPS, check_positive, in_range, is_finite_number, range_text
from llmsched_env.common.tenants import check_tenant_count
from llmsched_env.costs.base import CostModel, unloaded_decode_time_s
from llmsched_env.costs.loader import load_cost_model
from llmsched_env.engine.config import SLO_CLASSES, EngineConfig, SLOClass, TenantConfig
from llmsched_env.engine.remote_kv import RemoteKVConfig
from llmsched_env.engine.request import Request
from llmsched_env.workloads.lengths import LengthDist
from llmsched_env.workloads.public_traces import trace_dir, trace_path  # noqa: F401 (re-exported)
from llmsched_env.workloads.traces import Trace, data_stem, load_trace
from llmsched_env.workloads.workload import TenantWorkload, WorkloadConfig, generate

SPLITS = ("train", "val", "test")
TRAIN_FRACTION = 0.7  # a trace's first 70% (of its time, or of its rows for a length file) trains,
VAL_FRACTION = 0.15  # the next 15% is for every choice (checkpoint, seed, tuned knobs), the last 15% for test
REFERENCE_COST_MODEL = "llama3-8b-h100"  # the hardware the literature's SLO targets were set for


def slo_scale(cost_model: CostModel) -> float:
    """Unloaded decode step of ``cost_model`` over that of the reference H100 preset."""
    return unloaded_decode_time_s(cost_model) / unloaded_decode_time_s(load_cost_model(REFERENCE_COST_MODEL))


class RequestSource(Protocol):
    """Draws the requests of one episode."""

    @property
    def tenants(self) -> tuple[TenantConfig, ...]: ...

    def sample(
        self, rng: np.random.Generator, num_requests: int, load: float, window: int | None = None
    ) -> list[Request]: ...

    def nominal_rate_rps(self) -> float: ...


# Random stream of each split of a synthetic workload ("val" keeps the former "eval" split's).
_SPLIT_STREAM = {"train": 0, "val": 1, "test": 2}


def split_stream(split: str) -> int:
    """The number of ``split``'s random stream."""
    return _SPLIT_STREAM[check_split(split)]


def check_split(split: object) -> str:
    """``split`` if it names one of ``SPLITS``, else ``ValueError`` (which says what became of "eval")."""
    if split == "eval":
        raise ValueError("split 'eval' was divided in two: use 'val' for choices (checkpoints, seeds, tuned knobs) and "
                         "'test' for reported figures")
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    return split


def episode_window(split: str, seed: int | None) -> int | None:
    """The window the episode of ``seed`` replays: the ``seed``-th on val and test; None (random) on train."""
    return seed if seed is not None and check_split(split) != "train" else None


def split_bounds(split: str) -> tuple[float, float]:
    """The (start, end) fractions of a trace (its time, or its rows) that ``split`` covers."""
    cuts = {"train": (0.0, TRAIN_FRACTION), "val": (TRAIN_FRACTION, TRAIN_FRACTION + VAL_FRACTION)}
    return cuts.get(check_split(split), (TRAIN_FRACTION + VAL_FRACTION, 1.0))


@dataclass(frozen=True)
class SyntheticSource:
    """A generated workload; the episodes of each split draw from their own random stream."""

    workload: WorkloadConfig
    split: str

    @property
    def tenants(self) -> tuple[TenantConfig, ...]:
        return tuple(t.tenant for t in self.workload.tenants)

    def nominal_rate_rps(self) -> float:
        return self.workload.total_rate_rps

    def sample(self, rng: np.random.Generator, num_requests: int, load: float,
               window: int | None = None) -> list[Request]:
        """``num_requests`` generated requests at ``load`` (``window`` is ignored)."""
        stream = np.random.default_rng([split_stream(self.split), int(rng.integers(2**63))])
        wl = replace(self.workload, num_requests=num_requests)
        return generate(wl.scaled(load) if load != 1.0 else wl, stream)


@dataclass(frozen=True)
class TraceSource:
    """Windows of consecutive requests of one part of a trace, replayed at ``rate_rps × load``; the trace's tenant
    codes index ``tenants``. ``split`` names the part in messages."""

    trace: Trace
    tenants: tuple[TenantConfig, ...]
    rate_rps: float
    split: str | None = None

    def __post_init__(self) -> None:
        tenants = (self.tenants,) if isinstance(self.tenants, TenantConfig) else tuple(self.tenants)
        check_tenant_count(f"{self.trace.source}: TraceSource.tenants", len(tenants))  # at most MAX_TENANTS
        need = len(self.trace.tenant_names) if self.trace.tenant is not None else 1
        if len(tenants) != need or not all(isinstance(t, TenantConfig) for t in tenants):
            raise ValueError(f"{self.trace.source}: TraceSource needs {need} TenantConfig(s), one per tenant of the "
                             f"trace {list(self.trace.tenant_names)}, got {len(tenants)}")
        object.__setattr__(self, "tenants", tenants)
        rate = self.rate_rps
        check_positive(f"{self.trace.source}: TraceSource", "rate_rps", rate, maximum=MAX_RATE_RPS, unit="requests/s")

    def nominal_rate_rps(self) -> float:
        return self.rate_rps

    def check_episode(self, num_requests: int) -> None:
        """Raise ``ValueError`` naming the trace file unless an episode of ``num_requests`` fits in this part."""
        n = len(self.trace)
        if num_requests > n:
            part = f"the {self.split} split's" if self.split else "this split's"
            raise ValueError(f"{self.trace.source}: an episode of {num_requests} requests does not fit in {part} {n} "
                             f"requests; ask for at most {n}")

    def num_windows(self, num_requests: int) -> int:
        """Disjoint consecutive windows of ``num_requests`` requests this part holds (its first requests first)."""
        return len(self.trace) // num_requests

    def check_windows(self, num_requests: int, seeds: Sequence[int]) -> None:
        """``ValueError`` naming the trace file unless the part holds a window of ``num_requests`` for each seed."""
        self.check_episode(num_requests)
        held, top = self.num_windows(num_requests), max(seeds, default=-1)
        if top >= held:
            part = f"the {self.split} part" if self.split else "this part"
            plural = "s" if held != 1 else ""
            fit = len(self.trace) // (top + 1)
            hint = f", or episodes of at most {fit} requests (--num-requests) fit seeds up to {top}" if fit else ""
            raise ValueError(f"{self.trace.source}: {part} holds {held} window{plural} of {num_requests} requests "
                             f"({len(self.trace)} requests); seeds must be < {held}{hint}")

    @property
    def absent_tenants(self) -> list[str]:
        """Names of the tenants that have no request in this part (in their order)."""
        if self.trace.tenant is None:
            return []
        present = set(np.unique(self.trace.tenant).tolist())
        return [t.name for k, t in enumerate(self.tenants) if k not in present]

    def sample(self, rng: np.random.Generator, num_requests: int, load: float,
               window: int | None = None) -> list[Request]:
        """``num_requests`` consecutive requests at ``load``: the ``window``-th disjoint window; without one, a
        random start on train and a random window on val and test."""
        self.check_episode(num_requests)
        if window is None and self.split in ("val", "test"):
            window = int(rng.integers(0, self.num_windows(num_requests)))
        if window is None:
            start = int(rng.integers(0, len(self.trace) - num_requests + 1))
        else:
            self.check_windows(num_requests, (window,))
            start = window * num_requests
        part = self.trace.slice(start, start + num_requests)
        scale = self.rate_rps / self.trace.mean_rate_rps() * load
        return part.to_requests(time_scale=scale)  # the trace's tenant codes, or tenant 0 for every request


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
    traffic: str = ""  # "" for the scenario's own traffic; "fitted to FILE" for traffic generated from a trace
    # Sources built so far, per (split, SLO scale), per scenario object (two with one name never share them).
    _sources: dict[tuple[str, float], RequestSource] = field(
        default_factory=dict, init=False, repr=False, compare=False)

    def source(self, split: str, cost_model: CostModel | None = None) -> RequestSource:
        """The request source of ``split`` ("train", "val" or "test"), SLOs scaled to ``cost_model``."""
        check_split(split)
        model = cost_model if cost_model is not None else load_cost_model(self.cost_model)
        key = (split, round(slo_scale(model), 9))
        src = self._sources.get(key)
        if src is None:
            src = self.make_source(split, key[1])
            self._sources[key] = src
        return src


def scaled_tenant(name: str, slo_class: str | SLOClass, scale: float, weight: float = 1.0,
                  priority: int = 0) -> TenantConfig:
    """A tenant whose SLO class targets are multiplied by ``scale`` (see ``slo_scale``)."""
    slo = SLO_CLASSES[slo_class] if isinstance(slo_class, str) else slo_class
    return TenantConfig(name, slo=slo.scaled(scale), weight=weight, priority=priority)


def trace_split(trace: Trace, split: str) -> Trace:
    """The requests of a timed trace arriving in ``split``'s share of its time (``split_bounds``)."""
    lo, hi = split_bounds(split)
    duration = trace.duration_s()
    return trace.window(duration * lo if lo > 0 else 0.0, duration * hi if hi < 1 else duration + 1.0)


def split_rows(trace: Trace, split: str) -> Trace:
    """The rows of ``split``'s share of ``trace``'s rows, in file order (``split_bounds``)."""
    lo, hi = split_bounds(split)
    return trace.slice(int(len(trace) * lo), int(len(trace) * hi) if hi < 1 else None)


def length_split(trace: Trace, split: str, max_prompt_len: int, max_output_len: int) -> LengthDist:
    """An empirical length distribution over ``split``'s share of ``trace``'s rows (``split_rows``)."""
    part = split_rows(trace, split)
    return LengthDist.empirical(part.prompt_len, part.output_len, source=f"{trace.source}[{split}]",
                                max_prompt_len=max_prompt_len, max_output_len=max_output_len)


DEFAULT_TRACE_EPISODE = 1000  # requests per episode of a user trace, when its parts hold that many
_PARTS = {"train": f"the first {TRAIN_FRACTION:.0%} of its time", "val": f"the next {VAL_FRACTION:.0%}",
          "test": f"the last {1 - TRAIN_FRACTION - VAL_FRACTION:.0%}"}


def _names(values: Sequence[str], limit: int = 8) -> str:
    shown = ", ".join(repr(v) for v in values[:limit])
    return shown + (f", ... ({len(values)} in all)" if len(values) > limit else "")


def trace_tenants(path: str | Path, trace: Trace, slo_class: str | SLOClass = "chat",
                  tenant_slos: Mapping[str, str | SLOClass] | None = None) -> list[tuple[str, str | SLOClass]]:
    """(name, SLO class) of each tenant of ``trace`` in code order: ``tenant_slos``'s class, else ``slo_class`` (one
    tenant named after it without a tenant column). ``ValueError`` naming the file for a tenant the trace lacks."""
    tenant_slos = dict(tenant_slos or {})
    if trace.tenant is None:
        if tenant_slos:
            raise ValueError(f"{path}: SLO classes given for tenant(s) {_names(sorted(tenant_slos))} but the trace has "
                             f"no tenant column (generic format: map one with tenant=COLUMN)")
        return [(slo_class if isinstance(slo_class, str) else slo_class.name, slo_class)]
    unknown = sorted(set(tenant_slos) - set(trace.tenant_names))
    if unknown:
        raise ValueError(f"{path}: no tenant {_names(unknown)} in the trace's tenant column; its tenants are "
                         f"{_names(trace.tenant_names)}")
    return [(name, tenant_slos.get(name, slo_class)) for name in trace.tenant_names]


def _timed_parts(path: Path, trace: Trace) -> dict[str, Trace]:
    """The train, val and test parts of a timed trace, each checked to hold an arrival pattern."""
    n = len(trace)
    if n >= 2 and trace.duration_s() == 0.0:
        raise ValueError(f"{path}: all {n} requests arrive at the same time, so the trace has no arrival pattern to "
                         f"replay; give it distinct timestamps, or replay its lengths alone (generic format without an "
                         f"arrival column, with a rate: --trace-rate)")
    parts = {split: trace_split(trace, split) for split in SPLITS}
    for split, part in parts.items():
        if len(part) < 2 or part.duration_s() == 0.0:
            times = part.arrival_s
            assert times is not None  # a part of a timed trace
            raise ValueError(f"{path}: the trace's {n} request(s) leave its {split} part ({_PARTS[split]}) {len(part)} "
                             f"request(s) at {len(np.unique(times))} distinct time(s); each part needs at least 2 "
                             "requests at different times: give a longer trace")
    return parts


def _length_parts(path: Path, trace: Trace) -> list[tuple[float, Trace]]:
    """(share of the rows, rows) of each tenant of a length-only trace, each with rows for every part."""
    if trace.tenant is None:
        groups = [("", trace)]
    else:
        groups = [(name, trace.select(trace.tenant == k)) for k, name in enumerate(trace.tenant_names)]
    for name, rows in groups:
        if any(len(split_rows(rows, split)) == 0 for split in SPLITS):
            who = f"tenant {name!r} has" if name else "the trace has"
            raise ValueError(f"{path}: {who} {len(rows)} row(s), too few to give each of its train, val and test parts "
                             f"a row (the first {TRAIN_FRACTION:.0%} of the rows, the next {VAL_FRACTION:.0%}, the "
                             f"rest); give more rows")
    return [(len(rows) / len(trace), rows) for _, rows in groups]


def scenario_from_trace(path: str | Path, fmt: str, rate_rps: float | None = None, slo_class: str | SLOClass = "chat",
                        engine: EngineConfig | None = None, cost_model: str = REFERENCE_COST_MODEL,
                        tenant_slos: Mapping[str, str | SLOClass] | None = None, **options: object) -> Scenario:
    """A scenario replaying a user's trace file (``fmt``), split in time, at its mean rate unless ``rate_rps`` is
    given (a length-only trace needs it); tenants: ``trace_tenants``; ``ValueError`` naming the file."""
    path = Path(path)
    trace = load_trace(path, fmt, **options)  # fail now, with the file's own error, not at reset()
    if rate_rps is not None and not (is_finite_number(rate_rps) and in_range(rate_rps, False, MAX_RATE_RPS)):
        bound = range_text(False, MAX_RATE_RPS, "requests/s")
        raise ValueError(f"{path}: the rate (--trace-rate) must be a finite number {bound}, got {rate_rps!r}")
    for _, cls in tenant_slos.items() if tenant_slos else ():
        if isinstance(cls, str) and cls not in SLO_CLASSES:
            raise ValueError(f"{path}: unknown SLO class {cls!r}; available: {', '.join(SLO_CLASSES)}")
    tenants = trace_tenants(path, trace, slo_class, tenant_slos)
    engine = engine or EngineConfig()
    if trace.arrival_s is None:
        if rate_rps is None:
            raise ValueError(f"{path}: a length-only trace has no arrival times; give a rate (--trace-rate)")
        groups = _length_parts(path, trace)

        def make_lengths(split: str, scale: float) -> RequestSource:
            workloads = tuple(
                TenantWorkload(scaled_tenant(name, cls, scale), float(rate_rps) * share,
                               length_split(rows, split, engine.max_model_len - 1, engine.max_model_len - 1))
                for (name, cls), (share, rows) in zip(tenants, groups, strict=True)
            )
            return SyntheticSource(WorkloadConfig(workloads, DEFAULT_TRACE_EPISODE), split)

        make: Callable[[str, float], RequestSource] = make_lengths
        num = min(DEFAULT_TRACE_EPISODE, max(1, int(len(trace) * (1 - TRAIN_FRACTION - VAL_FRACTION)) - 1))
    else:
        parts = _timed_parts(path, trace)
        rate = float(rate_rps) if rate_rps is not None else trace.mean_rate_rps()
        if not rate <= MAX_RATE_RPS:  # the trace's own rate: its timestamps in another unit than they say
            raise ValueError(f"{path}: the trace's mean rate is {rate:g} requests/s, over the {MAX_RATE_RPS:,.0f} a "
                             f"rate may be; check the unit of its timestamps (--trace-time-unit) or give a rate "
                             f"(--trace-rate)")

        def make_timed(split: str, scale: float) -> RequestSource:
            configs = tuple(scaled_tenant(name, cls, scale) for name, cls in tenants)
            return TraceSource(parts[split], configs, rate, split)

        make = make_timed
        num = min(DEFAULT_TRACE_EPISODE, *(len(part) for part in parts.values()))
    name = data_stem(path)  # my.csv.gz is named "my", as my.csv is
    return Scenario(name, f"{fmt} trace {path}", make, engine=engine, cost_model=cost_model, num_requests=num)


def check_episode_size(scenario: Scenario, split: str, num_requests: int, seeds: Sequence[int] | None = None) -> None:
    """``ValueError`` naming the trace file when a trace part cannot hold ``num_requests`` (a window per seed)."""
    source = scenario.make_source(split, 1.0)  # the SLO scale does not change the part's size
    if isinstance(source, TraceSource):
        windows = [w for w in (episode_window(split, s) for s in seeds or ()) if w is not None]
        if windows:
            source.check_windows(num_requests, windows)
        else:
            source.check_episode(num_requests)
