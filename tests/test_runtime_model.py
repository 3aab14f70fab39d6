"""The runtime's model, paged KV cache and runner: paged results equal the dense no-cache reference."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from llmsched_env.runtime import runner as runner_module
from llmsched_env.runtime.kv_cache import PagedKVCache
from llmsched_env.runtime.model import MODEL_PRESETS, build_model, model_config
from llmsched_env.runtime.runner import ModelRunner, SeqChunk

torch.set_num_threads(1)

CFG = dataclasses.replace(MODEL_PRESETS["tiny"], name="tiny-2", num_layers=2)
BS = 8  # block size
ATOL = 1e-4


def _runner(seed: int = 0, **kw: object) -> ModelRunner:
    return ModelRunner(CFG, num_blocks=64, block_size=BS, seed=seed, **kw)


def _tokens(n: int, seed: int) -> list[int]:
    return torch.randint(0, CFG.vocab_size, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def _dense(runner: ModelRunner, tokens: list[int]) -> torch.Tensor:
    return runner.model.forward_dense(torch.tensor(tokens, device=runner.device))  # [T, vocab]


def _close(a: torch.Tensor, b: torch.Tensor, atol: float = ATOL) -> None:
    torch.testing.assert_close(a.float().cpu(), b.float().cpu(), atol=atol, rtol=0)


# ------------------------------------------------------------------------------------------- paged == dense
def test_whole_prompt_prefill_with_scattered_blocks_matches_dense() -> None:
    r = _runner()
    prompt = _tokens(37, 1)
    ref = _dense(r, prompt)
    blocks = [17, 3, 42, 5, 29]  # non-contiguous, out of order
    _close(r.forward_logits([SeqChunk(prompt, 0, blocks, True)])[0], ref[-1])
    # another layout of the same sequence gives the same logits
    _close(r.forward_logits([SeqChunk(prompt, 0, [60, 61, 0, 1, 2], True)])[0], ref[-1])


def test_chunked_prefill_then_decode_matches_dense() -> None:
    r = _runner()
    seq = _tokens(45, 2)
    ref = _dense(r, seq)
    blocks = [9, 8, 30, 31, 1, 50]
    for start in range(0, 40, 11):  # chunks of 11, 11, 11, 7
        chunk = seq[start : min(start + 11, 40)]
        _close(r.forward_logits([SeqChunk(chunk, start, blocks, True)])[0], ref[start + len(chunk) - 1])
    for p in range(40, 45):  # decodes
        _close(r.forward_logits([SeqChunk([seq[p]], p, blocks, True)])[0], ref[p])


def _reference_flash(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    *,
    causal: bool,
    cache_seqlens: torch.Tensor,
    block_table: torch.Tensor,
) -> torch.Tensor:
    """flash-attn's ``flash_attn_with_kvcache`` as the runner calls it, in plain torch: ``q`` [B, q_len, heads,
    dim] are the last ``q_len`` of each sequence's ``cache_seqlens`` tokens, read through ``block_table``."""
    assert causal and block_table.dtype == cache_seqlens.dtype == torch.int32
    out = torch.empty_like(q)
    q_len, group = q.shape[1], q.shape[2] // k_cache.shape[2]
    for b in range(q.shape[0]):
        n = int(cache_seqlens[b])
        k, v = (c[block_table[b].long()].flatten(0, 1)[:n].repeat_interleave(group, 1) for c in (k_cache, v_cache))
        mask = torch.arange(n)[None, :] <= (n - q_len + torch.arange(q_len))[:, None]
        o = torch.nn.functional.scaled_dot_product_attention(
            q[b].transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1), attn_mask=mask
        )
        out[b] = o.transpose(0, 1)
    return out


@pytest.mark.parametrize("flash", [False, True])
def test_mixed_batch_of_prefill_chunks_and_decodes_matches_dense(flash: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """Also through the flash-attn path (all decodes in one call), with a torch stand-in for the kernel."""
    r = _runner()
    if flash:
        monkeypatch.setattr(runner_module, "flash_attn_with_kvcache", _reference_flash)
        r.use_flash = True
    a, b, c, d = _tokens(21, 3), _tokens(14, 4), _tokens(15, 5), _tokens(30, 6)
    ta, tb, tc, td = [0, 1, 2], [10, 11], [20, 21], [30, 31, 32, 33]
    # earlier iterations: a and b prefilled but their last token, d's first chunk
    r.run([SeqChunk(a[:20], 0, ta, False), SeqChunk(b[:13], 0, tb, False), SeqChunk(d[:12], 0, td, False)])
    chunks = [
        SeqChunk(c, 0, tc, True),  # a first (whole) prefill
        SeqChunk([a[20]], 20, ta, True),  # decode
        SeqChunk(d[12:], 12, td, True),  # a later prefill chunk over a cached prefix
        SeqChunk([b[13]], 13, tb, True),  # decode
    ]
    logits = r.forward_logits(chunks)
    for row, seq in enumerate((c, a, d, b)):
        _close(logits[row], _dense(r, seq)[-1])
    assert r.run([SeqChunk([c[0]], 0, [50], False), SeqChunk([b[0]], 0, [51], True)])[0] is None


@pytest.mark.parametrize("slack", [0, 8, 10_000])
def test_decodes_of_mixed_lengths_in_length_groups_match_dense(slack: int) -> None:
    """Decodes are attended in groups of similar context length (one group per length with slack 0, one
    for all with a large slack); every grouping gives the dense logits, in the chunks' order."""
    r = _runner(decode_group_slack=slack)
    lengths = [3, 40, 9, 25, 40, 17, 2]
    seqs = [_tokens(n + 1, 20 + i) for i, n in enumerate(lengths)]
    tables = [[4 * i + j for j in range(4)] + [40 + 3 * i + j for j in range(3)] for i in range(len(seqs))]
    r.run([SeqChunk(s[:-1], 0, t, False) for s, t in zip(seqs, tables, strict=True)])
    extra = _tokens(12, 30)  # a prefill chunk beside the decodes
    chunks = [SeqChunk([s[-1]], len(s) - 1, t, True) for s, t in zip(seqs, tables, strict=True)]
    chunks.insert(3, SeqChunk(extra, 0, [62, 63], True))
    logits = r.forward_logits(chunks)
    for row, seq in enumerate([*seqs[:3], extra, *seqs[3:]]):
        _close(logits[row], _dense(r, seq)[-1])
    with pytest.raises(ValueError, match="decode_group_slack"):
        _runner(decode_group_slack=-1)


def test_prefix_reuse_reads_shared_blocks() -> None:
    r = _runner()
    prefix, tail_a, tail_b = _tokens(32, 7), _tokens(5, 8), _tokens(9, 9)  # 32 = 4 full blocks
    shared = [12, 4, 33, 7]
    table_a, table_b = [*shared, 20], [*shared, 21, 22]
    a = prefix + tail_a
    r.run([SeqChunk(a[:-1], 0, table_a, False)])
    b = prefix + tail_b
    logits = r.forward_logits([SeqChunk(tail_b, 32, table_b, True), SeqChunk([a[-1]], len(a) - 1, table_a, True)])
    _close(logits[0], _dense(r, b)[-1])
    _close(logits[1], _dense(r, a)[-1])


def test_preemption_with_recompute_continues_identically() -> None:
    prompt = _tokens(19, 10)

    def generate(r: ModelRunner, seq: list[int], table: list[int], start: int, n: int) -> list[int]:
        out = []
        tok = r.run([SeqChunk(seq[start:], start, table, True)])[0]
        for _ in range(n):
            out.append(tok)
            seq = [*seq, tok]
            tok = r.run([SeqChunk([tok], len(seq) - 1, table, True)])[0]
        return out

    r = _runner()
    full = generate(r, prompt, [1, 2, 3, 4, 5], 0, 8)
    r2 = _runner()
    first = generate(r2, prompt, [1, 2, 3, 4, 5], 0, 3)
    r2.run([SeqChunk(_tokens(40, 11), 0, [1, 2, 3, 4, 5], False)])  # the freed blocks go to someone else
    # recompute prompt + generated tokens into other block ids; the pending token is the last generated one
    seq = prompt + first
    rest = generate(r2, seq, [44, 9, 27, 13, 38], 0, 5)
    assert first + rest[:5] == full[:8]


# ------------------------------------------------------------------------------------------- sampling
def test_greedy_is_deterministic_and_sampling_is_seeded() -> None:
    prompts = [_tokens(10 + i, 20 + i) for i in range(6)]
    chunks = [SeqChunk(p, 0, [2 * i, 2 * i + 1], True) for i, p in enumerate(prompts)]
    greedy = _runner().run(chunks)
    assert greedy == _runner().run(chunks)
    assert greedy == [int(_dense(_runner(), p)[-1].argmax()) for p in prompts]
    sampled = [_runner(temperature=1.0).run(chunks) for _ in range(2)]
    assert sampled[0] == sampled[1]
    assert sampled[0] != greedy  # near-uniform logits: sampling almost surely leaves the argmax somewhere
    again = _runner(temperature=1.0)
    assert [again.run(chunks) for _ in range(2)] != [sampled[0], sampled[0]]  # the generator advances


# ------------------------------------------------------------------------------------------- weights
def _state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.contiguous() for k, v in model.state_dict().items()}


def test_weights_roundtrip_through_safetensors(tmp_path: Path) -> None:
    model = build_model(CFG, seed=5)
    state = _state(model)
    save_file(state, tmp_path / "model.safetensors")
    loaded = build_model(CFG, seed=99, weights_path=tmp_path / "model.safetensors")
    tokens = torch.tensor(_tokens(12, 30))
    _close(loaded.forward_dense(tokens), model.forward_dense(tokens), atol=0)
    shards = tmp_path / "shards"  # a folder of shards, as Hugging Face checkpoints come
    shards.mkdir()
    names = sorted(state)
    save_file({k: state[k] for k in names[::2]}, shards / "model-00001-of-00002.safetensors")
    save_file({k: state[k] for k in names[1::2]}, shards / "model-00002-of-00002.safetensors")
    runner = ModelRunner(CFG, num_blocks=8, block_size=BS, weights_path=shards)
    _close(runner.forward_logits([SeqChunk(tokens.tolist(), 0, [0, 1], True)])[0], model.forward_dense(tokens)[-1])


def test_tied_embeddings_need_no_lm_head(tmp_path: Path) -> None:
    cfg = dataclasses.replace(CFG, tie_word_embeddings=True)
    model = build_model(cfg, seed=1)
    assert model.lm_head.weight is model.model.embed_tokens.weight
    state = _state(model)
    del state["lm_head.weight"]  # as in Llama-3.2-1B checkpoints (and safetensors refuses shared tensors)
    save_file(state, tmp_path / "tied.safetensors")
    loaded = build_model(cfg, weights_path=tmp_path / "tied.safetensors")
    assert loaded.lm_head.weight is loaded.model.embed_tokens.weight
    _close(loaded.lm_head.weight, model.model.embed_tokens.weight, atol=0)


def test_bad_weights_files_name_file_and_tensor(tmp_path: Path) -> None:
    state = _state(build_model(CFG))
    path = tmp_path / "w.safetensors"
    bad = dict(state, **{"model.layers.1.mlp.up_proj.weight": torch.zeros(3, 4)})
    save_file(bad, path)
    with pytest.raises(ValueError, match=r"w\.safetensors.*model\.layers\.1\.mlp\.up_proj\.weight.*shape"):
        build_model(CFG, weights_path=path)
    save_file({k: v for k, v in state.items() if k != "model.norm.weight"}, path)
    with pytest.raises(ValueError, match=r"w\.safetensors.*'model\.norm\.weight' is missing"):
        build_model(CFG, weights_path=path)
    save_file(dict(state, extra=torch.zeros(1)), path)
    with pytest.raises(ValueError, match=r"w\.safetensors.*unexpected tensor 'extra'"):
        build_model(CFG, weights_path=path)
    (tmp_path / "junk.safetensors").write_bytes(b"not safetensors")
    with pytest.raises(ValueError, match=r"junk\.safetensors.*not a readable"):
        build_model(CFG, weights_path=tmp_path / "junk.safetensors")
    with pytest.raises(ValueError, match="no safetensors"):
        build_model(CFG, weights_path=tmp_path / "missing.safetensors")


def test_seeded_weights_are_deterministic() -> None:
    a, b, c = build_model(CFG, seed=3), build_model(CFG, seed=3), build_model(CFG, seed=4)
    assert torch.equal(a.model.layers[1].mlp.down_proj.weight, b.model.layers[1].mlp.down_proj.weight)
    assert not torch.equal(a.lm_head.weight, c.lm_head.weight)
    assert torch.equal(a.model.norm.weight, torch.ones(CFG.hidden_size))


# ------------------------------------------------------------------------------------------- validation
def test_model_config_validation_and_presets() -> None:
    with pytest.raises(ValueError, match=r"num_heads .* divisible by num_kv_heads"):
        dataclasses.replace(CFG, num_heads=6, num_kv_heads=4)
    with pytest.raises(ValueError, match="num_layers"):
        dataclasses.replace(CFG, num_layers=0)
    with pytest.raises(ValueError, match="rope_theta"):
        dataclasses.replace(CFG, rope_theta=float("nan"))
    with pytest.raises(ValueError, match="head_dim must be even"):
        dataclasses.replace(CFG, head_dim=31)
    with pytest.raises(ValueError, match=r"unknown model preset 'gpt-9'.*llama-1b.*llama3-8b.*tiny"):
        model_config("gpt-9")
    assert model_config(CFG) is CFG and model_config("tiny") is MODEL_PRESETS["tiny"]
    assert 1.2e9 < MODEL_PRESETS["llama-1b"].num_params < 1.3e9  # Llama-3.2-1B: 1.24 B
    assert 8.0e9 < MODEL_PRESETS["llama3-8b"].num_params < 8.1e9  # Llama-3-8B: 8.03 B
    assert all(c.max_position >= 8192 for c in MODEL_PRESETS.values())


def test_runner_rejects_bad_input() -> None:
    r = _runner()
    cases = [
        (SeqChunk([], 0, [0], True), "token_ids is empty"),
        (SeqChunk([1] * 9, 0, [0], True), "block_table has 1 blocks, positions \\[0, 9\\) need 2"),
        (SeqChunk([1, CFG.vocab_size], 0, [0], True), "token ids must be in"),
        (SeqChunk([1, -1], 0, [0], True), "token ids must be in"),
        (SeqChunk([1], 0, [64], True), "block ids must be in \\[0, 64\\)"),
        (SeqChunk([1], -1, [0], True), "start_pos"),
        (SeqChunk([1], CFG.max_position, [0] * 3000, True), "max_position"),
    ]
    for chunk, msg in cases:
        with pytest.raises(ValueError, match=msg):
            r.run([chunk])
    with pytest.raises(ValueError, match="same KV cache slot"):
        r.run([SeqChunk([1, 2], 0, [3], True), SeqChunk([4], 1, [3], True)])
    assert r.run([]) == []
    with pytest.raises(ValueError, match="temperature"):
        _runner(temperature=-1.0)
    with pytest.raises(ValueError, match="attention must be one of"):
        _runner(attention="xformers")
    with pytest.raises(ValueError, match="attention='flash' needs"):
        _runner(attention="flash")


def test_kv_cache_slots_and_sizes() -> None:
    kv = PagedKVCache(CFG, num_blocks=10, block_size=4)
    assert kv.slots([7, 2, 5], 3, 10) == [31, 8, 9, 10, 11, 20, 21]
    assert kv.k[1].shape == (10, 4, CFG.num_kv_heads, CFG.head_dim)
    per_block = PagedKVCache.bytes_per_block(CFG, 4)
    assert kv.memory_bytes() == 10 * per_block == 10 * 2 * CFG.num_layers * 4 * CFG.num_kv_heads * CFG.head_dim * 4
    assert PagedKVCache.num_blocks_for(CFG, 4, 10 * per_block + 1) == 10
    k, v = torch.randn(7, CFG.num_kv_heads, CFG.head_dim), torch.randn(7, CFG.num_kv_heads, CFG.head_dim)
    kv.write(1, torch.tensor(kv.slots([7, 2, 5], 3, 10)), k, v)
    got_k, got_v = kv.gather(1, torch.tensor([7, 2, 5]), 10)
    assert torch.equal(got_k[3:], k) and torch.equal(got_v[3:], v)
    batch_k, _ = kv.gather_batch(1, torch.tensor([[7, 2, 5], [0, 0, 0]]))
    assert batch_k.shape == (2, 12, CFG.num_kv_heads, CFG.head_dim) and torch.equal(batch_k[0, 3:10], k)
    with pytest.raises(ValueError, match="holds no block"):
        PagedKVCache.num_blocks_for(CFG, 4, per_block - 1)
    with pytest.raises(ValueError, match="block_size"):
        PagedKVCache(CFG, num_blocks=10, block_size=0)


# ------------------------------------------------------------------------------------------- CUDA
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize(("dtype", "atol"), [(torch.float32, 1e-3), (torch.bfloat16, 0.05)])
def test_cuda_paged_matches_dense(dtype: torch.dtype, atol: float) -> None:
    r = ModelRunner(CFG, num_blocks=64, block_size=BS, device="cuda", dtype=dtype)
    a, b = _tokens(40, 40), _tokens(25, 41)
    r.run([SeqChunk(a[:30], 0, [5, 9, 1, 33, 2], False)])
    logits = r.forward_logits([SeqChunk(a[30:], 30, [5, 9, 1, 33, 2], True), SeqChunk(b, 0, [7, 8, 60, 61], True)])
    _close(logits[0], _dense(r, a)[-1], atol=atol)
    _close(logits[1], _dense(r, b)[-1], atol=atol)
    r.synchronize()
