"""Synthetic multi-tenant workloads: a ``WorkloadConfig`` lists tenants, each with an arrival process and a
``LengthDist`` (``workloads/lengths.py``, re-exported here); ``generate`` draws ``num_requests`` requests."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from llmsched_env.common.checks import MAX_RATE_RPS, check_int, check_positive
from llmsched_env.common.tenants import check_tenant_count
from llmsched_env.engine.config import SLO_CLASSES, TenantConfig
from llmsched_env.engine.request import Request
from llmsched_env.workloads.arrivals import ArrivalProcess, Poisson, TraceReplay
from llmsched_env.workloads.lengths import LengthDist, load_length_file  # noqa: F401 (re-exported)
from llmsched_env.workloads.trace import make_requests

ARRIVALS = ("poisson",)
# Rates of ``default_workload``: 13 req/s in all, fcfs's capacity (90% SLO attainment) on the default engine.
DEFAULT_CHAT_RATE_RPS = 10.4
DEFAULT_BATCH_RATE_RPS = 2.6
# Synthetic shared-prefix ids start here so they never collide with the small ids of trace files (Mooncake).
SHARED_PREFIX_ID_BASE = 1 << 40


@dataclass(frozen=True)
class TenantWorkload:
    """One tenant's traffic: Poisson arrivals at ``rate_rps`` (or ``arrival``) with lengths from ``lengths``."""

    tenant: TenantConfig
    rate_rps: float
    lengths: LengthDist
    prefix_share: float = 0.0  # the chance a prompt starts with one of the shared system prompts
    num_shared_prefixes: int = 1
    shared_prefix_tokens: int = 1024
    arrival: ArrivalProcess | None = None  # None: Poisson at rate_rps

    def __post_init__(self) -> None:
        if not isinstance(self.tenant, TenantConfig):
            raise ValueError(f"TenantWorkload.tenant must be a TenantConfig, got {self.tenant!r}")
        owner = f"TenantWorkload({self.tenant.name!r})"
        check_positive(owner, "rate_rps", self.rate_rps, maximum=MAX_RATE_RPS, unit="requests/s")
        if self.arrival is not None:
            if not isinstance(self.arrival, ArrivalProcess):
                raise ValueError(f"{owner}.arrival must be an arrival process, got {self.arrival!r}")
            if not math.isclose(self.arrival.mean_rate_rps, self.rate_rps, rel_tol=1e-6):
                raise ValueError(f"{owner}.rate_rps={self.rate_rps} must equal its arrival process's mean rate "
                                 f"{self.arrival.mean_rate_rps} (use TenantWorkload.with_arrival)")
        if not isinstance(self.lengths, LengthDist):
            raise ValueError(f"{owner}.lengths must be a LengthDist, got {self.lengths!r}")
        check_positive(owner, "prefix_share", self.prefix_share, allow_zero=True)
        if self.prefix_share > 1:
            raise ValueError(f"{owner}.prefix_share is a probability in [0, 1], got {self.prefix_share}")
        check_int(owner, "num_shared_prefixes", self.num_shared_prefixes, 1)
        check_int(owner, "shared_prefix_tokens", self.shared_prefix_tokens, 1)
        if self.prefix_share > 0 and self.shared_prefix_tokens >= self.lengths.max_prompt_len:
            raise ValueError(f"{owner}.shared_prefix_tokens must be < "
                             f"lengths.max_prompt_len={self.lengths.max_prompt_len} so every prompt has a token of its "
                             f"own, got {self.shared_prefix_tokens}")

    @classmethod
    def with_arrival(cls, tenant: TenantConfig, arrival: ArrivalProcess, lengths: LengthDist,
                     **kwargs: Any) -> TenantWorkload:  # fmt: skip
        """A tenant whose requests come from ``arrival`` (bursty, on/off, diurnal, ramp, trace replay)."""
        return cls(tenant, arrival.mean_rate_rps, lengths, arrival=arrival, **kwargs)

    @property
    def arrival_process(self) -> ArrivalProcess:
        return self.arrival if self.arrival is not None else Poisson(self.rate_rps)

    def scaled(self, load: float) -> TenantWorkload:
        """This tenant with its arrival rate multiplied by ``load``."""
        if self.arrival is None:
            return replace(self, rate_rps=self.rate_rps * load)
        arrival = self.arrival.scaled(load)
        return replace(self, rate_rps=arrival.mean_rate_rps, arrival=arrival)


@dataclass(frozen=True)
class WorkloadConfig:
    """Tenants (``Request.tenant`` = position in ``tenants``), the number of requests, the arrival process."""

    tenants: tuple[TenantWorkload, ...]
    num_requests: int
    arrival: str = "poisson"
    prefix_id_tokens: int = 512

    def __post_init__(self) -> None:
        if isinstance(self.tenants, list):
            object.__setattr__(self, "tenants", tuple(self.tenants))
        if not isinstance(self.tenants, tuple) or not self.tenants:
            raise ValueError(f"WorkloadConfig.tenants must be a non-empty tuple of TenantWorkload, got {self.tenants}")
        check_tenant_count("WorkloadConfig.tenants", len(self.tenants))  # at most MAX_TENANTS (common.tenants)
        for i, t in enumerate(self.tenants):
            if not isinstance(t, TenantWorkload):
                raise ValueError(f"WorkloadConfig.tenants[{i}] must be a TenantWorkload, got {t!r}")
        names = [t.tenant.name for t in self.tenants]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"WorkloadConfig.tenants must have unique tenant names, repeated: {duplicates}")
        check_int("WorkloadConfig", "num_requests", self.num_requests, 1)
        if self.arrival not in ARRIVALS:
            raise ValueError(f"WorkloadConfig.arrival must be one of {ARRIVALS}, got {self.arrival!r}")
        check_int("WorkloadConfig", "prefix_id_tokens", self.prefix_id_tokens, 1)
        for t in self.tenants:
            if t.prefix_share > 0 and t.shared_prefix_tokens < self.prefix_id_tokens:
                raise ValueError(f"TenantWorkload({t.tenant.name!r}).shared_prefix_tokens={t.shared_prefix_tokens} is "
                                 f"shorter than WorkloadConfig.prefix_id_tokens={self.prefix_id_tokens}: nothing to "
                                 f"share")

    @property
    def total_rate_rps(self) -> float:
        return float(sum(t.rate_rps for t in self.tenants))

    def scaled(self, load: float) -> WorkloadConfig:
        """The same workload with every tenant's rate multiplied by ``load``."""
        check_positive("WorkloadConfig.scaled", "load", load)
        return replace(self, tenants=tuple(t.scaled(load) for t in self.tenants))

    def slo_scaled(self, scale: float) -> WorkloadConfig:
        """The same workload with every tenant's SLO targets multiplied by ``scale`` (``scenarios.slo_scale``)."""
        tenants = tuple(replace(t, tenant=replace(t.tenant, slo=t.tenant.slo.scaled(scale))) for t in self.tenants)
        return replace(self, tenants=tenants)


def tenant_configs(config: WorkloadConfig) -> tuple[TenantConfig, ...]:
    """The tenants' configs, indexed like ``Request.tenant``."""
    return tuple(t.tenant for t in config.tenants)


def generate(config: WorkloadConfig, rng: np.random.Generator) -> list[Request]:
    """Exactly ``config.num_requests`` requests sorted by arrival (ids 0..n-1): all-Poisson tenants superposed
    (gaps at the total rate, tenant k with probability rate_k / total), else ``_merge_arrivals``."""
    if not isinstance(config, WorkloadConfig):
        raise ValueError(f"generate: config must be a WorkloadConfig, got {type(config).__name__}")
    n = config.num_requests
    if all(t.arrival is None for t in config.tenants):
        rates = np.array([t.rate_rps for t in config.tenants], dtype=np.float64)
        gaps = rng.exponential(1.0 / rates.sum(), size=n)
        gaps[0] = max(gaps[0], np.finfo(np.float64).tiny)  # an exact 0 draw would put the first arrival at 0
        arrivals = np.cumsum(gaps)
        tenant_idx = rng.choice(len(rates), size=n, p=rates / rates.sum())
    else:
        arrivals, tenant_idx = _merge_arrivals(config, rng)
    prompts = np.empty(n, dtype=np.int64)
    outputs = np.empty(n, dtype=np.int64)
    prefix_ids: list[tuple[int, ...] | None] = [None] * n
    next_id = SHARED_PREFIX_ID_BASE
    for k, t in enumerate(config.tenants):
        idx = np.flatnonzero(tenant_idx == k)
        prompts[idx], outputs[idx] = t.lengths.sample(rng, idx.size)
        if t.prefix_share == 0:
            continue
        blocks = t.shared_prefix_tokens // config.prefix_id_tokens
        # Ids unique per (tenant, system prompt, block position): equal ids mean equal prompt content.
        num = t.num_shared_prefixes
        shared = [tuple(range(next_id + j * blocks, next_id + (j + 1) * blocks)) for j in range(num)]
        next_id += blocks * num
        sharing = idx[rng.random(idx.size) < t.prefix_share]
        which = rng.integers(0, t.num_shared_prefixes, size=sharing.size)
        prompts[sharing] = np.minimum(prompts[sharing] + t.shared_prefix_tokens, t.lengths.max_prompt_len)
        for i, j in zip(sharing.tolist(), which.tolist(), strict=True):
            prefix_ids[i] = shared[j]
    columns = (arrivals.tolist(), prompts.tolist(), outputs.tolist(), tenant_idx.tolist(), prefix_ids)
    return make_requests(*columns, config.prefix_id_tokens)


def _merge_arrivals(config: WorkloadConfig, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """The first ``num_requests`` arrivals of the tenants' own processes, merged in time."""
    n = config.num_requests
    procs = [t.arrival_process for t in config.tenants]
    streams = [p.sample(rng, min(n, p.num_arrivals) if isinstance(p, TraceReplay) else n) for p in procs]
    times = np.concatenate(streams)
    if times.size < n:
        raise ValueError(f"the workload's trace replays hold {times.size} arrivals, fewer than num_requests={n}")
    owner = np.concatenate([np.full(s.size, k, dtype=np.int64) for k, s in enumerate(streams)])
    keep = np.argsort(times, kind="stable")[:n]
    return times[keep], owner[keep]


def default_workload(num_requests: int = 1000) -> WorkloadConfig:
    """Two tenants, no file needed: interactive ``chat`` (ShareGPT-like lognormal lengths) at
    ``DEFAULT_CHAT_RATE_RPS`` and lower-priority ``batch`` (longer prompts) at ``DEFAULT_BATCH_RATE_RPS``."""
    chat = TenantWorkload(TenantConfig("chat", slo=SLO_CLASSES["chat"], weight=1.0, priority=0),
                          rate_rps=DEFAULT_CHAT_RATE_RPS,
                          lengths=LengthDist.lognormal(250, 200, 1.0, 1.0, max_prompt_len=4096, max_output_len=1024))
    batch = TenantWorkload(TenantConfig("batch", slo=SLO_CLASSES["batch"], weight=1.0, priority=1),
                           rate_rps=DEFAULT_BATCH_RATE_RPS,
                           lengths=LengthDist.lognormal(1000, 300, 0.8, 0.8, max_prompt_len=8192, max_output_len=1024))
    return WorkloadConfig((chat, batch), num_requests=num_requests)
