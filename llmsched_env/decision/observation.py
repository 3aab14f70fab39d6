"""The single-node observation: an encoder's ``encode(engine)`` turns engine state into named, normalised
float32 features, the same in the simulator env, on the torch runtime and inside vLLM (any
``decision.state.EngineState``).

Two encoders, one per schema (``decision.schema``): ``ObservationEncoder`` (schema 1, features per named
tenant) and ``GenericObservationEncoder`` (schema 2, workload-agnostic). ``make_encoder(schema, ...)`` builds
either.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from llmsched_env.decision.schema import SCHEMA_VERSION, check_schema
from llmsched_env.decision.state import EngineState
from llmsched_env.engine.config import EngineConfig, TenantConfig

__all__ = [
    "GLOBAL_FEATURES",
    "NUM_SLOTS",
    "OBS_CLIP",
    "SCHEMA_VERSION",
    "SLOT_FEATURES",
    "GenericObservationEncoder",
    "ObservationEncoder",
    "make_encoder",
]

OBS_CLIP = 10.0  # every feature lies in [-OBS_CLIP, OBS_CLIP]
GLOBAL_FEATURES = (
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
)
NUM_SLOTS = 4  # schema 2: tenants described one by one, most urgent first; the rest in aggregate
SLOT_FEATURES = (
    "present",
    "num_waiting",
    "num_running",
    "waiting_tokens",
    "service_share",
    "vtc_gap",
    "attainment",
    "head_slack",
    "ttft_class",
    "tpot_class",
    "priority",
    "weight",
    "predicted_output",
)
_TENANT_SCALE = 16.0  # tenant counts are given in units of 16 tenants
_KILO = 1024.0  # predicted output lengths in units of 1024 tokens
_LOG_SCALE = 8.0  # SLO targets relative to the tightest, as log2(ratio) / 8


class ObservationEncoder:
    """Schema 1. Engine state -> a float32 vector of named features, each scaled to roughly [0, 1] (clipped to
    [-OBS_CLIP, OBS_CLIP]). Times are in units of the relevant SLO target, counts in units of the engine's
    limits, so one policy transfers across hardware presets and SLO classes; six features per tenant, named
    after it, so a policy fits only the tenants it was trained on."""

    schema = 1

    def __init__(self, config: EngineConfig, tenants: Sequence[TenantConfig], nominal_rate_rps: float) -> None:
        self.config = config
        self.tenants = tuple(tenants)
        self.nominal_rate_rps = max(nominal_rate_rps, 1e-9)
        self._min_tpot = min(t.slo.tpot_s for t in self.tenants)
        self._ttft = [t.slo.ttft_s for t in self.tenants]
        self._min_ttft = min(self._ttft)
        names = list(GLOBAL_FEATURES)
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
        head_slack = [self._head_slack(engine, k) for k in range(len(self.tenants))]
        feats = self._globals(engine, last_step_s, head_slack)
        seqs = self.config.max_num_seqs
        total_service = sum(engine.service_tokens) or 1
        vtc_floor, vtc_scale = self._vtc_scale(engine)
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

    def _vtc_scale(self, engine: EngineState) -> tuple[float, float]:
        """The least VTC counter among active tenants and the scale of the counters' gaps."""
        active = [engine.vtc[k] for k in range(len(self.tenants)) if engine.num_waiting[k] or engine.num_running_t[k]]
        return (min(active) if active else 0.0), max(engine.vtc) + 1.0

    def _globals(self, engine: EngineState, last_step_s: float, head_slack: Sequence[float]) -> list[float]:
        """The ``GLOBAL_FEATURES`` (both schemas)."""
        cfg = self.config
        pool = engine.pool
        now = engine.now_s
        seqs = cfg.max_num_seqs
        nblocks = cfg.num_kv_blocks
        n_wait = sum(engine.num_waiting)
        oldest = engine.oldest_waiting() if n_wait else None
        oldest_wait = (now - oldest.arrival_s) / self._ttft[oldest.tenant] if oldest is not None else 0.0
        slack = min(head_slack) if n_wait else 1.0
        resolved = engine.num_good + engine.num_missed
        n_prefill = len(engine.prefilling)
        return [
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


class GenericObservationEncoder(ObservationEncoder):
    """Schema 2: the same features whatever the number, names and order of the tenants.

    - the ``GLOBAL_FEATURES`` of schema 1;
    - ``tenants/count``, ``tenants/active`` (tenants with requests waiting or running), in units of 16;
    - ``queue/late_waiting`` and ``queue/urgent_waiting``: requests waiting in the tenants whose queue head has
      missed its TTFT (slack < 0) and whose head has less than half its TTFT left (slack in [0, 0.5));
    - ``pred/waiting_output`` and ``pred/mean_waiting_output``: predicted output tokens of the waiting
      requests (/ KV pool tokens, and per waiting request / 1024); 0 without a length predictor;
    - ``slo/ttft_spread``, ``slo/tpot_spread``: log2 of the loosest over the tightest target, / 8;
    - ``NUM_SLOTS`` tenant slots (``slot{i}/...``, ``SLOT_FEATURES``): the tenants with requests first, by
      increasing head TTFT slack, ties broken by the slot's own features, so equal engine states give equal
      observations whatever the tenants' names and order; an empty slot reads as an idle tenant;
    - ``rest/...``: the tenants past the slots: count, waiting, running, least head slack, least attainment.

    A tenant's SLO targets enter as its class relative to the tightest (log2 ratio / 8), its priority as its
    rank between the best (0) and the worst (1), its weight over the largest weight.
    """

    schema = 2

    def __init__(self, config: EngineConfig, tenants: Sequence[TenantConfig], nominal_rate_rps: float) -> None:
        super().__init__(config, tenants, nominal_rate_rps)
        ttft = [t.slo.ttft_s for t in self.tenants]
        tpot = [t.slo.tpot_s for t in self.tenants]
        prio = [t.priority for t in self.tenants]
        spread = max(prio) - min(prio)
        max_weight = max(t.weight for t in self.tenants)
        # the static part of each tenant's slot: SLO class, priority rank, weight
        self._static = [
            (
                math.log2(ttft[k] / self._min_ttft) / _LOG_SCALE,
                math.log2(tpot[k] / self._min_tpot) / _LOG_SCALE,
                (prio[k] - min(prio)) / spread if spread else 0.0,
                self.tenants[k].weight / max_weight,
            )
            for k in range(len(self.tenants))
        ]
        self._spreads = [
            math.log2(max(ttft) / self._min_ttft) / _LOG_SCALE,
            math.log2(max(tpot) / self._min_tpot) / _LOG_SCALE,
        ]
        names = list(GLOBAL_FEATURES)
        names += [
            "tenants/count",
            "tenants/active",
            "queue/late_waiting",
            "queue/urgent_waiting",
            "pred/waiting_output",
            "pred/mean_waiting_output",
            "slo/ttft_spread",
            "slo/tpot_spread",
        ]
        for i in range(NUM_SLOTS):
            names += [f"slot{i}/{f}" for f in SLOT_FEATURES]
        names += ["rest/count", "rest/num_waiting", "rest/num_running", "rest/head_slack", "rest/attainment"]
        self.names = tuple(names)
        self.index = {n: i for i, n in enumerate(self.names)}
        self._empty_slot = [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0]

    def encode(self, engine: EngineState, last_step_s: float = 0.0) -> np.ndarray:
        n = len(self.tenants)
        head_slack = [self._head_slack(engine, k) for k in range(n)]
        feats = self._globals(engine, last_step_s, head_slack)
        cfg = self.config
        seqs = cfg.max_num_seqs
        waiting, running = engine.num_waiting, engine.num_running_t
        predicted = engine.waiting_predicted
        n_wait = sum(waiting)
        total_pred = sum(predicted)
        late = urgent = 0
        for k in range(n):
            if waiting[k]:
                if head_slack[k] < 0.0:
                    late += waiting[k]
                elif head_slack[k] < 0.5:
                    urgent += waiting[k]
        total_service = sum(engine.service_tokens) or 1
        vtc_floor, vtc_scale = self._vtc_scale(engine)
        slots = []
        active = 0
        for k in range(n):
            res_k = engine.num_good_t[k] + engine.num_missed_t[k]
            busy = bool(waiting[k] or running[k])
            active += busy
            slot = [
                1.0,
                waiting[k] / seqs,
                running[k] / seqs,
                engine.waiting_tokens[k] / cfg.num_kv_tokens,
                engine.service_tokens[k] / total_service,
                (engine.vtc[k] - vtc_floor) / vtc_scale,
                engine.num_good_t[k] / res_k if res_k else 1.0,
                head_slack[k],
                *self._static[k],
                predicted[k] / waiting[k] / _KILO if waiting[k] else 0.0,
            ]
            # busy tenants first, then least head slack; the features themselves break ties
            slots.append((not busy, head_slack[k], slot))
        slots.sort(key=lambda e: (e[0], e[1], e[2]))
        feats += [
            n / _TENANT_SCALE,
            active / _TENANT_SCALE,
            late / seqs,
            urgent / seqs,
            total_pred / cfg.num_kv_tokens,
            total_pred / n_wait / _KILO if n_wait else 0.0,
            *self._spreads,
        ]
        for i in range(NUM_SLOTS):
            feats += slots[i][2] if i < n else self._empty_slot
        rest = [e[2] for e in slots[NUM_SLOTS:]]
        feats += [
            len(rest) / _TENANT_SCALE,
            sum(r[1] for r in rest),
            sum(r[2] for r in rest),
            min((r[7] for r in rest), default=1.0),
            min((r[6] for r in rest), default=1.0),
        ]
        obs = np.array(feats, dtype=np.float32)
        np.clip(obs, -OBS_CLIP, OBS_CLIP, out=obs)
        return obs


def make_encoder(
    schema: int, config: EngineConfig, tenants: Sequence[TenantConfig], nominal_rate_rps: float
) -> ObservationEncoder:
    """The observation encoder of ``schema`` (1 or 2) for an engine and its tenants."""
    cls = ObservationEncoder if check_schema(schema) == 1 else GenericObservationEncoder
    return cls(config, tenants, nominal_rate_rps)
