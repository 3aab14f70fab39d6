"""The paged KV block pool: allocation, reference counts, prefix caching, LRU eviction, vLLM-style usage."""

from __future__ import annotations

import pytest

from llmsched_env.engine.block_pool import BlockPool, chain_hashes


def test_allocate_release_and_usage() -> None:
    pool = BlockPool(4, 16)
    blocks = [pool.allocate() for _ in range(3)]
    assert blocks == [0, 1, 2]
    assert pool.num_used == 3 and pool.num_free_blocks == 1 and pool.usage == pytest.approx(0.75)
    pool.release(blocks)
    assert pool.num_used == 0 and pool.num_free_blocks == 4
    pool.check_invariants({})


def test_blocks_for_rounds_up() -> None:
    pool = BlockPool(4, 16)
    assert [pool.blocks_for(n) for n in (0, 1, 16, 17, 32)] == [0, 1, 1, 2, 2]


def test_prefix_cache_hit_shares_blocks_and_counts_refs() -> None:
    pool = BlockPool(8, 4)
    hashes = chain_hashes((7, 8), prefix_id_tokens=8, block_size=4, max_tokens=16)
    assert len(hashes) == 4
    table = [pool.allocate() for _ in range(4)]
    for b, h in zip(table, hashes, strict=True):
        pool.commit(b, h)
    hits = pool.lookup(hashes, max_blocks=3)
    assert hits == table[:3]
    pool.share(hits)
    assert [pool.ref_count[b] for b in table] == [2, 2, 2, 1]
    pool.check_invariants({table[0]: 2, table[1]: 2, table[2]: 2, table[3]: 1})


def test_chained_hash_depends_on_the_whole_prefix() -> None:
    a = chain_hashes((1, 2), 4, 4, 8)
    b = chain_hashes((9, 2), 4, 4, 8)
    assert a[1] != b[1], "same second id after a different first one must not match"
    assert chain_hashes((1, 2), 4, 4, 6) == a[:1], "only whole blocks inside max_tokens are hashed"


def test_released_cached_blocks_are_evictable_free_and_evicted_lru() -> None:
    pool = BlockPool(3, 4)
    first = pool.allocate()
    pool.commit(first, 111)
    second = pool.allocate()
    pool.commit(second, 222)
    pool.release([first])
    pool.release([second])
    # vLLM usage: cached blocks with no reference count as free.
    assert pool.num_used == 0 and pool.num_free_blocks == 3 and pool.num_cached_blocks == 2
    pool.allocate()  # the empty block goes first
    assert pool.num_cached_blocks == 2
    evicted = pool.allocate()  # then the least recently released cached block
    assert evicted == first and pool.lookup([111], 1) == [] and pool.lookup([222], 1) == [second]
    assert pool.num_evictions == 1
    pool.check_invariants({evicted: 1, 2: 1})


def test_reviving_an_evictable_block() -> None:
    pool = BlockPool(2, 4)
    b = pool.allocate()
    pool.commit(b, 5)
    pool.release([b])
    hits = pool.lookup([5], 1)
    pool.share(hits)
    assert pool.num_used == 1 and pool.num_cached_blocks == 0 and pool.ref_count[b] == 1
    pool.check_invariants({b: 1})


def test_invariant_check_catches_a_leak() -> None:
    pool = BlockPool(2, 4)
    pool.allocate()
    with pytest.raises(AssertionError, match="refcount"):
        pool.check_invariants({})
