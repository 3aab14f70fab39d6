"""The roofline cost model of a decoder-only transformer."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, ClassVar

from llmsched_env.common.fields import derived, from_fields, to_fields
from llmsched_env.costs.base import check_cost_field, check_label, check_step_times

# How far the query heads' width (num_attention_heads * head_dim) may be from hidden_size (models: 0.67x to 3.4x).
SHAPE_FACTOR = 8.0


@dataclass(frozen=True, kw_only=True, repr=False)
class AnalyticCostModel:
    """Roofline cost of one iteration of a decoder-only transformer, tensor-parallel over ``tensor_parallel``
    GPUs, each with ``peak_tflops`` and ``mem_bandwidth_gbps`` (GB/s, 1e9) of which the ``*_efficiency``
    fractions are achieved. With p = prefill tokens, d = decode seqs, kv = decode KV tokens, pairs = prefill
    attention pairs and tp = ``tensor_parallel``::

        flops     = 2 * num_params * (p + d) + 4 * num_layers * num_attention_heads * head_dim * (pairs + kv)
        kv_bytes  = 2 * num_layers * num_kv_heads * head_dim * dtype_bytes            # K and V, per token
        bytes     = num_params * dtype_bytes                                          # weights, once
                  + kv_bytes * (kv + p)                          # decode KV reads, prefill KV writes
                  + kv_bytes * pairs / prefill_attn_query_tile   # prefill attention: KV re-read per q tile
        compute_s = flops / tp / (peak_tflops * 1e12 * compute_efficiency)
        memory_s  = bytes / tp / (mem_bandwidth_gbps * 1e9 * bandwidth_efficiency)
        ring_s    = 2 * (tp - 1) / tp * hidden_size * dtype_bytes / (interconnect_bandwidth_gbps * 1e9)
        comm_s    = 2 * num_layers * (allreduce_latency_s + ring_s * (p + d))          # only when tp > 1
        step_time_s = overhead_s + max(compute_s, memory_s) + comm_s                   # when p + d > 0
        step_time_s = overhead_s                                          # when p + d == 0: no kernels run

    KV is split by head (``ceil(num_kv_heads / tp) * tp`` heads when replicated). Compute and memory overlap;
    the two all-reduces per layer do not. A frozen dataclass built by keyword; each field is checked
    (``ValueError`` naming it: ``costs.base.COST_BOUNDS``, ``num_kv_heads`` dividing ``num_attention_heads``,
    the heads' width within ``SHAPE_FACTOR`` of ``hidden_size``) and the slopes are derived once.
    """

    name: str = "analytic"
    description: str = ""
    num_params: float
    num_layers: int
    hidden_size: int
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    dtype_bytes: float
    peak_tflops: float
    mem_bandwidth_gbps: float
    compute_efficiency: float
    bandwidth_efficiency: float
    overhead_s: float
    # Derived in __post_init__, in seconds: token compute, attention compute, weights, KV token, pair memory, base
    # and communication per token (the per-argument slopes of the roofline's two sides).
    _slopes: tuple[float, float, float, float, float, float, float] = derived()
    tensor_parallel: int = 1
    allreduce_latency_s: float = 0.0
    interconnect_bandwidth_gbps: float = 0.0
    prefill_attn_query_tile: int = 128

    _INTS: ClassVar[tuple[str, ...]] = (
        "num_layers", "hidden_size", "num_attention_heads", "num_kv_heads", "head_dim", "tensor_parallel",
    )
    # overhead_s > 0 so that an empty iteration takes time
    _MAY_BE_ZERO: ClassVar[tuple[str, ...]] = ("allreduce_latency_s", "interconnect_bandwidth_gbps")

    def __post_init__(self) -> None:
        owner = f"AnalyticCostModel {self.name!r}"
        check_label(owner, self.name, self.description)
        for f in fields(self):
            if f.init and f.name not in ("name", "description"):
                positive = f.name not in self._MAY_BE_ZERO
                check_cost_field(owner, f.name, getattr(self, f.name), positive=positive, integer=f.name in self._INTS)
        self._check_shape(owner)
        tp = self.tensor_parallel
        if tp > 1 and self.interconnect_bandwidth_gbps <= 0:
            raise ValueError(f"{owner}: field 'interconnect_bandwidth_gbps' must be > 0 when tensor_parallel > 1")
        flops_per_s = self.peak_tflops * 1e12 * self.compute_efficiency * tp
        bytes_per_s = self.mem_bandwidth_gbps * 1e9 * self.bandwidth_efficiency * tp
        kv_heads = math.ceil(self.num_kv_heads / tp) * tp
        kv_bytes = 2 * self.num_layers * kv_heads * self.head_dim * self.dtype_bytes
        attn_flops = 4 * self.num_layers * self.num_attention_heads * self.head_dim
        base_s = self.overhead_s
        comm_token_s = 0.0
        if tp > 1:
            base_s += 2 * self.num_layers * self.allreduce_latency_s
            ring_bytes = 2 * (tp - 1) / tp * self.hidden_size * self.dtype_bytes
            comm_token_s = 2 * self.num_layers * ring_bytes / (self.interconnect_bandwidth_gbps * 1e9)
        slopes = (2 * self.num_params / flops_per_s, attn_flops / flops_per_s,
                  self.num_params * self.dtype_bytes / bytes_per_s, kv_bytes / bytes_per_s,
                  kv_bytes / self.prefill_attn_query_tile / bytes_per_s, base_s, comm_token_s)  # fmt: skip
        object.__setattr__(self, "_slopes", slopes)
        check_step_times(owner, self)  # each field in range, and together a 1-token step within an hour

    def _check_shape(self, owner: str) -> None:
        """``ValueError`` naming the fields when the attention's shape contradicts itself."""
        heads, kv_heads = self.num_attention_heads, self.num_kv_heads
        if kv_heads > heads or heads % kv_heads:
            raise ValueError(f"{owner}: field 'num_kv_heads' ({kv_heads}) must divide 'num_attention_heads' ({heads}): "
                             f"each KV head serves a whole group of query heads (num_kv_heads = num_attention_heads "
                             f"without grouping, 1 for multi-query attention)")
        width = heads * self.head_dim
        if not self.hidden_size / SHAPE_FACTOR <= width <= self.hidden_size * SHAPE_FACTOR:
            raise ValueError(f"{owner}: fields 'num_attention_heads' x 'head_dim' ({heads} x {self.head_dim} = "
                             f"{width}) must be within {SHAPE_FACTOR:g}x of 'hidden_size' ({self.hidden_size}): the "
                             f"attention's width is about the model's (Llama: equal; Qwen3, Gemma, DeepSeek's MLA: "
                             f"0.7x to 3.4x)")

    def step_time_s(self, num_prefill_tokens: int, num_decode_seqs: int, num_kv_tokens: int,
                    prefill_attn_pairs: float) -> float:
        tokens = num_prefill_tokens + num_decode_seqs
        if tokens == 0:  # an empty iteration launches no kernels and reads no weights
            return self.overhead_s
        token_compute_s, attn_compute_s, weights_s, kv_token_s, pair_memory_s, base_s, comm_token_s = self._slopes
        compute_s = token_compute_s * tokens + attn_compute_s * (prefill_attn_pairs + num_kv_tokens)
        memory_s = weights_s + kv_token_s * (num_kv_tokens + num_prefill_tokens) + pair_memory_s * prefill_attn_pairs
        return base_s + (compute_s if compute_s > memory_s else memory_s) + comm_token_s * tokens

    def to_dict(self) -> dict[str, Any]:
        """The JSON preset of this model (kind ``"analytic"``)."""
        return {"kind": "analytic", **to_fields(self)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> AnalyticCostModel:
        """The model a ``to_dict()`` output or a preset's fields describe; ValueError naming an unknown or
        missing field."""
        return from_fields(cls, f"AnalyticCostModel {data.get('name', 'analytic')!r}", data, ignore=("kind",))

    def __repr__(self) -> str:
        return (f"AnalyticCostModel(name={self.name!r}, num_params={self.num_params:.3g}, "
                f"tensor_parallel={self.tensor_parallel}, peak_tflops={self.peak_tflops}, "
                f"mem_bandwidth_gbps={self.mem_bandwidth_gbps}, overhead_s={self.overhead_s})")
