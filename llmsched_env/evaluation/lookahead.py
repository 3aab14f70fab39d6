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

With ``candidates=requests`` each decision also weighs per-request moves, made at the decision point and followed
by the base setting (``REQUEST_MOVES``): one waiting request sent first in the next admission (``Engine.promote``:
the head of each queue order, the waiting request with the most cached prefix, the head of the tenant with the
lowest attainment so far), the running request holding the most KV blocks preempted (``preempt_request``), or a
waiting request shed (``shed_request``: the most urgent, or the longest prompt). A move picks its request from
the state at the decision point, so the plan replays it exactly; a move whose request the base order would send
first anyway, or that picks nobody, is not played. Comparing this bound with the knob-only one says how much
room per-request control has beyond switching static settings.

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

from llmsched_env.decision.knob_space import STATIC_HEURISTICS, base_decision, neighbours, static_decision
from llmsched_env.decision.lookahead import LookaheadConfig
from llmsched_env.decision.loop import DecisionLoop
from llmsched_env.decision.moves import REQUEST_MOVES, make_move, pick, play, redundant
from llmsched_env.decision.mpc import Emitter
from llmsched_env.engine.batch import Decision

__all__ = ["REQUEST_MOVES", "LookaheadPolicy", "lookahead_factory", "pick"]  # the moves: decision.moves


class LookaheadPolicy:
    """The ``lookahead`` bound on ``env`` (``LLMSched-v1``, already reset for the episode it plays; see the module
    docstring); ``table``: the tuned-settings table (a ``TunedTable`` or a path) of a ``tuned`` base (None: the
    shipped one). ``act(observation, action_mask)`` ignores the observation: it reads the env itself. One-line
    ``ValueError`` for an env it cannot play forward (the cluster env, a runtime, several iterations per step).

    ``base_source`` says where the base setting came from; ``num_decisions`` and ``num_switches`` (decisions that
    chose a setting other than the base, or a per-request move) count what its plan did, ``num_moves`` the
    decisions that chose a per-request move, ``num_rollouts`` the rollouts it played, ``kept_plan`` is False
    when the base alone did better and was played instead, and ``planned_met`` is the number of requests the
    played plan met from the episode's first step (the env's own steps then meet exactly as many)."""

    def __init__(
        self, env: gym.Env, config: LookaheadConfig, seed: int = 0, table: Any = None, labels_only: bool = False
    ) -> None:
        u: Any = env.unwrapped
        if not hasattr(u, "snapshot") or not hasattr(u, "sim") or not hasattr(u, "action_spec"):
            raise ValueError(
                f"lookahead plays LLMSched-v1 forward on snapshots; {type(u).__name__} has no single-node simulator"
            )
        if labels_only and config.candidates == "requests":
            raise ValueError("lookahead labels are actions: candidates=requests (per-request moves) cannot be one")
        if not labels_only and getattr(u, "iterations_per_step", 1) != 1:
            raise ValueError("lookahead needs an env of one engine iteration per step (iterations_per_step=1)")
        if u.sim is None:
            raise ValueError("lookahead: reset the env before building the bound (it may play the episode's start)")
        self.env = u
        self.labels_only = labels_only
        self.config = config
        self.seed = seed
        self.table = table
        self.spec = u.action_spec
        # the rollouts apply each candidate as the env applies an action (decision.loop), without observations
        self._loop = DecisionLoop(self.spec, name="lookahead")
        self.base, self.base_source = self._base()
        self.candidates = [self.base]
        if config.candidates in ("neighbours", "requests"):
            self.candidates += neighbours(self.base, self.spec)
        self._actions = [self.spec.encode(d) for d in self.candidates]
        # per-request moves: candidate len(self._actions) + j is move self._moves[j] under the base setting
        self._moves = list(REQUEST_MOVES) if config.candidates == "requests" else []
        self.num_decisions = 0
        self.num_switches = 0
        self.num_moves = 0
        self.num_rollouts = 0
        self.kept_plan = True
        self.planned_met = 0
        self._plan: list[int] = []
        self._steps = 0
        self._emit = Emitter(self.spec, self._actions)

    # ------------------------------------------------------------------------------------------ policy
    def start_episode(self) -> None:
        """A new episode on the same env: plan again at its first step (the base stays the one found)."""
        self._steps = 0
        self._plan = []

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
        mask = self.spec.mask(self.env.sim.engine)  # the env's own mask (cached per pattern), as action_mask
        return self._emit(chosen, mask)

    def label(self) -> np.ndarray:
        """The candidate setting whose rollout from the env's current state scores best, as an action (the base's
        on a tie): the expert's label for that state (DAgger, ``agents.teacher``'s ``lookahead``), whoever brought
        the env there. The env is left as it was (its snapshot restored)."""
        return self._actions[self._decide()].copy()

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
            self._rollout([(self._actions[self._play(plan[-1])], self.config.k)])
        plan_good = u.sim.engine.num_good - good0
        u.restore(start)
        self._rollout([(self._actions[0], None)])
        base_good = u.sim.engine.num_good - good0
        u.restore(start)
        self.num_decisions = len(plan)
        self.num_switches = sum(1 for c in plan if c)
        self.num_moves = sum(1 for c in plan if c >= len(self._actions))
        self.kept_plan = plan_good >= base_good
        self.planned_met = max(plan_good, base_good)  # what the env's steps will meet from here: the replay's check
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
        self.num_rollouts += len(self._actions)
        base = self._actions[0]
        first = self.base.order
        for j, move in enumerate(self._moves):
            u.restore(snap)
            engine = u.sim.engine
            r = pick(move, engine)
            if r is None:
                continue
            if redundant(move, engine, r, first):
                continue  # the base order sends it first anyway: the base's own rollout
            make_move(move, engine, r)
            score = self._rollout([(base, cfg.horizon), (base, cfg.tail)])
            self.num_rollouts += 1
            if score > best_score:
                best, best_score = len(self._actions) + j, score
        u.restore(snap)
        return best

    def _play(self, candidate: int) -> int:
        """Make ``candidate``'s per-request move on the env's engine now, if it is one; the index of the setting it
        plays (its own, or the base's for a move)."""
        if candidate < len(self._actions):
            return candidate
        play(self._moves[candidate - len(self._actions)], self.env.sim.engine)
        return 0

    def _rollout(self, plan: list[tuple[np.ndarray, int | None]]) -> int:
        """Play each (action, iterations) of ``plan`` on the env's simulator (None: to the episode's end), as
        ``env.step`` would (through a ``DecisionLoop``: the action corrected onto each iteration's mask) but without
        observations; stops
        where the episode ends or would be truncated. Returns requests met minus requests missed meanwhile."""
        u = self.env
        sim = u.sim
        engine = sim.engine
        loop = self._loop
        start = engine.num_good - engine.num_missed
        horizon_s, max_steps = u.horizon_s, u.max_steps
        for action, n in plan:
            loop.take(action, hold=None)  # held until the next take, corrected where the mask forbids it
            i = 0
            while n is None or i < n:
                if sim.done or sim.now_s >= horizon_s or sim.num_steps >= max_steps:
                    return engine.num_good - engine.num_missed - start
                d = loop.next(engine)
                assert d is not None  # no ENGINE_DEFAULT fallback here
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
