"""The cluster level: N engines behind a front router on one event clock, colocated or disaggregated
(prefill and decode pools with KV transfers over a link), with its metrics, invariants and scenarios.
"""

# ruff: noqa: F401 (the package re-exports these names)

from llmsched_env.cluster.config import DisaggConfig, KVLink, ReplicaSpec
from llmsched_env.cluster.invariants import check_cluster
from llmsched_env.cluster.metrics import cluster_metrics
from llmsched_env.cluster.scenarios import (
    CLUSTER_SCENARIOS,
    ClusterScenario,
    get_cluster_scenario,
    list_cluster_scenarios,
)
from llmsched_env.cluster.simulator import Cluster, Replica
