"""A remote KV store (Mooncake's KV pool, vLLM's KV connector): every prefix block an engine computes is published;
a request whose prefix is there but not cached locally takes local blocks and waits (vLLM's
WAITING_FOR_REMOTE_KVS) for a transfer of ``latency_s`` plus bytes over ``bandwidth_gbps`` on one FIFO link,
slowed by ``slow_factor`` with probability ``slow_prob``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from mypy_extensions import mypyc_attr

from llmsched_env.common.checks import check_positive


@dataclass(frozen=True)
class RemoteKVConfig:
    """Where prefix KV lives remotely and what fetching it costs. Defaults: Llama-3-8B bf16 KV (128 KiB per
    token), a 25 GB/s RDMA link with 5 ms set-up latency."""

    latency_s: float = 0.005
    bandwidth_gbps: float = 25.0
    kv_bytes_per_token: int = 131072
    slow_prob: float = 0.0
    slow_factor: float = 10.0

    def __reduce__(self) -> tuple[type[RemoteKVConfig], tuple[float, float, int, float, float]]:
        """Rebuilt through ``__init__`` when copied or pickled (compiled, a frozen dataclass cannot be set)."""
        return (RemoteKVConfig, (self.latency_s, self.bandwidth_gbps, self.kv_bytes_per_token, self.slow_prob,
                                 self.slow_factor))  # fmt: skip

    def __post_init__(self) -> None:
        check_positive("RemoteKVConfig", "latency_s", self.latency_s, allow_zero=True)
        check_positive("RemoteKVConfig", "bandwidth_gbps", self.bandwidth_gbps)
        check_positive("RemoteKVConfig", "kv_bytes_per_token", self.kv_bytes_per_token)
        check_positive("RemoteKVConfig", "slow_factor", self.slow_factor)
        if not (isinstance(self.slow_prob, (int, float)) and 0.0 <= self.slow_prob <= 1.0):
            raise ValueError(f"RemoteKVConfig.slow_prob must be in [0, 1], got {self.slow_prob!r}")
        if self.slow_factor < 1.0:
            raise ValueError(f"RemoteKVConfig.slow_factor must be >= 1, got {self.slow_factor!r}")


@mypyc_attr(allow_interpreted_subclasses=True)
class RemoteKVStore:
    """The set of published block hashes and the shared transfer link."""

    def __init__(self, config: RemoteKVConfig, rng: np.random.Generator) -> None:
        self.config = config
        self._rng = rng
        self._blocks: set[int] = set()  # published since the last fork
        # Published before a fork: sets shared with the forks and never changed again (the store only grows), the
        # oldest and largest first; ``copy`` adds a layer and merges the small ones, so a fork costs O(new).
        self._layers: tuple[set[int], ...] = ()
        self.link_free_s = 0.0
        self.num_fetches = 0
        self.num_fetched_tokens = 0
        self.total_fetch_s = 0.0
        self._s_per_token = config.kv_bytes_per_token / (config.bandwidth_gbps * 1e9)

    def copy(self, rng: np.random.Generator | None) -> RemoteKVStore:
        """An independent copy drawing its slow transfers from ``rng`` (``Engine.fork``)."""
        if self._blocks:  # freeze what was published since the last fork into a shared layer
            layers = [*self._layers, self._blocks]
            while len(layers) > 1 and 2 * len(layers[-1]) >= len(layers[-2]):  # merge layers of similar size
                top = layers.pop()
                layers[-1] = layers[-1] | top  # a new set: the merged ones may be shared with other forks
            self._layers, self._blocks = tuple(layers), set()
        c = RemoteKVStore.__new__(RemoteKVStore)
        c._rng = rng  # type: ignore[assignment]  # None only inside a snapshot, which never runs
        c._blocks, c._layers = set(), self._layers
        (c.config, c.link_free_s, c.num_fetches, c.num_fetched_tokens, c.total_fetch_s, c._s_per_token) = (
            self.config, self.link_free_s, self.num_fetches, self.num_fetched_tokens, self.total_fetch_s,
            self._s_per_token)  # fmt: skip
        return c

    def publish(self, hashes: Sequence[int]) -> None:
        self._blocks.update(hashes)

    def hit_blocks(self, hashes: Sequence[int], start: int, stop: int) -> int:
        """How many of ``hashes[start:stop]``, from ``start`` on without a gap, the store holds."""
        n = 0
        blocks, layers = self._blocks, self._layers
        for h in hashes[start:stop]:
            if h not in blocks and not any(h in layer for layer in layers):
                break
            n += 1
        return n

    def fetch(self, now_s: float, num_tokens: int) -> float:
        """Start a transfer of ``num_tokens`` tokens of KV now; return the time it completes."""
        cfg = self.config
        transfer = num_tokens * self._s_per_token
        if cfg.slow_prob and self._rng.random() < cfg.slow_prob:
            transfer *= cfg.slow_factor
        start = max(now_s, self.link_free_s)
        self.link_free_s = start + transfer
        ready = start + transfer + cfg.latency_s
        self.num_fetches += 1
        self.num_fetched_tokens += num_tokens
        self.total_fetch_s += ready - now_s
        return ready
