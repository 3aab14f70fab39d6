"""The paged KV block pool, as vLLM v1's ``BlockPool``: fixed-size blocks, reference counts and a prefix cache of
chained block hashes. Unreferenced blocks keep their hash in one free queue: allocations take the head; released
blocks go to the head when empty, to the tail when cached.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from itertools import islice
from typing import TYPE_CHECKING, TypeAlias

from mypy_extensions import mypyc_attr

if TYPE_CHECKING:
    from llmsched_env.engine.request import Request

# A block's content name: a chained hash (int) for prefix-id content any request may share, or
# ``(request_id, block_index)`` for content only one request has (its own prompt tail and outputs).
BlockHash: TypeAlias = int | tuple[int, int]


def chain_hashes(prefix_ids: Sequence[int], prefix_id_tokens: int, block_size: int, max_tokens: int) -> list[int]:
    """Chained hashes of the full engine blocks within the first ``max_tokens`` tokens covered by ``prefix_ids``
    (``prefix_ids[i]`` names prompt tokens ``[i*prefix_id_tokens, (i+1)*prefix_id_tokens)``, Mooncake's hash_ids)."""
    num_tokens = min(len(prefix_ids) * prefix_id_tokens, max_tokens)
    hashes: list[int] = []
    parent = 0
    for j in range(num_tokens // block_size):
        start = j * block_size
        parent = hash((parent, prefix_ids[start // prefix_id_tokens], start % prefix_id_tokens))
        hashes.append(parent)
    return hashes


def check_prefix_layout(requests: Iterable[Request], block_size: int) -> None:
    """Refuse requests whose ``prefix_id_tokens`` is not a multiple of ``block_size``."""
    for r in requests:
        if r.prefix_ids and r.prefix_id_tokens % block_size:
            raise ValueError(f"request {r.request_id}: prefix_id_tokens={r.prefix_id_tokens} is not a multiple of the "
                             f"block size {block_size}, so a shared block could hold different tokens")


@mypyc_attr(allow_interpreted_subclasses=True)
class BlockPool:
    """``num_blocks`` KV blocks of ``block_size`` tokens, with prefix caching by chained block hashes."""

    def __init__(self, num_blocks: int, block_size: int) -> None:
        self.num_blocks = num_blocks
        self.block_size = block_size
        # The free queue, a doubly linked list through two lists indexed by block with a sentinel at ``num_blocks``
        # (``_next[sentinel]``: the head, ``_prev[sentinel]``: the tail). Initially every block, in id order.
        self._next = [*range(1, num_blocks + 1), 0 if num_blocks else num_blocks]
        self._prev = [num_blocks, *range(num_blocks)]
        self._num_free = num_blocks
        self.ref_count = [0] * num_blocks
        self.block_hash: list[BlockHash | None] = [None] * num_blocks
        # block hash -> the block lookups find; further blocks holding the same content (twins), oldest first
        self._cached: dict[BlockHash, int] = {}
        self._twins: dict[BlockHash, list[int]] = {}
        self._num_free_cached = 0  # free blocks that still hold a hash
        self.num_used = 0
        self.num_evictions = 0

    def copy(self) -> BlockPool:
        """An independent copy in the same state, for ``Engine.fork``."""
        c = BlockPool.__new__(BlockPool)
        (c.num_blocks, c.block_size, c._num_free, c._num_free_cached, c.num_used, c.num_evictions) = (
            self.num_blocks, self.block_size, self._num_free, self._num_free_cached, self.num_used,
            self.num_evictions)  # fmt: skip
        c._next, c._prev, c.ref_count = self._next[:], self._prev[:], self.ref_count[:]
        c.block_hash = self.block_hash[:]
        c._cached = self._cached.copy()
        c._twins = {h: blocks[:] for h, blocks in self._twins.items()}
        return c

    # -- capacity ----------------------------------------------------------------------------------------
    @property
    def num_free_blocks(self) -> int:
        """Blocks an allocation can take now: empty ones plus cached ones no request holds."""
        return self._num_free

    @property
    def num_cached_blocks(self) -> int:
        """Free blocks that still hold reusable content."""
        return self._num_free_cached

    @property
    def usage(self) -> float:
        """Fraction of blocks referenced by running requests (evictable cached blocks count as free)."""
        return self.num_used / self.num_blocks

    def blocks_for(self, num_tokens: int) -> int:
        """Blocks needed to hold ``num_tokens`` tokens."""
        return -(-num_tokens // self.block_size)

    # -- allocation --------------------------------------------------------------------------------------
    def can_allocate(self, num_blocks: int, reserve: int = 0, shared: Sequence[int] = ()) -> bool:
        """Whether ``allocate(num_blocks, shared)`` can run now and leave ``reserve`` blocks free."""
        free = self._num_free - num_blocks
        if shared:
            ref_count = self.ref_count
            free -= sum(1 for b in shared if ref_count[b] == 0)
        return free >= reserve

    def allocate(self, num_blocks: int, shared: Sequence[int] = ()) -> list[int]:
        """Reference each block of ``shared``, then take ``num_blocks`` new ones from the free queue's head
        (forgetting cached content); returns ``shared`` + the new blocks. The pool must have room."""
        if num_blocks < 0:
            raise ValueError(f"BlockPool.allocate: num_blocks must be >= 0, got {num_blocks}")
        table = list(shared)
        if shared:
            self._share(shared)
        assert num_blocks <= self._num_free, "allocate() on a full pool: callers ask can_allocate first"
        ref_count = self.ref_count
        block_hash = self.block_hash
        nxt, prv = self._next, self._prev
        sentinel = self.num_blocks
        cached, twins = self._cached, self._twins
        evicted = 0
        block = nxt[sentinel]  # the head of the free queue; the blocks taken are unlinked at once, after the loop
        for _ in range(num_blocks):
            old = block_hash[block]
            if old is not None:  # a cached block is handed out again: its content is forgotten
                if twins and old in twins:
                    self._unregister(block)
                else:  # _unregister's common case, inlined: this loop runs for most blocks a request gets
                    block_hash[block] = None
                    held = cached.pop(old)
                    assert held == block, f"block {block} holds a hash the cache does not know"
                evicted += 1
            ref_count[block] = 1
            table.append(block)
            block = nxt[block]
        nxt[sentinel] = block
        prv[block] = sentinel
        self._num_free -= num_blocks
        self.num_used += num_blocks
        if evicted:
            self._num_free_cached -= evicted
            self.num_evictions += evicted
        return table

    def allocate_one(self) -> int:
        """``allocate(1)``'s block, without the list: the next block of a growing block table."""
        assert self._num_free, "allocate() on a full pool: callers ask can_allocate first"
        nxt = self._next
        sentinel = self.num_blocks
        block = nxt[sentinel]
        after = nxt[block]
        nxt[sentinel] = after
        self._prev[after] = sentinel
        if self.block_hash[block] is not None:
            self._unregister(block)
            self._num_free_cached -= 1
            self.num_evictions += 1
        self.ref_count[block] = 1
        self._num_free -= 1
        self.num_used += 1
        return block

    def forget(self, block: int) -> None:
        """A block in use will not hold the content its hash names after all: lookups stop finding it."""
        assert self.ref_count[block] > 0, f"forget() on free block {block}"
        if self.block_hash[block] is not None:
            self._unregister(block)

    def _unregister(self, block: int) -> None:
        """``block``'s content is forgotten: lookups stop finding it there."""
        old = self.block_hash[block]
        assert old is not None
        self.block_hash[block] = None
        if not self._twins or old not in self._twins:  # the one block holding that content: the common case
            held = self._cached.pop(old)
            assert held == block, f"block {block} holds a hash the cache does not know"
            return
        twins = self._twins.get(old)
        if self._cached[old] == block:
            if twins:
                self._cached[old] = twins.pop(0)
            else:
                del self._cached[old]
        else:
            assert twins is not None, f"block {block} holds a hash the cache does not know"
            twins.remove(block)
        if twins is not None and not twins:
            del self._twins[old]

    def lookup(self, hashes: Iterable[BlockHash], max_blocks: int) -> list[int]:
        """The cached blocks matching the longest prefix of ``hashes`` (at most ``max_blocks``), oldest holder each."""
        hits: list[int] = []
        cached = self._cached
        for h in islice(hashes, max_blocks):
            block = cached.get(h)
            if block is None:
                break
            hits.append(block)
        return hits

    def _share(self, blocks: Iterable[int]) -> None:
        """Take a reference on cached blocks found by ``lookup`` (taking free ones out of the free queue)."""
        for block in blocks:
            if self.ref_count[block] == 0:
                before, after = self._prev[block], self._next[block]  # out of the free queue
                self._next[before] = after
                self._prev[after] = before
                self._num_free -= 1
                self._num_free_cached -= 1
                self.num_used += 1
            self.ref_count[block] += 1

    def commit(self, block: int, block_hash: BlockHash) -> None:
        """Mark a full block as holding the content named by ``block_hash``, so later requests can share it."""
        if self.block_hash[block] is not None:
            return
        self.block_hash[block] = block_hash
        if self._cached.setdefault(block_hash, block) != block:  # a twin of the block lookups find
            self._twins.setdefault(block_hash, []).append(block)

    def commit_table(self, table: Sequence[int], lo: int, hi: int, hashes: Sequence[int], request_id: int) -> None:
        """``commit`` blocks ``table[lo:hi]``: block ``j`` holds ``hashes[j]``, past them ``(request_id, j)``."""
        block_hash = self.block_hash
        setdefault = self._cached.setdefault
        n = len(hashes)
        for j in range(lo, hi):
            block = table[j]
            if block_hash[block] is not None:
                continue
            h: BlockHash = hashes[j] if j < n else (request_id, j)
            block_hash[block] = h
            if setdefault(h, block) != block:  # a twin of the block lookups find
                self._twins.setdefault(h, []).append(block)

    def release(self, blocks: Sequence[int]) -> None:
        """Drop a reference on each block; freed ones go to the queue's head (empty) or tail (cached), last first."""
        empty: list[int] = []
        ref_count = self.ref_count
        block_hash = self.block_hash
        nxt, prv = self._next, self._prev
        sentinel = self.num_blocks
        tail = prv[sentinel]
        kept = 0
        for block in reversed(blocks):
            count = ref_count[block] - 1
            ref_count[block] = count
            if count:
                kept += 1  # another block table still holds it
            elif block_hash[block] is None:
                empty.append(block)
            else:  # to the tail
                nxt[tail] = block
                prv[block] = tail
                tail = block
        nxt[tail] = sentinel
        prv[sentinel] = tail
        freed = len(blocks) - kept
        cached = freed - len(empty)
        self.num_used -= freed
        self._num_free += freed
        self._num_free_cached += cached
        for block in reversed(empty):  # to the head
            head = nxt[sentinel]
            prv[head] = block
            nxt[block] = head
            prv[block] = sentinel
            nxt[sentinel] = block

    # -- checks ------------------------------------------------------------------------------------------
    def check_invariants(self, expected_refs: dict[int, int] | None = None) -> None:
        """AssertionError unless every block is either used or free and (given) the reference counts equal
        ``expected_refs`` (block -> block tables holding it). O(pool)."""
        n, refs, hashes = self.num_blocks, self.ref_count, self.block_hash
        nxt, prv = self._next, self._prev
        # one walk of the free queue checks its links, that no free block is referenced, and counts the cached ones
        free: set[int] = set()
        cached_free, before, block = 0, n, nxt[n]
        while block != n:  # a loop that misses the sentinel revisits a block: the assertion below ends it
            assert prv[block] == before and block not in free, "free queue links disagree"
            assert not refs[block], "a referenced block is also free"
            free.add(block)
            cached_free += hashes[block] is not None
            before, block = block, nxt[block]
        assert block == n and prv[n] == before, "free queue links disagree"
        assert len(free) == self._num_free, f"free queue of {len(free)} blocks, {self._num_free} counted"
        assert min(refs, default=0) >= 0, "negative reference count"
        used = n - refs.count(0)  # the referenced blocks (list scans in C: this runs every step under checks)
        assert used == self.num_used, f"num_used {self.num_used} != {used} referenced blocks"
        assert used + len(free) == n, f"used {used} + free {len(free)} != pool {n}"
        cached = self._cached
        if [hashes[block] for block in cached.values()] != list(cached):
            block = next(b for h, b in cached.items() if hashes[b] != h)
            raise AssertionError(f"cache maps hash to block {block} holding another hash")
        registered = len(cached)
        for h, twins in self._twins.items():
            assert h in cached, "twins of a hash the cache does not know"
            registered += len(twins)
            for twin in twins:
                assert hashes[twin] == h, f"block {twin} is a twin of hash it does not hold"
        hashed = n - hashes.count(None)
        assert registered == hashed, f"{hashed} blocks hold a hash, {registered} are registered"
        assert cached_free == self._num_free_cached, (
            f"{cached_free} cached free blocks, counted {self._num_free_cached}"
        )
        if expected_refs is not None:
            want = [0] * n
            for block, count in expected_refs.items():
                assert 0 <= block < n, f"a block table holds block {block}, outside the pool of {n}"
                want[block] = count
            if want != refs:
                block = next(b for b in range(n) if refs[b] != want[b])
                raise AssertionError(f"block {block}: refcount {refs[block]} but {want[block]} block tables hold it")
