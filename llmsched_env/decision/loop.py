"""``DecisionLoop``: the one step between a policy and an engine, shared by the env's ``step``, the serving loop
(``decision.serve``), the vLLM scheduler, a cluster's local schedulers and the lookahead's rollouts.

    loop = DecisionLoop(spec, encoder, policy, hold=4, fallback=fcfs, timeout_s=0.1)   # a policy decides
    while not sim.done:
        sim.step(loop.next(sim.engine))        # one engine iteration's Decision

- observe: ``encoder.encode(engine, last_step_s)`` and ``ActionSpec.mask(engine)``; a policy with
  ``reads_observation = False`` gets zeros and is asked once per mask pattern.
- act within ``timeout_s`` (``decision.decider``); validate with ``ActionSpec.decode`` (a malformed action is
  refused, never repaired); correct masked-out components (``ActionSpec.project``, ``num_corrected``).
- hold a decision ``hold`` iterations, checked against each iteration's mask.
- fall back when the policy raises, is late or malformed: ``fallback`` decides (``ENGINE_DEFAULT``: the
  engine's own settings), counted by cause (``FALLBACK_CAUSES``); without one the error reaches the caller.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np

from llmsched_env.decision.actions import ActionSpec
from llmsched_env.decision.decider import DECIDER_MODES, TimedDecider, first_line
from llmsched_env.decision.observation import ObservationEncoder
from llmsched_env.decision.policy import Policy, reads_observation
from llmsched_env.decision.state import EngineState
from llmsched_env.engine.batch import Decision

FALLBACK_CAUSES = ("error", "invalid", "timeout")  # the policy raised; its action was malformed; it was late


class _EngineDefault:
    """The fallback that leaves an iteration to the engine's own settings (``next`` returns None)."""

    def __repr__(self) -> str:
        return "ENGINE_DEFAULT"


ENGINE_DEFAULT: Final = _EngineDefault()


@dataclass
class DecisionStats:
    """What a ``DecisionLoop`` counted: decisions, iterations, held and corrected iterations, fallbacks by cause with
    the last one's message, and the decisions' time (observation to decision)."""

    num_decisions: int = 0
    num_iterations: int = 0
    num_held: int = 0
    num_corrected: int = 0
    fallbacks: Counter[str] = field(default_factory=Counter)
    policy_time_s: float = 0.0
    last_error: str = ""

    @property
    def num_fallbacks(self) -> int:
        return sum(self.fallbacks.values())

    @property
    def num_failed(self) -> int:
        """Decisions whose policy raised."""
        return self.fallbacks["error"]

    def as_metrics(self) -> dict[str, float]:
        """The counts as the metrics columns of a run (``policy_*``)."""
        out = {
            "policy_decisions": float(self.num_decisions),
            "policy_fallbacks": float(self.num_fallbacks),
            "policy_corrected": float(self.num_corrected),
            "policy_time_mean_s": self.policy_time_s / self.num_decisions if self.num_decisions else 0.0,
        }
        for cause in FALLBACK_CAUSES:
            out[f"policy_fallbacks_{cause}"] = float(self.fallbacks[cause])
        return out


class DecisionLoop:
    """The module docstring's rules. ``policy`` None: the caller ``take``s every action; ``fallback``: a ``Policy``,
    ``ENGINE_DEFAULT`` or None (errors reach the caller); ``timeout_s`` needs a fallback; ``name``: the policy in
    errors; ``record``: keep each iteration's (mask, decision applied, corrected) in ``history``."""

    def __init__(
        self,
        spec: ActionSpec,
        encoder: ObservationEncoder | None = None,
        policy: Policy | None = None,
        *,
        hold: int = 1,
        fallback: Policy | _EngineDefault | None = None,
        timeout_s: float | None = None,
        deadline_mode: str = "auto",
        name: str = "policy",
        record: bool = False,
    ) -> None:
        if isinstance(hold, bool) or not isinstance(hold, int) or hold < 1:
            raise ValueError(f"DecisionLoop: hold must be an integer >= 1, got {hold!r}")
        if timeout_s is not None and not timeout_s > 0:
            raise ValueError(f"DecisionLoop: timeout_s must be > 0 or None, got {timeout_s!r}")
        if timeout_s is not None and fallback is None:
            raise ValueError("DecisionLoop: a deadline (timeout_s) needs a fallback to decide in a late policy's place")
        if deadline_mode not in DECIDER_MODES:
            raise ValueError(f"DecisionLoop: deadline_mode must be one of {DECIDER_MODES}, got {deadline_mode!r}")
        if policy is not None and encoder is None and reads_observation(policy):
            raise ValueError("DecisionLoop: a policy that reads observations needs an encoder")
        self.spec = spec
        self.encoder = encoder
        self.hold = hold
        self.fallback = fallback
        self.timeout_s = timeout_s
        self.deadline_mode = deadline_mode
        self.name = name
        self.stats = DecisionStats()
        self._zeros = np.zeros(encoder.size if encoder is not None else 0, dtype=np.float32)
        self._policy: Policy | None = None
        self._reads_obs = True
        self._decider: TimedDecider | None = None
        # the policy's kept answers where it acts on the mask alone: the mask's object -> (values, decision)
        self._kept: dict[int, tuple[list[int], Decision]] = {}
        # the decision held: its action's values ([] for the engine's own settings) and the Decision they mean
        self._values: list[int] = []
        self._decision: Decision | None = None
        self._left = 0  # iterations the held decision still covers (negative: until the next take)
        self._fresh = False  # the decision held has served no iteration yet
        # the held action under each mask met while it is held (mask_list's object: one per mask pattern) ->
        # (the decision applied, whether the mask forbade the action), so a mask seen before costs a lookup
        self._applied: dict[int, tuple[Decision, bool]] = {}
        self._decided_at_s = -1.0  # the engine's clock at the last decision (-1: none yet)
        # with record=True: per iteration, the mask, the decision applied (None: the engine's own) and whether the
        # mask forbade the action held (corrected)
        self.history: list[tuple[tuple[bool, ...], Decision | None, bool]] | None = [] if record else None
        self.policy = policy

    # -- the policy ------------------------------------------------------------------------------------------
    @property
    def policy(self) -> Policy | None:
        """The policy deciding when a hold runs out; setting it installs a new one (a new deadline timer)."""
        return self._policy

    @policy.setter
    def policy(self, policy: Policy | None) -> None:
        self.close()
        self._policy = policy
        self._reads_obs = policy is None or reads_observation(policy)
        self._kept = {}
        self._decider = None
        if policy is not None and self.timeout_s is not None:
            self._decider = TimedDecider(policy, mode=self.deadline_mode, name=f"llmsched-{self.name}")

    @property
    def deadline(self) -> str:
        """How the deadline is enforced: ``TimedDecider``'s mode, or ``none``."""
        return self._decider.mode if self._decider is not None else "none"

    def close(self) -> None:
        """Stop a deadline's worker thread, if one runs (thread mode)."""
        if self._decider is not None:
            self._decider.close()

    def reset(self) -> None:
        """Forget the held decision and the clock of the last one (a new episode); the statistics stay."""
        self._values, self._decision, self._left, self._fresh = [], None, 0, False
        self._applied = {}
        self._decided_at_s = -1.0

    # -- observe ---------------------------------------------------------------------------------------------
    def last_step_s(self, engine: EngineState) -> float:
        """The engine's clock now minus its clock at the previous decision (0 before the first)."""
        return engine.now_s - self._decided_at_s if self._decided_at_s >= 0.0 else 0.0

    def observe(self, engine: EngineState, last_step_s: float | None = None) -> np.ndarray:
        """The observation the policy gets now (zeros for a policy that acts on the mask alone);
        ``last_step_s`` defaults to ``last_step_s(engine)``."""
        if not self._reads_obs or self.encoder is None:
            return self._zeros
        return self.encoder.encode(engine, self.last_step_s(engine) if last_step_s is None else last_step_s)

    # -- decisions -------------------------------------------------------------------------------------------
    def take(self, action: Any, engine: EngineState | None = None, hold: int | None = 0) -> None:
        """Hold the caller's ``action`` from the next iteration on, for ``hold`` iterations (0: the loop's; None:
        until the next ``take``); a malformed one is refused (``ValueError`` naming the component). ``engine``:
        where it is decided, for ``last_step_s``'s clock."""
        decision = self.spec.decode(action)  # validates
        if isinstance(action, np.ndarray) and action.dtype.kind in "iu":
            values = action.tolist()
        else:  # integers in some other form (decode checked them)
            values = [int(v) for v in np.asarray(action).tolist()]
        self._hold(values, decision)
        self._left = self.hold if hold == 0 else -1 if hold is None else hold
        self._fresh = True
        self.stats.num_decisions += 1
        if engine is not None:
            self._decided_at_s = engine.now_s

    def next(self, engine: EngineState, last_step_s: float | None = None) -> Decision | None:
        """The decision for ``engine``'s next iteration: the held one, corrected where the mask now forbids it, or,
        once the hold has run out, a new one (``decide``). None: the engine's own settings (``ENGINE_DEFAULT``)."""
        stats = self.stats
        if self._left == 0:
            self.decide(engine, last_step_s)
        if self._fresh:
            self._fresh = False
        else:
            stats.num_held += 1
        self._left -= 1
        stats.num_iterations += 1
        decision = self._decision
        spec = self.spec
        if decision is None:
            if self.history is not None:
                self.history.append((tuple(spec.mask_list(engine)), None, False))
            return None
        flags = spec.mask_list(engine)
        applied = self._applied.get(id(flags))
        if applied is None:  # a mask not met while this action is held: check the action against it
            if spec.allows_list(self._values, flags):
                applied = (decision, False)
            else:
                applied = (spec.decode(spec.project(self._values, spec.mask(engine))), True)
            self._applied[id(flags)] = applied
        if applied[1]:
            stats.num_corrected += 1
        if self.history is not None:
            self.history.append((tuple(flags), applied[0], applied[1]))
        return applied[0]

    def decide(self, engine: EngineState, last_step_s: float | None = None) -> None:
        """Make a new decision now (the policy's, or its fallback's) and hold it; the observation's ``last_step_s``
        is the one given, else ``last_step_s(engine)``."""
        policy = self._policy
        if policy is None:
            raise RuntimeError(f"DecisionLoop ({self.name}): the held action ran out and no policy decides; take() one")
        t0 = time.perf_counter()
        stats = self.stats
        spec = self.spec
        mask = spec.mask(engine)
        kept = None if self._reads_obs else self._kept.get(id(mask))
        if kept is not None:
            self._hold(*kept)
        else:
            obs = self.observe(engine, last_step_s)
            cause, error, raw = self._ask(policy, obs, mask, t0)
            if cause is None:
                try:
                    decision = spec.decode(raw)
                except (ValueError, TypeError) as exc:
                    if self.fallback is None:
                        raise ValueError(f"{self.name} returned {raw!r}: {exc}") from None
                    cause, error = "invalid", f"invalid action {raw!r}: {exc}"
                else:
                    values = np.asarray(raw).astype(np.int64).tolist()
                    self._hold(values, decision)
                    if not self._reads_obs:
                        self._kept[id(mask)] = (values, decision)
            if cause is not None:
                stats.fallbacks[cause] += 1
                stats.last_error = error
                self._fall_back(obs, mask)
        self._left = self.hold
        self._fresh = True
        self._decided_at_s = engine.now_s
        stats.num_decisions += 1
        stats.policy_time_s += time.perf_counter() - t0

    def _ask(self, policy: Policy, obs: np.ndarray, mask: np.ndarray, t0: float) -> tuple[str | None, str, Any]:
        """The policy's raw action, or the cause and message of a fallback; without a fallback its exception
        propagates."""
        if self._decider is not None:
            raw, cause, error = self._decider.decide(obs, mask, t0 + float(self.timeout_s or 0.0))
            return cause, error, raw
        if self.fallback is None:
            return None, "", policy.act(obs, mask)
        try:
            return None, "", policy.act(obs, mask)
        except Exception as exc:  # a failing policy must not stop serving: its fallback decides
            return "error", first_line(exc), None

    def _fall_back(self, obs: np.ndarray, mask: np.ndarray) -> None:
        fallback = self.fallback
        if isinstance(fallback, _EngineDefault):
            self._hold([], None)
            return
        assert fallback is not None  # a cause is only set where there is a fallback
        raw = fallback.act(obs, mask)  # the fallback must not fail: an error here is a bug, raised
        self._hold(np.asarray(raw).astype(np.int64).tolist(), self.spec.decode(raw))

    def _hold(self, values: list[int], decision: Decision | None) -> None:
        """Hold ``decision`` (its action's ``values``); the mask checks are kept when the action is the one held."""
        if values != self._values or decision is None:
            self._applied = {}
        self._values, self._decision = values, decision
