"""A ``Decision`` (the batch builder's knobs for one iteration) and a ``Batch`` (what the iteration runs: prefill
chunks and whether the decoders take a round), which an executor runs and hands to ``Engine.complete``."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from enum import IntEnum
from typing import TYPE_CHECKING

from mypy_extensions import mypyc_attr

from llmsched_env.engine.request import Request

if TYPE_CHECKING:
    from llmsched_env.costs.base import CostModel


class QueueOrder(IntEnum):
    """Which waiting request goes first."""

    FCFS = 0  # arrival order (vLLM fcfs)
    PRIORITY_AGING = 1  # tenant priority minus waited time over the aging constant (vLLM priority + aging)
    EDF = 2  # earliest TTFT deadline
    SJF = 3  # shortest prefill first, with a starvation guard
    VTC = 4  # least-served tenant by its virtual token counter, FCFS within the tenant
    LPM = 5  # longest cached prefix first (SGLang lpm), among the oldest waiting requests
    SPRW = 6  # shortest predicted remaining work (prefill + predicted output tokens), starvation guard


@dataclass(frozen=True)
class Decision:
    """Knobs of one iteration."""

    order: QueueOrder = QueueOrder.FCFS
    token_budget: int = 2048  # most tokens; each decode takes 1, prefill chunks the rest
    chunk_cap: int = 2048  # most prefill tokens per request
    prefill_first: bool = False  # prefills alone, decodes wait
    max_admit: int = 1 << 30  # most admissions now
    kv_reserve: float = 0.0  # KV share kept free after admitting
    shed: bool = False  # reject requests that can no longer meet their TTFT deadline

    def __post_init__(self) -> None:
        if not isinstance(self.order, QueueOrder):
            raise ValueError(f"Decision.order must be a QueueOrder, got {self.order!r}")
        for name in ("token_budget", "chunk_cap"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"Decision.{name} must be an integer >= 1, got {value!r}")
        if isinstance(self.max_admit, bool) or not isinstance(self.max_admit, int) or self.max_admit < 0:
            raise ValueError(f"Decision.max_admit must be an integer >= 0, got {self.max_admit!r}")
        if not (isinstance(self.kv_reserve, (int, float)) and math.isfinite(self.kv_reserve)) or not (
            0.0 <= self.kv_reserve < 1.0
        ):
            raise ValueError(f"Decision.kv_reserve must be in [0, 1), got {self.kv_reserve!r}")

    def __reduce__(self) -> tuple[type[Decision], tuple[QueueOrder, int, int, bool, int, float, bool]]:
        """Rebuilt through ``__init__`` when copied or pickled (compiled, a frozen dataclass cannot be set)."""
        return (Decision, (self.order, self.token_budget, self.chunk_cap, self.prefill_first, self.max_admit,
                           self.kv_reserve, self.shed))  # fmt: skip


@mypyc_attr(allow_interpreted_subclasses=True)
class Batch:
    """One iteration's work, as the batch builder formed it."""

    __slots__ = (
        "decision", "decode_round", "num_admitted", "num_decode_seqs", "num_kv_tokens", "num_preempted",
        "num_prefill_tokens", "num_rejected", "prefill_attn_pairs", "prefill_chunks", "prefill_ctx", "prefill_reqs",
    )

    def __init__(self, decision: Decision) -> None:
        self.decision = decision
        self.prefill_reqs: list[Request] = []
        self.prefill_chunks: list[int] = []  # tokens computed this iteration, per prefill request
        self.prefill_ctx: list[int] = []  # tokens already in KV before the chunk, per prefill request
        self.decode_round = False  # every decoding request produces one token
        self.num_decode_seqs = 0
        self.num_kv_tokens = 0  # context tokens read by the decodes' attention
        self.num_prefill_tokens = 0
        self.prefill_attn_pairs = 0.0
        self.num_admitted = 0
        self.num_preempted = 0
        self.num_rejected = 0

    def copy(self, memo: Mapping[int, Request]) -> Batch:
        """A copy holding the requests' copies in ``memo`` (``id(request) -> copy``), for ``Engine.fork``."""
        c = Batch(self.decision)
        get = memo.get
        c.prefill_reqs = [get(id(r), r) for r in self.prefill_reqs]
        c.prefill_chunks, c.prefill_ctx = self.prefill_chunks[:], self.prefill_ctx[:]
        (c.decode_round, c.num_decode_seqs, c.num_kv_tokens, c.num_prefill_tokens, c.prefill_attn_pairs, c.num_admitted,
         c.num_preempted, c.num_rejected) = (
            self.decode_round, self.num_decode_seqs, self.num_kv_tokens, self.num_prefill_tokens,
            self.prefill_attn_pairs, self.num_admitted, self.num_preempted, self.num_rejected)  # fmt: skip
        return c

    @property
    def num_tokens(self) -> int:
        return self.num_prefill_tokens + self.num_decode_seqs

    @property
    def is_empty(self) -> bool:
        return self.num_prefill_tokens == 0 and self.num_decode_seqs == 0

    def time_s(self, model: CostModel) -> float:
        """What ``model`` prices this iteration at, from its four features."""
        return model.step_time_s(self.num_prefill_tokens, self.num_decode_seqs, self.num_kv_tokens,
                                 self.prefill_attn_pairs)

    def add_prefill(self, request: Request, chunk: int, context: int) -> None:
        self.prefill_reqs.append(request)
        self.prefill_chunks.append(chunk)
        self.prefill_ctx.append(context)
        self.num_prefill_tokens += chunk
        self.prefill_attn_pairs += chunk * (context + (chunk + 1) * 0.5)

    def remove_prefill(self, request: Request) -> None:
        """Drop a request preempted after it was put in the batch."""
        i = self.prefill_reqs.index(request)
        chunk, context = self.prefill_chunks[i], self.prefill_ctx[i]
        del self.prefill_reqs[i], self.prefill_chunks[i], self.prefill_ctx[i]
        self.num_prefill_tokens -= chunk
        self.prefill_attn_pairs -= chunk * (context + (chunk + 1) * 0.5)
