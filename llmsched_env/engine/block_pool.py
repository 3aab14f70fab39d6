"""The paged KV block pool: fixed-size blocks, reference counts and a prefix cache.

As in vLLM and nano-vllm, a full block whose content is known gets a chained hash (the hash of its parent
block and its own content), so a later request with the same prefix maps its first blocks onto the cached
ones instead of recomputing them. A block whose reference count drops to zero keeps its hash and stays
*evictable*: it counts as free (vLLM's usage), and is reclaimed lazily, least recently released first,
only when the free list is empty.

Each block is in exactly one of three places: in use (refcount > 0), free (no content), or evictable
(refcount 0, content cached). ``check_invariants`` verifies that partition.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Sequence

__all__ = ["BlockPool", "chain_hashes"]


def chain_hashes(prefix_ids: Sequence[int], prefix_id_tokens: int, block_size: int, max_tokens: int) -> list[int]:
    """Chained hashes of the full engine blocks covered by ``prefix_ids``.

    ``prefix_ids[i]`` names the content of prompt tokens ``[i*prefix_id_tokens, (i+1)*prefix_id_tokens)``
    (Mooncake's hash_ids); only blocks lying wholly inside the first ``max_tokens`` tokens get a hash.
    """
    num_tokens = min(len(prefix_ids) * prefix_id_tokens, max_tokens)
    hashes: list[int] = []
    parent = 0
    for j in range(num_tokens // block_size):
        start = j * block_size
        parent = hash((parent, prefix_ids[start // prefix_id_tokens], start % prefix_id_tokens))
        hashes.append(parent)
    return hashes


class BlockPool:
    """``num_blocks`` KV blocks of ``block_size`` tokens, with prefix caching by chained block hashes."""

    def __init__(self, num_blocks: int, block_size: int) -> None:
        self.num_blocks = num_blocks
        self.block_size = block_size
        self._free: list[int] = list(range(num_blocks - 1, -1, -1))  # pop() hands out block 0 first
        self.ref_count = [0] * num_blocks
        self.block_hash: list[int | None] = [None] * num_blocks
        self._cached: dict[int, int] = {}  # block hash -> block id
        self._evictable: OrderedDict[int, None] = OrderedDict()  # refcount-0 cached blocks, LRU first
        self.num_used = 0
        self.num_evictions = 0

    # -- capacity ----------------------------------------------------------------------------------------
    @property
    def num_free_blocks(self) -> int:
        """Blocks an allocation can take now: empty ones plus evictable cached ones."""
        return len(self._free) + len(self._evictable)

    @property
    def num_cached_blocks(self) -> int:
        """Evictable blocks that still hold reusable prefix content."""
        return len(self._evictable)

    @property
    def usage(self) -> float:
        """Fraction of blocks referenced by running requests (evictable cached blocks count as free)."""
        return self.num_used / self.num_blocks

    def blocks_for(self, num_tokens: int) -> int:
        """Blocks needed to hold ``num_tokens`` tokens."""
        return -(-num_tokens // self.block_size)

    # -- allocation --------------------------------------------------------------------------------------
    def can_allocate(self, num_blocks: int, reserve: int = 0, shared: Sequence[int] = ()) -> bool:
        """Whether ``allocate(num_blocks, shared)`` can run now and leave at least ``reserve`` blocks free.

        ``shared`` are cached blocks found by ``lookup``; the evictable ones among them stop being free when
        shared, so they count against the free blocks as the new ones do."""
        free = len(self._free) + len(self._evictable) - num_blocks
        if shared:
            ref_count = self.ref_count
            free -= sum(1 for b in shared if ref_count[b] == 0)
        return free >= reserve

    def allocate(self, num_blocks: int, shared: Sequence[int] = ()) -> list[int]:
        """Take a reference on each cached block of ``shared`` (reviving evictable ones), then ``num_blocks``
        (>= 0) new blocks with refcount 1: empty ones first, else the least recently released cached ones.
        Returns ``shared`` followed by the new blocks, in order (a block table, or the tail to append to one).
        The pool must have room (``can_allocate``): a short pool is an AssertionError."""
        if num_blocks < 0:
            raise ValueError(f"BlockPool.allocate: num_blocks must be >= 0, got {num_blocks}")
        table = list(shared)
        if shared:
            self._share(shared)
        free = self._free
        ref_count = self.ref_count
        for _ in range(num_blocks):
            block = free.pop() if free else self._evict()
            ref_count[block] = 1
            table.append(block)
        self.num_used += num_blocks
        return table

    def _evict(self) -> int:
        """Reclaim the least recently released cached block (its content is forgotten)."""
        assert self._evictable, "allocate() on a full pool: callers ask can_allocate first"
        block, _ = self._evictable.popitem(last=False)
        old = self.block_hash[block]
        if self._cached.get(old) == block:  # type: ignore[arg-type]
            del self._cached[old]  # type: ignore[arg-type]
        self.block_hash[block] = None
        self.num_evictions += 1
        return block

    def lookup(self, hashes: Sequence[int], max_blocks: int) -> list[int]:
        """Ids of the cached blocks matching the longest prefix of ``hashes`` (at most ``max_blocks``)."""
        hits: list[int] = []
        cached = self._cached
        for h in hashes[:max_blocks]:
            block = cached.get(h)
            if block is None:
                break
            hits.append(block)
        return hits

    def _share(self, blocks: Iterable[int]) -> None:
        """Take a reference on cached blocks found by ``lookup`` (reviving evictable ones)."""
        for block in blocks:
            if self.ref_count[block] == 0:
                del self._evictable[block]
                self.num_used += 1
            self.ref_count[block] += 1

    def commit(self, block: int, block_hash: int) -> None:
        """Mark a full block as holding the content named by ``block_hash``, so later requests can share it."""
        if self.block_hash[block] is None and block_hash not in self._cached:
            self.block_hash[block] = block_hash
            self._cached[block_hash] = block

    def release(self, blocks: Sequence[int]) -> None:
        """Drop one reference on each block. Tail blocks are released first, so they are evicted first."""
        for block in reversed(blocks):
            count = self.ref_count[block] - 1
            self.ref_count[block] = count
            if count == 0:
                self.num_used -= 1
                if self.block_hash[block] is None:
                    self._free.append(block)
                else:
                    self._evictable[block] = None

    # -- checks ------------------------------------------------------------------------------------------
    def check_invariants(self, expected_refs: dict[int, int] | None = None) -> None:
        """Raise AssertionError unless every block is in exactly one of used / free / evictable, and (when
        given) the reference counts equal ``expected_refs`` (block id -> number of block tables holding it)."""
        free = set(self._free)
        evictable = set(self._evictable)
        assert len(free) == len(self._free), "a block is on the free list twice"
        assert not free & evictable, "a block is both free and evictable"
        used = {b for b in range(self.num_blocks) if self.ref_count[b] > 0}
        assert all(c >= 0 for c in self.ref_count), "negative reference count"
        assert not used & (free | evictable), "a referenced block is also free or evictable"
        assert len(used) == self.num_used, f"num_used {self.num_used} != {len(used)} referenced blocks"
        assert len(used) + len(free) + len(evictable) == self.num_blocks, (
            f"used {len(used)} + free {len(free)} + cached {len(evictable)} != pool {self.num_blocks}"
        )
        for h, block in self._cached.items():
            assert self.block_hash[block] == h, f"cache maps hash to block {block} holding another hash"
        for block in evictable:
            assert self.block_hash[block] is not None, f"evictable block {block} has no cached content"
        if expected_refs is not None:
            for block in range(self.num_blocks):
                want = expected_refs.get(block, 0)
                assert self.ref_count[block] == want, (
                    f"block {block}: refcount {self.ref_count[block]} but {want} block tables hold it"
                )
