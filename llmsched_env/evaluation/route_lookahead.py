"""The routing ``lookahead`` bound: the cluster's clairvoyant reference, played forward on snapshots of the cluster.

    policy = RouteLookaheadPolicy(env, LookaheadConfig(k=64, horizon=64, tail=64), seed=0)  # after env.reset
    metrics = run_episode(env, route_lookahead_factory(LookaheadConfig(), seed), seed)       # as run_cell runs it

The single-node bound (``evaluation.lookahead``) switches among static settings every ``k`` engine iterations;
this one switches among the named routing rules every ``k`` arrivals. At the episode's first arrival it plans
the whole episode on ``LLMSchedCluster-v0``'s own cluster: at each decision point it takes
``env.unwrapped.snapshot()`` and, for each candidate rule, plays that rule for ``horizon`` arrivals followed by
the base rule for ``tail`` more (``None``: to the episode's end), every replica running on as the episode does,
scores the rollout, restores the snapshot, and routes the next ``k`` arrivals with the best-scoring rule (the
earliest on a tie: the base wins ties). Each candidate keeps its own state (a turn, a seeded generator), copied
for every rollout and advanced only by the arrivals it routes in the plan. The score is requests met minus
requests missed over the rollout, across every replica (the env's reward with its default weights).

The candidates (``candidates=neighbours``, the default) are the deterministic named rules (``RULES``: every router
``baselines.routing`` names but ``random``); ``candidates=base`` plays the base alone. The base is ``base=`` a rule
by name, or (``base=tuned``, the default: routers have no tuned entry) the rule that meets the most requests on this
episode played from its start. The finished plan is compared with its base played alone over the whole episode
and replaced by it when the base meets more: with the default base, the bound's attainment is never below any
candidate rule's on the same episode (each built with the episode's seed, as its own row is). The plan is a list
of replicas, one per arrival, which the env's steps then replay exactly (``restore`` is exact).

It is not deployable: its rollouts route requests that have not arrived yet, with their true lengths, on the same
simulator that judges it. It bounds what switching among the named rules every ``k`` arrivals could gain (not
what any placement of each request could: that search is exponential). Rows carry
``decision.lookahead.BOUND_MARK``.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np

from llmsched_env.decision.lookahead import LookaheadConfig
from llmsched_env.decision.registry import ROUTERS, make_router

__all__ = ["RULES", "RouteLookaheadPolicy", "check_route_lookahead", "route_lookahead_factory"]

# the named rules a plan switches among (``random`` is a floor, never a plan's best guess)
RULES = ("round_robin", "least_outstanding", "least_kv_load", "prefix_affinity", "power_of_two")


def check_route_lookahead(config: LookaheadConfig) -> None:
    """One-line ``ValueError`` when ``config`` has no meaning for routers: per-request moves
    (``candidates=requests``) or a base that is neither ``tuned`` nor a registered router."""
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


class RouteLookaheadPolicy:
    """The routing ``lookahead`` bound on ``env`` (``LLMSchedCluster-v0``, already reset for the episode it plays;
    see the module docstring). ``act(observation, action_mask)`` returns the planned replica of each arrival.

    ``base_source`` names the base rule (and, for ``base=tuned``, that it was the best on the episode);
    ``num_decisions`` and ``num_switches`` (decisions that chose a rule other than the base) count what its plan
    did, ``num_rollouts`` the rollouts it played, ``kept_plan`` is False when the base alone met more requests
    and was played instead, and ``planned_met`` is the number of requests the played plan met (the env's own
    steps then meet exactly as many)."""

    def __init__(self, env: gym.Env, config: LookaheadConfig, seed: int = 0) -> None:
        u: Any = env.unwrapped
        if not hasattr(u, "snapshot") or not hasattr(u, "cluster") or not hasattr(u, "routable"):
            name = type(u).__name__
            raise ValueError(f"the routing lookahead plays LLMSchedCluster-v0 forward; {name} is no cluster")
        if u.cluster is None:
            raise ValueError("lookahead: reset the env before building the bound (it plays the episode from its start)")
        check_route_lookahead(config)
        self.env = u
        self.config = config
        self.seed = seed
        self.base_source = ""
        self.num_decisions = 0
        self.num_switches = 0
        self.num_rollouts = 0
        self.kept_plan = True
        self.planned_met = 0
        self._plan: list[int] = []
        self._steps = 0

    # ------------------------------------------------------------------------------------------ policy
    def start_episode(self) -> None:
        """A new episode on the same env: plan again at its first arrival."""
        self._steps = 0
        self._plan = []

    def act(self, observation: np.ndarray, action_mask: np.ndarray) -> int:
        if self._steps == 0:
            self._plan = self._make_plan(observation)
        step = self._steps
        self._steps += 1
        if step >= len(self._plan):  # the env was stepped past where the plan ended: no arrival is left to place
            return int(np.argmax(action_mask))
        return self._plan[step]

    # ------------------------------------------------------------------------------------------ inside
    def _rules(self) -> dict[str, Any]:
        """Every candidate rule (and a base given by name outside them), fresh, as the episode's rows build them."""
        ctx = self.env.policy_context()
        names = [name for name in RULES if name in ROUTERS]
        if self.config.base != "tuned" and self.config.base not in names:
            names.append(self.config.base)
        return {name: make_router(name, ctx, self.seed) for name in names}

    def _make_plan(self, observation: np.ndarray) -> list[int]:
        """Plan the episode from here (the env is then restored): the base rule, then a rule per ``k`` arrivals,
        then the check against the base alone (module docstring)."""
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
            best, best_score = 0, 0
            for i, name in enumerate(names):
                if i:
                    u.restore(snap)
                o, done = self._play(copy.deepcopy(rules[name]), cfg.horizon, snap_obs)
                if not done:
                    self._play(copy.deepcopy(base), cfg.tail, o)
                score = self._net() - net0
                if i == 0 or score > best_score:
                    best, best_score = i, score
            self.num_rollouts += len(names)
            u.restore(snap)
            self.num_decisions += 1
            self.num_switches += best != 0
            obs, ended = self._play(rules[names[best]], cfg.k, snap_obs, record=plan)
        plan_good = self._good() - good0
        u.restore(start)
        self.kept_plan = plan_good >= base_good
        self.planned_met = max(plan_good, base_good)
        return plan if self.kept_plan else base_plan

    def _base(self, start: Any, observation: np.ndarray) -> tuple[str, list[int], int]:
        """The base rule, its plan (the replica of every arrival when it plays alone from here) and the requests
        it meets; the env is left at ``start``. ``base=tuned``: every candidate rule played alone, the one that
        meets the most (the first on a tie)."""
        u = self.env
        good0 = self._good()
        rules = self._rules()
        names = [n for n in rules if n in RULES] if self.config.base == "tuned" else [self.config.base]
        best: tuple[str, list[int], int] | None = None
        for i, name in enumerate(names):
            if i:
                u.restore(start)
            actions: list[int] = []
            self._play(rules[name], None, observation, record=actions)
            good = self._good() - good0
            if best is None or good > best[2]:
                best = (name, actions, good)
        u.restore(start)
        assert best is not None
        if self.config.base == "tuned":
            self.base_source = f"{best[0]} (the best named rule on this episode)"
        else:
            self.base_source = best[0]
        return best

    def _play(
        self, router: Any, n: int | None, observation: np.ndarray, record: list[int] | None = None
    ) -> tuple[np.ndarray, bool]:
        """Route up to ``n`` arrivals (None: to the episode's end) with ``router`` from ``observation`` (the env's
        current one); the last observation and whether the episode ended (or would be truncated)."""
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


def route_lookahead_factory(config: LookaheadConfig, seed: int) -> Callable[[gym.Env], RouteLookaheadPolicy]:
    """The routing bound for ``run_episode``'s policy factory: built on the env once it is reset."""

    def make(env: gym.Env) -> RouteLookaheadPolicy:
        return RouteLookaheadPolicy(env, config, seed)

    return make
