"""The model runner: one engine iteration (prefill chunks and decodes, packed in one batch) on the paged KV cache.
Attention reads K/V through block tables: each prefill chunk alone, decodes grouped by similar context length
(``decode_group_slack``); on CUDA with fp16/bf16, 256-token blocks and ``flash_attn``,
``flash_attn_with_kvcache`` runs instead.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch.nn.functional import scaled_dot_product_attention as sdpa

from llmsched_env.runtime.kv_cache import PagedKVCache
from llmsched_env.runtime.model import LlamaModel, ModelConfig, build_model, model_config

try:  # optional fast kernel (CUDA only)
    from flash_attn import flash_attn_with_kvcache
except ImportError:  # pragma: no cover - depends on the install
    flash_attn_with_kvcache = None

ATTENTION_BACKENDS = ("auto", "torch", "flash")
_HAS_GQA = tuple(int(x) for x in torch.__version__.split(".")[:2]) >= (2, 5)  # sdpa(enable_gqa=...)


@dataclass(frozen=True)
class SeqChunk:
    """One sequence's work in an iteration: a prefill chunk, or the single last token of a decode."""

    token_ids: Sequence[int]  # the tokens computed this iteration
    start_pos: int  # tokens of this sequence already in the KV cache; token_ids sit at positions start_pos + i
    block_table: Sequence[int]  # the sequence's block ids; covers positions [0, start_pos + len(token_ids))
    sample: bool  # True: return the next token sampled from the last position's logits


@dataclass
class _Plan:
    """The iteration's index tensors, built once and shared by every layer."""

    token_ids: torch.Tensor  # [N], decodes first, then prefill chunks
    positions: torch.Tensor  # [N]
    slots: torch.Tensor  # [N] flat cache slots the new K/V go to
    sample_rows: torch.Tensor  # [M] rows whose logits are wanted, in chunk order
    num_decodes: int  # D: rows [0, D) are decodes, longest context first
    # (first row, tables [G, max_blocks] padded, lengths [G] = start_pos + 1, mask [G, 1, 1, max_blocks *
    # block_size] True where a key is visible) of each group of decodes attended in one call
    dec_groups: list[tuple[int, torch.Tensor, torch.Tensor, torch.Tensor]] = field(default_factory=list)
    # (first row, num tokens, start_pos, blocks [num_seq_blocks]) of each prefill chunk
    prefills: list[tuple[int, int, int, torch.Tensor]] = field(default_factory=list)


class ModelRunner:
    """A Llama model plus its paged KV cache; ``run`` executes one iteration and samples next tokens."""

    def __init__(self, model: str | ModelConfig = "tiny", *, num_blocks: int, block_size: int,
                 device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32, seed: int = 0,
                 weights_path: str | Path | None = None, temperature: float = 0.0, attention: str = "auto",
                 decode_group_slack: int = 256) -> None:  # fmt: skip
        if not isinstance(decode_group_slack, int) or decode_group_slack < 0:
            raise ValueError(f"decode_group_slack must be an integer >= 0, got {decode_group_slack!r}")
        if not (isinstance(temperature, (int, float)) and math.isfinite(temperature) and temperature >= 0):
            raise ValueError(f"temperature must be a finite number >= 0, got {temperature!r}")
        if attention not in ATTENTION_BACKENDS:
            raise ValueError(f"attention must be one of {ATTENTION_BACKENDS}, got {attention!r}")
        self.device = torch.device(device)
        self.config: ModelConfig = model_config(model)
        self.kv = PagedKVCache(self.config, num_blocks=num_blocks, block_size=block_size, dtype=dtype,
                               device=self.device)  # fmt: skip
        self.model: LlamaModel = build_model(self.config, seed=seed, dtype=dtype, device=self.device,
                                             weights_path=weights_path)  # fmt: skip
        self.block_size = block_size
        self.num_blocks = num_blocks
        self.temperature = float(temperature)
        self.generator = torch.Generator(device=self.device).manual_seed(seed)
        flash_ok = (flash_attn_with_kvcache is not None and self.device.type == "cuda"
                    and dtype in (torch.float16, torch.bfloat16) and block_size % 256 == 0)  # fmt: skip
        if attention == "flash" and not flash_ok:
            raise ValueError("attention='flash' needs flash_attn, a CUDA device, fp16/bf16 and block_size % 256 == 0")
        self.use_flash = flash_ok and attention != "torch"
        self.decode_group_slack = decode_group_slack  # padding tokens per decode before a new group starts

    def run(self, chunks: Sequence[SeqChunk]) -> list[int | None]:
        """Run one iteration in one forward pass: per chunk the next token (greedy at temperature 0, else seeded
        sampling), None where ``sample`` is False."""
        logits = self.forward_logits(chunks)  # [M, vocab]
        if logits.shape[0] == 0:
            return [None] * len(chunks)
        with torch.inference_mode():
            if self.temperature == 0:
                tokens = logits.argmax(-1)
            else:
                probs = torch.softmax(logits / self.temperature, dim=-1)
                tokens = torch.multinomial(probs, 1, generator=self.generator).squeeze(1)
        it = iter(tokens.tolist())
        return [next(it) if c.sample else None for c in chunks]

    def forward_logits(self, chunks: Sequence[SeqChunk]) -> torch.Tensor:
        """What ``run`` computes before sampling: float32 logits ``[M, vocab]`` of the last token of each
        chunk with ``sample=True``, in chunk order. Writes the chunks' K/V into the cache."""
        self._validate(chunks)
        with torch.inference_mode():
            plan = self._plan(chunks)
            hidden = self.model.hidden(plan.token_ids, plan.positions,
                                       lambda i, q, k, v: self._attend(plan, i, q, k, v))
            return self.model.logits(hidden[plan.sample_rows])

    def synchronize(self) -> None:
        """Wait for the device (``torch.cuda.synchronize`` on CUDA, nothing on CPU): for timing."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    # ------------------------------------------------------------------------------------------ internals
    def _validate(self, chunks: Sequence[SeqChunk]) -> None:
        bs, vocab = self.block_size, self.config.vocab_size
        num_slots = 0
        for i, c in enumerate(chunks):
            n = len(c.token_ids)
            if n == 0:
                raise ValueError(f"chunk {i}: token_ids is empty")
            if not isinstance(c.start_pos, int) or c.start_pos < 0:
                raise ValueError(f"chunk {i}: start_pos must be an integer >= 0, got {c.start_pos!r}")
            end = c.start_pos + n
            if end > self.config.max_position:
                raise ValueError(f"chunk {i}: positions up to {end} exceed max_position {self.config.max_position}")
            need = -(-end // bs)
            if len(c.block_table) < need:
                raise ValueError(f"chunk {i}: block_table has {len(c.block_table)} blocks, positions [0, {end}) need "
                                 f"{need} of {bs} tokens")
            used = c.block_table[:need]
            if min(used) < 0 or max(used) >= self.num_blocks:
                raise ValueError(f"chunk {i}: block ids must be in [0, {self.num_blocks}), got {list(used)}")
            if min(c.token_ids) < 0 or max(c.token_ids) >= vocab:
                raise ValueError(
                    f"chunk {i}: token ids must be in [0, {vocab}), got min {min(c.token_ids)} max {max(c.token_ids)}"
                )
            num_slots += n
        slots = {s for c in chunks for s in self.kv.slots(c.block_table, c.start_pos, c.start_pos + len(c.token_ids))}
        if len(slots) != num_slots:
            raise ValueError("two chunks write the same KV cache slot (a block is shared where it is written)")

    def _plan(self, chunks: Sequence[SeqChunk]) -> _Plan:
        dev, bs = self.device, self.block_size
        idx = torch.int32 if self.use_flash else torch.int64  # flash_attn takes int32 tables and lengths
        decodes = sorted((i for i, c in enumerate(chunks) if len(c.token_ids) == 1), key=lambda i: -chunks[i].start_pos)
        prefills = [i for i, c in enumerate(chunks) if len(c.token_ids) > 1]
        tokens: list[int] = []
        positions: list[int] = []
        slots: list[int] = []
        last_row: dict[int, int] = {}
        for i in decodes + prefills:
            c = chunks[i]
            end = c.start_pos + len(c.token_ids)
            tokens.extend(c.token_ids)
            positions.extend(range(c.start_pos, end))
            slots.extend(self.kv.slots(c.block_table, c.start_pos, end))
            last_row[i] = len(tokens) - 1
        packed = torch.tensor([tokens, positions, slots], dtype=torch.int64).to(dev)  # [3, N], one transfer
        rows = [last_row[i] for i, c in enumerate(chunks) if c.sample]
        plan = _Plan(packed[0], packed[1], packed[2], torch.tensor(rows, dtype=torch.int64, device=dev), len(decodes))
        first = 0
        while first < len(decodes):  # groups of similar length (flash-attn takes any mix in one call)
            top = chunks[decodes[first]].start_pos + 1
            end = first + 1
            while end < len(decodes) and (
                self.use_flash or top - chunks[decodes[end]].start_pos - 1 <= self.decode_group_slack
            ):
                end += 1
            lens = [chunks[i].start_pos + 1 for i in decodes[first:end]]
            width = -(-top // bs)
            tables = [list(chunks[i].block_table[: -(-n // bs)]) for i, n in zip(decodes[first:end], lens, strict=True)]
            dec_tables = torch.tensor([t + [0] * (width - len(t)) for t in tables], dtype=idx).to(dev)
            dec_lens = torch.tensor(lens, dtype=idx).to(dev)
            visible = torch.arange(width * bs, device=dev)[None, :] < dec_lens[:, None]  # [G, width * bs]
            plan.dec_groups.append((first, dec_tables, dec_lens, visible[:, None, None, :]))
            first = end
        row = len(decodes)
        for i in prefills:
            c = chunks[i]
            n = len(c.token_ids)
            blocks = torch.tensor(list(c.block_table[: -(-(c.start_pos + n) // bs)]), dtype=idx).to(dev)
            plan.prefills.append((row, n, c.start_pos, blocks))
            row += n
        return plan

    def _attend(self, plan: _Plan, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        # q: [N, heads, head_dim]; k, v: [N, kv_heads, head_dim] (rotary applied) -> [N, heads, head_dim]
        self.kv.write(layer, plan.slots, k, v)
        out = torch.empty_like(q)
        for g, (row, tables, lens, mask) in enumerate(plan.dec_groups):
            end = plan.dec_groups[g + 1][0] if g + 1 < len(plan.dec_groups) else plan.num_decodes
            out[row:end] = self._attend_decodes(layer, q[row:end], tables, lens, mask)
        for row, n, start, blocks in plan.prefills:
            out[row : row + n] = self._attend_prefill(layer, q[row : row + n], k[row : row + n], v[row : row + n],
                                                      start, blocks)
        return out

    def _flash(self, layer: int, q: torch.Tensor, lens: torch.Tensor, tables: torch.Tensor) -> torch.Tensor:
        """flash-attn over ``layer``'s paged cache: ``q`` [B, q_len, heads, head_dim], each sequence's query
        tokens the last ``q_len`` of its ``lens`` cached tokens (causal), ``tables`` [B, blocks] its block table."""
        kv = self.kv
        return flash_attn_with_kvcache(q, kv.k[layer], kv.v[layer], causal=True, cache_seqlens=lens, block_table=tables)

    def _attend_decodes(
        self, layer: int, q: torch.Tensor, tables: torch.Tensor, lens: torch.Tensor, mask: torch.Tensor
    ) -> torch.Tensor:
        # q: [D, heads, head_dim], one query per sequence at position lens - 1
        if self.use_flash:
            return self._flash(layer, q[:, None], lens, tables)[:, 0]  # [D, heads, head_dim]
        d, kvh = q.shape[0], self.config.num_kv_heads
        k, v = self.kv.gather_batch(layer, tables)  # [D, S, kv_heads, head_dim]
        # GQA without repeating K/V: the group's query heads become the query-length axis of their kv head
        qg = q.view(d, kvh, -1, q.shape[-1])  # [D, kv_heads, group, head_dim]
        o = sdpa(qg, k.transpose(1, 2), v.transpose(1, 2), attn_mask=mask)  # [D, kv_heads, group, head_dim]
        return o.reshape(q.shape)

    def _attend_prefill(
        self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, start: int, blocks: torch.Tensor
    ) -> torch.Tensor:
        # q: [n, heads, head_dim]; k, v: [n, kv_heads, head_dim] of the chunk at positions [start, start + n)
        n = q.shape[0]
        if self.use_flash:
            lens = torch.full((1,), start + n, dtype=torch.int32, device=q.device)
            return self._flash(layer, q[None], lens, blocks[None])[0]
        mask = None
        if start > 0:  # the cached prefix [0, start) plus the chunk, causal offset by start
            k, v = self.kv.gather(layer, blocks, start + n)  # [start + n, kv_heads, head_dim]
            key_pos = torch.arange(start + n, device=q.device)
            mask = key_pos[None, :] <= (start + torch.arange(n, device=q.device))[:, None]  # [n, start + n]
        # 4-d inputs: torch's CPU flash kernel takes them, 3-d ones fall back to the (much slower) math path
        qt, kt, vt = q.transpose(0, 1)[None], k.transpose(0, 1)[None], v.transpose(0, 1)[None]  # [1, heads, len, dim]
        if _HAS_GQA:
            o = sdpa(qt, kt, vt, attn_mask=mask, is_causal=mask is None, enable_gqa=True)
        else:  # pragma: no cover - torch < 2.5
            group = q.shape[1] // k.shape[1]
            kt, vt = kt.repeat_interleave(group, 1), vt.repeat_interleave(group, 1)
            o = sdpa(qt, kt, vt, attn_mask=mask, is_causal=mask is None)
        return o[0].transpose(0, 1)  # [n, heads, head_dim]
