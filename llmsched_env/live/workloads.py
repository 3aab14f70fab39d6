"""The live experiment's workloads: the two shipped examples (``WORKLOADS``: tenants with SLO classes and fixed
shares, uniform lengths, the KV pool) and a user's trace (``trace_workload``: its tenants, SLO classes and
requests); one block's stream (``block_stream``: ``block_s`` seconds of traffic at a rate, the same seed the same
stream; a trace's blocks are windows of it) and ``stream_requests``, which turns a stream into ``Request``s.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from llmsched_env.engine.config import SLO_CLASSES, EngineConfig, SLOClass, TenantConfig
from llmsched_env.engine.request import Request
from llmsched_env.workloads.lengths import LengthDist

__all__ = ["WORKLOADS", "LiveTenant", "LiveWorkload", "TracePool", "block_stream", "length_mix", "stream_requests",
           "tenant_configs", "trace_workload"]  # fmt: skip


@dataclass(frozen=True)
class LiveTenant:
    """One tenant: SLO class (``slo``: its own targets instead, a trace's ``TTFT_S:TPOT_S``), share of each block,
    prompt and output length ranges (inclusive), priority."""

    name: str
    slo_class: str
    share: float
    prompt: tuple[int, int]
    output: tuple[int, int]
    priority: int = 0
    slo: SLOClass | None = None

    def __post_init__(self) -> None:
        if self.slo is None and self.slo_class not in SLO_CLASSES:
            raise ValueError(f"LiveTenant {self.name!r}: slo_class must be one of {', '.join(SLO_CLASSES)}")
        if not self.share > 0:
            raise ValueError(f"LiveTenant {self.name!r}: share must be > 0, got {self.share!r}")
        for what, (lo, hi) in (("prompt", self.prompt), ("output", self.output)):
            if not 1 <= lo <= hi:
                raise ValueError(f"LiveTenant {self.name!r}: {what} must be a range 1 <= low <= high")


@dataclass(frozen=True)
class LiveWorkload:
    """A workload: its ``tenants``, KV pool and limits, a block's mean span, its default cells' loads (x knee);
    ``pool``: a trace's requests its blocks are drawn from (None: each tenant's uniform lengths, Poisson arrivals);
    ``slo_scaled``: its SLO classes are scaled to the server's speed (``tenant_configs``)."""

    name: str
    description: str
    tenants: tuple[LiveTenant, ...]
    num_kv_blocks: int
    loads: tuple[float, ...] = (1.0, 1.3)
    block_s: float = 10.0
    block_size: int = 128
    max_model_len: int = 2048
    max_num_seqs: int = 64
    max_num_batched_tokens: int = 2048
    pool: TracePool | None = None
    slo_scaled: bool = True

    def __post_init__(self) -> None:
        if not self.tenants or len({t.name for t in self.tenants}) != len(self.tenants):
            raise ValueError(f"LiveWorkload {self.name!r}: tenants must be non-empty with unique names")
        longest = max(t.prompt[1] + t.output[1] for t in self.tenants)
        if self.pool is not None:  # a trace's requests, each as it is
            longest = max(p + o for p, o in zip(self.pool.prompt, self.pool.output, strict=True))
        if longest > self.max_model_len or -(-longest // self.block_size) > self.num_kv_blocks:
            raise ValueError(f"LiveWorkload {self.name!r}: its longest request ({longest} tokens) does not fit")

    @property
    def engine(self) -> EngineConfig:
        """The server's limits as llmsched's ``EngineConfig``."""
        return EngineConfig(
            num_kv_blocks=self.num_kv_blocks, block_size=self.block_size, max_num_seqs=self.max_num_seqs,
            max_num_batched_tokens=self.max_num_batched_tokens, max_model_len=self.max_model_len,
        )  # fmt: skip

    def cell(self, load: float) -> str:
        """The name of the cell of this workload at ``load``: ``mixed-slo@1.4``."""
        return f"{self.name}@{load:g}"


WORKLOADS: dict[str, LiveWorkload] = {
    "mixed-slo": LiveWorkload(
        "mixed-slo",
        "an interactive tenant (short prompts, tight TTFT) beside a batch tenant (long prompts, lax TTFT), half "
        "the requests each",
        (
            LiveTenant("interactive", "interactive", 0.5, (64, 256), (16, 96)),
            LiveTenant("batch", "summarization", 0.5, (768, 1536), (32, 160), priority=1),
        ),
        num_kv_blocks=256,
    ),
    "kv-pressure": LiveWorkload(
        "kv-pressure",
        "long prompts and outputs in a pool of 48 blocks (6,144 tokens): a handful of requests fill it, and "
        "admitting more preempts",
        (LiveTenant("chat", "chat", 1.0, (1024, 1664), (96, 256)),),
        num_kv_blocks=48,
    ),
}


@dataclass(frozen=True)
class TracePool:
    """A trace's requests for a workload's blocks: ``arrival_s`` (None: lengths only), lengths cut to the server's
    limits, tenant names; ``source`` names the file. The first half (by position) gives the ``val`` windows (the
    tune's), the second the ``test`` windows (every block the experiment plays)."""

    source: str
    arrival_s: tuple[float, ...] | None
    prompt: tuple[int, ...]
    output: tuple[int, ...]
    tenant: tuple[str, ...]

    def part(self, name: str) -> tuple[int, int]:
        """The index range [start, end) of the part ``val`` or ``test``."""
        half = len(self.prompt) // 2
        return (0, half) if name == "val" else (half, len(self.prompt))


def trace_workload(
    options: Mapping[str, Any], limits: Mapping[str, int] | None = None, *, slo_scaled: bool = True,
    block_s: float = 10.0,
) -> LiveWorkload:  # fmt: skip
    """The workload of a user's trace: ``options`` as ``llmsched-evaluate --trace`` takes them
    (``workloads.trace_options.TRACE_OPTIONS``), ``limits`` the server's (``ENGINE_LIMIT_FIELDS``; the shipped
    workloads' by default). Lengths are cut to what the server holds (the prompt first keeps one output token);
    ``ValueError`` naming the option or the file."""
    from llmsched_env.workloads.scenarios import trace_tenants
    from llmsched_env.workloads.trace_options import build_trace_scenario, slo_class, tenant_slos
    from llmsched_env.workloads.traces import load_trace

    base: dict[str, Any] = _LIMITS | dict(limits or {})
    build_trace_scenario(options, base)  # every option checked as llmsched-evaluate checks it
    path = Path(options["trace"])
    reader: dict[str, Any] = {}
    if options["trace_format"] == "generic":
        from llmsched_env.common.fields import split_items

        reader["columns"] = split_items(str(options["trace_columns"]).split(","), "trace_columns", what="pair",
                                        form="field=column")  # fmt: skip
        reader["time_unit"] = options.get("trace_time_unit", "s")
    trace = load_trace(path, str(options["trace_format"]), **reader)
    if len(trace) < 8:
        raise ValueError(f"{path}: {len(trace)} requests; a live workload needs at least 8 (two parts of 4)")
    default = slo_class(str(options.get("trace_slo", "chat")))
    per = tenant_slos(str(options["tenant_slo"])) if options.get("tenant_slo") is not None else None
    classes = trace_tenants(path, trace, default, per)
    names = [name for name, _ in classes]
    codes = trace.tenant if trace.tenant is not None else np.zeros(len(trace), dtype=np.int64)
    cap = min(int(base["max_model_len"]), int(base["num_kv_blocks"]) * int(base["block_size"]))
    prompt = np.minimum(trace.prompt_len, cap - 1)
    output = np.minimum(trace.output_len, cap - prompt)
    tenants = []
    for k, (name, cls) in enumerate(classes):
        mine = codes == k
        if not mine.any():
            continue
        slo = cls if isinstance(cls, SLOClass) else SLO_CLASSES[cls]
        p, o = prompt[mine], output[mine]
        tenants.append(LiveTenant(name, slo.name, float(mine.mean()), (int(p.min()), int(p.max())),
                                  (int(o.min()), int(o.max())), slo=slo))  # fmt: skip
    arrival = None if trace.arrival_s is None else tuple(float(x) for x in trace.arrival_s)  # rescaled per block
    pool = TracePool(str(path), arrival, tuple(int(x) for x in prompt), tuple(int(x) for x in output),
                     tuple(names[int(c)] for c in codes))  # fmt: skip
    name = path.name.split(".")[0] or "trace"
    return LiveWorkload(name, f"the trace {path} ({len(trace)} requests, {len(tenants)} tenants)", tuple(tenants),
                        pool=pool, slo_scaled=slo_scaled, block_s=block_s, **base)  # fmt: skip


_LIMITS = {"num_kv_blocks": 256, "block_size": 128, "max_model_len": 2048, "max_num_seqs": 64,
           "max_num_batched_tokens": 2048}  # the shipped workloads' server, for a trace that names none  # fmt: skip


def tenant_configs(workload: LiveWorkload, slo_scale: float) -> tuple[TenantConfig, ...]:
    """The workload's tenants as ``TenantConfig``s, their class's targets times ``slo_scale`` (1 when the workload
    keeps its own, ``slo_scaled`` False)."""
    out = []
    scale = slo_scale if workload.slo_scaled else 1.0
    for t in workload.tenants:
        c = t.slo or SLO_CLASSES[t.slo_class]
        slo = SLOClass(c.name, c.ttft_s * scale, c.tpot_s * scale)
        out.append(TenantConfig(t.name, slo, priority=t.priority))
    return tuple(out)


def length_mix(workload: LiveWorkload) -> list[tuple[LengthDist, float]]:
    """(lengths, share) per tenant, for ``workloads.randomized.nominal_rate_rps``: a trace's own lengths."""
    pool = workload.pool
    if pool is None:
        return [(LengthDist.uniform(t.prompt, t.output), t.share) for t in workload.tenants]
    out = []
    for t in workload.tenants:
        mine = np.array([n == t.name for n in pool.tenant])
        p, o = np.array(pool.prompt)[mine], np.array(pool.output)[mine]
        out.append((LengthDist.empirical(p, o, source=pool.source), t.share))
    return out


def _counts(shares: Sequence[float], n: int) -> list[int]:
    """``n`` split by ``shares`` (largest remainder; the earlier tenant first on a tie)."""
    total = sum(shares)
    exact = [n * s / total for s in shares]
    counts = [int(x) for x in exact]
    order = sorted(range(len(shares)), key=lambda i: (-(exact[i] - counts[i]), i))
    for i in order[: n - sum(counts)]:
        counts[i] += 1
    return counts


def block_stream(workload: LiveWorkload, rate_rps: float, seed: int, part: str = "test") -> list[dict[str, Any]]:
    """One block's ``round(rate_rps * block_s)`` (at least 2) requests, ``{"timestamp", "input_length",
    "output_length", "tenant"}`` each, seeded: Poisson arrivals, each tenant exactly its share; or, for a trace,
    a window of its ``part`` (``TracePool.part``) at a seeded start, its arrival times scaled so the trace's mean
    rate is ``rate_rps`` (Poisson arrivals for a trace of lengths only)."""
    if not rate_rps > 0:
        raise ValueError(f"block_stream: rate_rps must be > 0, got {rate_rps!r}")
    rng = np.random.default_rng([20260, seed])
    n = max(2, round(rate_rps * workload.block_s))
    if workload.pool is not None:
        return _window(workload.pool, rate_rps, n, rng, part)
    names = [t.name for t, k in zip(workload.tenants, _counts([t.share for t in workload.tenants], n), strict=True)
             for _ in range(k)]  # fmt: skip
    order = rng.permutation(n)
    gaps = rng.exponential(1.0 / rate_rps, n)
    times = np.cumsum(gaps) - gaps[0]
    by_name = {t.name: t for t in workload.tenants}
    out = []
    for k in range(n):
        t = by_name[names[order[k]]]
        prompt = int(rng.integers(t.prompt[0], t.prompt[1] + 1))
        output = int(rng.integers(t.output[0], t.output[1] + 1))
        out.append({"timestamp": float(times[k]), "input_length": prompt, "output_length": output, "tenant": t.name})
    return out


def stream_requests(stream: Sequence[dict[str, Any]], tenants: Sequence[TenantConfig]) -> list[Request]:
    """The stream as llmsched ``Request``s (``request_id`` = position), for the simulator's prediction."""
    index = {t.name: i for i, t in enumerate(tenants)}
    return [
        Request(i, float(r["timestamp"]), int(r["input_length"]), int(r["output_length"]), index[r["tenant"]])
        for i, r in enumerate(stream)
    ]


def _window(pool: TracePool, rate_rps: float, n: int, rng: np.random.Generator, part: str) -> list[dict[str, Any]]:
    """``n`` consecutive requests of ``pool``'s ``part`` from a random start (wrapping around the part)."""
    lo, hi = pool.part(part)
    size = hi - lo
    start = int(rng.integers(0, size))
    idx = [lo + (start + k) % size for k in range(n)]
    if pool.arrival_s is not None and len(pool.arrival_s) >= 2 and pool.arrival_s[-1] > 0:
        mean_gap = pool.arrival_s[-1] / (len(pool.arrival_s) - 1)
        gaps = [0.0] + [max(pool.arrival_s[b] - pool.arrival_s[a], 0.0) if b > a else mean_gap
                         for a, b in itertools.pairwise(idx)]  # fmt: skip
        times = np.cumsum(gaps) / (mean_gap * rate_rps)
    else:
        g = rng.exponential(1.0 / rate_rps, n)
        times = np.cumsum(g) - g[0]
    return [{"timestamp": float(times[k]), "input_length": pool.prompt[i], "output_length": pool.output[i],
             "tenant": pool.tenant[i]} for k, i in enumerate(idx)]  # fmt: skip
