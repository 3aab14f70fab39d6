"""``mpc`` on ``LLMSched-v1``: the model-predictive planner (``decision.mpc``) as a policy of an episode.

    policy = MPCPolicy(env, MPCConfig(k=64, futures=4), seed=0)        # after env.reset
    metrics = run_episode(env, mpc_factory(MPCConfig(), seed), seed)    # as run_cell runs it

Every ``k`` steps it hands the env's simulator to its ``MPCPlanner``, which forks it into forecast futures (the
requests still to arrive and the true output lengths of live requests are replaced in the fork before anything
runs there: it never sees them) and returns the setting to play for the next ``k`` steps. The candidates are
the base setting (``tuned``'s entry for the scenario, or a named static rule) and every single-knob move of it
(``knob_space.neighbours``), as ``lookahead``'s; with ``candidates=requests`` also the per-request moves of
``decision.moves``, each made on the env's engine at the decision point when chosen. Unlike ``lookahead`` it is
a scheduler one could deploy; its rows are ordinary policy rows.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np

from llmsched_env.decision.actions import ActionSpec
from llmsched_env.decision.moves import REQUEST_MOVES, play
from llmsched_env.decision.mpc import MPCConfig, MPCPlanner
from llmsched_env.engine.batch import Decision
from llmsched_env.evaluation.knob_space import base_decision, neighbours

__all__ = ["MPCPolicy", "mpc_factory", "planner_around"]


class MPCPolicy:
    """``mpc`` on ``env`` (``LLMSched-v1`` of one iteration per step, already reset); ``table``: the tuned-settings
    table of a ``tuned`` base (None: the shipped one). ``act(observation, action_mask)`` ignores the observation:
    it plans on the env's simulator state. ``planner`` holds its counts and planning time. One-line
    ``ValueError`` for an env it cannot plan on, or a scenario without a tuned entry (``base=RULE`` then)."""

    def __init__(self, env: gym.Env, config: MPCConfig, seed: int = 0, table: Any = None) -> None:
        u: Any = env.unwrapped
        if not hasattr(u, "sim") or not hasattr(u, "action_spec") or not hasattr(u, "policy_context"):
            raise ValueError(f"mpc plans on LLMSched-v1's simulator; {type(u).__name__} has no single-node simulator")
        if getattr(u, "iterations_per_step", 1) != 1:
            raise ValueError("mpc needs an env of one engine iteration per step (iterations_per_step=1)")
        if u.sim is None:
            raise ValueError("mpc: reset the env before building the planner")
        self.env = u
        ctx = u.policy_context()
        try:
            base = base_decision(config.base, ctx, seed, table)
        except ValueError as exc:
            reason = str(exc).split(";")[0]
            raise ValueError(
                f"mpc on {ctx.scenario!r}: {reason}; give it a static base (mpc:base=fcfs) or tune the scenario "
                "(llmsched-tune)"
            ) from None
        self.spec = u.action_spec
        self.planner = planner_around(base, self.spec, config, seed)
        self._steps = 0
        self._chosen = 0
        self._emit: dict[tuple[int, int], np.ndarray] = {}

    def start_episode(self) -> None:
        """A new episode on the same env: plan again from its first step."""
        self._steps = 0
        self._chosen = 0

    def act(self, observation: np.ndarray, action_mask: np.ndarray) -> np.ndarray:
        planner = self.planner
        if self._steps % planner.config.k == 0:
            self._chosen = planner.decide(self.env.sim)
            if self._chosen >= len(planner.actions):  # a per-request move: made now, then the base plays
                play(planner.moves[self._chosen - len(planner.actions)], self.env.sim.engine)
                self._chosen = 0
        self._steps += 1
        mask = self.spec.mask(self.env.sim.engine)  # the env's own mask (cached per pattern), as action_mask
        key = (self._chosen, id(mask))
        out = self._emit.get(key)
        if out is None:
            out = self._emit[key] = self.spec.project(self.planner.actions[self._chosen], mask)
        return out.copy()


def planner_around(base: Decision, spec: ActionSpec, config: MPCConfig, seed: int) -> MPCPlanner:
    """The planner over ``base`` and every single-knob move of it in ``spec`` (``knob_space.neighbours``), and with
    ``candidates=requests`` the per-request moves of ``decision.moves``: ``MPCPolicy``'s, and the mpc teacher's."""
    moves = list(REQUEST_MOVES) if config.candidates == "requests" else []
    return MPCPlanner(spec, [base, *neighbours(base, spec)], config, seed, moves)


def mpc_factory(config: MPCConfig, seed: int, table: Any = None) -> Callable[[gym.Env], MPCPolicy]:
    """``mpc`` for ``run_episode``'s policy factory: built on the env once it is reset. ``table``: the
    tuned-settings table its ``tuned`` base reads (None: the shipped table)."""

    def make(env: gym.Env) -> MPCPolicy:
        return MPCPolicy(env, config, seed, table)

    return make
