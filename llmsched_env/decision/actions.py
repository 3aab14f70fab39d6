"""The single-node action space: ``ActionSpec.decode(action)`` turns a ``MultiDiscrete`` action into an engine
``Decision``, ``encode`` inverts it, ``mask(engine)`` gives the valid options now (``decision.schema``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from llmsched_env.decision.schema import SCHEMA_VERSION, check_schema
from llmsched_env.decision.state import EngineState
from llmsched_env.engine.batch import Decision, QueueOrder
from llmsched_env.engine.config import EngineConfig

UNLIMITED = 1 << 30  # admission cap meaning "as many as fit"
ACTION_COMPONENTS = ("queue_order", "token_budget", "chunk_cap", "batch_mix", "admission_cap", "kv_reserve", "shed")
SCHEMA1_ORDERS = 6  # queue orders of the schema-1 layout: FCFS .. LPM (SPRW came with schema 2)
FIXED_TOKEN_BUDGETS = (256, 512, 1024, 2048, 4096, 8192, 16384)
FIXED_CHUNK_CAPS = (128, 256, 512, 1024, 2048, 4096, 8192, 16384)


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
    """The options of each action component: queue order (the first ``num_orders`` of ``QueueOrder``), token
    budget, chunk cap, batch mix (0 decode-first, 1 prefill-first), admission cap (``UNLIMITED``: as many as fit),
    KV reserve (pool share kept free when admitting), shedding (0 off, 1 on). With ``max_tokens``, a budget or cap
    above it means ``max_tokens`` and only the first option reaching it is valid."""

    token_budgets: tuple[int, ...]
    chunk_caps: tuple[int, ...]
    admission_caps: tuple[int, ...] = (0, 1, 2, 4, 8, 32, UNLIMITED)
    kv_reserves: tuple[float, ...] = (0.0, 0.05, 0.1, 0.2, 0.4)
    num_orders: int = len(QueueOrder)
    max_tokens: int | None = None
    # derived in __post_init__, not compared: each token budget's and chunk cap's value (``_effective``), and
    # the caches of action tuple -> Decision and (queue non-empty, room to admit, engine idle) -> mask
    _budget_values: tuple[int | None, ...] = field(init=False, repr=False, compare=False)
    _chunk_values: tuple[int | None, ...] = field(init=False, repr=False, compare=False)
    _nvec: tuple[int, ...] = field(init=False, repr=False, compare=False)
    _decoded: dict[tuple[int, ...], Decision] = field(default_factory=dict, init=False, repr=False, compare=False)
    # (queue non-empty, room to admit, engine idle) -> the mask, and the mask as a list of bools
    _masks: dict[tuple[bool, bool, bool], tuple[np.ndarray, list[bool]]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        for name in ("token_budgets", "chunk_caps", "admission_caps", "kv_reserves"):
            opts = getattr(self, name)
            if not opts or list(opts) != sorted(set(opts)):
                raise ValueError(f"ActionSpec.{name} must be a non-empty strictly increasing tuple, got {opts!r}")
        if self.token_budgets[0] < 1 or self.chunk_caps[0] < 1 or self.admission_caps[0] < 0:
            raise ValueError("ActionSpec: token budgets and chunk caps must be >= 1, admission caps >= 0")
        if not (self.kv_reserves[0] >= 0.0 and self.kv_reserves[-1] < 1.0):
            raise ValueError(f"ActionSpec.kv_reserves must lie in [0, 1), got {self.kv_reserves!r}")
        if isinstance(self.num_orders, bool) or self.num_orders not in range(1, len(QueueOrder) + 1):
            raise ValueError(f"ActionSpec.num_orders must be in [1, {len(QueueOrder)}], got {self.num_orders!r}")
        if self.max_tokens is not None and (isinstance(self.max_tokens, bool) or not isinstance(self.max_tokens, int)
                                            or self.max_tokens < 1):  # fmt: skip
            raise ValueError(f"ActionSpec.max_tokens must be None or an integer >= 1, got {self.max_tokens!r}")
        set_ = object.__setattr__
        set_(self, "_budget_values", self._effective(self.token_budgets))
        set_(self, "_chunk_values", self._effective(self.chunk_caps))
        nvec = (self.num_orders, len(self.token_budgets), len(self.chunk_caps), 2, len(self.admission_caps),
                len(self.kv_reserves), 2)  # fmt: skip
        set_(self, "_nvec", nvec)

    def _effective(self, options: tuple[int, ...]) -> tuple[int | None, ...]:
        """Each option's value under ``max_tokens``; None for an option past the first that reaches the limit
        (it would repeat it: masked out)."""
        if self.max_tokens is None:
            return options
        out: list[int | None] = []
        reached = False
        for v in options:
            out.append(None if reached else min(v, self.max_tokens))
            reached = reached or v >= self.max_tokens
        return tuple(out)

    @classmethod
    def for_engine(cls, config: EngineConfig, schema: int | None = None) -> ActionSpec:
        """The layout of ``schema`` (default ``SCHEMA_VERSION``) for an engine (``decision.schema``)."""
        top = config.max_num_batched_tokens
        if check_schema(SCHEMA_VERSION if schema is None else schema) == 1:
            return cls(
                token_budgets=_powers_of_two(min(256, top), top),
                chunk_caps=_powers_of_two(min(128, top), top),
                num_orders=SCHEMA1_ORDERS,
            )
        return cls(token_budgets=FIXED_TOKEN_BUDGETS, chunk_caps=FIXED_CHUNK_CAPS, max_tokens=top)

    def check_engine(self, config: EngineConfig) -> None:
        top = config.max_num_batched_tokens
        if self.max_tokens is not None and self.max_tokens != top:
            raise ValueError(
                f"ActionSpec.max_tokens={self.max_tokens} was built for another engine: this one's "
                f"max_num_batched_tokens is {top}"
            )
        if self.max_tokens is None and self.token_budgets[-1] > top:
            raise ValueError(
                f"ActionSpec.token_budgets goes up to {self.token_budgets[-1]}, above the engine's "
                f"max_num_batched_tokens={top}"
            )

    @property
    def token_budget_values(self) -> tuple[int, ...]:
        """The token budgets a decision can have here (the valid options' values), increasing."""
        return tuple(v for v in self._budget_values if v is not None)

    @property
    def chunk_cap_values(self) -> tuple[int, ...]:
        """The chunk caps a decision can have here (the valid options' values), increasing."""
        return tuple(v for v in self._chunk_values if v is not None)

    @property
    def orders(self) -> tuple[QueueOrder, ...]:
        """The queue orders of this layout, in action-index order."""
        return tuple(QueueOrder(i) for i in range(self.num_orders))

    @property
    def nvec(self) -> tuple[int, ...]:
        return self._nvec

    @property
    def mask_size(self) -> int:
        return sum(self.nvec)

    def decode(self, action: Sequence[int] | np.ndarray) -> Decision:
        """The Decision an action means. Raises ValueError naming the component on a bad action."""
        cache = self._decoded
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
            top = self.max_tokens
            d = Decision(
                order=QueueOrder(o),
                token_budget=self.token_budgets[b] if top is None else min(self.token_budgets[b], top),
                chunk_cap=self.chunk_caps[c] if top is None else min(self.chunk_caps[c], top),
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

        def nearest(options: Sequence[float | None], value: float) -> int:
            return min((abs(o - value), i) for i, o in enumerate(options) if o is not None)[1]

        if int(decision.order) >= self.num_orders:
            raise ValueError(
                f"queue order {decision.order.name} is not in this action space (its {self.num_orders} orders: "
                f"{', '.join(o.name for o in self.orders)}); it needs the schema-2 layout"
            )
        return np.array(
            [
                int(decision.order),
                nearest(self._budget_values, decision.token_budget),
                nearest(self._chunk_values, decision.chunk_cap),
                int(decision.prefill_first),
                nearest(self.admission_caps, decision.max_admit),
                nearest(self.kv_reserves, decision.kv_reserve),
                int(decision.shed),
            ],
            dtype=np.int64,
        )

    def mask(self, engine: EngineState) -> np.ndarray:
        """Valid options, concatenated per component (sb3-contrib's layout): no budget or cap past ``max_tokens``;
        with nothing waiting only FCFS, admit 0 and no shedding (all alike); a full running set admits 0 only; an
        idle engine with requests waiting may not hold (admit 0), or a policy could hold them forever."""
        return self._mask_of(engine)[0]

    def _mask_of(self, engine: EngineState) -> tuple[np.ndarray, list[bool]]:
        """``mask(engine)``, and the same as a list."""
        waiting = any(engine.num_waiting)
        room = len(engine.running) < engine.config.max_num_seqs
        idle = not engine.running
        key = (waiting, room, idle)
        cache = self._masks
        m = cache.get(key)
        if m is None:
            parts = []
            static = {"token_budget": self._budget_values, "chunk_cap": self._chunk_values}
            for comp, n in zip(ACTION_COMPONENTS, self.nvec, strict=True):
                p = np.array([v is not None for v in static[comp]]) if comp in static else np.ones(n, dtype=bool)
                if comp in ("queue_order", "shed") and not waiting:
                    p[1:] = False
                if comp == "admission_cap" and not (waiting and room):
                    p[1:] = False
                elif comp == "admission_cap" and idle:
                    p[0] = False
                parts.append(p)
            mask = np.concatenate(parts)
            mask.setflags(write=False)
            m = cache[key] = (mask, mask.tolist())
        return m

    def allows_list(self, values: Sequence[int], mask: list[bool]) -> bool:
        """Whether every component of an in-range action is a valid option under ``mask`` (``mask_list``)."""
        start = 0
        for v, n in zip(values, self._nvec, strict=True):
            if not mask[start + v]:
                return False
            start += n
        return True

    def mask_list(self, engine: EngineState) -> list[bool]:
        """``mask(engine)`` as a list: one cached object per distinct mask, so a caller that checks one action
        over several iterations checks it again only when this object changes (``allows_list``)."""
        return self._mask_of(engine)[1]

    def project(self, action: np.ndarray | Sequence[int], mask: np.ndarray) -> np.ndarray:
        """``action`` with every masked-out component moved to that component's first valid option (its first
        option when none is valid). ValueError for a component outside its range."""
        out = np.array(action, dtype=np.int64)
        flags = mask.tolist()
        start = 0
        for i, (v, n) in enumerate(zip(out.tolist(), self._nvec, strict=True)):
            if not 0 <= v < n:
                raise ValueError(f"action component {ACTION_COMPONENTS[i]!r} must be in [0, {n}), got {v}")
            if not flags[start + v]:
                try:
                    out[i] = flags.index(True, start, start + n) - start
                except ValueError:
                    out[i] = 0
            start += n
        return out
