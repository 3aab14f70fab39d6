"""One inference request: WAITING -> RUNNING (chunked prefill, then decode) -> FINISHED, or REJECTED from WAITING;
TRANSFERRING after a prefill-only engine hands it off; a recompute preemption sends it back to WAITING. Decoding
is lazy (``Engine._sync``): token times are decode-round segments plus prefill-ending tokens.
"""

from __future__ import annotations

from enum import IntEnum
from typing import overload

import numpy as np
from mypy_extensions import mypyc_attr


@overload
def tpot_s(first_token_s: float, last_token_s: float, num_output_tokens: int) -> float: ...
@overload
def tpot_s(first_token_s: np.ndarray, last_token_s: np.ndarray, num_output_tokens: int | np.ndarray) -> np.ndarray: ...


def tpot_s(first_token_s: float | np.ndarray, last_token_s: float | np.ndarray,
           num_output_tokens: int | np.ndarray) -> float | np.ndarray:
    """Time per output token as vLLM's benchmark defines it, ``(last - first) / (n - 1)``; 0 for one token (the
    SLO check only: TPOT statistics leave such requests out). Element-wise on arrays; the project's one formula."""
    return (last_token_s - first_token_s) / np.maximum(num_output_tokens - 1, 1)


class Status(IntEnum):
    WAITING = 0
    RUNNING = 1
    FINISHED = 2
    REJECTED = 3
    TRANSFERRING = 4  # handed off by a prefill engine; not yet running on a decode engine


@mypyc_attr(allow_interpreted_subclasses=True)
class Request:
    """A request as the engine sees it. Lengths are in tokens, times in seconds of the engine clock."""

    __slots__ = (
        "admit_seq", "arrival_s", "block_table", "decode_out0", "decode_round0", "decoding", "event_round",
        "fetch_ready_s", "finish_s", "first_scheduled_s", "first_token_s", "num_admitted_tokens", "num_cached_tokens",
        "num_computed_tokens", "num_output_tokens", "num_preemptions", "num_prefix_hit_tokens", "num_remote_tokens",
        "output_len", "predicted_output_len", "prefill_token_s", "prefix_hashes", "prefix_id_tokens", "prefix_ids",
        "prompt_len", "reject_reason", "request_id", "slo_resolved", "status", "tenant", "token_segments",
    )

    def __init__(self, request_id: int, arrival_s: float, prompt_len: int, output_len: int, tenant: int = 0,
                 prefix_ids: tuple[int, ...] | None = None, prefix_id_tokens: int = 512) -> None:
        if prompt_len < 1 or output_len < 1:
            raise ValueError(
                f"request {request_id}: prompt_len and output_len must be >= 1, got {prompt_len}, {output_len}"
            )
        self.request_id = request_id
        self.arrival_s = float(arrival_s)
        self.prompt_len = int(prompt_len)
        self.output_len = int(output_len)
        self.tenant = int(tenant)
        # Ids of prompt blocks of ``prefix_id_tokens`` tokens each (Mooncake's hash_ids): equal ids at the
        # same position mean equal content, so the KV pool's prefix cache can share them.
        self.prefix_ids = tuple(prefix_ids) if prefix_ids else ()
        self.prefix_id_tokens = int(prefix_id_tokens)
        self.prefix_hashes: list[int] | None = None  # engine-block hashes, computed on first admission
        self.status = Status.WAITING
        self.reject_reason: str | None = None
        self.block_table: list[int] = []
        self.admit_seq = 0  # the engine's count of admissions when this request last joined the running set
        self.num_computed_tokens = 0  # tokens whose KV is in the cache
        self.num_cached_tokens = 0  # of those, tokens found in the prefix cache at (re)admission
        self.num_prefix_hit_tokens = 0  # prefix-cache hits summed over admissions
        self.num_admitted_tokens = 0  # prefill tokens needed at each admission, summed over admissions
        self.num_output_tokens = 0
        self.num_preemptions = 0
        self.num_remote_tokens = 0  # prefix tokens fetched from a remote KV store, over admissions
        self.fetch_ready_s = 0.0  # > 0 while a remote KV fetch is in flight: the time it completes
        self.decoding = False
        self.decode_round0 = 0
        self.decode_out0 = 0
        self.event_round = -1
        self.first_scheduled_s: float | None = None
        self.first_token_s: float | None = None
        self.finish_s: float | None = None
        self.prefill_token_s: list[float] = []
        self.token_segments: list[tuple[int, int]] = []  # [start, end) decode rounds that gave tokens
        self.slo_resolved = False  # the reward has counted this request (met or missed)
        # A length predictor's guess of output_len (``workloads.prediction``), known on arrival; None: no guess.
        # Schedulers may read it (QueueOrder.SPRW, the observation's pred/ features); the engine never does.
        self.predicted_output_len: int | None = None

    def copy(self) -> Request:
        """An independent copy for ``Engine.fork``: lists copied, ``prefix_hashes`` shared (never changed)."""
        c = Request.__new__(Request)
        (c.admit_seq, c.arrival_s, c.decode_out0, c.decode_round0, c.decoding, c.event_round, c.fetch_ready_s,
         c.finish_s, c.first_scheduled_s, c.first_token_s, c.num_admitted_tokens, c.num_cached_tokens,
         c.num_computed_tokens, c.num_output_tokens, c.num_preemptions, c.num_prefix_hit_tokens, c.num_remote_tokens,
         c.output_len, c.predicted_output_len, c.prefix_hashes, c.prefix_id_tokens, c.prefix_ids, c.prompt_len,
         c.reject_reason, c.request_id, c.slo_resolved, c.status, c.tenant) = (
            self.admit_seq, self.arrival_s, self.decode_out0, self.decode_round0, self.decoding, self.event_round,
            self.fetch_ready_s, self.finish_s, self.first_scheduled_s, self.first_token_s, self.num_admitted_tokens,
            self.num_cached_tokens, self.num_computed_tokens, self.num_output_tokens, self.num_preemptions,
            self.num_prefix_hit_tokens, self.num_remote_tokens, self.output_len, self.predicted_output_len,
            self.prefix_hashes, self.prefix_id_tokens, self.prefix_ids, self.prompt_len, self.reject_reason,
            self.request_id, self.slo_resolved, self.status, self.tenant)  # fmt: skip
        c.block_table = self.block_table[:]
        c.prefill_token_s = self.prefill_token_s[:]
        c.token_segments = self.token_segments[:]
        return c

    @property
    def num_prefill_tokens(self) -> int:
        """Tokens the current prefill computes: the prompt plus, after a preemption, every output token so far."""
        return self.prompt_len + self.num_output_tokens

    @property
    def predicted_remaining_output(self) -> int:
        """Output tokens still to come by the prediction (at least 1); 0 when there is no prediction."""
        pred = self.predicted_output_len
        return 0 if pred is None else max(pred - self.num_output_tokens, 1)

    @property
    def total_len(self) -> int:
        return self.prompt_len + self.output_len

    def __repr__(self) -> str:
        return (f"Request(id={self.request_id}, tenant={self.tenant}, status={self.status.name}, "
                f"prompt={self.prompt_len}, out={self.num_output_tokens}/{self.output_len}, "
                f"computed={self.num_computed_tokens})")
