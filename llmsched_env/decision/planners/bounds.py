"""The ``lookahead`` bounds: clairvoyant references that play the episode forward on snapshots of the env
(docs/evaluation.md). ``LookaheadPolicy`` switches among static settings every ``k`` iterations,
``RouteLookaheadPolicy`` among the named routing rules every ``k`` arrivals.

At the episode's first step a bound plans the whole episode (the base wins ties); the plan is replaced by the base
played alone when that meets more, so a bound never ends below its base; the env's steps then replay the plan
exactly. Not deployable: rollouts read requests that have not arrived yet. Rows carry ``lookahead.BOUND_MARK``.
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from llmsched_env.decision.loop import DecisionLoop
from llmsched_env.decision.planners.lookahead import LookaheadConfig
from llmsched_env.decision.planners.mpc import Emitter, rollout
from llmsched_env.decision.planners.space import (
    STATIC_HEURISTICS,
    acts,
    around,
    base_decision,
    make_move,
    setting_of,
    static_decision,
)
from llmsched_env.decision.registry import ROUTERS, make_router
from llmsched_env.engine.batch import Decision

__all__ = ["RULES", "LookaheadPolicy", "RouteLookaheadPolicy", "check_route_lookahead", "lookahead_factory"]

# the named rules a routing plan switches among (``random`` is a floor, never a plan's best guess)
RULES = ("round_robin", "least_outstanding", "least_kv_load", "prefix_affinity", "power_of_two")


class _Bound:
    """What both bounds share: the unwrapped env, a plan made at the episode's first step, and its counts
    (``kept_plan`` False when the base alone did better and is played instead)."""

    def __init__(self, env: Any, config: LookaheadConfig, seed: int, needs: tuple[str, ...], refusal: str) -> None:
        u: Any = env.unwrapped
        if not all(hasattr(u, name) for name in needs):
            raise ValueError(refusal.format(type(u).__name__))
        if getattr(u, needs[1]) is None:
            raise ValueError("lookahead: reset the env before building the bound (it plays the episode from its start)")
        self.env = u
        self.config = config
        self.seed = seed
        self.num_decisions = self.num_switches = self.num_rollouts = self.planned_met = 0
        self.kept_plan = True
        self._plan: list[int] = []
        self._steps = 0

    def start_episode(self) -> None:
        """A new episode on the same env: plan again at its first step."""
        self._steps = 0
        self._plan = []

    def _best(self, snap: Any, tries: list[Any]) -> tuple[int, int]:
        """The first of ``tries`` that scores best, and its score; the first plays from the env as it is, the others
        from ``snap``."""
        best, best_score = 0, 0
        for i, attempt in enumerate(tries):
            if i:
                self.env.restore(snap)
            score = attempt()
            if i == 0 or score > best_score:
                best, best_score = i, score
        return best, best_score

    def _keep(self, plan: list[int], plan_good: int, base_plan: list[int], base_good: int) -> list[int]:
        """The plan to play: ``plan`` unless the base alone (``base_plan``) meets more requests."""
        self.kept_plan = plan_good >= base_good
        self.planned_met = max(plan_good, base_good)
        return plan if self.kept_plan else base_plan


class LookaheadPolicy(_Bound):
    """The single-node bound on ``env`` (``LLMSched-v1``, reset); ``table``: a ``tuned`` base's table (None: shipped);
    ``labels_only``: a teacher's labeller that plays no episode. One-line ``ValueError`` for an env it cannot play
    forward (the cluster env, a runtime, several iterations per step)."""

    def __init__(
        self, env: Any, config: LookaheadConfig, seed: int = 0, table: Any = None, labels_only: bool = False
    ) -> None:
        refusal = "lookahead plays LLMSched-v1 forward on snapshots; {} has no single-node simulator"
        super().__init__(env, config, seed, ("snapshot", "sim", "action_spec"), refusal)
        if labels_only and config.candidates == "requests":
            raise ValueError("lookahead labels are actions: candidates=requests (per-request moves) cannot be one")
        if not labels_only and getattr(self.env, "iterations_per_step", 1) != 1:
            raise ValueError("lookahead needs an env of one engine iteration per step (iterations_per_step=1)")
        self.labels_only = labels_only
        self.table = table
        self.spec = self.env.action_spec
        self._loop = DecisionLoop(self.spec, name="lookahead")  # each candidate applied as the env applies actions
        self.base, self.base_source = self._base()
        # per-request moves: candidate len(self._actions) + j is move self._moves[j] under the base setting
        self.candidates, self._moves = around(self.base, self.spec, config.candidates)
        self._actions = [self.spec.encode(d) for d in self.candidates]
        self.num_moves = 0
        self._emit = Emitter(self.spec, self._actions)

    def act(self, observation: np.ndarray, action_mask: np.ndarray) -> np.ndarray:
        if self.labels_only:
            raise RuntimeError("a lookahead built with labels_only=True gives labels (label()), it plays no episode")
        if self._steps == 0:
            self._plan = self._make_plan()
        window, offset = divmod(self._steps, self.config.k)
        chosen = self._plan[window] if window < len(self._plan) else 0
        self._steps += 1
        if chosen >= len(self._actions):  # a per-request move, made as the plan made it, then the base setting
            if offset == 0:
                self._play(chosen)
            chosen = 0
        return self._emit(chosen, self.spec.mask(self.env.sim.engine))  # the env's own mask, as action_mask

    def label(self) -> np.ndarray:
        """The best candidate's action from the current state (the expert's label, ``agents.teacher``); the env is left
        as it was."""
        return self._actions[self._decide()].copy()

    def _make_plan(self) -> list[int]:
        """The candidate of each window of ``k`` iterations, found on the env's simulator (then restored)."""
        u = self.env
        start = u.snapshot()
        good0 = u.sim.engine.num_good
        plan: list[int] = []
        while not self._ended():
            plan.append(self._decide())
            self._rollout([(self._actions[self._play(plan[-1])], self.config.k)])
        plan_good = u.sim.engine.num_good - good0
        u.restore(start)
        self._rollout([(self._actions[0], None)])
        base_good = u.sim.engine.num_good - good0
        u.restore(start)
        self.num_decisions = len(plan)
        self.num_switches = sum(1 for c in plan if c)
        self.num_moves = sum(1 for c in plan if c >= len(self._actions))
        return self._keep(plan, plan_good, [0] * len(plan), base_good)

    def _ended(self) -> bool:
        """Whether the episode has ended or would be truncated."""
        u = self.env
        sim = u.sim
        return sim.done or sim.now_s >= u.horizon_s or sim.num_steps >= u.max_steps

    def _decide(self) -> int:
        """The candidate whose rollout from here scores best (the earliest on a tie); the env is left here."""
        u = self.env
        snap = u.snapshot()
        cfg = self.config
        base = self._actions[0]
        tries = [lambda a=a: self._rollout([(a, cfg.horizon), (base, cfg.tail)]) for a in self._actions]
        best, best_score = self._best(snap, tries)
        self.num_rollouts += len(self._actions)
        for j, move in enumerate(self._moves):
            u.restore(snap)
            engine = u.sim.engine
            r = acts(move, engine, self.base.order)
            if r is None:
                continue
            make_move(move, engine, r)
            score = self._rollout([(base, cfg.horizon), (base, cfg.tail)])
            self.num_rollouts += 1
            if score > best_score:
                best, best_score = len(self._actions) + j, score
        u.restore(snap)
        return best

    def _play(self, candidate: int) -> int:
        """Make ``candidate``'s per-request move on the env's engine now, if it is one; the setting it plays."""
        return setting_of(candidate, len(self._actions), self._moves, self.env.sim.engine)

    def _rollout(self, plan: list[tuple[np.ndarray, int | None]]) -> int:
        """Play ``plan`` (None: to the episode's end) as ``env.step`` would, without observations; requests met minus
        missed."""
        return rollout(self._loop, self.env.sim, plan, self._ended)

    def _base(self) -> tuple[Decision, str]:
        """The base setting and its source: ``tuned``'s entry, a named static rule, or the best one on this episode."""
        u = self.env
        ctx = u.policy_context()
        name = self.config.base
        if name != "tuned":
            return static_decision(name, ctx), name
        try:
            return base_decision(name, ctx, self.seed, self.table), "tuned"
        except ValueError as exc:
            reason = str(exc).split(";")[0]
        rules: dict[Decision, str] = {}
        for rule in STATIC_HEURISTICS:
            try:
                rules.setdefault(static_decision(rule, ctx), rule)
            except ValueError:
                continue  # not in this action space (schema 1 lacks an order)
        snap = u.snapshot()
        k, _ = self._best(snap, [lambda d=d: self._rollout([(self.spec.encode(d), None)]) for d in rules])
        u.restore(snap)
        decision, rule = list(rules.items())[k]
        source = f"{rule} (no tuned entry: the best static named rule on this episode)"
        warnings.warn(f"lookahead on {ctx.scenario!r}: {reason}; its base is {source}", stacklevel=2)
        return decision, source


def check_route_lookahead(config: LookaheadConfig) -> None:
    """One-line ``ValueError`` for per-request moves, or a base neither ``tuned`` nor a registered router."""
    if config.candidates == "requests":
        raise ValueError(
            "lookahead.candidates=requests (per-request scheduling moves) applies to single-node scenarios; a "
            "cluster's bound switches among routing rules (candidates=neighbours or base)"
        )
    if config.base != "tuned" and config.base not in ROUTERS:
        raise ValueError(
            f"lookahead.base {config.base!r} is no router; give tuned (the best rule on each episode) or one of "
            f"{', '.join(ROUTERS.names())}"
        )


class RouteLookaheadPolicy(_Bound):
    """The routing bound on ``env`` (``LLMSchedCluster-v0``, reset); ``act`` returns each arrival's planned replica."""

    def __init__(self, env: Any, config: LookaheadConfig, seed: int = 0) -> None:
        refusal = "the routing lookahead plays LLMSchedCluster-v0 forward; {} is no cluster"
        super().__init__(env, config, seed, ("snapshot", "cluster", "routable"), refusal)
        check_route_lookahead(config)
        self.base_source = ""

    def act(self, observation: np.ndarray, action_mask: np.ndarray) -> int:
        if self._steps == 0:
            self._plan = self._make_plan(observation)
        step = self._steps
        self._steps += 1
        if step >= len(self._plan):  # the env was stepped past where the plan ended: no arrival is left to place
            return int(np.argmax(action_mask))
        return self._plan[step]

    def _rules(self) -> dict[str, Any]:
        """Every candidate rule (and a base given by name outside them), fresh, as the episode's rows build them."""
        ctx = self.env.policy_context()
        names = [name for name in RULES if name in ROUTERS]
        if self.config.base != "tuned" and self.config.base not in names:
            names.append(self.config.base)
        return {name: make_router(name, ctx, self.seed) for name in names}

    def _make_plan(self, observation: np.ndarray) -> list[int]:
        """The replica of every arrival, planned from here (the env is then restored)."""
        u = self.env
        cfg = self.config
        start = u.snapshot()
        good0 = self._good()
        base_name, base_plan, base_good = self._base(start, observation)
        rules = self._rules()  # fresh, in the state the episode's rows start them
        base = rules[base_name]
        others = [n for n in rules if n != base_name and n in RULES]
        names = [base_name] + (others if cfg.candidates == "neighbours" else [])
        plan: list[int] = []
        obs, ended = observation, False
        while not ended:
            snap, snap_obs, net0 = u.snapshot(), obs, self._net()

            def attempt(name: str, snap_obs: np.ndarray = snap_obs, net0: int = net0) -> int:
                o, done = self._play(copy.deepcopy(rules[name]), cfg.horizon, snap_obs)
                if not done:
                    self._play(copy.deepcopy(base), cfg.tail, o)
                return self._net() - net0

            best, _ = self._best(snap, [lambda n=n: attempt(n) for n in names])
            self.num_rollouts += len(names)
            u.restore(snap)
            self.num_decisions += 1
            self.num_switches += best != 0
            obs, ended = self._play(rules[names[best]], cfg.k, snap_obs, record=plan)
        plan_good = self._good() - good0
        u.restore(start)
        return self._keep(plan, plan_good, base_plan, base_good)

    def _base(self, start: Any, observation: np.ndarray) -> tuple[str, list[int], int]:
        """The base rule, its plan played alone from here and the requests it meets; the env is left at ``start``."""
        u = self.env
        good0 = self._good()
        rules = self._rules()
        names = [n for n in rules if n in RULES] if self.config.base == "tuned" else [self.config.base]
        plans: list[list[int]] = []

        def attempt(name: str) -> int:
            plans.append([])
            self._play(rules[name], None, observation, record=plans[-1])
            return self._good() - good0

        k, good = self._best(start, [lambda n=n: attempt(n) for n in names])
        u.restore(start)
        tuned = self.config.base == "tuned"
        self.base_source = f"{names[k]} (the best named rule on this episode)" if tuned else names[k]
        return names[k], plans[k], good

    def _play(
        self, router: Any, n: int | None, observation: np.ndarray, record: list[int] | None = None
    ) -> tuple[np.ndarray, bool]:
        """Route up to ``n`` arrivals (None: all) with ``router``; the last observation and whether the episode
        ended."""
        u = self.env
        obs = observation
        i = 0
        while n is None or i < n:
            a = int(router.act(obs, u.action_masks()))
            obs, _, terminated, truncated, _ = u.step(a)
            if record is not None:
                record.append(a)
            i += 1
            if terminated or truncated:
                return obs, True
        return obs, False

    def _good(self) -> int:
        return sum(rep.engine.num_good for rep in self.env.cluster.replicas)

    def _net(self) -> int:
        return sum(rep.engine.num_good - rep.engine.num_missed for rep in self.env.cluster.replicas)


def lookahead_factory(
    config: LookaheadConfig, seed: int, table: Any = None, *, cluster: bool = False
) -> Callable[[Any], _Bound]:
    """The bound for ``run_episode``'s policy factory: the routing bound on a cluster, else the single-node one."""
    if cluster:
        return lambda env: RouteLookaheadPolicy(env, config, seed)
    return lambda env: LookaheadPolicy(env, config, seed, table)
