"""Named cluster scenarios: a library scenario's requests, tenants and SLOs served by N replicas (their engines
and cost models, ``replicas`` for heterogeneous ones, and the disaggregated layout if any). ``rate_rps``, the
nominal rate (load 1.0), is the capacity of round-robin routing with fcfs on every replica: the highest rate
keeping 90% attainment (seeds 0-2), by bisection to 2% with ``python bench/cluster_capacity.py``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from llmsched_env.cluster.config import DisaggConfig, ReplicaSpec, check_num_replicas
from llmsched_env.common.checks import check_positive
from llmsched_env.common.registry import Registry
from llmsched_env.costs.loader import load_cost_model
from llmsched_env.engine.config import EngineConfig
from llmsched_env.workloads.fitted import FITTED_SUFFIX
from llmsched_env.workloads.library import get_scenario
from llmsched_env.workloads.scenarios import Scenario


@dataclass(frozen=True)
class ClusterScenario:
    """``num_replicas`` replicas serving library scenario ``base`` at ``rate_rps`` x load; ``engine`` /
    ``cost_model`` default to the base's, ``replicas`` gives one ``(EngineConfig, preset)`` each; with ``disagg``
    the first ``disagg.num_prefill`` replicas prefill."""

    name: str
    description: str
    base: str
    num_replicas: int
    rate_rps: float
    num_requests: int = 2000
    engine: EngineConfig | None = None
    cost_model: str | None = None
    replicas: tuple[tuple[EngineConfig, str], ...] | None = None
    disagg: DisaggConfig | None = None

    def __post_init__(self) -> None:
        check_num_replicas("ClusterScenario", "num_replicas", self.num_replicas)
        check_positive(f"ClusterScenario({self.name!r})", "rate_rps", self.rate_rps)
        if self.replicas is not None and len(self.replicas) != self.num_replicas:
            raise ValueError(f"ClusterScenario.replicas has {len(self.replicas)} entries for {self.num_replicas}")
        if self.disagg is not None and self.disagg.num_replicas != self.num_replicas:
            raise ValueError(
                f"ClusterScenario.disagg describes {self.disagg.num_replicas} replicas, not {self.num_replicas}"
            )

    def scenario(self) -> Scenario:
        """The library scenario whose requests, tenants and SLOs this cluster serves."""
        return get_scenario(self.base)

    def specs(self) -> list[ReplicaSpec]:
        """One ``ReplicaSpec`` per replica (cost model presets loaded)."""
        if self.replicas is not None:
            return [ReplicaSpec(e, load_cost_model(cm)) for e, cm in self.replicas]
        base = self.scenario()
        cm = load_cost_model(self.cost_model or base.cost_model)
        return [ReplicaSpec(self.engine or base.engine, cm) for _ in range(self.num_replicas)]


# Nominal rates: round-robin + fcfs capacity (mean attainment over seeds 0-2 >= 90%, bisection to 2%) measured by
# `python bench/cluster_capacity.py` on the val and test parts, rounded down and checked at load 1.0.
_AZURE, _MOONCAKE = "Azure conversation trace", "Mooncake conversation trace (12k-token prompts sharing prefixes)"
_MEASURED = (
    ClusterScenario("cluster-azure-conv-4", f"{_AZURE} over 4 Llama-3-8B / H100 replicas", "azure-conv", 4, 44.1),
    ClusterScenario("cluster-azure-conv-8", f"{_AZURE} over 8 Llama-3-8B / H100 replicas", "azure-conv", 8, 81.7),
    ClusterScenario("cluster-mooncake-4", f"{_MOONCAKE} over 4 replicas", "mooncake-conv", 4, 3.19, 1000),
    ClusterScenario("cluster-mooncake-8", f"{_MOONCAKE} over 8 replicas", "mooncake-conv", 8, 6.32, 1500),
    ClusterScenario(
        "cluster-azure-conv-pd",
        f"{_AZURE}, disaggregated: 2 prefill + 2 decode replicas, 25 GB/s shared KV link",
        "azure-conv",
        4,
        41.8,
        disagg=DisaggConfig(num_prefill=2, num_decode=2),
    ),
)
# The same clusters on traffic fitted to the trace's parts (workloads.fitted), at the same nominal rates.
_FITTED = tuple(
    replace(
        c,
        name=c.name + FITTED_SUFFIX,
        description=f"traffic fitted to the {c.description}",
        base=c.base + FITTED_SUFFIX,
    )
    for c in _MEASURED
)
CLUSTER_SCENARIOS: Registry[ClusterScenario] = Registry("cluster scenario")
for _s in (*_MEASURED, *_FITTED):
    CLUSTER_SCENARIOS.register(_s.name, _s)

list_cluster_scenarios = CLUSTER_SCENARIOS.names
get_cluster_scenario = CLUSTER_SCENARIOS.get
