"""The paged KV cache: fixed-size blocks of key/value vectors, addressed by the ``BlockPool``'s block tables
(position ``p`` at slot ``block_table[p // block_size] * block_size + p % block_size``)."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from llmsched_env.runtime.model import ModelConfig


class PagedKVCache:
    """Per layer a key and a value tensor ``[num_blocks, block_size, num_kv_heads, head_dim]``, views of one
    zero-initialised tensor (stale slots stay finite)."""

    def __init__(self, config: ModelConfig, *, num_blocks: int, block_size: int, dtype: torch.dtype = torch.float32,
                 device: str | torch.device = "cpu") -> None:
        """``num_blocks`` blocks of ``block_size`` tokens, shaped for ``config``'s layers and kv heads."""
        num_layers, num_kv_heads, head_dim = config.num_layers, config.num_kv_heads, config.head_dim
        sizes = {"num_layers": num_layers, "num_blocks": num_blocks, "block_size": block_size}
        sizes |= {"num_kv_heads": num_kv_heads, "head_dim": head_dim}
        for key, value in sizes.items():
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"PagedKVCache {key} must be an integer >= 1, got {value!r}")
        self.num_layers, self.num_blocks, self.block_size = num_layers, num_blocks, block_size
        self.num_kv_heads, self.head_dim = num_kv_heads, head_dim
        # data: [num_layers, 2 (key, value), num_blocks, block_size, kv_heads, head_dim]
        # empty + zero_ rather than zeros: writing commits the pages now; lazily mapped zero pages made every
        # gather through them several times slower on CPU
        shape = (num_layers, 2, num_blocks, block_size, num_kv_heads, head_dim)
        self.data = torch.empty(shape, dtype=dtype, device=device).zero_()
        self.k = [self.data[i, 0] for i in range(num_layers)]  # k[layer]: [num_blocks, block_size, kv_heads, head_dim]
        self.v = [self.data[i, 1] for i in range(num_layers)]
        # gather scratch (keys, values): [rows, block_size * kv_heads * head_dim], grown to the largest gather;
        # a fresh multi-MB tensor per gather costs more in page faults than the copy itself on CPU
        row = block_size * num_kv_heads * head_dim
        self._scratch = [self.data.new_empty(0, row), self.data.new_empty(0, row)]

    @staticmethod
    def bytes_per_block(config: ModelConfig, block_size: int, dtype: torch.dtype = torch.float32) -> int:
        """Bytes one block takes over all layers (keys and values)."""
        itemsize = torch.empty(0, dtype=dtype).element_size()
        return 2 * config.num_layers * block_size * config.num_kv_heads * config.head_dim * itemsize

    @classmethod
    def num_blocks_for(cls, config: ModelConfig, block_size: int, memory_bytes: int,
                       dtype: torch.dtype = torch.float32) -> int:
        """How many blocks fit in ``memory_bytes`` (``ValueError`` when not even one does)."""
        per_block = cls.bytes_per_block(config, block_size, dtype)
        if memory_bytes < per_block:
            raise ValueError(f"a KV budget of {memory_bytes} bytes holds no block of {per_block} bytes")
        return memory_bytes // per_block

    def memory_bytes(self) -> int:
        """Bytes held by the cache tensors."""
        return self.data.numel() * self.data.element_size()

    def slots(self, block_table: Sequence[int], start: int, end: int) -> list[int]:
        """Flat slot ids of positions ``[start, end)`` through ``block_table`` (which must cover them)."""
        bs = self.block_size
        out: list[int] = []
        p = start
        while p < end:  # one contiguous run per block
            base = block_table[p // bs] * bs
            stop = min(end, (p // bs + 1) * bs)
            out.extend(range(base + p % bs, base + p % bs + stop - p))
            p = stop
        return out

    def write(self, layer: int, slots: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        """Store keys/values ``[N, kv_heads, head_dim]`` of N new tokens at flat ``slots [N]`` (int64)."""
        self.k[layer].view(-1, self.num_kv_heads, self.head_dim).index_copy_(0, slots, k)
        self.v[layer].view(-1, self.num_kv_heads, self.head_dim).index_copy_(0, slots, v)

    def gather(self, layer: int, blocks: torch.Tensor, length: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys and values ``[length, kv_heads, head_dim]`` of positions ``[0, length)`` of the sequence with block
        table ``blocks``, in a scratch buffer valid until the next gather."""
        shape = (-1, self.num_kv_heads, self.head_dim)
        k = self._rows(0, self.k[layer], blocks).view(shape)[:length]
        return k, self._rows(1, self.v[layer], blocks).view(shape)[:length]

    def gather_batch(self, layer: int, block_tables: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys and values ``[B, max_blocks * block_size, kv_heads, head_dim]`` of the sequences of the padded
        ``block_tables [B, max_blocks]`` (the caller masks), in a scratch buffer valid until the next gather."""
        b, m = block_tables.shape
        shape = (b, m * self.block_size, self.num_kv_heads, self.head_dim)
        flat = block_tables.reshape(-1)
        return self._rows(0, self.k[layer], flat).view(shape), self._rows(1, self.v[layer], flat).view(shape)

    def _rows(self, which: int, cache: torch.Tensor, blocks: torch.Tensor) -> torch.Tensor:
        # cache: [num_blocks, block_size, kv_heads, head_dim] -> [len(blocks), block_size * kv_heads * head_dim];
        # index_select on a 2-d view is ~10x faster than advanced indexing of the 4-d tensor on CPU
        n = blocks.numel()
        if self._scratch[which].shape[0] < n:
            self._scratch[which] = cache.new_empty(n, cache[0].numel())
        out = self._scratch[which][:n]
        torch.index_select(cache.view(cache.shape[0], -1), 0, blocks, out=out)
        return out
