"""Disaggregated prefill/decode: TTFT at the prefill replica, the KV transfer in TPOT, no prompt recompute on
the decode replica, hand-offs waiting for decode KV, and transfers queueing on the shared link."""

from __future__ import annotations

import pytest

from llmsched_env.cluster.config import DisaggConfig, ReplicaSpec
from llmsched_env.cluster.invariants import check_cluster
from llmsched_env.cluster.metrics import cluster_metrics
from llmsched_env.cluster.simulator import Cluster
from llmsched_env.costs.loader import load_cost_model
from llmsched_env.engine.batch import Decision
from llmsched_env.engine.config import SLO_CLASSES, EngineConfig, TenantConfig
from llmsched_env.engine.request import Request, Status
from llmsched_env.sim.metrics import token_times

COST = load_cost_model("llama3-8b-h100")
ENGINE = EngineConfig(num_kv_blocks=400, block_size=16, max_num_seqs=32, max_num_batched_tokens=2048)
TENANTS = (TenantConfig("chat", SLO_CLASSES["chat"]),)
KV = 131072  # bytes per token


class Recording:
    """A cost model that records the shape of every batch it prices."""

    def __init__(self) -> None:
        self.batches: list[tuple[int, int]] = []  # (prefill tokens, decode sequences)

    def step_time_s(self, prefill: int, decodes: int, kv_tokens: int, attn_pairs: float) -> float:
        self.batches.append((prefill, decodes))
        return COST.step_time_s(prefill, decodes, kv_tokens, attn_pairs)


def _fcfs(i: int, engine) -> Decision:
    return Decision()


def _run(requests: list[Request], disagg: DisaggConfig | None, engines: list[EngineConfig] | None = None):
    n = disagg.num_replicas if disagg is not None else 1
    costs = [Recording() for _ in range(n)]
    engines = engines or [ENGINE] * n
    cluster = Cluster(
        [ReplicaSpec(e, c) for e, c in zip(engines, costs, strict=True)], TENANTS, requests, _fcfs, disagg
    )
    for c in costs:
        c.batches.clear()  # the idle tick priced at construction
    cluster.run(lambda r: r.request_id % len(cluster.routable))
    check_cluster(cluster)
    return cluster, costs


def test_ttft_at_prefill_transfer_in_tpot_and_no_recompute_on_decode() -> None:
    link = DisaggConfig(1, 1, link_latency_s=0.05, link_bandwidth_Bps=1e9, kv_bytes_per_token=KV)
    cluster, (pre, dec) = _run([Request(0, 1.0, 1000, 11)], link)
    r = cluster.requests[0]
    prefill_s = COST.step_time_s(1000, 0, 0, 1000 * 500.5)
    assert pre.batches == [(1000, 0)]  # the prompt, once, on the prefill replica
    assert r.first_token_s == pytest.approx(1.0 + prefill_s)  # TTFT is measured there
    assert dec.batches == [(0, 1)] * 10  # ten decode rounds, no prefill token on the decode replica
    assert r.num_admitted_tokens == 1000 and cluster.replicas[1].engine.num_prompt_tokens_admitted == 0
    transfer_s = 0.05 + 1000 * KV / 1e9
    times = token_times(r, cluster.replicas[1].engine.round_end_s)
    assert len(times) == 11 and times[1] - times[0] == pytest.approx(transfer_s + COST.step_time_s(0, 1, 1000, 0.0))
    m = cluster_metrics(cluster)
    assert m["ttft_mean_s"] == pytest.approx(prefill_s)
    assert m["tpot_mean_s"] == pytest.approx((times[-1] - times[0]) / 10)
    assert m["kv_transfers"] == 1 and m["kv_transfer_mean_s"] == pytest.approx(transfer_s)
    colocated, _ = _run([Request(0, 1.0, 1000, 11)], None)
    m0 = cluster_metrics(colocated)
    assert m0["ttft_mean_s"] == pytest.approx(prefill_s)
    assert m["tpot_mean_s"] - m0["tpot_mean_s"] == pytest.approx(transfer_s / 10, rel=0.02)


@pytest.mark.parametrize("shared", [True, False])
def test_concurrent_transfers_queue_on_the_shared_link(shared: bool) -> None:
    """Two equal prompts prefill at once on two prefill replicas; their KV leaves at the same instant."""
    link = DisaggConfig(
        2, 2, link_latency_s=0.01, link_bandwidth_Bps=2e9, shared_link=shared, decode_rule="round_robin"
    )
    cluster, _ = _run([Request(0, 0.0, 800, 5), Request(1, 0.0, 800, 5)], link)
    wire_s = 800 * KV / 2e9
    m = cluster_metrics(cluster)
    assert m["kv_transfers"] == 2
    if shared:  # the second waits for the first to leave the link
        assert m["kv_transfer_queue_mean_s"] == pytest.approx(wire_s / 2)
        assert m["kv_transfer_mean_s"] == pytest.approx(0.01 + 1.5 * wire_s)
    else:
        assert m["kv_transfer_queue_mean_s"] == 0.0
        assert m["kv_transfer_mean_s"] == pytest.approx(0.01 + wire_s)
    assert sorted(cluster.home.values()) == [2, 3]


def test_a_handoff_waits_on_the_decode_replica_until_its_kv_fits() -> None:
    """The decode pool (12 blocks) holds one 150-token request at a time: the second waits, landed, without
    preempting the first, and starts decoding after it finishes."""
    small = EngineConfig(num_kv_blocks=12, block_size=16, max_num_seqs=8, max_num_batched_tokens=512)
    link = DisaggConfig(2, 1, link_latency_s=0.001)
    requests = [Request(0, 0.0, 100, 50), Request(1, 0.0, 100, 50)]
    cluster, (_, _, dec) = _run(requests, link, [ENGINE, ENGINE, small])
    a, b = cluster.requests
    assert a.status == b.status == Status.FINISHED and a.num_preemptions == b.num_preemptions == 0
    assert max(d for _, d in dec.batches) == 1  # never two decoding at once
    second = b if b.finish_s > a.finish_s else a  # type: ignore[operator]
    first = a if second is b else b
    times = token_times(second, cluster.replicas[2].engine.round_end_s)
    assert times[1] > first.finish_s  # type: ignore[operator]
    assert cluster.replicas[2].engine.num_arrived == 2 and not cluster.replicas[2].engine.landed


def test_one_token_requests_finish_on_the_prefill_replica() -> None:
    cluster, (_, dec) = _run([Request(0, 0.0, 300, 1)], DisaggConfig(1, 1))
    assert cluster.requests[0].status == Status.FINISHED and not dec.batches and not cluster.in_flight
    assert cluster_metrics(cluster)["kv_transfers"] == 0
