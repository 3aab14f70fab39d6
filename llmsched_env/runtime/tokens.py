"""Token ids for workload requests, which carry lengths only (``output_len`` ends each request). The ids are
deterministic and content-addressed: the tokens of prefix block ``i`` depend only on ``prefix_ids[: i + 1]``, so
requests that share KV blocks hold the same tokens there; the rest come from the request's own stream.
"""

from __future__ import annotations

import numpy as np

from llmsched_env.engine.request import Request


class PromptTokens:
    """Deterministic prompt token ids per request, cached until the request is dropped."""

    def __init__(self, vocab_size: int, seed: int = 0) -> None:
        if vocab_size < 2:
            raise ValueError(f"PromptTokens: vocab_size must be >= 2, got {vocab_size}")
        self.vocab_size = vocab_size
        self.seed = int(seed)
        self._prompts: dict[int, np.ndarray] = {}
        self._units: dict[tuple[int, ...], np.ndarray] = {}  # prefix-id chain -> that unit's tokens

    def prompt(self, r: Request) -> np.ndarray:
        """The ``r.prompt_len`` prompt token ids of ``r`` (int64)."""
        out = self._prompts.get(r.request_id)
        if out is None:
            out = self._make(r)
            self._prompts[r.request_id] = out
        return out

    def drop(self, request_id: int) -> None:
        """Forget a finished request's prompt (the shared prefix units stay cached)."""
        self._prompts.pop(request_id, None)

    def _make(self, r: Request) -> np.ndarray:
        n = r.prompt_len
        parts: list[np.ndarray] = []
        covered = 0
        unit = r.prefix_id_tokens
        for i in range(len(r.prefix_ids)):
            if covered >= n:
                break
            chain = r.prefix_ids[: i + 1]
            tokens = self._units.get(chain)
            if tokens is None:
                rng = np.random.default_rng([self.seed, 1, *(int(x) & 0xFFFFFFFF for x in chain)])
                tokens = rng.integers(0, self.vocab_size, unit, dtype=np.int64)
                self._units[chain] = tokens
            parts.append(tokens[: n - covered])
            covered += len(parts[-1])
        if covered < n:
            rng = np.random.default_rng([self.seed, 2, r.request_id & 0xFFFFFFFF])
            parts.append(rng.integers(0, self.vocab_size, n - covered, dtype=np.int64))
        return np.concatenate(parts) if len(parts) > 1 else parts[0]
