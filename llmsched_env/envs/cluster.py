"""``LLMSchedCluster-v0``: route requests over N serving engines. A thin wrapper over ``cluster.simulator``."""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from gymnasium import spaces

from llmsched_env.cluster.config import (
    MAX_REPLICAS,
    DisaggConfig,
    ReplicaSpec,
    check_cluster_kv_blocks,
    check_num_replicas,
)
from llmsched_env.cluster.invariants import check_cluster
from llmsched_env.cluster.metrics import cluster_metrics
from llmsched_env.cluster.scenarios import CLUSTER_SCENARIOS, ClusterScenario
from llmsched_env.cluster.simulator import Cluster
from llmsched_env.common.fields import as_dataclass
from llmsched_env.costs.base import CostModel
from llmsched_env.costs.loader import cost_model_of
from llmsched_env.decision.actions import ActionSpec
from llmsched_env.decision.local import LocalScheduler
from llmsched_env.decision.observation import OBS_CLIP, ObservationEncoder
from llmsched_env.decision.policy import Policy, PolicyContext, reads_observation
from llmsched_env.decision.registry import SCHEDULERS
from llmsched_env.decision.router import ClusterObservationEncoder, RouterContext, RouteSpec, route_mask
from llmsched_env.engine.request import Request
from llmsched_env.envs.base import NOT_RESET, EnvBase
from llmsched_env.envs.options import EpisodeConfig, engine_config
from llmsched_env.envs.render import render_cluster_ansi
from llmsched_env.workloads.library import get_scenario
from llmsched_env.workloads.scenarios import Scenario, TraceSource

LocalPolicy = str | Policy


@dataclass(frozen=True, kw_only=True)
class ClusterEnvConfig(EpisodeConfig):
    """``LLMSchedClusterEnv``'s arguments; ``None``: the scenario's."""

    # a cluster scenario (name or ClusterScenario), or a single-node one (its nominal rate x the replica count)
    scenario: str | ClusterScenario | Scenario = "cluster-azure-conv-4"
    num_replicas: int | None = None
    replicas: Sequence[Any] | None = None  # one (engine, cost_model) pair or dict per replica: heterogeneous
    engine: Any = None  # every replica's
    cost_model: str | CostModel | None = None  # every replica's
    disaggregated: DisaggConfig | Mapping[str, Any] | bool | None = None  # False: colocated; a DisaggConfig or dict
    local_policy: LocalPolicy | Sequence[LocalPolicy] = "fcfs"  # a baseline name, a Policy, or one per replica


class LLMSchedClusterEnv(EnvBase[ClusterEnvConfig]):
    """Route each arriving request to one of N LLM serving replicas, one arrival per step.

    ## Description
    N replicas, each the core engine with its own KV pool, limits and cost model, share one clock; each schedules
    its own iterations with a local policy (a single-node baseline or trained policy). With ``disaggregated`` the
    router places requests on a prefill pool; at the first token a request's prompt KV crosses a FIFO link
    (latency + bytes / bandwidth) to the decode replica with the most free KV per request.

    ## Action space
    ``Discrete(num_routable)``: the replica (of the prefill pool when disaggregated). ``action_masks()`` masks
    replicas that could never hold the request (all valid if none could); a masked action moves to the first valid
    replica (``info["action_projected"]``); an out-of-range action raises ``ValueError``.

    ## Observation space
    ``Box(-10, 10, (n,), float32)`` of named features (``obs_names``; ``decision.router``): per replica its queue,
    running set, KV use, free KV per request, queued prefill tokens, TTFT and TPOT over SLO, the arriving
    prompt's prefix hit and its speed; the arriving request's length and tenant; the cluster's arrival rate and
    attainment; disaggregated, the decode pool and the KV link backlog. Counts are over the largest
    ``max_num_seqs``, KV over the largest pool, so heterogeneous replicas compare on one scale.

    ## Rewards
    As ``LLMSched-v1`` (``good`` +1/N, ``miss`` −1/N, ``preempt`` on any replica), so a drained episode returns
    ``2·attainment − 1``. Terms in ``info["rewards"]``.

    ## Episode end
    ``terminated`` once every request has been routed and served (or rejected); ``truncated`` past ``horizon_s``
    or ``max_steps``. The last ``info["metrics"]``: the single-node set, ``replica/i/...`` and ``imbalance/...``.

    ## Arguments
    A ``ClusterEnvConfig`` (each field says what it means), or its fields as keywords; ``load`` is × the
    cluster's nominal rate; SLOs are scaled to replica 0's cost model.
    """

    metadata: dict[str, Any] = {"render_modes": ["ansi"], "render_fps": 10}  # noqa: RUF012
    schema: ClassVar[int] = 1  # the router observation's layout (exported router policies record it)
    config_class = ClusterEnvConfig

    def __init__(self, config: ClusterEnvConfig | None = None, **kwargs: Any) -> None:
        super().__init__(config, **kwargs)
        c = self.config
        scenario = c.scenario
        csc = scenario if isinstance(scenario, ClusterScenario) else None
        if csc is None and str(scenario) in CLUSTER_SCENARIOS:
            csc = CLUSTER_SCENARIOS.get(str(scenario))
        base = csc.scenario() if csc is not None else scenario if isinstance(scenario, Scenario) else None
        base = base or get_scenario(str(scenario))
        self._episode_args(c)
        self.disagg = resolve_disagg(c.disaggregated, csc)
        self.specs = resolve_specs(csc, base, c.num_replicas, c.replicas, c.engine, c.cost_model, self.disagg)
        n = len(self.specs)
        if self.disagg is not None and self.disagg.num_replicas != n:
            raise ValueError(
                f"disaggregated asks for {self.disagg.num_prefill} prefill + {self.disagg.num_decode} decode "
                f"replicas but the cluster has {n}; give num_replicas={self.disagg.num_replicas} or matching replicas"
            )
        check_cluster_kv_blocks("LLMSchedClusterEnv", self.specs, self.disagg)  # before the trace or any pool
        self.num_replicas = n
        self.routable = list(range(self.disagg.num_prefill if self.disagg else n))
        self.scenario, self.base_scenario = csc, base
        self.source = base.source(self.split, self.specs[0].cost_model)
        num_requests = c.num_requests
        if num_requests is None and csc is not None:
            num_requests = csc.num_requests
        elif num_requests is None:  # N x the single-node episode, as much of a trace split as fits
            trace = getattr(self.source, "trace", None)
            num_requests = min(base.num_requests * n, len(trace)) if trace is not None else base.num_requests * n
        self.num_requests = num_requests
        if isinstance(self.source, TraceSource):  # an episode larger than the trace's part fails now, not at reset
            self.source.check_episode(self.num_requests)
        self.tenants = self.source.tenants
        single = self.source.nominal_rate_rps()
        # load 1.0: the cluster scenario's measured rate (per replica, if num_replicas was changed), else N
        # replicas at the single-node scenario's nominal rate each
        self.cluster_rate_rps = csc.rate_rps * n / csc.num_replicas if csc is not None else single * n
        self._source_load = self.cluster_rate_rps / single
        self.local_policy = resolve_local_policies(c.local_policy, n)
        # the replicas' local schedulers see schema 1 (the router's own observation has one layout)
        self.action_specs = [ActionSpec.for_engine(s.engine, schema=1) for s in self.specs]
        self.local_encoders = [ObservationEncoder(s.engine, self.tenants, single) for s in self.specs]
        self.encoder = ClusterObservationEncoder(
            [self.specs[i] for i in self.routable], self.tenants, self.cluster_rate_rps, self.disagg is not None
        )
        self.obs_names = self.encoder.names
        self.action_spec = RouteSpec(len(self.routable))  # for exported router policies
        self.action_space = spaces.Discrete(len(self.routable))
        self.observation_space = spaces.Box(-OBS_CLIP, OBS_CLIP, shape=(self.encoder.size,), dtype=np.float32)
        self.cluster: Cluster | None = None
        self._pending: Request | None = None
        self._steps = 0
        self._signature = (
            ("scenario", csc.name if csc is not None else base.name),
            ("split", self.split),
            ("num_requests", self.num_requests),
            ("replicas", tuple(self.specs)),
            ("disaggregated", self.disagg),
            ("tenants", self.tenants),
            ("cluster_rate_rps", self.cluster_rate_rps),
            ("local_policy", tuple(p if isinstance(p, str) else type(p).__name__ for p in self.local_policy)),
            ("reward", self.reward_config),
            ("horizon_s", self.horizon_s),
            ("max_steps", self.max_steps),
        )

    # ---------------------------------------------------------------------------------------- hooks
    def _core(self) -> Cluster | None:
        return self.cluster

    def _start(self, requests: list[Request]) -> np.ndarray:
        scheduler = self._local_scheduler()
        self.cluster = Cluster(self.specs, self.tenants, requests, scheduler, self.disagg)
        scheduler.cluster = self.cluster
        self._steps = 0
        self._pending = self.cluster.advance()
        return self.encoder.encode(self.cluster, self._pending)

    def _advance(self, action: Any) -> tuple[bool, bool, dict[str, Any]]:
        cluster = self.cluster
        if cluster is None:
            raise RuntimeError(NOT_RESET.format("step"))
        a = _replica_index(action, len(self.routable))
        projected = False
        if self._pending is not None:
            mask = route_mask(cluster, self._pending)
            if not mask[a]:
                a, projected = int(np.argmax(mask)), True
            cluster.route(self.routable[a])
            if self.check_invariants:
                check_cluster(cluster)
            self._pending = cluster.advance()
            if self.check_invariants:
                check_cluster(cluster)
        self._steps += 1
        return self._pending is None, projected, {"replica": self.routable[a]}

    def _progress(self) -> tuple[float, int, int, int, int, int]:
        assert self.cluster is not None
        engines = [rep.engine for rep in self.cluster.replicas]
        return (
            self.cluster.now_s,
            self._steps,
            self.cluster.num_routed,
            sum(e.num_good for e in engines),
            sum(e.num_missed for e in engines),
            sum(e.num_preemptions for e in engines),
        )

    def _metrics(self) -> dict[str, float]:
        assert self.cluster is not None
        return cluster_metrics(self.cluster)

    def _observe(self) -> np.ndarray:
        assert self.cluster is not None
        return self.encoder.encode(self.cluster, self._pending)

    def _mask(self) -> np.ndarray:
        """Replicas that could hold the arriving request."""
        assert self.cluster is not None
        if self._pending is None:
            return np.ones(len(self.routable), dtype=bool)
        return route_mask(self.cluster, self._pending)

    def _check(self) -> None:
        assert self.cluster is not None
        check_cluster(self.cluster)

    def _render(self) -> str:
        assert self.cluster is not None
        return render_cluster_ansi(self.cluster)

    def _fork(self) -> dict[str, Any]:
        """The cluster (replicas' engines, event heap, KV links, requests to route), the step counter and copies
        of the local policies that may hold state (those that read observations)."""
        assert self.cluster is not None
        scheduler = self.cluster.local_decide
        assert isinstance(scheduler, LocalScheduler)  # reset builds the cluster with one
        return {"cluster": self.cluster.fork(scheduler), "policies": _policy_states(scheduler), "step": self._steps}

    def _restore(self, state: dict[str, Any]) -> None:
        scheduler = self.cluster.local_decide if self.cluster is not None else self._local_scheduler()
        assert isinstance(scheduler, LocalScheduler)
        for i, policy in _policy_states(state["policies"]).items():
            scheduler.set_policy(i, policy)
        self._restore_episode(state)
        self.cluster = cluster = state["cluster"].fork(scheduler)
        scheduler.cluster = cluster
        # the arrival advance() returned last (None once all are routed and the cluster has drained)
        self._pending = cluster.requests[cluster.num_routed] if cluster.num_routed < len(cluster.requests) else None
        self._steps = state["step"]

    def policy_context(self) -> RouterContext:
        """The static facts a router is built from (``decision.registry.ROUTERS``, ``baselines.make_router``)."""
        return self.encoder.context()

    def local_policy_context(self, i: int) -> PolicyContext:
        """Replica ``i``'s single-node policy context, named after the single-node scenario the cluster
        replicates (a tuned local policy uses that scenario's settings)."""
        s = self.specs[i]
        names = self.local_encoders[i].names
        return PolicyContext(s.engine, self.tenants, s.cost_model, self.action_specs[i], names, self.base_scenario.name)

    def _local_scheduler(self) -> LocalScheduler:
        policies = []
        for i, p in enumerate(self.local_policy):
            if isinstance(p, str):
                p = SCHEDULERS.get(p)(self.local_policy_context(i), int(self.np_random.integers(2**31)))
            policies.append(p)
        return LocalScheduler(policies, self.action_specs, self.local_encoders)


def _policy_states(source: LocalScheduler | dict[int, Any]) -> dict[int, Any]:
    """Copies of the local policies that may hold state (all but static rules), by replica: of a scheduler's
    policies (``snapshot``), or of the copies a snapshot holds (``restore``, which leaves them as they were)."""
    if isinstance(source, LocalScheduler):
        source = {i: p for i, p in enumerate(source.policies) if reads_observation(p)}
    return {i: _copy_policy(p) for i, p in source.items()}


def _copy_policy(policy: Any) -> Any:
    """A deep copy of ``policy`` that shares the frozen dataclasses it holds (its policy context, action spec:
    immutable, and the bulk of a baseline), so that only what may change (a generator, a memory) is copied."""
    memo: dict[int, Any] = {}
    for value in getattr(policy, "__dict__", {}).values():
        params = getattr(value, "__dataclass_params__", None)
        if params is not None and params.frozen and not isinstance(value, type):
            memo[id(value)] = value
    return copy.deepcopy(policy, memo)


def _replica_index(action: Any, n: int) -> int:
    a = np.asarray(action)
    if a.size != 1 or not np.issubdtype(a.dtype, np.number) or not np.isfinite(a).all() or a.item() != int(a.item()):
        raise ValueError(f"action must be one integer replica index in [0, {n}), got {action!r}")
    i = int(a.item())
    if not 0 <= i < n:
        raise ValueError(f"action must be a replica index in [0, {n}), got {i}")
    return i


# ------------------------------------------------- the keywords as replica specs, a layout, local policies
def resolve_disagg(value: Any, csc: ClusterScenario | None) -> DisaggConfig | None:
    """``disaggregated=``: None keeps the scenario's layout, False is colocated, a dict names DisaggConfig fields."""
    if value is None:
        return csc.disagg if csc is not None else None
    return None if value is False else as_dataclass(DisaggConfig, "disaggregated", value)


def _cost_model(cm: Any) -> CostModel:
    return cost_model_of("LLMSchedClusterEnv.cost_model", cm)


def resolve_specs(
    csc: ClusterScenario | None,
    base: Scenario,
    num_replicas: int | None,
    replicas: Sequence[Any] | None,
    engine: Any,
    cost_model: Any,
    disagg: DisaggConfig | None,
) -> list[ReplicaSpec]:
    """One spec per replica from ``replicas=`` (heterogeneous), else ``num_replicas`` copies of ``engine`` /
    ``cost_model``, else the cluster scenario's, else the base scenario's."""
    if num_replicas is not None:
        check_num_replicas("LLMSchedClusterEnv", "num_replicas", num_replicas)
    if replicas is not None:
        if engine is not None or cost_model is not None:
            raise ValueError("give either replicas= (one engine and cost model each) or engine=/cost_model=")
        entries = _replica_entries(replicas)
        if num_replicas is not None and len(entries) != num_replicas:
            raise ValueError(f"num_replicas={num_replicas} but {len(entries)} replicas were given")
        return [ReplicaSpec(engine_config(e or base.engine), _cost_model(cm or base.cost_model)) for e, cm in entries]
    if num_replicas is None:
        num_replicas = csc.num_replicas if csc is not None else disagg.num_replicas if disagg is not None else 4
    if csc is not None and engine is None and cost_model is None:
        specs = csc.specs()
        if len(specs) == num_replicas:
            return specs
        if csc.replicas is not None:
            raise ValueError(f"{csc.name} lists {len(specs)} heterogeneous replicas; num_replicas must match")
        return [specs[0]] * num_replicas
    if engine is None:
        engine = csc.engine if csc is not None and csc.engine is not None else base.engine
    if cost_model is None:
        cost_model = csc.cost_model if csc is not None and csc.cost_model is not None else base.cost_model
    e, cm = engine_config(engine), _cost_model(cost_model)
    return [ReplicaSpec(e, cm) for _ in range(num_replicas)]


def _replica_entries(replicas: object) -> list[tuple[Any, Any]]:
    """``replicas=`` as ``(engine, cost_model)`` pairs: a list or tuple of 1 to ``MAX_REPLICAS`` entries, each a
    pair or a dict with the keys ``engine`` and ``cost_model`` (either may be left out or None: the base
    scenario's); ``ValueError`` naming ``replicas`` and the entry otherwise."""
    if isinstance(replicas, (str, bytes, Mapping)) or not isinstance(replicas, Sequence):
        raise ValueError(f"LLMSchedClusterEnv.replicas must be a list of replicas, got {type(replicas).__name__}")
    if not 1 <= len(replicas) <= MAX_REPLICAS:
        raise ValueError(f"LLMSchedClusterEnv.replicas must list 1 to {MAX_REPLICAS:,} replicas, got {len(replicas):,}")
    entries = []
    for i, entry in enumerate(replicas):
        if isinstance(entry, Mapping):
            unknown = sorted(map(str, set(entry) - {"engine", "cost_model"}))
            if unknown:
                raise ValueError(
                    f"LLMSchedClusterEnv.replicas[{i}]: unknown keys {unknown}; expected engine, cost_model"
                )
            entries.append((entry.get("engine"), entry.get("cost_model")))
        elif isinstance(entry, Sequence) and not isinstance(entry, (str, bytes)) and len(entry) == 2:
            entries.append((entry[0], entry[1]))
        else:
            raise ValueError(
                f"LLMSchedClusterEnv.replicas[{i}] must be an (engine, cost_model) pair or a dict with those keys, "
                f"got {entry!r}"
            )
    return entries


def resolve_local_policies(value: Any, n: int) -> list[LocalPolicy]:
    """``local_policy=``: one baseline name or policy object for all ``n`` replicas, or one each."""
    items = [value] * n if isinstance(value, str) or not isinstance(value, Sequence) else list(value)
    if len(items) != n:
        raise ValueError(f"local_policy lists {len(items)} policies for {n} replicas")
    for p in items:
        if isinstance(p, str) and p not in SCHEDULERS:
            raise ValueError(f"local_policy {p!r} is not a baseline; available: {', '.join(SCHEDULERS.names())}")
        if not isinstance(p, str) and not callable(getattr(p, "act", None)):
            raise ValueError(f"local_policy entries must be baseline names or objects with act(obs, mask), got {p!r}")
    return items
