"""KV-usage accounting (``sim.kv_usage.KVUsage``): time weighting, peak, series, merging, and that the
simulator and the cluster report exactly what it accumulates from their iterations."""

from __future__ import annotations

import numpy as np
import pytest

from llmsched_env.cluster.config import ReplicaSpec
from llmsched_env.cluster.metrics import cluster_metrics
from llmsched_env.cluster.simulator import Cluster
from llmsched_env.costs.loader import load_cost_model
from llmsched_env.engine.batch import Batch, Decision
from llmsched_env.engine.config import SLO_CLASSES, EngineConfig, TenantConfig
from llmsched_env.sim.kv_usage import KVUsage
from llmsched_env.sim.simulator import Simulator
from llmsched_env.workloads.workload import LengthDist, TenantWorkload, WorkloadConfig, generate, tenant_configs

COST = load_cost_model("llama3-8b-h100")
ENGINE = EngineConfig(num_kv_blocks=120, block_size=16, max_num_seqs=16, max_num_batched_tokens=1024)


def _requests(n: int, rate: float, seed: int = 0) -> tuple[WorkloadConfig, list]:
    lengths = LengthDist.lognormal(300, 150, 1.0, 1.0, max_prompt_len=1024, max_output_len=256)
    wl = WorkloadConfig((TenantWorkload(TenantConfig("a", SLO_CLASSES["chat"]), rate, lengths),), num_requests=n)
    return wl, generate(wl, np.random.default_rng(seed))


def test_mean_weighs_each_iteration_by_its_duration() -> None:
    kv = KVUsage()
    assert kv.mean == 0.0 and kv.peak == 0.0
    kv.add(0.5, 3.0)
    kv.add(1.0, 1.0)
    kv.add(0.25, 0.0)  # a zero-length iteration adds nothing to the mean
    assert kv.mean == pytest.approx((0.5 * 3 + 1.0) / 4)
    assert kv.peak == 1.0
    assert kv.metrics("replica/0/") == {"replica/0/kv_usage_mean": kv.mean, "replica/0/kv_usage_peak": 1.0}


def test_series_is_a_fresh_share_of_the_pool() -> None:
    kv = KVUsage()
    for t, used in [(0.0, 0), (0.5, 30), (1.5, 60)]:
        kv.record(t, used)
    t, u = kv.series(num_blocks=60)
    np.testing.assert_array_equal(t, [0.0, 0.5, 1.5])
    np.testing.assert_array_equal(u, [0.0, 0.5, 1.0])
    u[0] = 9.0  # the caller's copy
    assert kv.series(60)[1][0] == 0.0


def test_merged_weighs_pools_by_their_busy_time() -> None:
    a, b = KVUsage(), KVUsage()
    a.add(0.2, 1.0)
    b.add(0.8, 3.0)
    both = KVUsage.merged([a, b])
    assert both.mean == pytest.approx((0.2 + 2.4) / 4)
    assert both.peak == 0.8
    assert KVUsage.merged([]).metrics() == {"kv_usage_mean": 0.0, "kv_usage_peak": 0.0}


class _WatchedSimulator(Simulator):
    """Records the usage and duration of every iteration that ran a batch, independently of KVUsage."""

    def __init__(self, *args: object) -> None:
        self.seen: list[tuple[float, float]] = []
        super().__init__(*args)  # type: ignore[arg-type]

    def execute(self, batch: Batch) -> float:
        dt = super().execute(batch)
        self.seen.append((self.engine.pool.usage, dt))
        return dt


def test_simulator_reports_the_time_weighted_usage_of_its_iterations() -> None:
    wl, reqs = _requests(80, 12.0)
    sim = _WatchedSimulator(ENGINE, tenant_configs(wl), COST, reqs)
    while not sim.done:
        sim.step(Decision())
    usage, dt = np.array(sim.seen).T
    m = sim.metrics()
    assert m["kv_usage_mean"] == pytest.approx(float((usage * dt).sum() / dt.sum()), rel=1e-12)
    assert m["kv_usage_peak"] == usage.max() > 0.5
    t, u = sim.kv_usage_series()
    assert t.shape == (sim.num_steps,) and u.max() <= 1.0


def test_cluster_metrics_merge_the_replicas_accounting() -> None:
    wl, reqs = _requests(60, 20.0, seed=1)
    cluster = Cluster([ReplicaSpec(ENGINE, COST)] * 2, tenant_configs(wl), reqs, lambda i, e: Decision())
    cluster.run(lambda r: r.request_id % 2)
    m = cluster_metrics(cluster)
    reps = cluster.replicas
    for rep in reps:
        assert m[f"replica/{rep.index}/kv_usage_mean"] == rep.kv_usage.mean > 0
    busy = [rep.kv_usage.time_s for rep in reps]
    want = sum(rep.kv_usage.mean * s for rep, s in zip(reps, busy, strict=True)) / sum(busy)
    assert m["kv_usage_mean"] == pytest.approx(want, rel=1e-12)
    assert m["kv_usage_peak"] == max(rep.kv_usage.peak for rep in reps)
