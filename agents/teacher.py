"""Teachers for behaviour cloning and DAgger: the baselines; ``searched``, the best of several settings replayed
on the episode itself (``LLMSchedMix-v0`` only); ``lookahead`` and ``mpc``, a planner's choice in the state asked.

    teacher("tuned,searched", seed)  # tuned's settings on library episodes, the searched best on the others
    teacher("mpc", seed)             # the mpc planner's choice in each state reached
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

import baselines
from baselines.base import FixedPolicy
from baselines.tuned import SHIPPED_TABLE
from llmsched_env.decision.planners.bounds import LookaheadPolicy
from llmsched_env.decision.planners.lookahead import LookaheadConfig
from llmsched_env.decision.planners.mpc import MPCConfig, planner_around
from llmsched_env.decision.planners.tuned import load_tuned_table
from llmsched_env.decision.policy import Policy
from llmsched_env.envs.episode import run_episode

SEARCHED = "searched"
LOOKAHEAD = "lookahead"
MPC = "mpc"
MPC_FALLBACK_BASE = "mixed-slo"  # the base of an episode without a tuned entry: its tuned setting
# chosen greedily on 60 randomised train episodes (bench/teacher_candidates.py): each raised the best-of mean most
DEFAULT_CANDIDATES = ("tuned:mixed-slo", "tuned:default", "tuned:short-long", "tuned:bursty", "tuned:azure-code",
                      "slo_aware")  # fmt: skip
TUNED_PREFIX = "tuned:"


@functools.cache
def shipped_settings() -> dict[str, Any]:
    """Scenario -> its settings (a ``Decision``) in the shipped tuned table, read once per process."""
    table = load_tuned_table(SHIPPED_TABLE, shipped=True)
    return {name: table.settings(name) for name in table.entries}


def candidate_factory(candidate: str, seed: int | None = None) -> Callable[[Any], Policy]:
    """A policy factory of a candidate (a baseline name or ``tuned:SCENARIO``); ``ValueError`` if unknown."""
    if candidate.startswith(TUNED_PREFIX):
        scenario = candidate[len(TUNED_PREFIX) :]
        decision = shipped_settings().get(scenario)
        if decision is None:
            known = ", ".join(sorted(shipped_settings()))
            raise ValueError(f"teacher candidate {candidate!r}: the tuned table has no {scenario!r} (it has {known})")
        return lambda env: FixedPolicy(env.unwrapped.policy_context(), decision)
    return baselines.per_workload(candidate, seed)


def searched(env: Any, candidates: Sequence[str] = DEFAULT_CANDIDATES, seed: int | None = 0) -> Policy:
    """The policy of the candidate with the best (attainment, goodput) on ``env``'s current episode."""
    mix = env.unwrapped
    if not hasattr(mix, "replay"):
        raise ValueError(f"the {SEARCHED!r} teacher replays LLMSchedMix-v0 episodes; {type(mix).__name__} has none")
    if not candidates:
        raise ValueError(f"the {SEARCHED!r} teacher needs at least one candidate")
    best: tuple[tuple[float, float], str] | None = None
    for candidate in candidates:
        replay, episode_seed = mix.replay()
        metrics = run_episode(replay, candidate_factory(candidate, seed), episode_seed)
        replay.close()
        score = (float(metrics["slo_attainment"]), float(metrics.get("goodput_rps", 0.0)))
        if best is None or score > best[0]:
            best = (score, candidate)
    assert best is not None
    return candidate_factory(best[1], seed)(env)


class _StateTeacher:
    """Labels the state it is asked about anew every ``k`` engine iterations, projected onto each mask."""

    spec: Any

    def __init__(self, k: int) -> None:
        self.k = k
        self.num_labels = 0
        self._label: np.ndarray | None = None
        self._at = 0
        self._sim: Any = None

    def _simulator(self) -> Any:
        raise NotImplementedError

    def _decide(self) -> np.ndarray:
        raise NotImplementedError

    def act(self, observation: np.ndarray, action_mask: np.ndarray) -> np.ndarray:
        sim = self._simulator()
        if self._label is None or sim is not self._sim or sim.num_steps - self._at >= self.k:
            self._at = sim.num_steps  # before the label: a lookahead's first rollout plays on this very simulator
            self._label = self._decide()
            self._sim = self._simulator()  # a lookahead's label restored the env (a new Simulator): steps go on there
            self.num_labels += 1
        return self.spec.project(self._label, np.asarray(action_mask, dtype=bool))


class LookaheadTeacher(_StateTeacher):
    """The ``lookahead`` teacher on one episode of ``env``: the lookahead's label for the env's current state."""

    def __init__(self, env: Any, seed: int | None = 0, config: LookaheadConfig | None = None) -> None:
        u = env.unwrapped
        inner = getattr(u, "inner", None)  # LLMSchedMix-v0: the env of the episode it drew
        config = config if config is not None else LookaheadConfig()
        with warnings.catch_warnings():  # a randomised workload has no tuned entry: the fallback base is the rule
            warnings.filterwarnings("ignore", message="lookahead on .*: no tuned settings", category=UserWarning)
            self.bound = LookaheadPolicy(inner if inner is not None else u, config, seed or 0, labels_only=True)
        self.spec = self.bound.spec
        super().__init__(config.k)

    def _simulator(self) -> Any:
        return self.bound.env.sim

    def _decide(self) -> np.ndarray:
        return self.bound.label()


class MPCTeacher(_StateTeacher):
    """The ``mpc`` teacher on one episode of ``env``: the planner's choice for the current state."""

    def __init__(self, env: Any, seed: int | None = 0, config: MPCConfig | None = None) -> None:
        config = config if config is not None else MPCConfig()
        if config.candidates == "requests":
            raise ValueError("mpc labels are actions: candidates=requests (per-request moves) cannot be one")
        u = env.unwrapped
        self.env = getattr(u, "inner", None) or u  # LLMSchedMix-v0: the env of the episode it drew
        scenario = self.env.policy_context().scenario
        settings = shipped_settings()
        base = settings.get(scenario, settings[MPC_FALLBACK_BASE])
        self.spec = self.env.action_spec
        base = self.spec.decode(self.spec.encode(base))  # onto this env's options
        self.planner = planner_around(base, self.spec, config, seed or 0)
        super().__init__(config.k)

    def _simulator(self) -> Any:
        return self.env.sim

    def _decide(self) -> np.ndarray:
        return self.planner.actions[self.planner.decide(self.env.sim)]


def check_teacher(names: str, registry: Any = None) -> None:
    """``ValueError`` naming the first entry of the comma list ``names`` that is no teacher of ``registry``'s kind."""
    from llmsched_env.decision.registry import SCHEDULERS

    registry = SCHEDULERS if registry is None else registry
    extended = registry is SCHEDULERS  # searched, lookahead, mpc and tuned:SCENARIO teach single-node schedulers only
    listed = [n for n in str(names).split(",") if n]  # as per_workload reads them (no spaces around commas)
    if not listed:
        raise ValueError(f"no teacher named in {names!r}")
    for name in listed:
        if extended and name.startswith(TUNED_PREFIX):
            candidate_factory(name)  # its ValueError names the scenario the table lacks
        elif name not in registry and not (extended and name in (SEARCHED, LOOKAHEAD, MPC)):
            known = ", ".join([*registry, *((SEARCHED, LOOKAHEAD, MPC, TUNED_PREFIX + "SCENARIO") if extended else ())])
            raise ValueError(f"unknown {registry.kind} {name!r}; available: {known}")


def teacher(names: str, seed: int | None = None) -> Callable[[Any], Policy]:
    """``baselines.per_workload`` over ``names``, also ``searched``, ``lookahead``, ``mpc`` and ``tuned:SCENARIO``."""
    builders: dict[str, Callable[[Any], Policy]] = {
        SEARCHED: lambda env: searched(env, seed=seed),
        LOOKAHEAD: lambda env: LookaheadTeacher(env, seed),
        MPC: lambda env: MPCTeacher(env, seed),
    }
    for name in names.split(","):
        if name.startswith(TUNED_PREFIX):
            builders[name] = candidate_factory(name, seed)
    return baselines.per_workload(names, seed, builders=builders)
