"""``mpc`` on ``LLMSched-v1``: the model-predictive planner (``decision.mpc``) as a policy of an episode.

    policy = mpc_on_env(env, MPCConfig(k=64, futures=4), seed=0)        # after env.reset
    metrics = run_episode(env, mpc_factory(MPCConfig(), seed), seed)    # as run_cell runs it

Every ``k`` steps it hands the env's simulator to its ``MPCPlanner``, which forks it into forecast futures (the
requests still to arrive and the true output lengths of live requests are replaced in the fork before anything
runs there: it never sees them) and returns the setting to play for the next ``k`` steps. The candidates are
the base setting (``tuned``'s entry for the scenario, or a named static rule) and every single-knob move of it
(``knob_space.neighbours``), as ``lookahead``'s; with ``candidates=requests`` also the per-request moves of
``decision.moves``, each made on the env's engine at the decision point when chosen. Unlike ``lookahead`` it is
a scheduler one could deploy; its rows are ordinary policy rows. Where a driver other than the env gives it a
state to plan on (``PolicyContext.planning_state``: the in-situ replays, the vLLM adapter), ``PolicySpec.make_for``
builds it with ``decision.mpc.mpc_for``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym

from llmsched_env.decision.mpc import MPCConfig, MPCPolicy, planner_for

__all__ = ["mpc_factory", "mpc_on_env"]


def mpc_on_env(env: gym.Env, config: MPCConfig, seed: int = 0, table: Any = None) -> MPCPolicy:
    """``mpc`` on ``env`` (``LLMSched-v1`` of one iteration per step, already reset), planning on the env's own
    simulator (``live``: a per-request move it chooses is made there); ``table``: the tuned-settings table of a
    ``tuned`` base (``config.table`` first; None: the shipped one). ``planner`` holds its counts and planning
    time. One-line ``ValueError`` for an env it cannot plan on, or a scenario without a tuned entry."""
    u: Any = env.unwrapped
    if not hasattr(u, "sim") or not hasattr(u, "action_spec") or not hasattr(u, "policy_context"):
        raise ValueError(f"mpc plans on LLMSched-v1's simulator; {type(u).__name__} has no single-node simulator")
    if getattr(u, "iterations_per_step", 1) != 1:
        raise ValueError("mpc needs an env of one engine iteration per step (iterations_per_step=1)")
    if u.sim is None:
        raise ValueError("mpc: reset the env before building the planner")
    planner = planner_for(config, u.policy_context(), seed, table)
    return MPCPolicy(planner, lambda: u.sim, live=True)


def mpc_factory(config: MPCConfig, seed: int, table: Any = None) -> Callable[[gym.Env], MPCPolicy]:
    """``mpc`` for ``run_episode``'s policy factory: built on the env once it is reset (``mpc_on_env``). ``table``:
    the tuned-settings table its ``tuned`` base reads (``config.table`` first; None: the shipped table)."""

    def make(env: gym.Env) -> MPCPolicy:
        return mpc_on_env(env, config, seed, table)

    return make
