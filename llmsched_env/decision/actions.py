"""The single-node action space, shared by the simulator env, the torch runtime and any other engine.

``ActionSpec.decode(action)`` turns a ``MultiDiscrete`` action into an engine ``Decision``;
``ActionSpec.mask(engine)`` says which option of each action component is valid now; ``encode`` is the
inverse of ``decode``. No gymnasium, no torch: a policy acts the same in simulation and on a real model.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from llmsched_env.decision.state import EngineState
from llmsched_env.engine.batch import Decision, QueueOrder
from llmsched_env.engine.config import EngineConfig

__all__ = ["ACTION_COMPONENTS", "UNLIMITED", "ActionSpec"]

UNLIMITED = 1 << 30  # admission cap meaning "as many as fit"
ACTION_COMPONENTS = ("queue_order", "token_budget", "chunk_cap", "batch_mix", "admission_cap", "kv_reserve", "shed")


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
        d = None
        # fast path: an action of plain integers seen before is valid (only validated keys enter the cache); a
        # bool, float or complex action always takes the checks (True == 1 and 1+0j == 1 hash alike)
        if isinstance(action, np.ndarray):
            if action.dtype.kind in "iu" and action.ndim == 1:
                d = cache.get(tuple(action.tolist()))
        elif isinstance(action, (tuple, list)) and all(type(v) is int for v in action):
            d = cache.get(tuple(action))
        if d is None:
            key = self._key(action)
            d = cache.get(key)
        if d is None:
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

    def mask(self, engine: EngineState) -> np.ndarray:
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
