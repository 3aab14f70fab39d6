"""Turning ``LLMSchedCluster-v0``'s keyword arguments into replica specs, a disaggregated layout and local
policies, with ``ValueError`` naming the argument on bad input."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from llmsched_env.cluster.config import MAX_REPLICAS, DisaggConfig, ReplicaSpec, check_num_replicas
from llmsched_env.cluster.scenarios import ClusterScenario
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
