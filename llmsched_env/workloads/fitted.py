"""Traffic fitted to a trace: as many requests as an episode asks for, with a trace part's statistics.

A trace part holds a few disjoint windows; at high loads they arrive too fast to be sustained
(``workloads.windows``). ``FittedSource`` generates windows of any size from one part instead, labelled as
generated wherever they are reported (``Scenario.traffic``: ``fitted to FILE``):

- **arrivals**: per tenant, a Gamma renewal process (``GammaArrivals``) at the tenant's share of the replay's
  rate and with the coefficient of variation of the tenant's gaps in the part (slow changes of rate over the
  part count as burstiness: the process has no rate profile of its own);
- **requests**: each tenant's arrivals take the tenant's rows of the part in rounds, each round a fresh
  random order of every row: a row's prompt and output lengths stay paired, and the rows sharing a prefix
  (Mooncake's ``hash_ids``) share it within a round, as in the part; each round's prefix ids are its own, so a
  row drawn again in a later round shares nothing with its earlier copy (no more prefix reuse than the part
  has).

Not kept: the order of the rows (a conversation's turns come in any order within a round, further apart than
in the trace), correlations between lengths and arrival times, rate changes over the part (a diurnal swing,
a burst at one moment), and dependence between tenants' arrivals. Episodes of different seeds share no
draw (each its own random stream, as for ``SyntheticSource``), and a window's span is inverse to the load
(every gap is a unit-rate draw over the rate), so ``max_sustained_load`` is exact in one step.
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

__all__ = ["FITTED_SUFFIX", "MAX_FITTED_CV", "FittedSource", "TenantFit", "fit_tenants", "fitted_scenario"]

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
    """Per tenant code ``0..num_tenants-1`` of ``trace`` (a timed part; every request tenant 0 when it has no
    tenant column): its share of the requests, the CV of its inter-arrival gaps (1, Poisson, with fewer than 3
    arrivals or no spread in time) and its rows. A tenant with no request in the part gets share 0."""
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
    """Requests generated from the statistics of one trace part (see the module's docstring), at ``rate_rps``
    x load in all, each tenant its share of it. ``fitted_to`` names the file in messages and labels."""

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

    def sample(
        self, rng: np.random.Generator, num_requests: int, load: float, window: int | None = None
    ) -> list[Request]:
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
    """``base`` (a trace replay) with each part's traffic generated from that part (``FittedSource``): the
    same tenants, SLOs, engine, nominal rate and episode size, named ``name`` (default: ``base``'s name and
    ``FITTED_SUFFIX``) and labelled ``traffic = "fitted to FITTED_TO"``. A source that is not a timed trace's
    replay is a ``ValueError`` naming the scenario when a part is first asked for."""

    def make(split: str, scale: float) -> RequestSource:
        replay = base.make_source(split, scale)
        if not isinstance(replay, TraceSource):
            raise ValueError(
                f"scenario {base.name!r}: traffic can be fitted to a timed trace's replay only (its {split} part "
                f"is {type(replay).__name__})"
            )
        return FittedSource.of_replay(replay, fitted_to)

    return replace(
        base,
        name=name or base.name + FITTED_SUFFIX,
        description=f"traffic fitted to {fitted_to} (generated: {base.description})",
        make_source=make,
        traffic=f"fitted to {fitted_to}",
    )
