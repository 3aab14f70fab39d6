"""The single-node observation: ``ObservationEncoder.encode(engine)`` turns engine state into named,
normalised float32 features, the same in the simulator env, on the torch runtime and inside vLLM (any
``decision.state.EngineState``).

``SCHEMA_VERSION`` versions the observation and action layout a policy file was trained on.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from llmsched_env.decision.state import EngineState
from llmsched_env.engine.config import EngineConfig, TenantConfig

__all__ = ["OBS_CLIP", "SCHEMA_VERSION", "ObservationEncoder"]

SCHEMA_VERSION = 1
OBS_CLIP = 10.0  # every feature lies in [-OBS_CLIP, OBS_CLIP]


class ObservationEncoder:
    """Engine state -> a float32 vector of named features, each scaled to roughly [0, 1] (clipped to
    [-OBS_CLIP, OBS_CLIP]). Times are in units of the relevant SLO target, counts in units of the engine's
    limits, so one policy transfers across hardware presets and SLO classes."""

    def __init__(self, config: EngineConfig, tenants: Sequence[TenantConfig], nominal_rate_rps: float) -> None:
        self.config = config
        self.tenants = tuple(tenants)
        self.nominal_rate_rps = max(nominal_rate_rps, 1e-9)
        self._min_tpot = min(t.slo.tpot_s for t in self.tenants)
        self._ttft = [t.slo.ttft_s for t in self.tenants]
        self._min_ttft = min(self._ttft)
        names = [
            "queue/num_waiting",
            "queue/waiting_tokens",
            "queue/oldest_wait",
            "queue/least_ttft_slack",
            "kv/used",
            "kv/free",
            "kv/cached",
            "kv/reserve_demand",
            "run/num_decoding",
            "run/num_prefilling",
            "run/remaining_prefill",
            "run/seq_room",
            "run/num_fetching",
            "run/fetch_wait",
            "latency/ttft_ratio",
            "latency/tpot_ratio",
            "latency/last_step_over_tpot",
            "latency/attainment",
            "arrival/rate",
        ]
        for t in self.tenants:
            names += [
                f"tenant/{t.name}/num_waiting",
                f"tenant/{t.name}/num_running",
                f"tenant/{t.name}/service_share",
                f"tenant/{t.name}/vtc_gap",
                f"tenant/{t.name}/attainment",
                f"tenant/{t.name}/head_slack",
            ]
        self.names: tuple[str, ...] = tuple(names)
        self.index = {n: i for i, n in enumerate(self.names)}

    @property
    def size(self) -> int:
        return len(self.names)

    def encode(self, engine: EngineState, last_step_s: float = 0.0) -> np.ndarray:
        cfg = self.config
        pool = engine.pool
        now = engine.now_s
        seqs = cfg.max_num_seqs
        nblocks = cfg.num_kv_blocks
        n_wait = sum(engine.num_waiting)
        oldest = engine.oldest_waiting() if n_wait else None
        oldest_wait = (now - oldest.arrival_s) / self._ttft[oldest.tenant] if oldest is not None else 0.0
        head_slack = [self._head_slack(engine, k) for k in range(len(self.tenants))]
        slack = min(head_slack) if n_wait else 1.0
        resolved = engine.num_good + engine.num_missed
        n_prefill = len(engine.prefilling)
        feats = [
            n_wait / seqs,
            sum(engine.waiting_tokens) / cfg.num_kv_tokens,
            oldest_wait,
            slack,
            pool.num_used / nblocks,
            (pool.num_free_blocks - pool.num_cached_blocks) / nblocks,
            pool.num_cached_blocks / nblocks,
            max(engine.running_total_blocks - pool.num_used, 0) / nblocks,
            engine.num_decoding / seqs,
            n_prefill / seqs,
            (engine.remaining_prefill_tokens() if n_prefill else 0) / cfg.max_num_batched_tokens,
            (seqs - len(engine.running)) / seqs,
            engine.num_fetching / seqs,
            self._fetch_wait(engine),
            engine.ttft_ratio_ewma,
            engine.tpot_ratio_ewma,
            last_step_s / self._min_tpot,
            engine.num_good / resolved if resolved else 1.0,
            engine.arrival_rate() / self.nominal_rate_rps,
        ]
        total_service = sum(engine.service_tokens) or 1
        active = [engine.vtc[k] for k in range(len(self.tenants)) if engine.num_waiting[k] or engine.num_running_t[k]]
        vtc_floor = min(active) if active else 0.0
        vtc_scale = max(engine.vtc) + 1.0
        for k in range(len(self.tenants)):
            res_k = engine.num_good_t[k] + engine.num_missed_t[k]
            feats += [
                engine.num_waiting[k] / seqs,
                engine.num_running_t[k] / seqs,
                engine.service_tokens[k] / total_service,
                (engine.vtc[k] - vtc_floor) / vtc_scale,
                engine.num_good_t[k] / res_k if res_k else 1.0,
                head_slack[k],
            ]
        obs = np.array(feats, dtype=np.float32)
        np.clip(obs, -OBS_CLIP, OBS_CLIP, out=obs)
        return obs

    def _fetch_wait(self, engine: EngineState) -> float:
        """Time until the earliest remote KV transfer lands, in units of the tightest TTFT target."""
        ready = engine.next_fetch_ready_s() if engine.num_fetching else None
        return 0.0 if ready is None else max(ready - engine.now_s, 0.0) / self._min_ttft

    def _head_slack(self, engine: EngineState, k: int) -> float:
        """TTFT slack of tenant ``k``'s queue head in units of its TTFT target (1.0 with an empty queue)."""
        head = engine.head(k) if engine.num_waiting[k] else None
        if head is None:
            return 1.0
        return (head.arrival_s + self._ttft[k] - engine.now_s) / self._ttft[k]
