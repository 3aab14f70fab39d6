"""What the observation encoder and the action mask read of an engine: the ``EngineState`` protocol.

llmsched's ``Engine`` satisfies it as it is; any other engine (vLLM's scheduler, through
``adapters.vllm.scheduler``) that exposes the same attributes gets the same observation and mask, feature for
feature, so one policy runs on both.
"""

from __future__ import annotations

from collections.abc import Sequence, Sized
from typing import Protocol

from llmsched_env.engine.config import EngineConfig


class PoolState(Protocol):
    """The KV pool's block counts: referenced, allocatable (empty or evictable), evictable with cached content."""

    @property
    def num_used(self) -> int: ...
    @property
    def num_free_blocks(self) -> int: ...
    @property
    def num_cached_blocks(self) -> int: ...


class QueuedRequest(Protocol):
    """A waiting request as the encoder reads it."""

    @property
    def arrival_s(self) -> float: ...
    @property
    def tenant(self) -> int: ...


class EngineState(Protocol):
    """The engine state ``ObservationEncoder.encode`` and ``ActionSpec.mask`` read (times in seconds of the
    engine's clock; per-tenant sequences indexed like the tenants)."""

    config: EngineConfig
    num_fetching: int
    num_good: int
    num_missed: int
    ttft_ratio_ewma: float
    tpot_ratio_ewma: float

    @property
    def pool(self) -> PoolState: ...
    @property
    def now_s(self) -> float: ...
    @property
    def running(self) -> Sized: ...
    @property
    def prefilling(self) -> Sized: ...
    @property
    def num_decoding(self) -> int: ...
    @property
    def running_total_blocks(self) -> int: ...
    @property
    def num_waiting(self) -> Sequence[int]: ...
    @property
    def waiting_tokens(self) -> Sequence[int]: ...
    @property
    def waiting_predicted(self) -> Sequence[int]: ...
    @property
    def num_running_t(self) -> Sequence[int]: ...
    @property
    def num_good_t(self) -> Sequence[int]: ...
    @property
    def num_missed_t(self) -> Sequence[int]: ...
    @property
    def service_tokens(self) -> Sequence[int]: ...
    @property
    def vtc(self) -> Sequence[float]: ...
    def head(self, t: int) -> QueuedRequest | None: ...
    def remaining_prefill_tokens(self) -> int: ...
    def next_fetch_ready_s(self) -> float | None: ...
    def arrival_rate(self) -> float: ...
