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
    """``num_replicas`` replicas serving the requests of library scenario ``base`` at ``rate_rps`` x load.

    ``engine`` / ``cost_model`` (a preset name) default to the base scenario's; ``replicas`` gives one
    ``(EngineConfig, preset)`` per replica instead (heterogeneous hardware). With ``disagg`` the first
    ``disagg.num_prefill`` replicas prefill and the rest decode.
    """

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


# Nominal rates = round-robin + fcfs capacity, measured with `python bench/cluster_capacity.py` (on the last 30% of the
# trace's time, the val and test parts together, with 4,000 and 2,000-request episodes for the 8-replica scenarios, mean
# attainment over seeds 0-2 >= 90%, bisection to 2%; it printed each capacity as a load of a first guess, N x the
# single-node nominal rate: azure-conv-4 0.968 x 45.6, azure-conv-8 0.897 x 91.2, mooncake-4 1.269 x 2.52, mooncake-8
# 1.255 x 5.04, azure-conv-pd 0.917 x 45.6 req/s), rounded down, then checked at load 1.0: attainment 0.901, 0.901,
# 0.902, 0.902, 0.908 (and 0.79-0.89 at load 1.04; azure-conv-8 needed 81.7 rather than 81.8). Per replica: 11.0 and
# 10.2 req/s for Azure (single-node fcfs capacity 11.4; the 8-replica episodes are twice as long) and 0.80 and 0.79
# req/s for Mooncake (single node 0.63: round robin smooths each replica's arrivals).
_AZURE, _MOONCAKE = "Azure conversation trace", "Mooncake conversation trace (12k-token prompts sharing prefixes)"
_MEASURED = (
    ClusterScenario("cluster-azure-conv-4", f"{_AZURE} over 4 Llama-3-8B / H100 replicas", "azure-conv", 4, 44.1),
    # the val and test parts hold 2,747 and 2,166 requests (Azure), 1,939 and 1,969 (Mooncake)
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
# The same clusters serving traffic fitted to the trace's parts (workloads.fitted: generated, each window as long
# as a load needs), at the same nominal rates: a replay's test part holds five windows of 433 (Azure) or 393
# (Mooncake) requests, sustained only up to loads 0.26-1.19 over 4 or 8 replicas, below where routers differ.
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
