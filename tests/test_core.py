"""The engine core and the simulator: invariants under random decisions, determinism, lifecycle, bad input."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llmsched_env.cluster.config import ReplicaSpec
from llmsched_env.cluster.simulator import Cluster
from llmsched_env.costs.base import prefill_time_s
from llmsched_env.costs.loader import load_cost_model
from llmsched_env.engine.batch import Decision, QueueOrder
from llmsched_env.engine.config import SLO_CLASSES, EngineConfig, SLOClass, TenantConfig
from llmsched_env.engine.engine import Engine
from llmsched_env.engine.remote_kv import RemoteKVConfig, RemoteKVStore
from llmsched_env.engine.request import Request, Status
from llmsched_env.sim.simulator import Simulator
from llmsched_env.workloads.workload import LengthDist, TenantWorkload, WorkloadConfig, generate, tenant_configs

COST = load_cost_model("llama3-8b-h100")


def _workload(n: int, rate: float, prefix_share: float = 0.0) -> WorkloadConfig:
    lengths = LengthDist.lognormal(200, 100, 1.0, 1.0, max_prompt_len=2048, max_output_len=512)
    return WorkloadConfig(
        (
            TenantWorkload(TenantConfig("a", SLO_CLASSES["interactive"]), rate, lengths, prefix_share=prefix_share),
            TenantWorkload(TenantConfig("b", SLO_CLASSES["batch"], weight=2.0, priority=1), rate / 2, lengths),
            TenantWorkload(TenantConfig("c", SLO_CLASSES["code"]), rate / 4, lengths),
        ),
        num_requests=n,
    )


def _sim(n: int, rate: float, engine: EngineConfig, seed: int = 0, prefix_share: float = 0.0) -> Simulator:
    wl = _workload(n, rate, prefix_share)
    return Simulator(engine, tenant_configs(wl), COST, generate(wl, np.random.default_rng(seed)))


def _random_decision(rng: np.random.Generator) -> Decision:
    return Decision(
        order=QueueOrder(int(rng.integers(len(QueueOrder)))),
        token_budget=int(rng.choice([16, 64, 256, 1024])),
        chunk_cap=int(rng.choice([8, 64, 512, 2048])),
        prefill_first=bool(rng.integers(2)),
        max_admit=int(rng.choice([0, 1, 4, 1 << 30])),
        kv_reserve=float(rng.choice([0.0, 0.1, 0.4])),
        shed=bool(rng.integers(2)),
    )


CONFIGS = [
    EngineConfig(num_kv_blocks=48, block_size=16, max_num_seqs=8, max_num_batched_tokens=1024, max_model_len=4096),
    EngineConfig(num_kv_blocks=300, block_size=8, max_num_seqs=32, max_num_batched_tokens=1024),
    EngineConfig(num_kv_blocks=2000, block_size=16, max_num_seqs=64, max_num_batched_tokens=1024),
    EngineConfig(
        num_kv_blocks=160, block_size=16, max_num_seqs=16, max_num_batched_tokens=1024, victim_rule="lowest_priority"
    ),
]


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), cfg=st.sampled_from(CONFIGS), rate=st.sampled_from([2.0, 20.0, 200.0]))
def test_invariants_hold_every_step_under_random_decisions(seed: int, cfg: EngineConfig, rate: float) -> None:
    sim = _sim(60, rate, cfg, seed=seed, prefix_share=0.5)
    rng = np.random.default_rng(seed)
    steps = 0
    while not sim.done and steps < 4000:
        sim.step(_random_decision(rng))
        sim.check_invariants()
        steps += 1
    engine = sim.engine
    # drain with a decision that always admits, so every request must end finished or rejected
    while not sim.done:
        sim.step(Decision())
        sim.check_invariants()
    assert len(engine.finished) + len(engine.rejected) == 60
    for r in engine.finished:
        assert r.num_output_tokens == r.output_len
    assert engine.num_good + engine.num_missed == 60


def test_thousands_of_steps_with_preemption_and_shedding() -> None:
    sim = _sim(400, 50.0, CONFIGS[0], seed=3, prefix_share=0.3)
    rng = np.random.default_rng(3)
    steps = 0
    while not sim.done:
        d = _random_decision(rng) if steps % 3 else Decision(shed=bool(steps % 2))
        sim.step(d)
        sim.check_invariants()
        steps += 1
    assert steps > 2000
    assert sim.engine.num_preemptions > 0
    assert any(r.reject_reason == "ttft_unreachable" for r in sim.engine.rejected)


def _trajectory(seed: int) -> tuple[list[tuple[float, int, int]], dict[str, float]]:
    sim = _sim(300, 30.0, CONFIGS[1], seed=seed)
    rng = np.random.default_rng(seed)
    traj = []
    while not sim.done:
        b = sim.step(_random_decision(rng))
        traj.append((sim.now_s, b.num_prefill_tokens, b.num_decode_seqs))
    return traj, sim.metrics()


def test_same_seed_same_trajectory_and_metrics() -> None:
    t1, m1 = _trajectory(7)
    t2, m2 = _trajectory(7)
    assert t1 == t2 and m1 == m2
    t3, _ = _trajectory(8)
    assert t3 != t1


def test_idle_engine_jumps_to_next_arrival() -> None:
    tenants = (TenantConfig("t"),)
    reqs = [Request(0, 5.0, 10, 2), Request(1, 100.0, 10, 2)]
    sim = Simulator(EngineConfig(), tenants, COST, reqs)
    assert sim.now_s == 5.0 and sim.engine.num_arrived == 1  # jumped to the first arrival
    while sim.engine.num_arrived < 2:
        sim.step(Decision())
    assert sim.now_s == 100.0  # no idle iterations in between
    while not sim.done:
        sim.step(Decision())
    assert [r.status for r in reqs] == [Status.FINISHED, Status.FINISHED]


def test_chunked_prefill_respects_chunk_cap_and_then_decodes() -> None:
    r, other = Request(0, 0.0, 100, 3), Request(1, 0.0, 8, 8)
    sim = Simulator(EngineConfig(), (TenantConfig("t"),), COST, [r, other])
    chunks = []
    while not sim.done:
        b = sim.step(Decision(chunk_cap=32))
        chunks.append([(q.request_id, c) for q, c in zip(b.prefill_reqs, b.prefill_chunks, strict=True)])
    assert [c for c in chunks if c] == [[(0, 32), (1, 8)], [(0, 32)], [(0, 32)], [(0, 4)]]
    assert r.first_token_s == pytest.approx(r.prefill_token_s[0]) and r.num_output_tokens == 3


def test_a_request_alone_is_not_chunk_capped() -> None:
    """vLLM drops long_prefill_token_threshold when one request is running or waiting: nobody to starve."""
    r = Request(0, 0.0, 100, 3)
    sim = Simulator(EngineConfig(), (TenantConfig("t"),), COST, [r])
    chunks = []
    while not sim.done:
        b = sim.step(Decision(chunk_cap=32))
        chunks.append((b.num_prefill_tokens, b.num_decode_seqs))
    assert chunks == [(100, 0), (0, 1), (0, 1)]


def test_hybrid_batch_never_stalls_decodes_and_prefill_first_does() -> None:
    long_req, short_req = Request(0, 0.0, 16, 50), Request(1, 0.0001, 4000, 5)
    sim = Simulator(EngineConfig(), (TenantConfig("t"),), COST, [long_req, short_req])
    sim.step(Decision())  # prefill of request 0
    while sim.engine.num_arrived < 2:
        sim.step(Decision())
    b = sim.step(Decision(token_budget=512))
    assert b.num_decode_seqs == 1 and b.num_prefill_tokens == 511  # stall-free: decode + chunk
    b = sim.step(Decision(token_budget=512, prefill_first=True))
    assert b.num_decode_seqs == 0 and b.num_prefill_tokens == 512  # prefill-first: the decode waits


def test_no_admission_in_an_iteration_that_preempted() -> None:
    cfg = EngineConfig(num_kv_blocks=10, block_size=16, max_num_seqs=8, max_num_batched_tokens=256)
    reqs = [Request(i, 0.0, 60, 100) for i in range(4)]
    sim = Simulator(cfg, (TenantConfig("t"),), COST, reqs)
    preempting = 0
    while not sim.done:
        preempted_before = sim.engine._preempted_since_schedule
        b = sim.step(Decision())
        if b.num_preempted or preempted_before:
            preempting += 1
            assert b.num_admitted == 0
        sim.check_invariants()
    assert preempting > 0 and all(r.num_output_tokens == r.output_len for r in reqs)


def test_prefix_cache_hit_after_same_prefix_finished() -> None:
    first = Request(0, 0.0, 100, 2, prefix_ids=(1, 2, 3), prefix_id_tokens=32)
    second = Request(1, 10.0, 100, 2, prefix_ids=(1, 2, 3), prefix_id_tokens=32)
    sim = Simulator(EngineConfig(), (TenantConfig("t"),), COST, [first, second])
    while not sim.done:
        sim.step(Decision())
        sim.check_invariants()
    assert first.num_prefix_hit_tokens == 0 and second.num_prefix_hit_tokens == 96


def test_shedding_prices_only_the_prefill_left_after_the_prefix_cache() -> None:
    """A request whose whole prompt could not be prefilled before its TTFT deadline, but whose uncached rest
    can, is kept by shedding: the price is the prefill admission would run now, after the prefix-cache hit."""
    n, shared = 4000, 3968  # 62 prefix ids of 64 tokens: 248 cached blocks of 16
    full = prefill_time_s(COST, n)
    rest = prefill_time_s(COST, n, num_cached_tokens=shared)
    assert rest < full / 10
    tenant = TenantConfig("t", SLOClass("mid", ttft_s=(full + rest) / 2, tpot_s=1.0))
    ids = tuple(range(62))
    first = Request(0, 0.0, n, 2, prefix_ids=ids, prefix_id_tokens=64)
    second = Request(1, 10.0, n, 2, prefix_ids=ids, prefix_id_tokens=64)
    cold = Request(2, 20.0, n, 2, prefix_ids=tuple(range(100, 162)), prefix_id_tokens=64)  # nothing cached
    sim = Simulator(EngineConfig(), (tenant,), COST, [first, second, cold])
    while first.status != Status.FINISHED:
        sim.step(Decision())
    while not sim.done:
        assert sim.engine.now_s + full > sim.engine.now_s + tenant.slo.ttft_s  # the old rule sheds every one
        sim.step(Decision(shed=True))
        sim.check_invariants()
    assert second.status == Status.FINISHED and second.num_prefix_hit_tokens == shared
    assert cold.status == Status.REJECTED and cold.reject_reason == "ttft_unreachable"
    assert second.first_token_s is not None and second.first_token_s - second.arrival_s <= tenant.slo.ttft_s


@pytest.mark.parametrize("where", ["below", "between", "above"])
def test_shedding_looks_a_head_up_only_between_its_two_deadlines(where: str) -> None:
    """A waiting head is priced with no cache hit and with the largest hit a lookup can give (every whole block
    short of its last token): the prefix cache is looked up only when its TTFT falls between the two prices (a
    lookup leaves the request's prefix hashes on it)."""
    n = 4000
    full = prefill_time_s(COST, n)
    best = prefill_time_s(COST, n, num_cached_tokens=(n - 1) // 16 * 16)
    ttft = {"below": best / 2, "between": (best + full) / 2, "above": 2 * full}[where]
    tenant = TenantConfig("t", SLOClass("mid", ttft_s=ttft, tpot_s=1.0))
    blocker = Request(0, 0.0, 64, 200)  # keeps the engine busy: the head below waits for shedding to judge it
    head = Request(1, 0.0, n, 2, prefix_ids=tuple(range(62)), prefix_id_tokens=64)  # nothing of it cached
    sim = Simulator(EngineConfig(max_num_seqs=1), (tenant,), COST, [blocker, head])
    sim.step(Decision())
    assert blocker.status == Status.RUNNING and head.status == Status.WAITING
    assert head.prefix_hashes is None  # never looked up so far
    sim.step(Decision(shed=True))
    sim.check_invariants()
    assert (head.prefix_hashes is not None) == (where == "between")
    assert (head.status == Status.REJECTED) == (where != "above")


def test_a_prefix_id_layout_that_splits_blocks_is_refused_in_one_line() -> None:
    """``prefix_id_tokens`` not a multiple of the block size would give one block hash to different tokens:
    the simulator (engine, single node and cluster) refuses it as the runtime does."""
    bad = Request(0, 0.0, 50, 2, prefix_ids=(1, 2), prefix_id_tokens=24)
    msg = "request 0: prefix_id_tokens=24 is not a multiple of the block size 16"
    for make in (
        lambda: Simulator(EngineConfig(), (TenantConfig("t"),), COST, [bad]),
        lambda: Engine(EngineConfig(), (TenantConfig("t"),), COST).add_request(bad),
        lambda: Cluster([ReplicaSpec(EngineConfig(), COST)], (TenantConfig("t"),), [bad], lambda i, e: Decision()),
    ):
        with pytest.raises(ValueError, match=msg) as err:
            make()
        assert "\n" not in str(err.value)
    for fine in (  # whole blocks per id, or no prefix ids at all
        Request(0, 0.0, 50, 2, prefix_ids=(1, 2), prefix_id_tokens=32),
        Request(0, 0.0, 50, 2, prefix_id_tokens=24),
    ):
        sim = Simulator(EngineConfig(), (TenantConfig("t"),), COST, [fine])
        while not sim.done:
            sim.step(Decision())
        assert fine.status == Status.FINISHED


def test_kv_reserve_holds_admission_but_an_empty_engine_admits() -> None:
    cfg = EngineConfig(num_kv_blocks=20, block_size=16, max_num_seqs=8, max_num_batched_tokens=512)
    reqs = [Request(0, 0.0, 200, 50), Request(1, 0.0, 100, 50)]
    sim = Simulator(cfg, (TenantConfig("t"),), COST, reqs)
    b = sim.step(Decision(kv_reserve=0.9))
    assert b.num_admitted == 1  # empty engine: the reserve does not block the first request
    b = sim.step(Decision(kv_reserve=0.9))
    assert b.num_admitted == 0 and sim.engine.num_waiting_total == 1


def test_requests_too_long_are_rejected_with_a_reason_not_hung() -> None:
    cfg = EngineConfig(num_kv_blocks=8, block_size=16, max_num_seqs=4, max_num_batched_tokens=128, max_model_len=100)
    reqs = [Request(0, 0.0, 90, 20), Request(1, 0.0, 50, 40), Request(2, 0.0, 20, 10)]
    sim = Simulator(cfg, (TenantConfig("t"),), COST, reqs)
    while not sim.done:
        sim.step(Decision())
    assert reqs[0].reject_reason == "exceeds_max_model_len"
    assert reqs[1].status == Status.FINISHED and reqs[2].status == Status.FINISHED
    cfg2 = EngineConfig(num_kv_blocks=4, block_size=16, max_num_seqs=4, max_num_batched_tokens=128)
    big = Request(0, 0.0, 60, 10)
    sim2 = Simulator(cfg2, (TenantConfig("t"),), COST, [big])
    assert sim2.done and big.reject_reason == "exceeds_kv_capacity"


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"num_kv_blocks": 0}, "num_kv_blocks"),
        ({"block_size": -1}, "block_size"),
        ({"max_num_seqs": 1.5}, "max_num_seqs"),
        ({"max_num_seqs": 64, "max_num_batched_tokens": 32}, "max_num_batched_tokens"),
        ({"victim_rule": "oldest"}, "victim_rule"),
    ],
)
def test_invalid_engine_config_names_the_field(kwargs: dict, field: str) -> None:
    with pytest.raises(ValueError, match=field):
        EngineConfig(**kwargs)


def test_invalid_tenant_decision_and_slo_values() -> None:
    with pytest.raises(ValueError, match="ttft_s"):
        SLOClass("x", ttft_s=float("nan"), tpot_s=0.1)
    with pytest.raises(ValueError, match="weight"):
        TenantConfig("x", weight=0.0)
    with pytest.raises(ValueError, match="kv_reserve"):
        Decision(kv_reserve=1.0)
    with pytest.raises(ValueError, match="token_budget"):
        Decision(token_budget=0)
    with pytest.raises(ValueError, match="prompt_len"):
        Request(0, 0.0, 0, 5)


def test_unsorted_requests_are_refused() -> None:
    with pytest.raises(ValueError, match="sorted by arrival"):
        Simulator(EngineConfig(), (TenantConfig("t"),), COST, [Request(0, 2.0, 5, 5), Request(1, 1.0, 5, 5)])


def test_remote_kv_fetch_delays_prefill_and_holds_blocks() -> None:
    cfg = EngineConfig(num_kv_blocks=24, block_size=16, max_num_seqs=4, max_num_batched_tokens=512)
    remote = RemoteKVConfig(latency_s=0.05, bandwidth_gbps=1.0, kv_bytes_per_token=131072)
    first = Request(0, 0.0, 130, 2, prefix_ids=(7, 8), prefix_id_tokens=64)
    flush = Request(1, 1.0, 380, 2)  # needs all 24 blocks: evicts every cached block of the first
    again = Request(2, 2.0, 130, 2, prefix_ids=(7, 8), prefix_id_tokens=64)
    sim = Simulator(cfg, (TenantConfig("t"),), COST, [first, flush, again], remote_kv=remote)
    fetching_seen = False
    while not sim.done:
        sim.step(Decision())
        sim.check_invariants()
        if again.fetch_ready_s:
            fetching_seen = True
            assert again.status == Status.RUNNING and len(again.block_table) == 8  # 128 tokens held
    assert fetching_seen and again.num_remote_tokens == 128 and again.num_prefix_hit_tokens == 0
    fetch_s = 0.05 + 128 * 131072 / 1e9
    assert again.first_token_s - again.first_scheduled_s >= fetch_s
    m = sim.metrics()
    assert m["remote_kv_fetches"] == 1 and m["remote_kv_fetch_mean_s"] == pytest.approx(fetch_s)


def test_remote_kv_congestion_queues_transfers_on_one_link() -> None:
    store = RemoteKVStore(
        RemoteKVConfig(latency_s=0.0, bandwidth_gbps=1.0, kv_bytes_per_token=1000), np.random.default_rng(0)
    )
    a = store.fetch(0.0, 1000)  # 1 MB at 1 GB/s: 1 ms
    b = store.fetch(0.0, 1000)  # waits for the first
    assert a == pytest.approx(0.001) and b == pytest.approx(0.002)
    slow = RemoteKVStore(
        RemoteKVConfig(latency_s=0.0, bandwidth_gbps=1.0, kv_bytes_per_token=1000, slow_prob=1.0, slow_factor=5.0),
        np.random.default_rng(0),
    )
    assert slow.fetch(0.0, 1000) == pytest.approx(0.005)
    with pytest.raises(ValueError, match="slow_prob"):
        RemoteKVConfig(slow_prob=2.0)


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), cfg=st.sampled_from(CONFIGS[:2]))
def test_invariants_with_remote_kv_under_random_decisions(seed: int, cfg: EngineConfig) -> None:
    wl = _workload(60, 30.0, prefix_share=0.8)
    remote = RemoteKVConfig(latency_s=0.01, bandwidth_gbps=2.0, slow_prob=0.3)
    sim = Simulator(
        cfg,
        tenant_configs(wl),
        COST,
        generate(wl, np.random.default_rng(seed)),
        remote_kv=remote,
        rng=np.random.default_rng(seed),
    )
    rng = np.random.default_rng(seed)
    while not sim.done and sim.num_steps < 4000:
        sim.step(_random_decision(rng))
        sim.check_invariants()
    while not sim.done:
        sim.step(Decision())
        sim.check_invariants()
    assert sim.engine.num_fetching == 0
    assert all(r.num_output_tokens == r.output_len for r in sim.engine.finished)


def test_per_request_moves_promote_preempt_and_shed_keep_every_invariant() -> None:
    cfg = EngineConfig(num_kv_blocks=64, block_size=16, max_num_seqs=2, max_num_batched_tokens=4096)
    reqs = [Request(i, 0.0, 40 + 10 * i, 20) for i in range(5)]
    sim = Simulator(cfg, (TenantConfig("t"),), COST, reqs)
    engine = sim.engine
    sim.step(Decision(max_admit=0))  # nobody admitted yet: all five wait, FCFS would take 0 then 1
    engine.promote(reqs[3])
    b = sim.step(Decision())
    assert b.prefill_reqs[:2] == [reqs[3], reqs[0]]  # the promoted one first, then the order resumes
    sim.check_invariants()
    with pytest.raises(ValueError, match="request 3 is not waiting"):
        engine.promote(reqs[3])
    with pytest.raises(ValueError, match="request 1 is not running"):
        engine.preempt_request(reqs[1])
    engine.preempt_request(reqs[3])
    assert reqs[3].status == Status.WAITING and reqs[3].num_preemptions == 1 and engine.head(0) is reqs[3]
    sim.check_invariants()
    assert sim.step(Decision()).num_admitted == 0  # no admission right after a preemption, as vLLM
    engine.shed_request(reqs[4])
    assert reqs[4].status == Status.REJECTED and reqs[4].reject_reason == "shed" and engine.num_missed == 1
    with pytest.raises(ValueError, match="request 4 is not waiting"):
        engine.shed_request(reqs[4])
    while not sim.done:
        sim.step(Decision())
        sim.check_invariants()
    assert sorted(r.request_id for r in engine.finished) == [0, 1, 2, 3] and engine.rejected == [reqs[4]]


def test_a_fork_keeps_the_promotion_on_its_own_copy() -> None:
    cfg = EngineConfig(num_kv_blocks=64, block_size=16, max_num_seqs=1, max_num_batched_tokens=4096)
    sim = Simulator(cfg, (TenantConfig("t"),), COST, [Request(i, 0.0, 40, 4) for i in range(3)])
    sim.step(Decision(max_admit=0))
    sim.engine.promote(sim.requests[2])
    fork = sim.fork()
    first = [sim.step(Decision()).prefill_reqs[0].request_id, fork.step(Decision()).prefill_reqs[0].request_id]
    assert first == [2, 2]
    assert fork.engine.running[2] is not sim.engine.running[2]  # each engine admitted its own copy
