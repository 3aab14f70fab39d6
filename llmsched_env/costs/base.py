"""What a cost model is: how long one engine iteration takes, for the simulator's clock.

One iteration runs a continuous batch: chunked prefills and decodes together. Every cost model answers
``step_time_s(num_prefill_tokens, num_decode_seqs, num_kv_tokens, prefill_attn_pairs)``:

- ``num_prefill_tokens``: prefill tokens computed in the batch, all chunks together;
- ``num_decode_seqs``: decoding sequences, one new token each;
- ``num_kv_tokens``: context tokens whose KV the decodes' attention reads (sum of their context lengths);
- ``prefill_attn_pairs``: (query, key) pairs of prefill attention, summed over chunks of
  ``chunk_len * (num_context_tokens_before_chunk + (chunk_len + 1) / 2)``.

The result is > 0 for every batch, the empty one included (a fixed per-iteration overhead), and monotone
non-decreasing in each argument. ``step_time_s`` runs once per simulated iteration, so it is plain float
arithmetic on constants computed at construction, and it does not validate its arguments.

Besides the protocol, the times every layer derives from any cost model: one unloaded decode step and one
request's prefill alone.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from llmsched_env.common.checks import Bound, check_number

__all__ = [
    "COST_BOUNDS", "MAX_STEP_S", "CostModel", "check_cost_field", "check_label", "check_step_times", "prefill_time_s",
    "prefill_time_unchecked_s", "unloaded_decode_time_s",
]

# Physical ranges of a cost model's constants (docs/reliability.md, "Physical ranges"), far outside anything
# real so that every shipped preset and calibrated file passes and a mistyped or hostile figure (1e308, or one
# that makes a step take days) is refused in one line. One iteration (the empty one, a 1-token prefill, one
# decode of 1 token of context) takes at most an hour: real ones take milliseconds. Per device: 1e6 TFLOP/s
# (1e18 FLOP/s, some 1,000x an H100's 989 dense bf16 TFLOP/s and 450x a B200's) and 1e6 GB/s of memory or
# interconnect bandwidth (1e15 B/s, 300x an H100's 3.35 TB/s and 100x a B200's 8 TB/s; NVLink 5 is 0.9 TB/s a
# direction); 1e15 parameters (500x the largest published models); 64 bytes per value (8x float64); the sizes of
# a model (layers, widths, heads, tensor-parallel degree, the attention query tile) at most 2**20 each (64x the
# widest model's hidden size of 16,384, 8,000x the deepest's 126 layers). A linear model's coefficients are
# seconds per unit, each at most an hour. The figures that divide a step's time also have a bottom (``Bound``), as
# a tiny one prices an 8B model at microseconds: 1e-3 TFLOP/s (1 GFLOP/s, below any CPU core's), 1e-3 GB/s
# (1 MB/s) of memory or interconnect bandwidth, 1e3 parameters (a toy model has 1e5), 0.125 bytes per value
# (1-bit weights), and a compute or bandwidth efficiency of 1e-3 to 1 of peak (real ones are 0.3 to 0.9).
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
    **dict.fromkeys(
        ("num_layers", "hidden_size", "num_attention_heads", "num_kv_heads", "head_dim", "tensor_parallel"), _MAX_SIZE
    ),
    "prefill_attn_query_tile": _MAX_SIZE,
    **dict.fromkeys(
        ("prefill_token_s", "decode_seq_s", "kv_token_s", "prefill_attn_pair_s", "decode_log_s"), MAX_STEP_S
    ),
}
_UNITS = {
    "peak_tflops": "TFLOP/s",
    "mem_bandwidth_gbps": "GB/s",
    "interconnect_bandwidth_gbps": "GB/s",
    "compute_efficiency": "of peak",
    "bandwidth_efficiency": "of peak",
}


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
    """Raise ``ValueError`` naming ``owner`` unless the smallest iterations ``model`` prices (a 1-token prefill,
    one decode of 1 token of context) each take at most ``MAX_STEP_S``: constants each within their range can
    still price one token at days together (a slow device and a huge model)."""
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


def prefill_time_s(
    model: CostModel, prompt_tokens: int, chunk_tokens: int | None = None, num_cached_tokens: int = 0
) -> float:
    """Time to prefill one request alone: its ``prompt_tokens - num_cached_tokens`` uncached tokens in one
    iteration (pairs = n * (n + 1) / 2 with no cache), or in iterations of ``chunk_tokens`` each."""
    check_number("prefill_time_s", "prompt_tokens", prompt_tokens, integer=True)
    check_number("prefill_time_s", "num_cached_tokens", num_cached_tokens, integer=True)
    if chunk_tokens is not None:
        check_number("prefill_time_s", "chunk_tokens", chunk_tokens, positive=True, integer=True)
    return prefill_time_unchecked_s(model, prompt_tokens, chunk_tokens, num_cached_tokens)


def prefill_time_unchecked_s(
    model: CostModel, prompt_tokens: int, chunk_tokens: int | None = None, num_cached_tokens: int = 0
) -> float:
    """``prefill_time_s`` without checking its arguments: for the engine's hot path, whose counts are its own
    non-negative integers."""
    done = min(num_cached_tokens, prompt_tokens)
    todo = prompt_tokens - done
    step = todo if chunk_tokens is None else chunk_tokens
    total_s = 0.0
    while done < prompt_tokens:
        n = min(step, prompt_tokens - done)
        total_s += model.step_time_s(n, 0, 0, n * (done + (n + 1) / 2))
        done += n
    return total_s
