"""The roofline cost model of a decoder-only transformer."""

from __future__ import annotations

import math
from typing import Any, ClassVar

from llmsched_env.common.checks import check_number


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

    KV is split over GPUs by KV head; when ``num_kv_heads < tp`` each GPU holds a replica of one head, which
    the formula prices by using ``ceil(num_kv_heads / tp) * tp`` heads. Compute and memory overlap (the
    roofline max); the two all-reduces per layer (after attention and after the MLP) do not.
    """

    REQUIRED = (
        "num_params",
        "num_layers",
        "hidden_size",
        "num_attention_heads",
        "num_kv_heads",
        "head_dim",
        "dtype_bytes",
        "peak_tflops",
        "mem_bandwidth_gbps",
        "compute_efficiency",
        "bandwidth_efficiency",
        "overhead_s",
    )
    OPTIONAL: ClassVar[dict[str, float]] = {
        "tensor_parallel": 1,
        "allreduce_latency_s": 0.0,
        "interconnect_bandwidth_gbps": 0.0,
        "prefill_attn_query_tile": 128,
    }
    _INTS = ("num_layers", "hidden_size", "num_attention_heads", "num_kv_heads", "head_dim",
             "tensor_parallel")

    def __init__(self, *, name: str = "analytic", description: str = "", **fields: Any) -> None:
        owner = f"AnalyticCostModel {name!r}"
        unknown = sorted(set(fields) - set(self.REQUIRED) - set(self.OPTIONAL))
        if unknown:
            known = [*self.REQUIRED, *self.OPTIONAL]
            raise ValueError(f"{owner}: unknown field(s) {unknown}; known fields: {known}")
        for field in self.REQUIRED:
            if field not in fields:
                raise ValueError(f"{owner}: missing field '{field}'")
        values = {**self.OPTIONAL, **fields}
        for field, value in values.items():
            positive = field not in ("overhead_s", "allreduce_latency_s", "interconnect_bandwidth_gbps")
            check_number(owner, field, value, positive=positive, integer=field in self._INTS)
        for field in ("compute_efficiency", "bandwidth_efficiency"):
            if values[field] > 1:
                raise ValueError(
                    f"{owner}: field '{field}' is a fraction of peak, must be <= 1, got {values[field]!r}"
                )
        if values["overhead_s"] <= 0:
            raise ValueError(f"{owner}: field 'overhead_s' must be > 0 so an empty iteration takes time")
        tp = values["tensor_parallel"]
        if tp > 1 and values["interconnect_bandwidth_gbps"] <= 0:
            raise ValueError(
                f"{owner}: field 'interconnect_bandwidth_gbps' must be > 0 when tensor_parallel > 1"
            )
        self.name = name
        self.description = description
        self.fields: dict[str, Any] = values

        v = values
        flops_per_s = v["peak_tflops"] * 1e12 * v["compute_efficiency"] * tp
        bytes_per_s = v["mem_bandwidth_gbps"] * 1e9 * v["bandwidth_efficiency"] * tp
        kv_heads = math.ceil(v["num_kv_heads"] / tp) * tp
        kv_bytes = 2 * v["num_layers"] * kv_heads * v["head_dim"] * v["dtype_bytes"]
        attn_flops = 4 * v["num_layers"] * v["num_attention_heads"] * v["head_dim"]
        # The per-argument slopes of the roofline's two sides, in seconds.
        self._token_compute_s = 2 * v["num_params"] / flops_per_s
        self._attn_compute_s = attn_flops / flops_per_s
        self._weights_s = v["num_params"] * v["dtype_bytes"] / bytes_per_s
        self._kv_token_s = kv_bytes / bytes_per_s
        self._pair_memory_s = kv_bytes / v["prefill_attn_query_tile"] / bytes_per_s
        self._overhead_s = v["overhead_s"]
        self._base_s = v["overhead_s"]
        self._comm_token_s = 0.0
        if tp > 1:
            self._base_s += 2 * v["num_layers"] * v["allreduce_latency_s"]
            ring_bytes = 2 * (tp - 1) / tp * v["hidden_size"] * v["dtype_bytes"]
            self._comm_token_s = 2 * v["num_layers"] * ring_bytes / (v["interconnect_bandwidth_gbps"] * 1e9)

    def step_time_s(
        self, num_prefill_tokens: int, num_decode_seqs: int, num_kv_tokens: int, prefill_attn_pairs: float
    ) -> float:
        tokens = num_prefill_tokens + num_decode_seqs
        if tokens == 0:  # an empty iteration launches no kernels and reads no weights
            return self._overhead_s
        compute_s = (
            self._token_compute_s * tokens + self._attn_compute_s * (prefill_attn_pairs + num_kv_tokens)
        )
        memory_s = (
            self._weights_s
            + self._kv_token_s * (num_kv_tokens + num_prefill_tokens)
            + self._pair_memory_s * prefill_attn_pairs
        )
        return self._base_s + (compute_s if compute_s > memory_s else memory_s) + self._comm_token_s * tokens

    def to_dict(self) -> dict[str, Any]:
        """The JSON preset of this model (kind ``"analytic"``)."""
        return {"kind": "analytic", "name": self.name, "description": self.description, **self.fields}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> AnalyticCostModel:
        fields = {k: v for k, v in data.items() if k not in ("kind", "name", "description")}
        return cls(name=data.get("name", "analytic"), description=data.get("description", ""), **fields)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self).from_dict, (self.to_dict(),))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, AnalyticCostModel) and self.to_dict() == other.to_dict()

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        f = self.fields
        return (
            f"AnalyticCostModel(name={self.name!r}, num_params={f['num_params']:.3g}, "
            f"tensor_parallel={f['tensor_parallel']}, peak_tflops={f['peak_tflops']}, "
            f"mem_bandwidth_gbps={f['mem_bandwidth_gbps']}, overhead_s={f['overhead_s']})"
        )
