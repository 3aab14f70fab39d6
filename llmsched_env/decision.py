"""Observations, actions and the ``Policy`` protocol, shared by the simulator env and the torch runtime.

``ObservationEncoder.encode(engine)`` turns engine state into named, normalised float32 features;
``ActionSpec.decode(action)`` turns a ``MultiDiscrete`` action into a core ``Decision``;
``ActionSpec.mask(engine)`` says which option of each action component is valid now. No gymnasium, no
torch: a policy sees the same numbers in simulation and on a real model.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

from llmsched_env.config import EngineConfig, TenantConfig
from llmsched_env.core.batch import Decision, QueueOrder
from llmsched_env.core.cost_model import CostModel
from llmsched_env.core.engine import Engine

__all__ = [
    "ACTION_COMPONENTS",
    "OBS_CLIP",
    "SCHEMA_VERSION",
    "UNLIMITED",
    "ActionSpec",
    "ObservationEncoder",
    "Policy",
    "PolicyContext",
]

SCHEMA_VERSION = 1
OBS_CLIP = 10.0  # every feature lies in [-OBS_CLIP, OBS_CLIP]
UNLIMITED = 1 << 30  # admission cap meaning "as many as fit"
ACTION_COMPONENTS = ("queue_order", "token_budget", "chunk_cap", "batch_mix", "admission_cap", "kv_reserve", "shed")


@dataclass(frozen=True)
class PolicyContext:
    """What a heuristic may know about the engine it schedules, besides its observations."""

    engine: EngineConfig
    tenants: tuple[TenantConfig, ...]
    cost_model: CostModel
    action_spec: ActionSpec
    obs_names: tuple[str, ...]


@runtime_checkable
class Policy(Protocol):
    """Anything that maps an observation and its action mask to a MultiDiscrete action."""

    def act(self, observation: np.ndarray, action_mask: np.ndarray) -> np.ndarray: ...


def _powers_of_two(lo: int, hi: int) -> tuple[int, ...]:
    out = []
    v = lo
    while v < hi:
        out.append(v)
        v *= 2
    out.append(hi)
    return tuple(out)


@dataclass(frozen=True)
class ActionSpec:
    """The options of each action component; the action picks one index per component.

    Components, in order: queue order (``QueueOrder``), token budget, chunk cap, batch mix (0 decode-first
    hybrid, 1 prefill-first), admission cap (``UNLIMITED`` = as many as fit), KV reserve (share of the pool
    kept free when admitting), shedding (0 off, 1 on).
    """

    token_budgets: tuple[int, ...]
    chunk_caps: tuple[int, ...]
    admission_caps: tuple[int, ...] = (0, 1, 2, 4, 8, 32, UNLIMITED)
    kv_reserves: tuple[float, ...] = (0.0, 0.05, 0.1, 0.2, 0.4)

    def __post_init__(self) -> None:
        for name in ("token_budgets", "chunk_caps", "admission_caps", "kv_reserves"):
            opts = getattr(self, name)
            if not opts or list(opts) != sorted(set(opts)):
                raise ValueError(f"ActionSpec.{name} must be a non-empty strictly increasing tuple, got {opts!r}")
        if self.token_budgets[0] < 1 or self.chunk_caps[0] < 1 or self.admission_caps[0] < 0:
            raise ValueError("ActionSpec: token budgets and chunk caps must be >= 1, admission caps >= 0")
        if not (self.kv_reserves[0] >= 0.0 and self.kv_reserves[-1] < 1.0):
            raise ValueError(f"ActionSpec.kv_reserves must lie in [0, 1), got {self.kv_reserves!r}")
        object.__setattr__(self, "_decoded", {})  # action tuple -> Decision
        object.__setattr__(self, "_masks", {})  # (queue non-empty, room to admit, engine idle) -> mask

    @classmethod
    def for_engine(cls, config: EngineConfig) -> ActionSpec:
        """Budgets and chunk caps in powers of two up to the engine's ``max_num_batched_tokens``."""
        top = config.max_num_batched_tokens
        return cls(token_budgets=_powers_of_two(min(256, top), top), chunk_caps=_powers_of_two(min(128, top), top))

    def check_engine(self, config: EngineConfig) -> None:
        if self.token_budgets[-1] > config.max_num_batched_tokens:
            raise ValueError(
                f"ActionSpec.token_budgets goes up to {self.token_budgets[-1]}, above the engine's "
                f"max_num_batched_tokens={config.max_num_batched_tokens}"
            )

    @property
    def nvec(self) -> tuple[int, ...]:
        return (
            len(QueueOrder),
            len(self.token_budgets),
            len(self.chunk_caps),
            2,
            len(self.admission_caps),
            len(self.kv_reserves),
            2,
        )

    @property
    def mask_size(self) -> int:
        return sum(self.nvec)

    def decode(self, action: Sequence[int] | np.ndarray) -> Decision:
        """The Decision an action means. Raises ValueError naming the component on a bad action."""
        cache: dict[tuple[int, ...], Decision] = self._decoded  # type: ignore[attr-defined]
        try:  # fast path: an action seen before is valid (only validated keys enter the cache)
            d = cache.get(tuple(action.tolist() if isinstance(action, np.ndarray) else action))
        except TypeError:
            d = None
        if d is None:
            key = self._key(action)
            o, b, c, m, a, k, s = key
            d = Decision(
                order=QueueOrder(o),
                token_budget=self.token_budgets[b],
                chunk_cap=self.chunk_caps[c],
                prefill_first=bool(m),
                max_admit=self.admission_caps[a],
                kv_reserve=float(self.kv_reserves[k]),
                shed=bool(s),
            )
            cache[key] = d
        return d

    def _key(self, action: Sequence[int] | np.ndarray) -> tuple[int, ...]:
        nvec = self.nvec
        try:
            values = action.tolist() if isinstance(action, np.ndarray) else list(action)
        except TypeError:
            raise ValueError(f"action must be a sequence of {len(nvec)} integers, got {action!r}") from None
        if len(values) != len(nvec):
            raise ValueError(f"action must have {len(nvec)} components {ACTION_COMPONENTS}, got {len(values)}")
        key = []
        for name, v, n in zip(ACTION_COMPONENTS, values, nvec, strict=True):
            if isinstance(v, float):
                if not math.isfinite(v) or v != int(v):
                    raise ValueError(f"action component {name!r} must be an integer, got {v!r}")
                v = int(v)
            if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < n:
                raise ValueError(f"action component {name!r} must be an integer in [0, {n}), got {v!r}")
            key.append(v)
        return tuple(key)

    def encode(self, decision: Decision) -> np.ndarray:
        """The action whose options are nearest to ``decision``'s knobs (what a heuristic uses to act)."""

        def nearest(options: Sequence[float], value: float) -> int:
            return min(range(len(options)), key=lambda i: (abs(options[i] - value), i))

        return np.array(
            [
                int(decision.order),
                nearest(self.token_budgets, decision.token_budget),
                nearest(self.chunk_caps, decision.chunk_cap),
                int(decision.prefill_first),
                nearest(self.admission_caps, decision.max_admit),
                nearest(self.kv_reserves, decision.kv_reserve),
                int(decision.shed),
            ],
            dtype=np.int64,
        )

    def mask(self, engine: Engine) -> np.ndarray:
        """Valid options, concatenated per component (sb3-contrib's MultiDiscrete mask layout).

        With an empty waiting queue every queue order, admission cap and shedding choice does the same,
        so only FCFS, admit 0 and no shedding stay valid; a full running set likewise only admits 0. An idle
        engine with requests waiting may not hold (admit 0): holding then only delays everyone, and a policy
        that kept holding would leave requests waiting forever.
        """
        waiting = any(engine.num_waiting)
        room = len(engine.running) < engine.config.max_num_seqs
        idle = not engine.running
        key = (waiting, room, idle)
        cache: dict[tuple[bool, bool, bool], np.ndarray] = self._masks  # type: ignore[attr-defined]
        m = cache.get(key)
        if m is None:
            parts = []
            for comp, n in zip(ACTION_COMPONENTS, self.nvec, strict=True):
                p = np.ones(n, dtype=bool)
                if comp in ("queue_order", "shed") and not waiting:
                    p[1:] = False
                if comp == "admission_cap" and not (waiting and room):
                    p[1:] = False
                elif comp == "admission_cap" and idle:
                    p[0] = False
                parts.append(p)
            m = np.concatenate(parts)
            m.setflags(write=False)
            cache[key] = m
        return m

    def allows(self, action: np.ndarray, mask: np.ndarray) -> bool:
        """Whether every component of an in-range ``action`` is a valid option under ``mask``."""
        start = 0
        for i, n in enumerate(self.nvec):
            if not mask[start + int(action[i])]:
                return False
            start += n
        return True

    def project(self, action: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """``action`` with every masked-out component moved to that component's first valid option."""
        out = np.asarray(action, dtype=np.int64).copy()
        start = 0
        for i, n in enumerate(self.nvec):
            seg = mask[start : start + n]
            if not seg[out[i]]:
                out[i] = int(np.argmax(seg))
            start += n
        return out


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

    def encode(self, engine: Engine, last_step_s: float = 0.0) -> np.ndarray:
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

    def _fetch_wait(self, engine: Engine) -> float:
        """Time until the earliest remote KV transfer lands, in units of the tightest TTFT target."""
        ready = engine.next_fetch_ready_s() if engine.num_fetching else None
        return 0.0 if ready is None else max(ready - engine.now_s, 0.0) / self._min_ttft

    def _head_slack(self, engine: Engine, k: int) -> float:
        """TTFT slack of tenant ``k``'s queue head in units of its TTFT target (1.0 with an empty queue)."""
        head = engine.head(k) if engine.num_waiting[k] else None
        if head is None:
            return 1.0
        return (head.arrival_s + self._ttft[k] - engine.now_s) / self._ttft[k]
