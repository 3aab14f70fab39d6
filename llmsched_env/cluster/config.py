"""What a cluster is made of: replicas (engine limits + cost model, possibly heterogeneous) and the disaggregated
layout (``DisaggConfig``: prefill replicas, decode replicas and the KV link between them).
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from llmsched_env.common.checks import check_positive
from llmsched_env.costs.base import CostModel
from llmsched_env.engine.config import ENGINE_BOUNDS, EngineConfig

# K and V, 32 layers, 8 KV heads of 128 dims, 2 bytes (bf16): Llama-3-8B's KV per token.
LLAMA3_8B_KV_BYTES_PER_TOKEN = 2 * 32 * 8 * 128 * 2
DECODE_RULES = ("kv_per_request", "least_outstanding", "round_robin")
# The most replicas a cluster has (each a whole engine stepped and observed at every arrival); the scenarios have 4, 8.
MAX_REPLICAS = 1024
# The most KV blocks over all the replicas of a cluster: one engine's bound (about 96 bytes per block, 370 MiB).
MAX_CLUSTER_KV_BLOCKS = ENGINE_BOUNDS["num_kv_blocks"]
_BYTES_PER_KV_BLOCK = 96


def check_num_replicas(owner: str, name: str, value: Any) -> int:
    """``value`` if it is an integer from 1 to ``MAX_REPLICAS``; ``ValueError`` naming ``owner.name`` otherwise."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or not 1 <= int(value) <= MAX_REPLICAS:
        raise ValueError(f"{owner}.{name} must be an integer from 1 to {MAX_REPLICAS:,}, got {value!r}")
    return int(value)


@dataclass(frozen=True)
class ReplicaSpec:
    """One replica: its engine limits and the cost model that times its iterations."""

    engine: EngineConfig
    cost_model: CostModel

    def __post_init__(self) -> None:
        if not isinstance(self.engine, EngineConfig):
            raise ValueError(f"ReplicaSpec.engine must be an EngineConfig, got {type(self.engine).__name__}")
        if not callable(getattr(self.cost_model, "step_time_s", None)):
            raise ValueError(f"ReplicaSpec.cost_model must be a CostModel, got {type(self.cost_model).__name__}")


@dataclass(frozen=True)
class DisaggConfig:
    """Disaggregated prefill/decode: pool sizes, the KV link (``shared_link``: one for all, else one per decode
    replica; default a 25 GB/s RDMA path, 2 ms set-up, Llama-3-8B bf16 KV) and ``decode_rule``: ``kv_per_request``
    (most free KV per request, Llumnix's), ``least_outstanding`` or ``round_robin``."""

    num_prefill: int = 1
    num_decode: int = 1
    link_latency_s: float = 0.002
    link_bandwidth_Bps: float = 25e9
    kv_bytes_per_token: int = LLAMA3_8B_KV_BYTES_PER_TOKEN
    shared_link: bool = True
    decode_rule: str = "kv_per_request"

    def __post_init__(self) -> None:
        check_num_replicas("DisaggConfig", "num_prefill", self.num_prefill)
        check_num_replicas("DisaggConfig", "num_decode", self.num_decode)
        if self.num_replicas > MAX_REPLICAS:
            raise ValueError(
                f"DisaggConfig: num_prefill + num_decode must be at most {MAX_REPLICAS:,}, got {self.num_replicas:,}"
            )
        check_positive("DisaggConfig", "link_latency_s", self.link_latency_s, allow_zero=True)
        check_positive("DisaggConfig", "link_bandwidth_Bps", self.link_bandwidth_Bps)
        check_positive("DisaggConfig", "kv_bytes_per_token", self.kv_bytes_per_token)
        if not isinstance(self.shared_link, bool):
            raise ValueError(f"DisaggConfig.shared_link must be a bool, got {self.shared_link!r}")
        if self.decode_rule not in DECODE_RULES:
            raise ValueError(f"DisaggConfig.decode_rule must be one of {DECODE_RULES}, got {self.decode_rule!r}")

    @property
    def num_replicas(self) -> int:
        return self.num_prefill + self.num_decode


def check_cluster_kv_blocks(owner: str, specs: Sequence[ReplicaSpec], disagg: DisaggConfig | None = None) -> int:
    """The KV blocks of all ``specs`` together if at most ``MAX_CLUSTER_KV_BLOCKS``; ``ValueError`` naming the
    fields and their product otherwise, before any block pool is built."""
    blocks = [s.engine.num_kv_blocks for s in specs]
    total = sum(blocks)
    if total <= MAX_CLUSTER_KV_BLOCKS:
        return total
    if disagg is not None and len(specs) == disagg.num_replicas:
        names, count = "(num_prefill + num_decode)", f"({disagg.num_prefill:,} + {disagg.num_decode:,})"
        prefill, decode = sum(blocks[: disagg.num_prefill]), sum(blocks[disagg.num_prefill :])
        pools = f" (prefill pool {prefill:,} + decode pool {decode:,})"
    else:
        names, count, pools = "num_replicas", f"{len(specs):,}", ""
    if len(set(blocks)) == 1:
        what = f"{names} x engine.num_kv_blocks = {count} x {blocks[0]:,} = {total:,} KV blocks"
    else:
        what = f"the {len(specs):,} replicas' engine.num_kv_blocks sum to {total:,} KV blocks{pools}"
    gb = total * _BYTES_PER_KV_BLOCK / 1e9
    raise ValueError(
        f"{owner}: {what} over the cluster, more than {MAX_CLUSTER_KV_BLOCKS:,} (one engine's bound, "
        f"ENGINE_BOUNDS num_kv_blocks: the simulator's block pools hold about {_BYTES_PER_KV_BLOCK} bytes per "
        f"block, {gb:,.1f} GB here); give fewer replicas or fewer num_kv_blocks each"
    )


class KVLink:
    """A FIFO link: a transfer starts when the link is free, holds it for bytes / bandwidth, and lands
    ``latency_s`` after it leaves the link (the latency is pipelined: it does not hold the link)."""

    def __init__(self, latency_s: float, bandwidth_Bps: float) -> None:
        self.latency_s = latency_s
        self.bandwidth_Bps = bandwidth_Bps
        self.free_s = 0.0  # when the transfer now last in line leaves the link
        self.num_transfers = 0
        self.num_bytes = 0
        self.total_s = 0.0  # sum of (landing - start request) over transfers
        self.total_queue_s = 0.0  # of which waiting for the link

    def copy(self) -> KVLink:
        """An independent copy in the same state (``Cluster.fork``)."""
        c = KVLink.__new__(KVLink)
        c.__dict__.update(self.__dict__)
        return c

    def send(self, now_s: float, num_bytes: int) -> float:
        """Queue a transfer of ``num_bytes`` at ``now_s``; return when it lands."""
        start = now_s if now_s > self.free_s else self.free_s
        self.free_s = start + num_bytes / self.bandwidth_Bps
        ready = self.free_s + self.latency_s
        self.num_transfers += 1
        self.num_bytes += num_bytes
        self.total_s += ready - now_s
        self.total_queue_s += start - now_s
        return ready

    def backlog_s(self, now_s: float) -> float:
        """How long a transfer queued now would wait for the link."""
        return max(self.free_s - now_s, 0.0)
