"""The ``lookahead`` bound: a clairvoyant reference that plays the episode forward on snapshots of the env.

    policy = LookaheadPolicy(env, LookaheadConfig(k=64, horizon=64, tail=256), seed=0)   # after env.reset
    metrics = run_episode(env, lookahead_factory(LookaheadConfig(), seed), seed)          # as run_cell runs it

At the episode's first step it plans the whole episode on the env's own simulator: every ``k`` iterations it
takes ``env.unwrapped.snapshot()``, and for each candidate static setting (the base setting first, then every
single-knob move of it, ``knob_space.neighbours``) it plays that setting for ``horizon`` iterations followed by
the base setting for ``tail`` iterations (``None``: to the episode's end), scores the rollout, restores the
snapshot, and keeps the best-scoring setting (the earliest on a tie: the base wins ties) for the next ``k``
iterations. The score is the env's reward with its default weights over the rollout: +1 for every request that
meets its SLOs and -1 for every miss (rejected, TTFT deadline passed, finished too slowly) as each becomes
known; over a rollout to the episode's end it ranks candidates exactly by SLO attainment, the figure the tables
judge by. A bounded tail makes each choice a forecast, and greedy choices can end behind, so the finished plan
is compared with the base setting played alone over the whole episode and replaced by it when the base meets
more requests: the bound's attainment is never below its base's. The env's steps then replay the plan exactly
(``restore`` is exact), so the episode's metrics are those of the trajectory the plan found.

It is not deployable: its rollouts replay requests that have not arrived yet, with their true lengths, on the
same simulator that judges it. It bounds what switching among static settings every ``k`` iterations could
gain; rows carry ``decision.lookahead.BOUND_MARK``. Rollouts drive the simulator directly (no observation is
encoded), so their cost is the simulator's iterations plus one snapshot restore each;
``bench/bench_lookahead.py`` measures it.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np

from llmsched_env.decision.lookahead import LookaheadConfig
from llmsched_env.decision.registry import SCHEDULERS
from llmsched_env.engine.batch import Decision
from llmsched_env.evaluation.knob_space import STATIC_HEURISTICS, neighbours, static_decision

__all__ = ["LookaheadPolicy", "lookahead_factory"]


class LookaheadPolicy:
    """The ``lookahead`` bound on ``env`` (``LLMSched-v0``, already reset for the episode it plays; see the module
    docstring); ``table``: the tuned-settings table (a ``TunedTable`` or a path) of a ``tuned`` base (None: the
    shipped one). ``act(observation, action_mask)`` ignores the observation: it reads the env itself. One-line
    ``ValueError`` for an env it cannot play forward (the cluster env, a runtime, several iterations per step).

    ``base_source`` says where the base setting came from; ``num_decisions`` and ``num_switches`` (decisions that
    chose a setting other than the base) count what its plan did, ``num_rollouts`` the rollouts it played, and
    ``kept_plan`` is False when the base alone did better and was played instead."""

    def __init__(self, env: gym.Env, config: LookaheadConfig, seed: int = 0, table: Any = None) -> None:
        u: Any = env.unwrapped
        if not hasattr(u, "snapshot") or not hasattr(u, "sim") or not hasattr(u, "action_spec"):
            raise ValueError(
                f"lookahead plays LLMSched-v0 forward on snapshots; {type(u).__name__} has no single-node simulator"
            )
        if getattr(u, "iterations_per_step", 1) != 1:
            raise ValueError("lookahead needs an env of one engine iteration per step (iterations_per_step=1)")
        if u.sim is None:
            raise ValueError("lookahead: reset the env before building the bound (it may play the episode's start)")
        self.env = u
        self.config = config
        self.seed = seed
        self.table = table
        self.spec = u.action_spec
        self.base, self.base_source = self._base()
        self.candidates = [self.base]
        if config.candidates == "neighbours":
            self.candidates += neighbours(self.base, self.spec)
        self._actions = [self.spec.encode(d) for d in self.candidates]
        self.num_decisions = 0
        self.num_switches = 0
        self.num_rollouts = 0
        self.kept_plan = True
        self._plan: list[int] = []
        self._steps = 0
        self._emit: dict[tuple[int, int], np.ndarray] = {}

    # ------------------------------------------------------------------------------------------ policy
    def start_episode(self) -> None:
        """A new episode on the same env: plan again at its first step (the base stays the one found)."""
        self._steps = 0
        self._plan = []

    def act(self, observation: np.ndarray, action_mask: np.ndarray) -> np.ndarray:
        if self._steps == 0:
            self._plan = self._make_plan()
        window = self._steps // self.config.k
        chosen = self._plan[window] if window < len(self._plan) else 0
        self._steps += 1
        mask = self.spec.mask(self.env.sim.engine)  # the env's own mask (cached per pattern), as action_mask
        out = self._emit.get((chosen, id(mask)))
        if out is None:
            out = self._emit[(chosen, id(mask))] = self.spec.project(self._actions[chosen], mask)
        return out.copy()

    # ------------------------------------------------------------------------------------------ inside
    def _make_plan(self) -> list[int]:
        """The candidate played in each window of ``k`` iterations, found by playing the whole episode forward
        from here on the env's simulator (the env is then restored): at each window's start every candidate's
        rollout is scored and the best kept. The plan is then checked against the base alone over the whole
        episode and dropped for it if the base meets more requests (a truncated rollout is a forecast, and a
        run of greedy choices can end behind): so the bound never ends below its base. The env's steps then
        replay the plan exactly (``restore`` is exact)."""
        u = self.env
        start = u.snapshot()
        sim = u.sim
        good0 = sim.engine.num_good
        plan: list[int] = []
        while not self._ended():
            plan.append(self._decide())
            self._rollout([(self._actions[plan[-1]], self.config.k)])
        plan_good = u.sim.engine.num_good - good0
        u.restore(start)
        self._rollout([(self._actions[0], None)])
        base_good = u.sim.engine.num_good - good0
        u.restore(start)
        self.num_decisions = len(plan)
        self.num_switches = sum(1 for c in plan if c)
        self.kept_plan = plan_good >= base_good
        return plan if self.kept_plan else [0] * len(plan)

    def _ended(self) -> bool:
        u = self.env
        sim = u.sim
        return sim.done or sim.now_s >= u.horizon_s or sim.num_steps >= u.max_steps

    def _decide(self) -> int:
        """The candidate whose rollout from here scores best (the earliest on a tie); the env is left here."""
        u = self.env
        snap = u.snapshot()
        cfg = self.config
        best, best_score = 0, 0
        for i, action in enumerate(self._actions):
            if i:
                u.restore(snap)  # the first rollout starts from the env as it stands, identical to the snapshot
            score = self._rollout([(action, cfg.horizon), (self._actions[0], cfg.tail)])
            if i == 0 or score > best_score:
                best, best_score = i, score
        u.restore(snap)
        self.num_rollouts += len(self._actions)
        return best

    def _rollout(self, plan: list[tuple[np.ndarray, int | None]]) -> int:
        """Play each (action, iterations) of ``plan`` on the env's simulator (None: to the episode's end), as
        ``env.step`` would (the action projected onto each iteration's mask) but without observations; stops
        where the episode ends or would be truncated. Returns requests met minus requests missed meanwhile."""
        u = self.env
        sim = u.sim
        engine = sim.engine
        spec = self.spec
        start = engine.num_good - engine.num_missed
        horizon_s, max_steps = u.horizon_s, u.max_steps
        for action, n in plan:
            decisions: dict[int, Decision] = {}
            i = 0
            while n is None or i < n:
                if sim.done or sim.now_s >= horizon_s or sim.num_steps >= max_steps:
                    return engine.num_good - engine.num_missed - start
                mask = spec.mask(engine)
                d = decisions.get(id(mask))
                if d is None:
                    d = decisions[id(mask)] = spec.decode(spec.project(action, mask))
                sim.step(d)
                i += 1
        return engine.num_good - engine.num_missed - start

    def _base(self) -> tuple[Decision, str]:
        """The base setting and where it came from: ``tuned``'s entry for the scenario, a named static rule, or,
        without a tuned entry, the static named rule that scores best on this episode played from its start."""
        u = self.env
        ctx = u.policy_context()
        name = self.config.base
        if name != "tuned":
            return static_decision(name, ctx), name
        try:
            tuned: Any = SCHEDULERS.get("tuned")
            made = tuned(ctx, self.seed) if self.table is None else tuned(ctx, self.seed, table=self.table)
            return made.decision, "tuned"
        except ValueError as exc:
            reason = str(exc).split(";")[0]
        rules: dict[Decision, str] = {}
        for rule in STATIC_HEURISTICS:
            try:
                rules.setdefault(static_decision(rule, ctx), rule)
            except ValueError:
                continue  # not in this action space (schema 1 lacks an order)
        snap = u.snapshot()
        scores = []
        for k, d in enumerate(rules):
            if k:
                u.restore(snap)
            scores.append(self._rollout([(self.spec.encode(d), None)]))
        u.restore(snap)
        best = int(np.argmax(scores))  # the first on a tie
        decision, rule = list(rules.items())[best]
        source = f"{rule} (no tuned entry: the best static named rule on this episode)"
        warnings.warn(f"lookahead on {ctx.scenario!r}: {reason}; its base is {source}", stacklevel=2)
        return decision, source


def lookahead_factory(config: LookaheadConfig, seed: int, table: Any = None) -> Callable[[gym.Env], LookaheadPolicy]:
    """The bound for ``run_episode``'s policy factory: built on the env once it is reset. ``table``: the
    tuned-settings table its ``tuned`` base reads (``run_cell`` passes the one of the evaluation's own ``tuned``
    policy, e.g. a trace's entry; None: the shipped table)."""

    def make(env: gym.Env) -> LookaheadPolicy:
        return LookaheadPolicy(env, config, seed, table)

    return make
