"""The paged KV block pool: allocation, reference counts, prefix caching, LRU eviction, vLLM-style usage."""

from __future__ import annotations

import pytest

from llmsched_env.engine.block_pool import BlockPool, chain_hashes


def cached_block(pool: BlockPool, block_hash: int) -> int:
    """Take a block, give it the content ``block_hash`` and release it: it stays cached, evictable."""
    [block] = pool.allocate(1)
    pool.commit(block, block_hash)
    pool.release([block])
    return block


def test_allocate_release_and_usage() -> None:
    pool = BlockPool(4, 16)
    blocks = pool.allocate(3)
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
    table = pool.allocate(4)
    for b, h in zip(table, hashes, strict=True):
        pool.commit(b, h)
    hits = pool.lookup(hashes, max_blocks=3)
    assert hits == table[:3]
    second = pool.allocate(1, shared=hits)
    assert second[:3] == hits and second[3] not in table
    assert [pool.ref_count[b] for b in table] == [2, 2, 2, 1]
    pool.check_invariants({table[0]: 2, table[1]: 2, table[2]: 2, table[3]: 1, second[3]: 1})


def test_chained_hash_depends_on_the_whole_prefix() -> None:
    a = chain_hashes((1, 2), 4, 4, 8)
    b = chain_hashes((9, 2), 4, 4, 8)
    assert a[1] != b[1], "same second id after a different first one must not match"
    assert chain_hashes((1, 2), 4, 4, 6) == a[:1], "only whole blocks inside max_tokens are hashed"


def test_released_cached_blocks_are_evictable_free_and_evicted_lru() -> None:
    pool = BlockPool(3, 4)
    first = cached_block(pool, 111)
    second = cached_block(pool, 222)
    # vLLM usage: cached blocks with no reference count as free.
    assert pool.num_used == 0 and pool.num_free_blocks == 3 and pool.num_cached_blocks == 2
    pool.allocate(1)  # the empty block goes first
    assert pool.num_cached_blocks == 2
    [evicted] = pool.allocate(1)  # then the least recently released cached block
    assert evicted == first and pool.lookup([111], 1) == [] and pool.lookup([222], 1) == [second]
    assert pool.num_evictions == 1
    pool.check_invariants({evicted: 1, 2: 1})


def test_reviving_an_evictable_block() -> None:
    pool = BlockPool(2, 4)
    b = cached_block(pool, 5)
    hits = pool.lookup([5], 1)
    assert pool.allocate(0, shared=hits) == [b]
    assert pool.num_used == 1 and pool.num_cached_blocks == 0 and pool.ref_count[b] == 1
    pool.check_invariants({b: 1})


def test_invariant_check_catches_a_leak() -> None:
    pool = BlockPool(2, 4)
    pool.allocate(1)
    with pytest.raises(AssertionError, match="refcount"):
        pool.check_invariants({})


@pytest.mark.parametrize(
    ("corrupt", "match"),
    [
        (lambda p: p._next.__setitem__(p._next[6], 6), "free queue links disagree"),  # a loop in the free queue
        (lambda p: p._prev.__setitem__(p._next[6], 0), "free queue links disagree"),
        (lambda p: p.ref_count.__setitem__(p._next[6], 1), "a referenced block is also free"),
        (lambda p: p.ref_count.__setitem__(0, -1), "negative reference count"),
        (lambda p: setattr(p, "_num_free", p._num_free + 1), "counted"),
        (lambda p: p.block_hash.__setitem__(1, 99), "cache maps hash to block 1 holding another hash"),
        (lambda p: setattr(p, "_num_free_cached", 0), "cached free blocks"),
        (lambda p: p.block_hash.__setitem__(3, 42), "blocks hold a hash"),
    ],
)
def test_invariant_check_catches_each_kind_of_corruption(corrupt, match: str) -> None:
    pool = BlockPool(6, 4)
    used = pool.allocate(1)
    cached_block(pool, 7)  # a cached, evictable block
    pool.check_invariants({used[0]: 1})
    corrupt(pool)
    with pytest.raises(AssertionError, match=match):
        pool.check_invariants({used[0]: 1})


def test_can_allocate_counts_free_and_evictable_blocks_and_keeps_the_reserve() -> None:
    pool = BlockPool(6, 4)
    cached_block(pool, 7)  # one block evictable (cached), the rest empty: all six count as free
    assert pool.can_allocate(6) and not pool.can_allocate(7)
    assert pool.can_allocate(4, reserve=2) and not pool.can_allocate(5, reserve=2)
    assert pool.can_allocate(0, reserve=6) and not pool.can_allocate(0, reserve=7)
    assert len(pool.allocate(6)) == 6 and pool.num_evictions == 1  # the cached block was reclaimed
    assert not pool.can_allocate(1) and pool.can_allocate(0)


def test_sharing_an_evictable_block_counts_against_the_free_blocks() -> None:
    pool = BlockPool(4, 4)
    cached = cached_block(pool, 42)
    hits = pool.lookup([42], 1)
    assert hits == [cached] and pool.num_free_blocks == 4
    assert pool.can_allocate(3, shared=hits) and not pool.can_allocate(4, shared=hits)
    assert not pool.can_allocate(2, reserve=2, shared=hits)
    table = pool.allocate(3, shared=hits)
    assert table[0] == cached and pool.num_free_blocks == 0 and pool.num_evictions == 0
    # a block in use costs nothing to share again
    assert pool.can_allocate(0, shared=[cached]) and pool.allocate(0, shared=[cached]) == [cached]
    pool.check_invariants({cached: 2, table[1]: 1, table[2]: 1, table[3]: 1})


def test_allocate_on_a_short_pool_or_a_negative_count_is_an_error() -> None:
    pool = BlockPool(2, 4)
    with pytest.raises(ValueError, match="num_blocks must be >= 0"):
        pool.allocate(-1)
    with pytest.raises(AssertionError, match="can_allocate"):
        pool.allocate(3)
