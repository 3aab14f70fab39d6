"""The live experiment's workloads (``WORKLOADS``: tenants with SLO classes and fixed shares, uniform lengths, the
KV pool) and one block's stream (``block_stream``: Poisson arrivals over ``block_s``, the same seed the same
stream; ``stream_requests`` turns it into ``Request``s).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from llmsched_env.engine.config import SLO_CLASSES, EngineConfig, SLOClass, TenantConfig
from llmsched_env.engine.request import Request
from llmsched_env.workloads.lengths import LengthDist

__all__ = ["WORKLOADS", "LiveTenant", "LiveWorkload", "block_stream", "length_mix", "stream_requests", "tenant_configs"]


@dataclass(frozen=True)
class LiveTenant:
    """One tenant: SLO class, share of each block, prompt and output length ranges (inclusive), priority."""

    name: str
    slo_class: str
    share: float
    prompt: tuple[int, int]
    output: tuple[int, int]
    priority: int = 0

    def __post_init__(self) -> None:
        if self.slo_class not in SLO_CLASSES:
            raise ValueError(f"LiveTenant {self.name!r}: slo_class must be one of {', '.join(SLO_CLASSES)}")
        if not self.share > 0:
            raise ValueError(f"LiveTenant {self.name!r}: share must be > 0, got {self.share!r}")
        for what, (lo, hi) in (("prompt", self.prompt), ("output", self.output)):
            if not 1 <= lo <= hi:
                raise ValueError(f"LiveTenant {self.name!r}: {what} must be a range 1 <= low <= high")


@dataclass(frozen=True)
class LiveWorkload:
    """A workload: its ``tenants``, KV pool and limits, a block's mean span, its cells' loads (x knee)."""

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

    def __post_init__(self) -> None:
        if not self.tenants or len({t.name for t in self.tenants}) != len(self.tenants):
            raise ValueError(f"LiveWorkload {self.name!r}: tenants must be non-empty with unique names")
        longest = max(t.prompt[1] + t.output[1] for t in self.tenants)
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


def tenant_configs(workload: LiveWorkload, slo_scale: float) -> tuple[TenantConfig, ...]:
    """The workload's tenants as ``TenantConfig``s, their class's targets times ``slo_scale``."""
    out = []
    for t in workload.tenants:
        c = SLO_CLASSES[t.slo_class]
        slo = SLOClass(c.name, c.ttft_s * slo_scale, c.tpot_s * slo_scale)
        out.append(TenantConfig(t.name, slo, priority=t.priority))
    return tuple(out)


def length_mix(workload: LiveWorkload) -> list[tuple[LengthDist, float]]:
    """(lengths, share) per tenant, for ``workloads.randomized.nominal_rate_rps``."""
    return [(LengthDist.uniform(t.prompt, t.output), t.share) for t in workload.tenants]


def _counts(shares: Sequence[float], n: int) -> list[int]:
    """``n`` split by ``shares`` (largest remainder; the earlier tenant first on a tie)."""
    total = sum(shares)
    exact = [n * s / total for s in shares]
    counts = [int(x) for x in exact]
    order = sorted(range(len(shares)), key=lambda i: (-(exact[i] - counts[i]), i))
    for i in order[: n - sum(counts)]:
        counts[i] += 1
    return counts


def block_stream(workload: LiveWorkload, rate_rps: float, seed: int) -> list[dict[str, Any]]:
    """One block's ``round(rate_rps * block_s)`` (at least 2) requests, ``{"timestamp", "input_length",
    "output_length", "tenant"}`` each: Poisson arrivals, each tenant exactly its share, seeded."""
    if not rate_rps > 0:
        raise ValueError(f"block_stream: rate_rps must be > 0, got {rate_rps!r}")
    rng = np.random.default_rng([20260, seed])
    n = max(2, round(rate_rps * workload.block_s))
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
