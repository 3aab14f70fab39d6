"""The adapter's contract with llmsched and with vLLM, without vLLM: what a policy sees and which vLLM knob each
decision field sets (``vllm_knobs``; the table: docs/vllm.md). Tested in the default suite, so a drift fails in CI.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from llmsched_env.decision.actions import ActionSpec
from llmsched_env.decision.observation import make_encoder
from llmsched_env.engine.batch import Decision, QueueOrder
from llmsched_env.engine.config import EngineConfig, TenantConfig

__all__ = ["BatchFeatures", "VllmKnobs", "adapter_spaces", "batch_features", "vllm_knobs"]


@dataclass(frozen=True)
class VllmKnobs:
    """The scheduler settings a decision sets (vLLM's own values when it falls back)."""

    order: QueueOrder
    max_num_scheduled_tokens: int
    long_prefill_token_threshold: int
    max_num_active_reqs: int
    watermark_blocks: int


def vllm_knobs(
    decision: Decision | None, base: VllmKnobs, num_running: int, num_decodes: int, num_kv_blocks: int
) -> VllmKnobs:
    """vLLM's settings for ``decision`` (None: ``base``, vLLM's own, in FCFS order) with ``num_running``
    requests in vLLM's running list, ``num_decodes`` of them decoding, and ``num_kv_blocks`` usable blocks."""
    if decision is None:
        return base if base.order == QueueOrder.FCFS else VllmKnobs(QueueOrder.FCFS, *_values(base))
    budget = base.max_num_scheduled_tokens
    return VllmKnobs(
        order=decision.order,
        max_num_scheduled_tokens=min(budget, max(decision.token_budget, num_decodes)),
        long_prefill_token_threshold=0 if decision.chunk_cap >= budget else decision.chunk_cap,
        max_num_active_reqs=min(base.max_num_active_reqs, num_running + decision.max_admit),
        watermark_blocks=math.ceil(decision.kv_reserve * num_kv_blocks),
    )


def _values(k: VllmKnobs) -> tuple[int, int, int, int]:
    return k.max_num_scheduled_tokens, k.long_prefill_token_threshold, k.max_num_active_reqs, k.watermark_blocks


def adapter_spaces(
    config: EngineConfig, tenants: Sequence[TenantConfig], schema: int, nominal_rate_rps: float
) -> tuple[ActionSpec, Any]:
    """The action space and observation encoder the adapter builds: the same ones ``LLMSched-v1`` builds."""
    return ActionSpec.for_engine(config, schema), make_encoder(schema, config, tuple(tenants), nominal_rate_rps)


@dataclass
class BatchFeatures:
    """The four features llmsched's cost models price a step by, of one vLLM batch, and its prefill count."""

    num_prefill_tokens: int = 0
    num_decode_seqs: int = 0
    num_kv_tokens: int = 0
    prefill_attn_pairs: float = 0.0
    num_prefill_seqs: int = 0


def batch_features(num_scheduled_tokens: dict[str, int], requests: dict[str, Any]) -> BatchFeatures:
    """The features of a batch just scheduled (computed counts already advanced): a request one token past its last
    output is a decode reading its context, any other a prefill chunk priced as ``Batch.add_prefill`` does."""
    f = BatchFeatures()
    for rid, n in num_scheduled_tokens.items():
        r = requests[rid]
        before = r.num_computed_tokens - n
        if n == 1 and r.num_output_tokens > 0 and before == r.num_tokens - 1:
            f.num_decode_seqs += 1
            f.num_kv_tokens += r.num_tokens
        else:
            f.num_prefill_seqs += 1
            f.num_prefill_tokens += n
            f.prefill_attn_pairs += n * (before + (n + 1) * 0.5)
    return f
