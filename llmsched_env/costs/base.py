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

from llmsched_env.common.checks import check_number

__all__ = ["CostModel", "check_label", "prefill_time_s", "prefill_time_unchecked_s", "unloaded_decode_time_s"]


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
