"""What an evaluation runs, checked once: scenarios, policies, loads, seeds, episode options, backend. Anything
wrong is one ``ValueError`` naming the field. A config pickles with cloudpickle.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from typing import Any

import gymnasium as gym

import llmsched_env  # noqa: F401  (registers LLMSched-v1, LLMSched-v1 and LLMSchedCluster-v0)
from llmsched_env.cluster.scenarios import CLUSTER_SCENARIOS, ClusterScenario
from llmsched_env.common.checks import (
    check_bool,
    check_int,
    check_label,
    check_positive,
    check_seeds,
    check_unique,
    duplicates,
    shown,
)
from llmsched_env.costs.loader import load_cost_model
from llmsched_env.decision.actions import ACTION_COMPONENTS, ActionSpec
from llmsched_env.decision.planners.bounds import check_route_lookahead
from llmsched_env.decision.planners.space import base_decision, static_decision
from llmsched_env.decision.policy_spec import PolicySpec, resolve_policy
from llmsched_env.decision.registry import ROUTERS, SCHEDULERS
from llmsched_env.decision.schema import SCHEMA_VERSION
from llmsched_env.engine.config import EngineConfig
from llmsched_env.envs.options import MAX_EPISODE_REQUESTS, MAX_LOAD, MIN_LOAD
from llmsched_env.envs.single_node import env_id
from llmsched_env.evaluation.runtime_options import RuntimeOptions
from llmsched_env.workloads.library import SCENARIOS
from llmsched_env.workloads.prediction import LengthPredictor
from llmsched_env.workloads.scenarios import Scenario, check_episode_size, check_split

__all__ = ["AnyScenario", "EvalConfig", "InputError", "Row", "traffic_label"]

Row = dict[str, Any]  # one run's (or one summary group's) keys and metrics
AnyScenario = Scenario | ClusterScenario


def traffic_label(scenario: AnyScenario) -> dict[str, str]:
    """``{"traffic": "fitted to FILE"}`` for a scenario of traffic fitted to a trace, else ``{}``."""
    base = scenario.scenario() if isinstance(scenario, ClusterScenario) else scenario
    return {"traffic": base.traffic} if base.traffic else {}


class InputError(ValueError):
    """Bad input found only when a run starts (a model weights file); the command prints it as one line."""


@dataclass(frozen=True, init=False)
class EvalConfig:
    """Every run of an evaluation: each (scenario, load, policy, seed), episodes of ``split`` with ``num_requests``
    requests; ``engine_limits``: ``EngineConfig`` fields over every scenario's engine."""

    scenarios: tuple[AnyScenario, ...]
    policies: tuple[PolicySpec, ...]
    loads: tuple[float, ...]
    seeds: tuple[int, ...]
    split: str
    num_requests: int | None
    cost_model: str | None
    check_invariants: bool
    runtime: RuntimeOptions | None
    engine_limits: Mapping[str, Any] | None
    length_prediction: str | None

    def __init__(
        self,
        scenarios: Sequence[AnyScenario | str] = ("default",),
        policies: Sequence[PolicySpec | str] = ("fcfs",),
        loads: Sequence[float] = (1.0,),
        seeds: Sequence[int] = (0,),
        split: str = "test",
        num_requests: int | None = None,
        cost_model: str | os.PathLike[str] | None = None,
        check_invariants: bool = False,
        runtime: RuntimeOptions | None = None,
        engine_limits: Mapping[str, Any] | None = None,
        length_prediction: str | None = None,
    ) -> None:
        """The fields as given; scenarios and policies by name are resolved here, the lists held as tuples."""
        for name, value in (("scenarios", scenarios), ("policies", policies), ("loads", loads), ("seeds", seeds)):
            if isinstance(value, str):
                raise ValueError(f"EvalConfig.{name} must be a list, got the string {value!r}")
            if not isinstance(value, Iterable):
                raise TypeError(f"EvalConfig.{name} must be a list, got {shown(value)}")
            if not value:
                raise ValueError(f"EvalConfig.{name} needs at least one entry, got {value!r}")
        given = {**locals(), "loads": tuple(loads), "seeds": tuple(seeds)}
        given["scenarios"] = tuple(_scenario(s) for s in scenarios)
        given["policies"] = tuple(p if isinstance(p, PolicySpec) else resolve_policy(p) for p in policies)
        given["cost_model"] = os.fspath(cost_model) if isinstance(cost_model, os.PathLike) else cost_model
        for f in fields(self):  # frozen: set once, here
            object.__setattr__(self, f.name, given[f.name])
        self._check()

    def _check(self) -> None:
        set_ = object.__setattr__  # frozen: normalise once, here
        check_bool("EvalConfig", "check_invariants", self.check_invariants)
        # a name or a path (a CostModel object is the env's argument: this config's record names its file)
        if self.cost_model is not None and not isinstance(self.cost_model, str):
            raise ValueError(
                f"EvalConfig.cost_model must be a cost-model preset name or a JSON path, got {self.cost_model!r}"
            )
        for load in self.loads:
            check_positive("EvalConfig", "loads", load)
            if not MIN_LOAD <= load <= MAX_LOAD:  # the env's bounds, checked before anything runs
                raise ValueError(f"EvalConfig.loads must be between {MIN_LOAD} and {MAX_LOAD}, got {load!r}")
        check_seeds("EvalConfig", "seeds", self.seeds)
        check_unique("EvalConfig.scenarios", [s.name for s in self.scenarios])  # a repeat would count runs twice
        for scenario in self.scenarios:  # the names label the tables' rows (a trace's: its file's stem)
            check_label("EvalConfig.scenarios: scenario name", scenario.name)
        for spec in self.policies:  # NAME=PATH's NAME, or the folder's or table's name
            check_label("EvalConfig.policies: policy name", spec.name)
        check_unique("EvalConfig.loads", self.loads)
        check_unique("EvalConfig.seeds", self.seeds)
        try:
            check_split(self.split)
        except ValueError as exc:
            raise ValueError(f"EvalConfig.split: {exc}") from None
        if self.num_requests is not None:
            check_int("EvalConfig", "num_requests", self.num_requests, 1)
            if self.num_requests > MAX_EPISODE_REQUESTS:
                raise ValueError(
                    f"EvalConfig.num_requests must be at most {MAX_EPISODE_REQUESTS}, got {self.num_requests}"
                )
        if self.length_prediction is not None:
            try:
                set_(self, "length_prediction", str(LengthPredictor.of(self.length_prediction)))
            except ValueError as exc:
                raise ValueError(f"EvalConfig.length_prediction: {exc}") from None
        if self.runtime is not None and not isinstance(self.runtime, RuntimeOptions):
            raise ValueError(f"EvalConfig.runtime must be RuntimeOptions or None, got {self.runtime!r}")
        dup = duplicates(spec.name for spec in self.policies)
        if dup:
            raise ValueError(
                f"EvalConfig.policies: {', '.join(dup)} given more than once; give each policy once (two policy "
                "files of the same name: name each one with name=path)"
            )
        self._check_kinds()
        if self.engine_limits:
            set_(self, "scenarios", tuple(self._with_limits(s) for s in self.scenarios))
        for scenario in self.scenarios:  # an episode larger than a trace's part, or seeds beyond its disjoint
            self._check_windows(scenario)  # val/test windows, fail here, naming the file and what it holds
        if self.runtime is not None and self.cost_model is None:
            set_(self, "cost_model", self.runtime.cost_model_preset())
        if self.cost_model is not None:  # a bad preset name or file fails here, not inside the first run
            load_cost_model(self.cost_model)
        self._check_policies()

    @property
    def is_cluster(self) -> bool:
        """Whether the scenarios are cluster scenarios (the policies are routers)."""
        return isinstance(self.scenarios[0], ClusterScenario)

    @property
    def num_runs(self) -> int:
        """Episodes in the grid: scenarios x loads x policies x seeds."""
        return len(self.scenarios) * len(self.loads) * len(self.policies) * len(self.seeds)

    def make_env(
        self, scenario: AnyScenario, load: float, iterations_per_step: int = 1, schema: int | None = None
    ) -> gym.Env:
        """The env of ``scenario`` at ``load`` with this config's episode options."""
        common: dict[str, Any] = {
            "scenario": scenario,
            "split": self.split,
            "num_requests": self.num_requests,
            "load": load,
            "cost_model": self.cost_model,
            "check_invariants": self.check_invariants,
        }
        if isinstance(scenario, ClusterScenario):  # a router decides per arrival: no iterations_per_step
            return gym.make("LLMSchedCluster-v0", **common)
        return gym.make(
            env_id(SCHEMA_VERSION if schema is None else schema),  # the env of the policy's observation schema
            iterations_per_step=iterations_per_step,
            length_prediction=self.length_prediction,
            **common,
        )

    def _check_kinds(self) -> None:
        clusters = [isinstance(s, ClusterScenario) for s in self.scenarios]
        if any(clusters) and not all(clusters):
            raise ValueError("evaluate cluster scenarios (routers) and single-node scenarios (schedulers) separately")
        if self.is_cluster and self.runtime is not None:
            raise ValueError("the torch runtime backend serves single-node scenarios only")
        if self.is_cluster and self.length_prediction is not None:
            raise ValueError("length_prediction applies to single-node scenarios (the routers do not read it)")
        bounds = [p for p in self.policies if p.lookahead is not None]
        if bounds and self.runtime is not None:
            raise ValueError(
                f"policy {bounds[0].name!r} plays the simulator forward on snapshots; it cannot run on the torch "
                "runtime backend"
            )
        planners = [p for p in self.policies if p.mpc is not None]
        if planners and (self.runtime is not None or self.is_cluster):
            where = "the torch runtime backend" if self.runtime is not None else "cluster scenarios"
            raise ValueError(
                f"policy {planners[0].name!r} plans on forks of the single-node simulator; it cannot run on {where}"
            )
        for p in bounds if self.is_cluster else ():  # the routing bound: rules, not scheduling moves
            assert p.lookahead is not None
            try:
                check_route_lookahead(p.lookahead)
            except ValueError as exc:
                raise ValueError(f"policy {p.name!r} on cluster scenarios: {exc}") from None
        right = ROUTERS.names() if self.is_cluster else SCHEDULERS.names()
        misplaced = [p.baseline for p in self.policies if p.baseline and p.baseline not in right]
        if misplaced:
            kind = "single-node schedulers" if self.is_cluster else "routers (cluster scenarios only)"
            raise ValueError(f"{misplaced} are {kind}; use {'routers' if self.is_cluster else 'schedulers'} here")

    def _check_windows(self, scenario: AnyScenario) -> None:
        """``ValueError`` when an episode does not fit in ``scenario``'s part or its seeds' windows."""
        base = scenario.scenario() if isinstance(scenario, ClusterScenario) else scenario
        size = self.num_requests if self.num_requests is not None else scenario.num_requests
        try:
            check_episode_size(base, self.split, size, self.seeds)
        except ValueError as exc:
            named = isinstance(scenario, ClusterScenario) or scenario.name in SCENARIOS
            raise ValueError(f"scenario {scenario.name!r}: {exc}" if named else str(exc)) from None

    def _with_limits(self, scenario: AnyScenario) -> Scenario:
        """``scenario`` with ``engine_limits`` over its engine (``ValueError`` naming the field)."""
        limits = dict(self.engine_limits or {})
        if not isinstance(scenario, Scenario):
            raise ValueError(f"EvalConfig.engine_limits apply to single-node scenarios, not {scenario.name!r}")
        known = [f.name for f in fields(EngineConfig)]
        unknown = sorted(set(limits) - set(known))
        if unknown:
            raise ValueError(f"EvalConfig.engine_limits: unknown field(s) {unknown}; EngineConfig has {known}")
        try:
            engine = replace(scenario.engine, **limits)
        except ValueError as exc:
            raise ValueError(f"scenario {scenario.name!r}: {exc}") from None
        return replace(scenario, engine=engine)

    def tuned_table(self) -> Any:
        """The table of the evaluation's own ``tuned`` policy (None: the shipped one)."""
        return next((p.table for p in self.policies if p.baseline == "tuned" and p.table is not None), None)

    def _check_policies(self) -> None:
        """Every policy must fit every scenario, found here, not mid-grid."""
        exported = [p for p in self.policies if p.path is not None]
        baselines = [] if self.is_cluster else [p for p in self.policies if p.path is None]
        if not exported and not baselines:
            return
        if exported:
            from llmsched_env.decision.policy_file import action_options
        by_schema: dict[int, list[PolicySpec]] = {}
        for spec in [*exported, *baselines]:
            by_schema.setdefault(spec.schema, []).append(spec)
        for scenario in self.scenarios:
            for schema, specs in by_schema.items():
                env: Any = self.make_env(scenario, 1.0, schema=schema)
                u = env.unwrapped
                spec_ = u.action_spec
                options = action_options(spec_) if exported and isinstance(spec_, ActionSpec) else None
                components = getattr(spec_, "components", ACTION_COMPONENTS)
                try:
                    for spec in specs:
                        try:
                            if spec.path is not None:
                                spec.load().check_compatible(
                                    u.obs_names,
                                    spec_.nvec,
                                    schema_version=u.schema,
                                    action_options=options,
                                    action_components=components,
                                )
                            elif spec.lookahead is not None:  # its base must be a static rule of this space
                                # (no tuned entry: a fallback, said when run; a cluster's: _check_kinds)
                                if not self.is_cluster and spec.lookahead.base != "tuned":
                                    static_decision(spec.lookahead.base, u.policy_context())
                            elif spec.mpc is not None:  # its base: a tuned entry or a static rule here
                                base_decision(spec.mpc.base, u.policy_context(), 0, self.tuned_table())
                            else:
                                spec.make(env, 0)
                        except ValueError as exc:
                            who = spec.path if spec.path is not None else repr(spec.name)
                            raise ValueError(f"policy {who} cannot run on scenario {scenario.name!r}: {exc}") from None
                finally:
                    env.close()


def _scenario(entry: AnyScenario | str) -> AnyScenario:
    if isinstance(entry, (Scenario, ClusterScenario)):
        return entry
    if isinstance(entry, str):
        if entry in SCENARIOS:
            return SCENARIOS.get(entry)
        if entry in CLUSTER_SCENARIOS:
            return CLUSTER_SCENARIOS.get(entry)
        known = [*SCENARIOS.names(), *CLUSTER_SCENARIOS.names()]
        raise ValueError(f"unknown scenario {entry!r}; available: {', '.join(known)}")
    raise ValueError(f"EvalConfig.scenarios: expected a scenario or its name, got {entry!r}")
