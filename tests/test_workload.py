"""Workload generation: Poisson superposition, length distributions, length files, prefix sharing."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import numpy as np
import pytest

from llmsched_env.engine.config import SLO_CLASSES, TenantConfig
from llmsched_env.workloads import workload as wl
from llmsched_env.workloads.public_traces import trace_path
from llmsched_env.workloads.traces import clear_trace_cache
from llmsched_env.workloads.workload import (
    LengthDist,
    TenantWorkload,
    WorkloadConfig,
    default_workload,
    generate,
    load_length_file,
    tenant_configs,
)

SHAREGPT = trace_path("sharegpt")
AZURE_CONV = trace_path("azure-conv")


def _tenant(name: str, rate: float, lengths: LengthDist | None = None, **kw) -> TenantWorkload:
    return TenantWorkload(TenantConfig(name), rate, lengths or LengthDist.fixed(100, 10), **kw)


def test_poisson_rate_and_cv() -> None:
    cfg = default_workload(20_000)
    reqs = generate(cfg, np.random.default_rng(0))
    arrivals = np.array([r.arrival_s for r in reqs])
    gaps = np.diff(np.concatenate([[0.0], arrivals]))
    target = wl.DEFAULT_CHAT_RATE_RPS + wl.DEFAULT_BATCH_RATE_RPS
    assert cfg.total_rate_rps == pytest.approx(target)
    assert len(reqs) / arrivals[-1] == pytest.approx(target, rel=0.03)
    assert abs(gaps.std() / gaps.mean() - 1.0) < 0.05
    assert arrivals[0] > 0 and np.all(gaps >= 0)
    assert [r.request_id for r in reqs] == list(range(20_000))


def test_tenant_shares_follow_rates() -> None:
    cfg = WorkloadConfig((_tenant("a", 1.0), _tenant("b", 2.0), _tenant("c", 3.0)), num_requests=20_000)
    reqs = generate(cfg, np.random.default_rng(1))
    tenants = np.array([r.tenant for r in reqs])
    for k, rate in enumerate((1.0, 2.0, 3.0)):
        assert np.mean(tenants == k) == pytest.approx(rate / 6.0, abs=0.015)
        # Each tenant's own arrivals form a Poisson process at its rate (superposition).
        own = np.diff([r.arrival_s for r in reqs if r.tenant == k])
        assert 1.0 / own.mean() == pytest.approx(rate, rel=0.05)
        assert abs(own.std() / own.mean() - 1.0) < 0.06
    assert tenant_configs(cfg) == tuple(t.tenant for t in cfg.tenants)


def _summary(reqs: list) -> list[tuple]:
    return [(r.request_id, r.arrival_s, r.prompt_len, r.output_len, r.tenant, r.prefix_ids) for r in reqs]


def test_determinism_by_seed() -> None:
    cfg = default_workload(500)
    same = _summary(generate(cfg, np.random.default_rng(7)))
    assert same == _summary(generate(cfg, np.random.default_rng(7)))
    assert same != _summary(generate(cfg, np.random.default_rng(8)))


def test_scaled_multiplies_rates_and_compresses_time() -> None:
    cfg = default_workload(200)
    fast = cfg.scaled(2.0)
    assert [t.rate_rps for t in fast.tenants] == [2 * t.rate_rps for t in cfg.tenants]
    slow_reqs = generate(cfg, np.random.default_rng(3))
    fast_reqs = generate(fast, np.random.default_rng(3))
    assert [r.arrival_s / 2 for r in slow_reqs] == pytest.approx([r.arrival_s for r in fast_reqs])
    assert [r.tenant for r in slow_reqs] == [r.tenant for r in fast_reqs]
    with pytest.raises(ValueError, match="load"):
        cfg.scaled(0.0)


def test_generate_many() -> None:
    reqs = generate(default_workload(10_000), np.random.default_rng(0))
    assert len(reqs) == 10_000
    assert [r.request_id for r in reqs] == list(range(10_000))


@pytest.mark.parametrize(
    "dist",
    [
        LengthDist.fixed(300, 50, max_prompt_len=300, max_output_len=64),
        LengthDist.uniform((10, 300), (1, 64), max_prompt_len=300, max_output_len=64),
        LengthDist.lognormal(250, 200, 2.0, 2.0, max_prompt_len=300, max_output_len=64),
        LengthDist.empirical(np.array([1, 5, 10_000]), np.array([70, 3, 1]), max_prompt_len=300, max_output_len=64),
    ],
    ids=lambda d: d.kind,
)
def test_lengths_within_clip_bounds(dist: LengthDist) -> None:
    prompts, outputs = dist.sample(np.random.default_rng(0), 5000)
    assert prompts.dtype == np.int64 and outputs.dtype == np.int64
    assert prompts.shape == outputs.shape == (5000,)
    assert prompts.min() >= 1 and prompts.max() <= 300
    assert outputs.min() >= 1 and outputs.max() <= 64


def test_length_kinds_shape() -> None:
    rng = np.random.default_rng(0)
    p, o = LengthDist.uniform((10, 20), (3, 4)).sample(rng, 2000)
    assert set(p.tolist()) == set(range(10, 21)) and set(o.tolist()) == {3, 4}
    p, o = LengthDist.lognormal(250, 200, 1.0, 1.0).sample(rng, 20_000)
    assert np.median(p) == pytest.approx(250, rel=0.05) and np.median(o) == pytest.approx(200, rel=0.05)
    assert np.log(p).std() == pytest.approx(1.0, rel=0.05)
    p, o = LengthDist.empirical(np.array([5, 7]), np.array([50, 70])).sample(rng, 100)
    assert set(zip(p.tolist(), o.tolist(), strict=True)) == {(5, 50), (7, 70)}  # pairs kept together
    assert LengthDist.fixed(3, 4).sample(rng, 0)[0].shape == (0,)


def test_default_workload() -> None:
    cfg = default_workload()
    assert cfg.num_requests == 1000
    chat, batch = tenant_configs(cfg)
    assert (chat.name, chat.slo, chat.priority) == ("chat", SLO_CLASSES["chat"], 0)
    assert (batch.name, batch.slo, batch.priority) == ("batch", SLO_CLASSES["batch"], 1)
    reqs = generate(cfg, np.random.default_rng(0))
    chat_prompts = [r.prompt_len for r in reqs if r.tenant == 0]
    batch_prompts = [r.prompt_len for r in reqs if r.tenant == 1]
    assert np.median(chat_prompts) < np.median(batch_prompts)
    assert max(chat_prompts) <= 4096 and max(r.output_len for r in reqs) <= 1024


@pytest.mark.parametrize(
    ("name", "rows", "first"),
    [(SHAREGPT.name, 30_731, (74, 918)), (AZURE_CONV.name, 19_366, (374, 44))],
)
def test_real_length_files(name: str, rows: int, first: tuple[int, int]) -> None:
    path = SHAREGPT if name == SHAREGPT.name else AZURE_CONV
    clear_trace_cache()
    prompts, outputs = load_length_file(path)
    assert prompts.size == outputs.size == rows
    assert (int(prompts[0]), int(outputs[0])) == first
    assert prompts.min() >= 1 and outputs.min() >= 1
    again = load_length_file(str(path))  # cache hit: same arrays, not re-read
    assert again[0] is prompts and again[1] is outputs
    assert not prompts.flags.writeable
    dist = LengthDist.from_file(path, max_prompt_len=2048, max_output_len=512)
    p, o = dist.sample(np.random.default_rng(0), 1000)
    assert p.max() <= 2048 and o.max() <= 512
    assert dist.kind == "empirical" and dist.prompt_samples is prompts


def test_length_file_cache_invalidated_by_mtime(tmp_path: Path) -> None:
    path = tmp_path / "lens.csv"
    path.write_text("num_prefill_tokens,num_decode_tokens\n10,20\n")
    assert load_length_file(path)[0].tolist() == [10]
    path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\nt,30,40\nt,50,60\n")
    mtime_ns = path.stat().st_mtime_ns + 10**9
    os.utime(path, ns=(mtime_ns, mtime_ns))
    prompts, outputs = load_length_file(path)
    assert prompts.tolist() == [30, 50] and outputs.tolist() == [40, 60]


SHAREGPT_HEADER = "num_prefill_tokens,num_decode_tokens,num_total_tokens,pd_ratio\n"


@pytest.mark.parametrize(
    ("text", "needles"),
    [
        ("", ["empty"]),
        (SHAREGPT_HEADER, ["no data rows"]),
        ("a,b,c\n1,2,3\n", [":1:", "num_prefill_tokens,num_decode_tokens", "ContextTokens,GeneratedTokens"]),
        (SHAREGPT_HEADER + "74,918,992,0.1\n12,abc,0,0\n", [":3:", "'num_decode_tokens'", "'abc'"]),
        (SHAREGPT_HEADER + "74,918,992,0.1\n\n0,5,5,0\n", [":4:", "'num_prefill_tokens'"]),
        ("TIMESTAMP,ContextTokens,GeneratedTokens\nt,5,-3\n", [":2:", "'GeneratedTokens'", "'-3'"]),
        ("TIMESTAMP,ContextTokens,GeneratedTokens\nt,5.5,3\n", [":2:", "'ContextTokens'"]),
        ("TIMESTAMP,ContextTokens,GeneratedTokens\nt,5,3\nt,7\n", [":3:", "'GeneratedTokens'"]),
    ],
    ids=[
        "empty",
        "header-only",
        "unknown-header",
        "non-numeric",
        "zero",
        "negative",
        "fraction",
        "short-row",
    ],
)
def test_malformed_length_files(tmp_path: Path, text: str, needles: list[str]) -> None:
    path = tmp_path / "bad.csv"
    path.write_text(text)
    with pytest.raises(ValueError) as info:
        load_length_file(path)
    message = str(info.value)
    assert str(path.resolve()) in message
    for needle in needles:
        assert needle in message


def test_missing_length_file(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"nope\.csv"):
        load_length_file(tmp_path / "nope.csv")
    with pytest.raises(ValueError, match=r"nope\.csv"):
        LengthDist.from_file(tmp_path / "nope.csv")


def _bad_configs() -> list[tuple[str, object]]:
    ok = LengthDist.fixed(100, 10)
    return [
        ("kind", lambda: LengthDist("zipf")),
        ("max_prompt_len", lambda: LengthDist.fixed(1, 1, max_prompt_len=0)),
        ("prompt_len", lambda: LengthDist.fixed(0, 1)),
        ("output_len", lambda: LengthDist.fixed(1, 5000, max_output_len=100)),
        ("prompt_range", lambda: LengthDist.uniform((50, 10), (1, 2))),
        ("output_range", lambda: LengthDist.uniform((1, 2), (0, 2))),
        ("prompt_median", lambda: LengthDist.lognormal(0, 10)),
        ("output_sigma", lambda: LengthDist.lognormal(10, 10, 1.0, -1.0)),
        ("prompt_samples", lambda: LengthDist.empirical(np.array([0, 1]), np.array([1, 1]))),
        ("paired", lambda: LengthDist.empirical(np.array([1, 2]), np.array([1]))),
        ("rate_rps", lambda: _tenant("a", 0.0)),
        ("lengths", lambda: TenantWorkload(TenantConfig("a"), 1.0, (100, 10))),
        ("prefix_share", lambda: _tenant("a", 1.0, prefix_share=1.5)),
        ("num_shared_prefixes", lambda: _tenant("a", 1.0, prefix_share=0.5, num_shared_prefixes=0)),
        ("shared_prefix_tokens", lambda: _tenant("a", 1.0, ok, prefix_share=0.5, shared_prefix_tokens=9000)),
        ("tenants", lambda: WorkloadConfig((), 10)),
        ("unique tenant names", lambda: WorkloadConfig((_tenant("a", 1.0), _tenant("a", 2.0)), 10)),
        ("num_requests", lambda: WorkloadConfig((_tenant("a", 1.0),), 0)),
        ("arrival", lambda: WorkloadConfig((_tenant("a", 1.0),), 10, arrival="gamma")),
        ("prefix_id_tokens", lambda: WorkloadConfig((_tenant("a", 1.0),), 10, prefix_id_tokens=0)),
        (
            "shared_prefix_tokens",
            lambda: WorkloadConfig((_tenant("a", 1.0, prefix_share=0.5, shared_prefix_tokens=100),), 10),
        ),
    ]


@pytest.mark.parametrize(("field", "build"), _bad_configs(), ids=[f for f, _ in _bad_configs()])
def test_invalid_config_names_field(field: str, build) -> None:
    with pytest.raises(ValueError, match=field):
        build()


def test_configs_are_frozen() -> None:
    cfg = default_workload(10)
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.num_requests = 5  # type: ignore[misc]
    with pytest.raises(ValueError):
        cfg.tenants[0].lengths.sample(np.random.default_rng(0), -1)


def test_prefix_sharing() -> None:
    shared = _tenant(
        "a",
        3.0,
        LengthDist.uniform((10, 100), (1, 5)),
        prefix_share=0.6,
        num_shared_prefixes=3,
        shared_prefix_tokens=1100,
    )
    other = _tenant("b", 1.0, prefix_share=1.0, num_shared_prefixes=2, shared_prefix_tokens=512)
    plain = _tenant("c", 1.0)
    cfg = WorkloadConfig((shared, other, plain), num_requests=4000, prefix_id_tokens=512)
    reqs = generate(cfg, np.random.default_rng(5))
    by_ids: dict[tuple[int, ...], list] = {}
    for r in reqs:
        assert r.prefix_id_tokens == 512
        if r.prefix_ids:
            by_ids.setdefault(r.prefix_ids, []).append(r)
    a_ids = {ids for ids, rs in by_ids.items() if rs[0].tenant == 0}
    b_ids = {ids for ids, rs in by_ids.items() if rs[0].tenant == 1}
    assert len(a_ids) == 3 and all(len(ids) == 2 for ids in a_ids)  # 1100 tokens -> 2 whole 512-token blocks
    assert len(b_ids) == 2 and all(len(ids) == 1 for ids in b_ids)
    all_ids = [i for ids in by_ids for i in ids]
    assert len(all_ids) == len(set(all_ids))  # unique per (tenant, system prompt, block position)
    for rs in by_ids.values():
        assert len({r.tenant for r in rs}) == 1 and len(rs) > 1
        # The system prompt is prepended to the sampled prompt, so every prompt extends past it.
        assert all(r.prompt_len > (1100 if r.tenant == 0 else 512) for r in rs)
    a_reqs = [r for r in reqs if r.tenant == 0]
    assert np.mean([bool(r.prefix_ids) for r in a_reqs]) == pytest.approx(0.6, abs=0.04)
    assert all(r.prefix_ids for r in reqs if r.tenant == 1)
    assert not any(r.prefix_ids for r in reqs if r.tenant == 2)
    assert all(r.prompt_len <= 100 for r in a_reqs if not r.prefix_ids)
