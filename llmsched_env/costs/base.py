"""The ``CostModel`` protocol: ``step_time_s(num_prefill_tokens, num_decode_seqs, num_kv_tokens,
prefill_attn_pairs)``, the seconds of one iteration, > 0 and non-decreasing in each argument (unchecked: the hot
path); and the times derived from it (an unloaded decode step, a prefill alone).
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from llmsched_env.common.checks import Bound, check_number

# Physical ranges of a cost model's constants (docs/reliability.md, "Physical ranges"), with bottoms (``Bound``)
# for the figures that divide a step's time.
MAX_STEP_S = 3600.0
_MAX_SIZE = 1 << 20
COST_BOUNDS: dict[str, float] = {
    "peak_tflops": Bound(1e6, 1e-3),
    "mem_bandwidth_gbps": Bound(1e6, 1e-3),
    "interconnect_bandwidth_gbps": Bound(1e6, 1e-3),  # 0 too where it may be (one device: no interconnect)
    "num_params": Bound(1e15, 1e3),
    "dtype_bytes": Bound(64.0, 0.125),
    "compute_efficiency": Bound(1.0, 1e-3),
    "bandwidth_efficiency": Bound(1.0, 1e-3),
    "overhead_s": MAX_STEP_S,
    "allreduce_latency_s": MAX_STEP_S,
    **dict.fromkeys(("num_layers", "hidden_size", "num_attention_heads", "num_kv_heads", "head_dim", "tensor_parallel",
                     "prefill_attn_query_tile"), _MAX_SIZE),
    **dict.fromkeys(("prefill_token_s", "decode_seq_s", "kv_token_s", "prefill_attn_pair_s", "decode_log_s"),
                    MAX_STEP_S),
}  # fmt: skip
_UNITS = {"peak_tflops": "TFLOP/s", "mem_bandwidth_gbps": "GB/s", "interconnect_bandwidth_gbps": "GB/s",
          "compute_efficiency": "of peak", "bandwidth_efficiency": "of peak"}  # fmt: skip


@runtime_checkable
class CostModel(Protocol):
    """Anything that prices one engine iteration (see the module docstring for the arguments)."""

    @property
    def name(self) -> str: ...

    def step_time_s(
        self, num_prefill_tokens: int, num_decode_seqs: int, num_kv_tokens: int, prefill_attn_pairs: float
    ) -> float: ...


def check_label(owner: str, name: object, description: object) -> None:
    """Raise ``ValueError`` unless a cost model's ``name`` and ``description`` are strings."""
    for field, value in (("name", name), ("description", description)):
        if not isinstance(value, str):
            raise ValueError(f"{owner}: field '{field}' must be a string, got {value!r}")


def check_cost_field(owner: str, field: str, value: object, *, positive: bool = False, integer: bool = False) -> None:
    """``check_number`` of a cost model's constant ``field`` within its physical range (``COST_BOUNDS``)."""
    maximum = COST_BOUNDS.get(field)
    unit = _UNITS.get(field, "s" if field.endswith("_s") else "")
    check_number(owner, field, value, positive=positive, integer=integer, maximum=maximum, unit=unit)


def check_step_times(owner: str, model: CostModel) -> None:
    """``ValueError`` naming ``owner`` unless a 1-token prefill and one decode of 1 context token each take at most
    ``MAX_STEP_S`` (constants each in range can still price a token at days together)."""
    for what, batch in (("a 1-token prefill", (1, 0, 0, 1.0)), ("one decode of 1 context token", (0, 1, 1, 0.0))):
        step_s = model.step_time_s(*batch)
        if not step_s <= MAX_STEP_S:  # NaN too
            raise ValueError(
                f"{owner}: one iteration of {what} takes {step_s:g} s, over the {MAX_STEP_S:g} s a step may take "
                '(docs/reliability.md, "Physical ranges"): its constants are outside physical ranges'
            )


def unloaded_decode_time_s(model: CostModel, context_tokens: int = 1024) -> float:
    """One decode step of one request with ``context_tokens`` of context, nothing else in the batch."""
    check_number("unloaded_decode_time_s", "context_tokens", context_tokens, integer=True)
    return model.step_time_s(0, 1, context_tokens, 0.0)


def prefill_time_s(model: CostModel, prompt_tokens: int, chunk_tokens: int | None = None,
                   num_cached_tokens: int = 0) -> float:
    """Time to prefill one request alone: its ``prompt_tokens - num_cached_tokens`` uncached tokens in one
    iteration (pairs = n * (n + 1) / 2 with no cache), or in iterations of ``chunk_tokens`` each."""
    check_number("prefill_time_s", "prompt_tokens", prompt_tokens, integer=True)
    check_number("prefill_time_s", "num_cached_tokens", num_cached_tokens, integer=True)
    if chunk_tokens is not None:
        check_number("prefill_time_s", "chunk_tokens", chunk_tokens, positive=True, integer=True)
    return prefill_time_unchecked_s(model, prompt_tokens, chunk_tokens, num_cached_tokens)


def prefill_time_unchecked_s(model: CostModel, prompt_tokens: int, chunk_tokens: int | None = None,
                             num_cached_tokens: int = 0) -> float:
    """``prefill_time_s`` without checking its arguments (the engine's hot path)."""
    done = min(num_cached_tokens, prompt_tokens)
    todo = prompt_tokens - done
    step = todo if chunk_tokens is None else chunk_tokens
    total_s = 0.0
    while done < prompt_tokens:
        n = min(step, prompt_tokens - done)
        total_s += model.step_time_s(n, 0, 0, n * (done + (n + 1) / 2))
        done += n
    return total_s
