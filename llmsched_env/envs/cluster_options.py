"""Turning ``LLMSchedCluster-v0``'s keyword arguments into replica specs, a disaggregated layout and local
policies, with ``ValueError`` naming the argument on bad input."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from llmsched_env.cluster.config import DisaggConfig, ReplicaSpec
from llmsched_env.cluster.scenarios import ClusterScenario
from llmsched_env.common.checks import check_int
from llmsched_env.common.fields import as_dataclass
from llmsched_env.costs.base import CostModel
from llmsched_env.costs.loader import cost_model_of
from llmsched_env.decision.policy import Policy
from llmsched_env.decision.registry import SCHEDULERS
from llmsched_env.envs.options import engine_config
from llmsched_env.workloads.scenarios import Scenario

__all__ = ["LocalPolicy", "resolve_disagg", "resolve_local_policies", "resolve_specs"]

LocalPolicy = str | Policy


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
    if replicas is not None:
        if engine is not None or cost_model is not None:
            raise ValueError("give either replicas= (one engine and cost model each) or engine=/cost_model=")
        if num_replicas is not None and len(replicas) != num_replicas:
            raise ValueError(f"num_replicas={num_replicas} but {len(replicas)} replicas were given")
        out = []
        for entry in replicas:
            e, cm = (entry.get("engine"), entry.get("cost_model")) if isinstance(entry, Mapping) else entry
            out.append(ReplicaSpec(engine_config(e or base.engine), _cost_model(cm or base.cost_model)))
        return out
    if num_replicas is None:
        num_replicas = csc.num_replicas if csc is not None else disagg.num_replicas if disagg is not None else 4
    check_int("LLMSchedClusterEnv", "num_replicas", num_replicas, 1)
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
