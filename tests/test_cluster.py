"""The cluster core: invariants across replicas under random routing and local decisions, the one-replica
cluster equals the single-node simulator, metrics, and the routing baselines on micro-scenarios."""

from __future__ import annotations

import numpy as np
import pytest

import baselines
from llmsched_env.cluster.config import DisaggConfig, ReplicaSpec
from llmsched_env.cluster.invariants import check_cluster
from llmsched_env.cluster.metrics import cluster_metrics
from llmsched_env.cluster.simulator import Cluster
from llmsched_env.costs.loader import load_cost_model
from llmsched_env.decision.router import ClusterObservationEncoder, RouterContext, route_mask
from llmsched_env.engine.batch import Decision, QueueOrder
from llmsched_env.engine.config import SLO_CLASSES, EngineConfig, TenantConfig
from llmsched_env.engine.request import Request
from llmsched_env.sim.simulator import Simulator
from llmsched_env.workloads.workload import LengthDist, TenantWorkload, WorkloadConfig, generate, tenant_configs

COST = load_cost_model("llama3-8b-h100")
SMALL = EngineConfig(num_kv_blocks=64, block_size=16, max_num_seqs=8, max_num_batched_tokens=512, max_model_len=2048)
MID = EngineConfig(num_kv_blocks=400, block_size=16, max_num_seqs=32, max_num_batched_tokens=1024)
TENANTS = (TenantConfig("chat", SLO_CLASSES["chat"]),)


def _workload(n: int, rate: float) -> WorkloadConfig:
    lengths = LengthDist.lognormal(200, 100, 1.0, 1.0, max_prompt_len=1500, max_output_len=300)
    return WorkloadConfig(
        (
            TenantWorkload(TenantConfig("a", SLO_CLASSES["interactive"]), rate, lengths, prefix_share=0.5),
            TenantWorkload(TenantConfig("b", SLO_CLASSES["batch"], priority=1), rate / 2, lengths),
        ),
        num_requests=n,
    )


def _random_decide(rng: np.random.Generator):
    def decide(i: int, engine) -> Decision:
        return Decision(
            order=QueueOrder(int(rng.integers(len(QueueOrder)))),
            token_budget=int(rng.choice([64, 256, 512])),
            chunk_cap=int(rng.choice([32, 128, 512])),
            prefill_first=bool(rng.integers(2)),
            max_admit=int(rng.choice([0, 1, 4, 1 << 30])),
            kv_reserve=float(rng.choice([0.0, 0.1])),
            shed=bool(rng.integers(2)),
        )

    return decide


@pytest.mark.parametrize(
    "seed, engines, disagg",
    [
        (0, [SMALL, SMALL, MID], None),
        (1, [SMALL, MID, SMALL, MID], DisaggConfig(2, 2, link_bandwidth_Bps=2e9)),
        (2, [MID, SMALL, SMALL], DisaggConfig(1, 2, shared_link=False, decode_rule="round_robin")),
        (3, [MID, SMALL, SMALL, SMALL], DisaggConfig(1, 3, decode_rule="least_outstanding")),
    ],
)
def test_invariants_every_step_under_random_routing_and_decisions(seed, engines, disagg) -> None:
    wl = _workload(120, 40.0)
    requests = generate(wl, np.random.default_rng(seed))
    rng = np.random.default_rng(seed)
    specs = [ReplicaSpec(e, COST) for e in engines]
    cluster = Cluster(specs, tenant_configs(wl), requests, _random_decide(rng), disagg)
    check_cluster(cluster)
    max_landed = 0
    while cluster.advance() is not None:
        check_cluster(cluster)
        cluster.route(int(rng.choice(cluster.routable)))
        check_cluster(cluster)
        max_landed = max([max_landed] + [len(cluster.replicas[j].engine.landed) for j in cluster.decode_pool])
    check_cluster(cluster)
    assert cluster.done
    m = cluster_metrics(cluster)
    assert m["num_requests"] == 120 and m["num_finished"] + m["num_rejected"] == 120
    assert m["preemptions"] > 0  # the small pools preempt
    if disagg is not None:  # hand-offs waited for decode KV blocks, and decodes were preempted
        assert m["kv_transfers"] > 0 and max_landed > 0
        assert sum(cluster.replicas[j].engine.num_preemptions for j in cluster.decode_pool) > 0


def test_invariants_catch_a_lost_request() -> None:
    wl = _workload(20, 10.0)
    cluster = Cluster([ReplicaSpec(MID, COST)] * 2, tenant_configs(wl), generate(wl, np.random.default_rng(0)), _fcfs)
    cluster.run(lambda r: r.request_id % 2)
    cluster.replicas[1].engine.finished.pop()
    with pytest.raises(AssertionError):
        check_cluster(cluster)


def _fcfs(i: int, engine) -> Decision:
    return Decision()


def test_one_replica_cluster_equals_the_single_node_simulator() -> None:
    wl = _workload(300, 12.0)
    sim = Simulator(MID, tenant_configs(wl), COST, generate(wl, np.random.default_rng(5)))
    while not sim.done:
        sim.step(Decision())
    cluster = Cluster([ReplicaSpec(MID, COST)], tenant_configs(wl), generate(wl, np.random.default_rng(5)), _fcfs)
    cluster.run(lambda r: 0)
    a, b = sim.metrics(), cluster_metrics(cluster)
    for key in ("slo_attainment", "ttft_mean_s", "tpot_p99_s", "itl_p90_s", "e2el_mean_s", "preemptions"):
        assert a[key] == pytest.approx(b[key], rel=1e-9, abs=1e-12), key
    assert b["replica/0/slo_attainment"] == pytest.approx(a["slo_attainment"])


def test_per_replica_metrics_and_imbalance() -> None:
    wl = _workload(200, 30.0)
    cluster = Cluster([ReplicaSpec(MID, COST)] * 4, tenant_configs(wl), generate(wl, np.random.default_rng(1)), _fcfs)
    cluster.run(lambda r: r.request_id % 4)  # request ids are 0..199: 50 each
    m = cluster_metrics(cluster)
    assert [m[f"replica/{i}/num_requests"] for i in range(4)] == [50.0] * 4
    assert m["imbalance/requests_max_mean"] == 1.0 and m["imbalance/requests_cv"] == 0.0
    met = sum(m[f"replica/{i}/slo_attainment"] * 50 for i in range(4))
    assert met == pytest.approx(m["slo_attainment"] * 200)
    skewed = Cluster([ReplicaSpec(MID, COST)] * 4, tenant_configs(wl), generate(wl, np.random.default_rng(1)), _fcfs)
    skewed.run(lambda r: 0 if r.request_id % 4 else 1)  # 150 on replica 0, 50 on replica 1, none elsewhere
    s = cluster_metrics(skewed)
    assert s["imbalance/requests_max_mean"] == pytest.approx(3.0) and s["imbalance/requests_cv"] > 1.0
    assert s["replica/2/num_requests"] == 0.0 and s["replica/2/num_iterations"] == 0.0


def test_bad_cluster_configuration_raises() -> None:
    with pytest.raises(ValueError, match="block_size"):
        Cluster([ReplicaSpec(MID, COST), ReplicaSpec(EngineConfig(block_size=8), COST)], TENANTS, [], _fcfs)
    with pytest.raises(ValueError, match="prefill"):
        Cluster([ReplicaSpec(MID, COST)] * 3, TENANTS, [], _fcfs, DisaggConfig(2, 2))
    with pytest.raises(ValueError, match="decode_rule"):
        DisaggConfig(decode_rule="nearest")
    with pytest.raises(ValueError, match="link_bandwidth_Bps"):
        DisaggConfig(link_bandwidth_Bps=0)
    c = Cluster([ReplicaSpec(MID, COST)] * 2, TENANTS, [Request(0, 0.0, 10, 5)], _fcfs, DisaggConfig(1, 1))
    c.advance()
    with pytest.raises(ValueError, match="routable"):
        c.route(1)  # a decode replica


# ------------------------------------------------------------------------------------------ routing baselines
def _ctx(n: int) -> RouterContext:
    specs = [ReplicaSpec(MID, COST)] * n
    return ClusterObservationEncoder(specs, TENANTS, 10.0).context()


def _obs(ctx: RouterContext, **features: list[float]) -> np.ndarray:
    obs = np.zeros(len(ctx.obs_names), dtype=np.float32)
    for name, values in features.items():
        obs[ctx.feature_index(name)] = values
    return obs


def test_round_robin_cycles_and_skips_masked_replicas() -> None:
    ctx = _ctx(4)
    router = baselines.make_router("round_robin", ctx)
    obs, mask = _obs(ctx), np.ones(4, dtype=bool)
    assert [router.act(obs, mask) for _ in range(6)] == [0, 1, 2, 3, 0, 1]
    mask[3] = False
    assert [router.act(obs, mask) for _ in range(4)] == [2, 0, 1, 2]


def test_least_outstanding_and_least_kv_load_pick_the_idle_replica() -> None:
    ctx = _ctx(4)
    obs = _obs(
        ctx, num_waiting=[0.1, 0.0, 0.0, 0.2], num_running=[0.3, 0.2, 0.0, 0.1], kv_free_per_request=[1, 2, 5, 3]
    )
    mask = np.ones(4, dtype=bool)
    assert baselines.make_router("least_outstanding", ctx).act(obs, mask) == 2
    assert baselines.make_router("least_kv_load", ctx).act(obs, mask) == 2
    mask[2] = False
    assert baselines.make_router("least_outstanding", ctx).act(obs, mask) == 1
    assert baselines.make_router("least_kv_load", ctx).act(obs, mask) == 3


def test_prefix_affinity_follows_the_cached_prefix_under_the_load_cap() -> None:
    """A request served on replica 2 leaves its prefix cached there; the next one with that prefix goes there,
    unless replica 2 is far more loaded than the rest."""
    prefix = (11, 12, 13, 14)
    first = Request(0, 0.0, 2048, 4, prefix_ids=prefix)
    second = Request(1, 5.0, 2100, 4, prefix_ids=prefix)
    cluster = Cluster([ReplicaSpec(MID, COST)] * 4, TENANTS, [first, second], _fcfs)
    enc = ClusterObservationEncoder([ReplicaSpec(MID, COST)] * 4, TENANTS, 10.0)
    router = baselines.make_router("prefix_affinity", enc.context())
    cluster.advance()
    cluster.route(2)
    r = cluster.advance()
    obs = enc.encode(cluster, r)
    hits = obs[enc.context().feature_index("prefix_hit")]
    assert hits[2] == pytest.approx(2048 / 2100, abs=0.01) and not hits[[0, 1, 3]].any()
    assert router.act(obs, route_mask(cluster, r)) == 2
    ctx = enc.context()
    busy = obs.copy()
    busy[ctx.feature_index("num_waiting")] = [0.0, 0.0, 0.5, 0.0]  # 16 requests queued on replica 2
    assert router.act(busy, np.ones(4, dtype=bool)) != 2


def test_power_of_two_is_seeded_and_picks_the_less_loaded_of_its_draws() -> None:
    ctx = _ctx(8)
    obs = _obs(ctx, num_running=[0.8, 0.1, 0.6, 0.2, 0.9, 0.3, 0.7, 0.4])
    mask = np.ones(8, dtype=bool)
    routers = [baselines.make_router("power_of_two", ctx, seed=s) for s in (7, 7, 8)]
    runs = [[router.act(obs, mask) for _ in range(30)] for router in routers]
    assert runs[0] == runs[1] and runs[0] != runs[2]
    assert 4 not in runs[0]  # the most loaded replica never wins a pair
    mask[:] = False
    mask[5] = True
    assert baselines.make_router("power_of_two", ctx, seed=0).act(obs, mask) == 5


def test_router_registry_and_bad_masks() -> None:
    assert baselines.available_routers() == [
        "round_robin",
        "least_outstanding",
        "least_kv_load",
        "prefix_affinity",
        "power_of_two",
        "random",
    ]
    with pytest.raises(ValueError, match="available routers"):
        baselines.make_router("nearest", _ctx(2))
    with pytest.raises(ValueError, match="action_mask"):
        baselines.make_router("random", _ctx(2), seed=0).act(np.zeros(len(_ctx(2).obs_names)), np.zeros(2, bool))
