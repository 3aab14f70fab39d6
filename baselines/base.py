"""What every baseline shares: its context checks and the cheap masked emission of its action (encoded once,
projected onto each mask pattern with ``ActionSpec.project`` and cached); and ``random``, the floor."""

from __future__ import annotations

import numbers
from collections.abc import Sequence

import numpy as np

from llmsched_env.decision.actions import ActionSpec
from llmsched_env.decision.policy import PolicyContext
from llmsched_env.engine.batch import Decision

_MAX_CACHED_MASKS = 64  # the env produces 4 mask patterns; the bound only guards against odd callers


def nearest_option(options: Sequence[int], value: int) -> int:
    """The option nearest ``value`` (the lower one on a tie), as ``ActionSpec.encode`` picks it."""
    return min(options, key=lambda o: (abs(o - value), o))


def check_context(owner: str, ctx: object, kind: type) -> None:
    """``TypeError`` naming ``owner``'s argument ``ctx`` unless it is a ``kind``."""
    if not isinstance(ctx, kind):
        raise TypeError(f"{owner}: argument 'ctx' must be a {kind.__name__} (env.unwrapped.policy_context()), "
                        f"got {type(ctx).__name__} {ctx!r:.80}")


def check_seed(owner: str, seed: object) -> None:
    """``TypeError`` naming ``owner``'s argument ``seed`` unless it is None or an integer (not a bool)."""
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, numbers.Integral)):
        raise TypeError(f"{owner}: argument 'seed' must be None or an integer, got {seed!r:.80}")


def check_observation(owner: str, observation: object, size: int) -> None:
    """``ValueError`` naming ``owner``'s argument ``observation`` unless its shape is ``(size,)``."""
    if getattr(observation, "shape", None) != (size,):
        shape = getattr(observation, "shape", type(observation).__name__)
        raise ValueError(f"{owner}.act: argument 'observation' must be an array of shape ({size},) (one value per name "
                         f"of the context's obs_names), got {shape}")


def valid_mask(spec: ActionSpec, mask: np.ndarray) -> np.ndarray:
    """``mask`` as a bool array, or ``ValueError`` when its size is wrong or a component has no valid option."""
    m = np.asarray(mask, dtype=bool)
    if m.shape != (spec.mask_size,):
        raise ValueError(f"action_mask must have shape ({spec.mask_size},), got {np.shape(mask)}")
    start = 0
    for i, n in enumerate(spec.nvec):
        if not m[start : start + n].any():
            raise ValueError(f"action_mask leaves action component {i} without a valid option")
        start += n
    return m


class BaselinePolicy:
    """A policy that emits one of a few precomputed actions (``_set_actions``) projected onto the mask (cached):
    ``act`` calls ``self._emit(i, action_mask)``."""

    name = "baseline"

    def __init__(self, ctx: PolicyContext, seed: int | None = None) -> None:
        check_context(type(self).__name__, ctx, PolicyContext)
        check_seed(type(self).__name__, seed)
        self.ctx = ctx
        self.spec: ActionSpec = ctx.action_spec
        self.seed = seed
        self._actions: list[np.ndarray] = []
        self._cache: list[dict[bytes, np.ndarray]] = []

    def _set_actions(self, decisions: Sequence[Decision]) -> None:
        self._actions = []
        for d in decisions:
            a = self.spec.encode(d)
            a.setflags(write=False)
            self._actions.append(a)
        self._cache = [{} for _ in self._actions]

    def _emit(self, i: int, action_mask: np.ndarray) -> np.ndarray:
        if action_mask.dtype != np.bool_:
            action_mask = np.asarray(action_mask, dtype=bool)
        cache = self._cache[i]
        key = action_mask.tobytes()
        out = cache.get(key)
        if out is None:
            out = self.spec.project(self._actions[i], valid_mask(self.spec, action_mask))
            out.setflags(write=False)
            if len(cache) >= _MAX_CACHED_MASKS:
                cache.clear()
            cache[key] = out
        return out.copy()

    def decision_for(self, i: int = 0) -> Decision:
        """The knobs of precomputed action ``i`` (before masking), as the engine will read them."""
        return self.spec.decode(self._actions[i])

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.decision_for(0)})"


class StaticPolicy(BaselinePolicy):
    """The same knobs every iteration: ``decide(ctx)`` once, then only masking at ``act`` time."""

    reads_observation = False  # its action depends on the mask only (see ``decision.policy.Policy``)
    bounded_act = True  # a cached lookup: no deadline timer need interrupt it (``decision.policy.bounded_act``)

    def __init__(self, ctx: PolicyContext, seed: int | None = None) -> None:
        super().__init__(ctx, seed)
        self.decision = self.decide(ctx)
        self._set_actions([self.decision])

    def decide(self, ctx: PolicyContext) -> Decision:
        raise NotImplementedError

    def act(self, observation: np.ndarray, action_mask: np.ndarray) -> np.ndarray:
        return self._emit(0, action_mask)


class FixedPolicy(StaticPolicy):
    """Given knobs (a ``Decision``, e.g. a tuned-table entry's) at every iteration, whatever the workload."""

    name = "fixed"

    def __init__(self, ctx: PolicyContext, decision: Decision, seed: int | None = None) -> None:
        self._given = decision
        super().__init__(ctx, seed)

    def decide(self, ctx: PolicyContext) -> Decision:
        return self._given


class RandomPolicy(BaselinePolicy):
    """``random``: a uniformly random valid action every iteration (the floor), each component drawn on its own."""

    name = "random"
    bounded_act = True  # one draw per component from a cached table (``decision.policy.bounded_act``)

    def __init__(self, ctx: PolicyContext, seed: int | None = None) -> None:
        super().__init__(ctx, seed)
        self.rng = np.random.default_rng(seed)
        self._rows = np.arange(len(self.spec.nvec))
        # mask bytes -> (number of valid options per component, table[i, j] = j-th valid option of i)
        self._tables: dict[bytes, tuple[np.ndarray, np.ndarray]] = {}

    def _table(self, action_mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        m = action_mask if action_mask.dtype == np.bool_ else np.asarray(action_mask, dtype=bool)
        key = m.tobytes()
        entry = self._tables.get(key)
        if entry is None:
            m = valid_mask(self.spec, m)
            nvec = self.spec.nvec
            counts = np.zeros(len(nvec), dtype=np.int64)
            table = np.zeros((len(nvec), max(nvec)), dtype=np.int64)
            start = 0
            for i, n in enumerate(nvec):
                valid = np.flatnonzero(m[start : start + n])
                counts[i] = valid.size
                table[i, : valid.size] = valid
                start += n
            entry = (counts, table)
            if len(self._tables) >= _MAX_CACHED_MASKS:
                self._tables.clear()
            self._tables[key] = entry
        return entry

    def act(self, observation: np.ndarray, action_mask: np.ndarray) -> np.ndarray:
        counts, table = self._table(action_mask)
        picks = self.rng.integers(0, counts)  # one uniform draw per component, in [0, count)
        return table[self._rows, picks]

    def __repr__(self) -> str:
        return f"RandomPolicy(seed={self.seed})"
