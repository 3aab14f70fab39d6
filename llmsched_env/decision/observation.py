"""The single-node observation: ``encode(engine)`` turns any ``decision.state.EngineState`` (simulator, torch
runtime, vLLM) into named, normalised float32 features. One encoder per schema (``decision.schema``):
``ObservationEncoder`` (1) and ``GenericObservationEncoder`` (2); ``make_encoder`` builds either.
"""

from __future__ import annotations

import functools
import math
import struct
from collections.abc import Callable, Sequence

import numpy as np

from llmsched_env.decision.schema import SCHEMA_VERSION, check_schema  # noqa: F401 (SCHEMA_VERSION re-exported)
from llmsched_env.decision.state import EngineState, QueuedRequest
from llmsched_env.engine.config import EngineConfig, TenantConfig

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
    """Schema 1: engine state -> named float32 features, each scaled to roughly [0, 1] (clipped to
    +-``OBS_CLIP``; times over SLO targets, counts over engine limits), six per tenant, named after it."""

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
        waiting, running = engine.num_waiting, engine.num_running_t
        head_slack, oldest_wait, vtc_floor = self._scan(engine, waiting, running)
        feats = self._globals(engine, last_step_s, sum(waiting), oldest_wait, head_slack)
        seqs = self.config.max_num_seqs
        service, vtc = engine.service_tokens, engine.vtc
        total_service = sum(service) or 1
        vtc_scale = max(vtc) + 1.0
        good, missed = engine.num_good_t, engine.num_missed_t
        for k in range(len(self.tenants)):
            res_k = good[k] + missed[k]
            feats += [
                waiting[k] / seqs,
                running[k] / seqs,
                service[k] / total_service,
                (vtc[k] - vtc_floor) / vtc_scale,
                good[k] / res_k if res_k else 1.0,
                head_slack[k],
            ]
        return _clipped(feats)

    def _scan(
        self, engine: EngineState, waiting: Sequence[int], running: Sequence[int]
    ) -> tuple[list[float], float, float]:
        """One pass over the tenants: each one's head TTFT slack (/ its TTFT target; 1.0 with an empty queue), the
        oldest queue head's wait (/ its TTFT target; FCFS's pick on a tie; 0 with none) and the least VTC counter
        among active tenants (0 with none)."""
        now = engine.now_s
        ttft = self._ttft
        vtc = engine.vtc
        slack: list[float] = []
        oldest: QueuedRequest | None = None
        floor: float | None = None
        for k in range(len(ttft)):
            if waiting[k]:
                head = engine.head(k)
                if head is None:
                    slack.append(1.0)
                else:
                    arrival = head.arrival_s
                    slack.append((arrival + ttft[k] - now) / ttft[k])
                    if oldest is None or arrival < oldest.arrival_s:
                        oldest = head
            else:
                slack.append(1.0)
                if not running[k]:
                    continue
            v = vtc[k]
            if floor is None or v < floor:
                floor = v
        oldest_wait = 0.0 if oldest is None else (now - oldest.arrival_s) / ttft[oldest.tenant]
        return slack, oldest_wait, (0.0 if floor is None else floor)

    def _globals(
        self, engine: EngineState, last_step_s: float, n_wait: int, oldest_wait: float, head_slack: list[float]
    ) -> list[float]:
        """The ``GLOBAL_FEATURES`` (both schemas), given what ``_scan`` found."""
        cfg = self.config
        pool = engine.pool
        seqs = cfg.max_num_seqs
        nblocks = cfg.num_kv_blocks
        resolved = engine.num_good + engine.num_missed
        n_prefill = len(engine.prefilling)
        used = pool.num_used
        cached = pool.num_cached_blocks
        fetching = engine.num_fetching
        fetch_wait = 0.0
        if fetching:
            ready = engine.next_fetch_ready_s()
            if ready is not None:
                fetch_wait = max(ready - engine.now_s, 0.0) / self._min_ttft
        return [
            n_wait / seqs,
            sum(engine.waiting_tokens) / cfg.num_kv_tokens,
            oldest_wait,
            min(head_slack) if n_wait else 1.0,
            used / nblocks,
            (pool.num_free_blocks - cached) / nblocks,
            cached / nblocks,
            max(engine.running_total_blocks - used, 0) / nblocks,
            engine.num_decoding / seqs,
            n_prefill / seqs,
            (engine.remaining_prefill_tokens() if n_prefill else 0) / cfg.max_num_batched_tokens,
            (seqs - len(engine.running)) / seqs,
            fetching / seqs,
            fetch_wait,
            engine.ttft_ratio_ewma,
            engine.tpot_ratio_ewma,
            last_step_s / self._min_tpot,
            engine.num_good / resolved if resolved else 1.0,
            engine.arrival_rate() / self.nominal_rate_rps,
        ]


def _clipped(feats: list[float], tail: bytes = b"") -> np.ndarray:
    """``np.clip(np.array(feats + tail's values, np.float32), ±OBS_CLIP)`` bit for bit in about half its time
    (``tail``: constant features packed as float32): packed by ``struct`` (the same C cast), clipped by the ufunc."""
    try:
        packed = _packer(len(feats))(*feats)
    except OverflowError:  # beyond float32's range: numpy's cast gives inf, which the clip bounds
        obs = np.concatenate([np.array(feats, dtype=np.float32), _frombuffer(tail, _float32)])
    else:
        buffer = bytearray(packed)
        buffer += tail
        obs = _frombuffer(buffer, _float32)
    _clip(obs, _LOW, _HIGH, out=obs)
    return obs


@functools.cache
def _packer(size: int) -> Callable[..., bytes]:
    return struct.Struct(f"={size}f").pack


_frombuffer, _float32 = np.frombuffer, np.float32
# the bounds as 0-d float32 arrays: the ufunc then converts no Python scalar at each call
_LOW, _HIGH = np.array(-OBS_CLIP, dtype=np.float32), np.array(OBS_CLIP, dtype=np.float32)
_clip = getattr(getattr(getattr(np, "_core", None), "umath", None), "clip", None) or np.clip


class GenericObservationEncoder(ObservationEncoder):
    """Schema 2: the same features whatever the tenants: ``GLOBAL_FEATURES``; ``tenants/count`` and ``/active``
    (/ 16); ``queue/late_waiting`` and ``queue/urgent_waiting`` (behind a head past its TTFT, or under half left);
    ``pred/...`` (predicted output tokens); ``slo/{ttft,tpot}_spread`` (log2 loosest / tightest, / 8); ``NUM_SLOTS``
    tenant slots (``SLOT_FEATURES``, busy tenants first by head slack; SLOs as log2 over the tightest / 8, priority
    a rank, weight over the largest); ``rest/...`` (the other tenants' count, waiting, running, slack, attainment)."""

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
        empty_slot = [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0]
        # with n <= NUM_SLOTS tenants the features past the last tenant's slot are constant: the empty slots, and
        # the rest (none: count 0, waiting 0, running 0, least head slack 1, least attainment 1)
        tail = {n: empty_slot * (NUM_SLOTS - n) + [0.0, 0.0, 0.0, 1.0, 1.0] for n in range(1, NUM_SLOTS + 1)}
        self._tail = {n: _packer(len(v))(*v) for n, v in tail.items()}  # packed once: float32, within the bounds

    def encode(self, engine: EngineState, last_step_s: float = 0.0) -> np.ndarray:
        n = len(self.tenants)
        waiting, running = engine.num_waiting, engine.num_running_t
        head_slack, oldest_wait, vtc_floor = self._scan(engine, waiting, running)
        n_wait = sum(waiting)
        feats = self._globals(engine, last_step_s, n_wait, oldest_wait, head_slack)
        cfg = self.config
        seqs = cfg.max_num_seqs
        kv_tokens = cfg.num_kv_tokens
        predicted = engine.waiting_predicted
        total_pred = sum(predicted)
        late = urgent = 0
        for k in range(n):
            if waiting[k]:
                if head_slack[k] < 0.0:
                    late += waiting[k]
                elif head_slack[k] < 0.5:
                    urgent += waiting[k]
        good, missed, tokens = engine.num_good_t, engine.num_missed_t, engine.waiting_tokens
        service, vtc, static = engine.service_tokens, engine.vtc, self._static
        total_service = sum(service) or 1
        vtc_scale = max(vtc) + 1.0
        slots = []
        active = 0
        for k in range(n):
            res_k = good[k] + missed[k]
            w = waiting[k]
            busy = bool(w or running[k])
            active += busy
            slot = [
                1.0,
                w / seqs,
                running[k] / seqs,
                tokens[k] / kv_tokens,
                service[k] / total_service,
                (vtc[k] - vtc_floor) / vtc_scale,
                good[k] / res_k if res_k else 1.0,
                head_slack[k],
                *static[k],
                predicted[k] / w / _KILO if w else 0.0,
            ]
            # busy tenants first, then least head slack; the features themselves break ties
            slots.append((not busy, head_slack[k], slot))
        if n > 1:
            slots.sort()  # (idle, head slack, features): the features break ties
        feats += [
            n / _TENANT_SCALE,
            active / _TENANT_SCALE,
            late / seqs,
            urgent / seqs,
            total_pred / kv_tokens,
            total_pred / n_wait / _KILO if n_wait else 0.0,
            *self._spreads,
        ]
        for i in range(min(n, NUM_SLOTS)):
            feats += slots[i][2]
        if n <= NUM_SLOTS:
            return _clipped(feats, self._tail[n])  # the empty slots and an empty rest
        # the rest in aggregate, in one pass: waiting and running summed, least head slack and attainment
        num_waiting = num_running = 0.0
        least_slack = least_attainment = math.inf
        for e in slots[NUM_SLOTS:]:
            r = e[2]
            num_waiting += r[1]
            num_running += r[2]
            if r[7] < least_slack:
                least_slack = r[7]
            if r[6] < least_attainment:
                least_attainment = r[6]
        feats += [(n - NUM_SLOTS) / _TENANT_SCALE, num_waiting, num_running, least_slack, least_attainment]
        return _clipped(feats)


def make_encoder(
    schema: int, config: EngineConfig, tenants: Sequence[TenantConfig], nominal_rate_rps: float
) -> ObservationEncoder:
    """The observation encoder of ``schema`` (1 or 2) for an engine and its tenants."""
    cls = ObservationEncoder if check_schema(schema) == 1 else GenericObservationEncoder
    return cls(config, tenants, nominal_rate_rps)
