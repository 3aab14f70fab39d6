"""The engine's vLLM-v1 rules, each on a case small enough to follow by hand (the lockstep comparison with
vLLM's own scheduler is tests/test_vllm_parity.py, which needs the [vllm] extra)."""

from __future__ import annotations

from llmsched_env.costs.loader import load_cost_model
from llmsched_env.engine.batch import Decision
from llmsched_env.engine.block_pool import BlockPool
from llmsched_env.engine.config import EngineConfig, TenantConfig
from llmsched_env.engine.engine import Engine
from llmsched_env.engine.invariants import check_engine
from llmsched_env.engine.request import Request, Status

COST = load_cost_model("llama3-8b-h100")
TENANTS = (TenantConfig("t"),)


def _engine(**kw: object) -> Engine:
    cfg = dict(num_kv_blocks=20, block_size=16, max_num_seqs=8, max_num_batched_tokens=256, max_model_len=4096)
    cfg.update(kw)
    return Engine(EngineConfig(**cfg), TENANTS, COST)  # type: ignore[arg-type]


def _step(engine: Engine, decision: Decision) -> None:
    batch = engine.schedule(decision)
    engine.complete(batch, engine.now_s + batch.time_s(COST))
    check_engine(engine)


def test_admission_reserves_the_whole_prefill_unless_told_to_check_the_first_chunk() -> None:
    """vLLM's scheduler_reserve_full_isl: a 240-token prompt needs 15 blocks; with 12 free it waits, although
    its first 64-token chunk (4 blocks) would fit."""
    for full, admitted in ((True, False), (False, True)):
        engine = _engine(reserve_full_prefill=full)
        engine.add_request(Request(0, 0.0, 120, 50))  # 8 blocks once its prompt is in
        _step(engine, Decision(chunk_cap=256))
        engine.add_request(Request(1, engine.now_s, 240, 10))
        batch = engine.schedule(Decision(chunk_cap=64))
        assert (batch.num_admitted == 1) is admitted, f"reserve_full_prefill={full}"


def test_a_block_is_shared_in_the_step_that_computes_it() -> None:
    """Two requests with a 1,024-token common prefix arriving together: the second finds it in the same step."""
    engine = _engine(num_kv_blocks=400, max_num_batched_tokens=4096)
    prefix = (7, 8)  # two 512-token prefix ids
    engine.add_request(Request(0, 0.0, 1100, 5, prefix_ids=prefix))
    engine.add_request(Request(1, 0.0, 1100, 5, prefix_ids=prefix))
    batch = engine.schedule(Decision(token_budget=4096, chunk_cap=4096))
    assert [r.request_id for r in batch.prefill_reqs] == [0, 1]
    assert batch.prefill_chunks == [1100, 1100 - 1024]
    assert engine.num_prefix_hit_tokens == 1024


def test_a_preempted_request_finds_its_own_blocks_again() -> None:
    """Without prefix ids a request's blocks are its own: after a preemption it resumes from those still cached."""
    engine = _engine(num_kv_blocks=24, max_num_seqs=2)
    a, b = Request(0, 0.0, 160, 200), Request(1, 0.0, 160, 200)
    engine.add_request(a)
    engine.add_request(b)
    decision = Decision(chunk_cap=256)
    while not (b.num_preemptions or a.num_preemptions):
        _step(engine, decision)
    victim = b if b.num_preemptions else a
    hits_before = victim.num_prefix_hit_tokens
    while victim.status == Status.WAITING:
        _step(engine, decision)
    assert victim.num_prefix_hit_tokens > hits_before, "the resumed prefill recomputed blocks the pool still held"


def test_free_queue_reuses_empty_blocks_first_and_cached_ones_least_recently_released() -> None:
    pool = BlockPool(6, 4)
    first = pool.allocate(3)
    second = pool.allocate(3)
    for block, h in zip(first, (11, 12, 13), strict=True):
        pool.commit(block, h)
    pool.release(first)  # cached: to the tail, last block first
    pool.release(second)  # empty: to the head, last block first
    assert pool.allocate(3) == list(reversed(second))
    assert pool.num_cached_blocks == 3
    assert pool.allocate(1) == [first[2]] and pool.num_evictions == 1  # the tail block of `first` goes first
    assert pool.lookup([11, 12], 2) == [first[0], first[1]]
    pool.check_invariants()


def test_two_blocks_with_the_same_content_both_stay_findable() -> None:
    """vLLM keeps every block holding a hash: when the one lookups find is evicted, its twin is found instead."""
    pool = BlockPool(4, 4)
    x, y = pool.allocate(1), pool.allocate(1)
    pool.commit(x[0], 99)
    pool.commit(y[0], 99)
    assert pool.lookup([99], 1) == x
    pool.release(x)
    pool.allocate(3)  # the two empty blocks, then x's (evicted)
    assert pool.lookup([99], 1) == y
    pool.check_invariants({y[0]: 1, **{b: 1 for b in range(4) if b != y[0]}})
