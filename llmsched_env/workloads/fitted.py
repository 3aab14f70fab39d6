"""``FittedSource``: windows of any size with a trace part's statistics: per tenant, Gamma arrivals at its share
of the rate with the CV of its gaps, its rows taken in rounds of fresh random order. A window's span is inverse
to the load, so ``max_sustained_load`` is exact in one step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from functools import cached_property

import numpy as np

from llmsched_env.common.checks import MAX_RATE_RPS, check_positive
from llmsched_env.engine.config import TenantConfig
from llmsched_env.engine.request import Request
from llmsched_env.workloads.scenarios import RequestSource, Scenario, TraceSource, check_split, split_stream
from llmsched_env.workloads.trace import Trace

FITTED_SUFFIX = "-fitted"  # a fitted scenario's name: its replay's, then this

MAX_FITTED_CV = 20.0  # a tenant's fitted CV is clipped to [1 / MAX_FITTED_CV, MAX_FITTED_CV]
_FIRST_DRAW = 1.25  # a tenant's first draw holds this many times its expected share of the arrivals (+ 16)


@dataclass(frozen=True)
class TenantFit:
    """One tenant's fit: its ``share`` of the part's requests, the CV of its gaps, and its rows (indices)."""

    share: float
    cv: float
    rows: np.ndarray = field(repr=False)


def fit_tenants(trace: Trace, num_tenants: int) -> tuple[TenantFit, ...]:
    """Per tenant code of the timed ``trace``: its share of the requests, the CV of its gaps (1 with fewer than 3
    arrivals or no spread) and its rows."""
    if trace.arrival_s is None:
        raise ValueError(f"{trace.source}: fitted traffic needs arrival times (a timed trace)")
    codes = trace.tenant if trace.tenant is not None else np.zeros(len(trace), dtype=np.int64)
    fits = []
    for k in range(num_tenants):
        rows = np.flatnonzero(codes == k)
        cv = 1.0
        if rows.size >= 3:
            gaps = np.diff(trace.arrival_s[rows])
            if gaps.mean() > 0:
                cv = float(np.clip(gaps.std() / gaps.mean(), 1.0 / MAX_FITTED_CV, MAX_FITTED_CV))
        rows.setflags(write=False)
        fits.append(TenantFit(rows.size / max(len(trace), 1), cv, rows))
    return tuple(fits)


@dataclass(frozen=True)
class FittedSource:
    """Requests generated from one trace part's statistics at ``rate_rps`` x load (``fitted_to`` names the file)."""

    trace: Trace
    tenants: tuple[TenantConfig, ...]
    rate_rps: float
    split: str
    fitted_to: str
    fits: tuple[TenantFit, ...] = field(default=(), repr=False)

    def __post_init__(self) -> None:
        check_split(self.split)
        rate = self.rate_rps
        check_positive(f"{self.fitted_to}: FittedSource", "rate_rps", rate, maximum=MAX_RATE_RPS, unit="requests/s")
        if not self.fits:
            object.__setattr__(self, "fits", fit_tenants(self.trace, len(self.tenants)))
        if not any(f.share > 0 for f in self.fits):
            raise ValueError(f"{self.fitted_to}: the {self.split} part has no request to fit traffic to")

    @cached_property
    def _prefix_span(self) -> int:
        """One more than the part's largest prefix id (0 without ids): round ``n``'s ids are shifted by ``n`` x it."""
        prefix = self.trace.prefix_ids
        return 1 + max((max(ids) for ids in prefix if ids), default=0) if prefix is not None else 0

    @classmethod
    def of_replay(cls, replay: TraceSource, fitted_to: str) -> FittedSource:
        """Traffic fitted to the part that ``replay`` replays, at the same nominal rate and with its tenants."""
        return cls(replay.trace, replay.tenants, replay.rate_rps, replay.split or "test", fitted_to)

    def nominal_rate_rps(self) -> float:
        return self.rate_rps

    def sample(self, rng: np.random.Generator, num_requests: int, load: float,
               window: int | None = None) -> list[Request]:
        """``num_requests`` requests at ``load``; ``window`` is ignored (every episode draws its own)."""
        if not (isinstance(num_requests, int) and num_requests >= 1):
            raise ValueError(f"FittedSource.sample: num_requests must be an int >= 1, got {num_requests!r}")
        if not (math.isfinite(load) and load > 0):
            raise ValueError(f"FittedSource.sample: load must be a finite number > 0, got {load!r}")
        root = np.random.SeedSequence([split_stream(self.split), int(rng.integers(2**63))])
        streams = [np.random.default_rng(s) for s in root.spawn(len(self.fits))]
        rate = self.rate_rps * load
        draws: list[np.ndarray] = [np.empty(0)] * len(self.fits)  # unit-rate arrival times per tenant
        need = [math.ceil(f.share * num_requests * _FIRST_DRAW) + 16 if f.share > 0 else 0 for f in self.fits]
        while True:
            for k, f in enumerate(self.fits):
                if need[k] > draws[k].size:
                    cv2 = f.cv * f.cv
                    more = streams[k].gamma(1.0 / cv2, cv2 / f.share, size=need[k] - draws[k].size)
                    last = draws[k][-1] if draws[k].size else 0.0
                    draws[k] = np.concatenate([draws[k], last + np.cumsum(more)])
            times = np.concatenate(draws)  # at least num_requests: the first draws hold 1.25x every share
            owner = np.concatenate([np.full(d.size, k, dtype=np.int64) for k, d in enumerate(draws)])
            order = np.argsort(times, kind="stable")[:num_requests]
            # exact once every tenant's draws reach past the last arrival kept (or it drew none at all)
            short = [k for k, d in enumerate(draws) if d.size and d[-1] < times[order[-1]]]
            if not short:
                break
            for k in short:
                need[k] *= 2
        arrivals, tenants = times[order] / rate, owner[order]
        return self._requests(arrivals, tenants, streams)

    def _requests(self, arrivals: np.ndarray, tenants: np.ndarray, streams: list[np.random.Generator]) -> list[Request]:
        trace = self.trace
        rows = np.empty(arrivals.size, dtype=np.int64)
        rounds = np.empty(arrivals.size, dtype=np.int64)
        for k, f in enumerate(self.fits):
            mine = np.flatnonzero(tenants == k)
            if not mine.size:
                continue
            count = math.ceil(mine.size / f.rows.size)
            # a fresh random order of every row of the tenant per round (drawn after all its arrival gaps)
            order = np.concatenate([streams[k].permutation(f.rows) for _ in range(count)])
            rows[mine] = order[: mine.size]
            rounds[mine] = np.arange(mine.size) // f.rows.size
        prefix, span, pit = trace.prefix_ids, self._prefix_span, trace.prefix_id_tokens
        out = []
        columns = (arrivals.tolist(), rows.tolist(), tenants.tolist(), rounds.tolist())
        for i, (a, r, k, n) in enumerate(zip(*columns, strict=True)):
            ids = None
            if prefix is not None and prefix[r]:
                ids = tuple(n * span + x for x in prefix[r]) if n else prefix[r]
            out.append(Request(i, a, int(trace.prompt_len[r]), int(trace.output_len[r]), k, ids, pit))
        return out


def fitted_scenario(base: Scenario, fitted_to: str, name: str | None = None) -> Scenario:
    """``base`` (a timed trace replay) with each part's traffic generated from it (``FittedSource``), named
    ``name`` (default ``base``'s + ``FITTED_SUFFIX``); another source is a ``ValueError`` when first asked for."""

    def make(split: str, scale: float) -> RequestSource:
        replay = base.make_source(split, scale)
        if not isinstance(replay, TraceSource):
            raise ValueError(f"scenario {base.name!r}: traffic can be fitted to a timed trace's replay only (its "
                             f"{split} part is {type(replay).__name__})")
        return FittedSource.of_replay(replay, fitted_to)

    description = f"traffic fitted to {fitted_to} (generated: {base.description})"
    return replace(base, name=name or base.name + FITTED_SUFFIX, description=description, make_source=make,
                   traffic=f"fitted to {fitted_to}")  # fmt: skip
