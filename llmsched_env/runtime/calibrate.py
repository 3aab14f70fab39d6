"""Calibrate the simulator's cost model on the runtime: samples from ``profile(runner, grid)`` (batch shapes alone)
or ``iteration_samples(runtime)`` (an episode's steps, loop included); ``fit`` fits a ``LinearCostModel``.
"""

from __future__ import annotations

import itertools
import statistics
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from llmsched_env.costs.base import CostModel
from llmsched_env.costs.linear import LinearCostModel
from llmsched_env.engine.config import EngineConfig
from llmsched_env.runtime.executor import Runtime
from llmsched_env.runtime.runner import ModelRunner, SeqChunk

Sample = tuple[int, int, int, float, float]  # prefill tokens, decode seqs, KV tokens, attention pairs, seconds


@dataclass(frozen=True)
class ProfileGrid:
    """Batch shapes to time: every (prefill chunk, its cached context) x (decode count, decode context)."""

    prefill_tokens: tuple[int, ...] = (0, 16, 64, 256, 512, 1024, 2048)
    prefill_context: tuple[int, ...] = (0, 512, 2048)
    decode_seqs: tuple[int, ...] = (0, 1, 4, 16, 32, 64)
    decode_context: tuple[int, ...] = (128, 512, 2048)

    def __post_init__(self) -> None:
        for name in ("prefill_tokens", "prefill_context", "decode_seqs", "decode_context"):
            values = getattr(self, name)
            if not values or any(not isinstance(v, int) or v < 0 for v in values):
                raise ValueError(f"ProfileGrid.{name} must be a non-empty tuple of integers >= 0, got {values!r}")

    @classmethod
    def for_engine(cls, config: EngineConfig) -> ProfileGrid:
        """The default grid cut to what ``config`` can schedule (budget, sequences, model length)."""
        base = cls()

        def upto(values: tuple[int, ...], top: int) -> tuple[int, ...]:
            return tuple(sorted({v for v in values if v < top} | {top}))

        ctx_top = max(config.max_model_len - config.max_num_batched_tokens, 0)
        return cls(upto(base.prefill_tokens, config.max_num_batched_tokens), upto(base.prefill_context, ctx_top),
                   upto(base.decode_seqs, config.max_num_seqs), upto(base.decode_context, config.max_model_len - 1))

    def shapes(self) -> list[tuple[int, int, int, int]]:
        """``(p, c, d, l)`` for every non-empty batch; context only matters where there is work it sizes."""
        out = set()
        for p, c, d, ln in itertools.product(self.prefill_tokens, self.prefill_context, self.decode_seqs,
                                             self.decode_context):
            if p == 0 and d == 0:
                continue
            out.add((p, c if p else 0, d, ln if d else 0))
        return sorted(out)


def batch_features(p: int, c: int, d: int, ln: int) -> tuple[int, int, int, float]:
    """The cost model's features of one prefill chunk (``p`` tokens after ``c``) and ``d`` decodes at ``ln``."""
    pairs = p * (c + (p + 1) * 0.5) if p else 0.0
    return p, d, d * ln, pairs


def _chunks(runner: ModelRunner, p: int, c: int, d: int, ln: int, rng: np.random.Generator) -> list[SeqChunk] | None:
    bs = runner.block_size
    vocab = runner.config.vocab_size
    chunks = []
    next_block = 0
    lengths = ([(c, p)] if p else []) + [(ln, 1)] * d
    for start, n in lengths:
        nblocks = -(-(start + n) // bs)
        if next_block + nblocks > runner.num_blocks or start + n > runner.config.max_position:
            return None
        table = list(range(next_block, next_block + nblocks))
        next_block += nblocks
        chunks.append(SeqChunk(rng.integers(0, vocab, n).tolist(), start, table, True))
    return chunks


def time_step(runner: ModelRunner, chunks: Sequence[SeqChunk], warmup: int = 1, repeats: int = 3) -> float:
    """Median wall time of ``runner.run(chunks)`` (device-synchronised) over ``repeats`` runs after ``warmup``."""
    for _ in range(warmup):
        runner.run(chunks)
    runner.synchronize()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        runner.run(chunks)
        runner.synchronize()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def profile(runner: ModelRunner, grid: ProfileGrid | None = None, repeats: int = 3, seed: int = 0,
            progress: Callable[[int, int], None] | None = None) -> list[Sample]:  # fmt: skip
    """One sample per shape of ``grid`` that fits ``runner``'s KV cache (the median of ``repeats`` runs)."""
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    grid = grid or ProfileGrid()
    rng = np.random.default_rng(seed)
    shapes = grid.shapes()
    samples: list[Sample] = []
    for i, (p, c, d, ln) in enumerate(shapes):
        chunks = _chunks(runner, p, c, d, ln, rng)
        if chunks is None:
            continue
        samples.append((*batch_features(p, c, d, ln), time_step(runner, chunks, 1, repeats)))
        if progress is not None:
            progress(i + 1, len(shapes))
    return samples


def iteration_samples(runtime: Runtime) -> list[Sample]:
    """The recorded model steps of ``runtime`` (``record=True``) as samples, wall time with the loop."""
    if runtime.iterations is None:
        raise ValueError("iteration_samples: build the Runtime with record=True")
    return [(p, d, kv, pairs, dt) for p, d, kv, pairs, dt, _ in runtime.iterations if dt > 0]


def fit(grid_samples: Iterable[Sample], loop_overhead_s: float = 0.0, name: str = "runtime", description: str = "",
        iterations: Iterable[Sample] = ()) -> LinearCostModel:  # fmt: skip
    """``LinearCostModel`` fitted to ``grid_samples`` (plus ``loop_overhead_s``) and ``iterations``, then scaled so
    its total over the iterations equals theirs (real steps have a tail relative errors leave out)."""
    if loop_overhead_s < 0:
        raise ValueError(f"loop_overhead_s must be >= 0, got {loop_overhead_s}")
    recorded = list(iterations)
    samples = [(p, d, kv, pairs, t + loop_overhead_s) for p, d, kv, pairs, t in grid_samples] + recorded
    model = LinearCostModel.fit(samples, name=name, description=description, concave_decodes=True)
    if not recorded:
        return model
    return model.scaled(measured_over_predicted(model, recorded))


def samples_table(samples: Sequence[Sample]) -> list[dict[str, float]]:
    """Samples as rows with named fields (for CSV/JSON reports)."""
    keys = ("num_prefill_tokens", "num_decode_seqs", "num_kv_tokens", "prefill_attn_pairs", "seconds")
    return [dict(zip(keys, (float(v) for v in s), strict=True)) for s in samples]


def measured_over_predicted(model: CostModel, samples: Sequence[Sample]) -> float:
    """Total measured time of ``samples`` over the total ``model`` predicts for them."""
    predicted = sum(model.step_time_s(int(p), int(d), int(kv), pairs) for p, d, kv, pairs, _ in samples)
    return sum(t for *_, t in samples) / predicted


_STEP_KINDS: tuple[tuple[str, Callable[[Sample], bool]], ...] = (
    ("decodes 1", lambda s: s[0] == 0 and s[1] == 1),
    ("decodes 2", lambda s: s[0] == 0 and s[1] == 2),
    ("decodes 3-4", lambda s: s[0] == 0 and 3 <= s[1] <= 4),
    ("decodes 5-8", lambda s: s[0] == 0 and 5 <= s[1] <= 8),
    ("decodes 9+", lambda s: s[0] == 0 and s[1] >= 9),
    ("with prefill", lambda s: s[0] > 0),
)


def residuals_by_decodes(model: CostModel, samples: Sequence[Sample]) -> list[dict[str, float | str]]:
    """Measured over predicted total time of ``samples`` per kind of step (``_STEP_KINDS``)."""
    rows: list[dict[str, float | str]] = []
    for name, kind in _STEP_KINDS:
        picked = [s for s in samples if kind(s)]
        if picked:
            ratio = measured_over_predicted(model, picked)
            rows.append({"steps": name, "count": float(len(picked)), "measured_over_predicted": ratio})
    return rows
