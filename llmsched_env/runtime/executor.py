"""The torch executor: ``Runtime`` is a ``sim.Simulator`` whose ``execute(batch)`` runs the batch on a
``ModelRunner`` and returns its wall time (from the previous model step's end, loop included). Idle gaps are
skipped unless ``realtime=True``; ``pause()`` / ``resume()`` stop the clock (lockstep runs, ``block_offset``).
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np

from llmsched_env.costs.base import CostModel
from llmsched_env.engine.batch import Batch, Decision
from llmsched_env.engine.config import EngineConfig, TenantConfig
from llmsched_env.engine.request import Request, Status
from llmsched_env.runtime.runner import ModelRunner, SeqChunk
from llmsched_env.runtime.tokens import PromptTokens
from llmsched_env.sim.simulator import Simulator


class Runtime(Simulator):
    """Serve ``requests`` on ``runner``; ``cost_model`` only prices shedding decisions and the idle tick."""

    def __init__(self, runner: ModelRunner, config: EngineConfig, tenants: Sequence[TenantConfig],
                 cost_model: CostModel, requests: Sequence[Request], *, seed: int = 0, realtime: bool = False,
                 record: bool = False, block_offset: int = 0) -> None:  # fmt: skip
        if not isinstance(block_offset, int) or block_offset < 0:
            raise ValueError(f"block_offset must be an integer >= 0, got {block_offset!r}")
        if config.block_size != runner.block_size:
            raise ValueError(f"EngineConfig.block_size={config.block_size} differs from the runner's KV block size "
                             f"{runner.block_size}")
        if config.num_kv_blocks + block_offset > runner.num_blocks:
            raise ValueError(f"EngineConfig.num_kv_blocks={config.num_kv_blocks} from block {block_offset} on exceeds "
                             f"the runner's {runner.num_blocks} KV blocks")
        if config.max_model_len > runner.config.max_position:
            raise ValueError(f"EngineConfig.max_model_len={config.max_model_len} exceeds model "
                             f"{runner.config.name!r}'s max_position={runner.config.max_position}")
        self.runner = runner
        self.prompts = PromptTokens(runner.config.vocab_size, seed)
        self.output_tokens: dict[int, list[int]] = {}  # sampled tokens per request id, kept after it ends
        self.realtime = realtime
        # The engine's block b is the runner's block b + block_offset (two runtimes sharing one runner).
        self.block_offset = block_offset
        self._paused_at: float | None = None
        self.model_time_s = 0.0  # wall time inside the model runner
        self.busy_time_s = 0.0  # wall time of the iterations that ran a batch (model plus the loop around it)
        self.num_model_steps = 0
        # With ``record``: per model step, the cost model's features, its wall time and its model time.
        self.iterations: list[tuple[int, int, int, float, float, float]] | None = [] if record else None
        # (decoding requests, (prefill-ending request, its chunk index, its output count before), sampled)
        self._pending: tuple[list[Request], list[tuple[Request, int, int]], list[int | None]] | None = None
        super().__init__(config, tenants, cost_model, requests)
        self._mark = time.perf_counter()
        self._wall0 = self._mark - self.engine.now_s  # wall time at engine clock 0 (realtime mode)

    # ------------------------------------------------------------------------------------------ executing
    def execute(self, batch: Batch) -> float:
        engine = self.engine
        chunks: list[SeqChunk] = []
        finals: list[tuple[Request, int, int]] = []  # requests whose chunk ends their prefill
        for r, chunk, ctx in zip(batch.prefill_reqs, batch.prefill_chunks, batch.prefill_ctx, strict=True):
            seq = self._sequence(r)
            end = ctx + chunk
            sample = end == r.num_prefill_tokens
            if sample:
                finals.append((r, len(chunks), r.num_output_tokens))
            chunks.append(SeqChunk(seq[ctx:end].tolist(), ctx, self._table(r), sample))
        decodes = engine.decoding_requests() if batch.decode_round else []
        for r in decodes:
            last = self.output_tokens[r.request_id][-1]
            chunks.append(SeqChunk([last], r.num_computed_tokens, self._table(r), True))
        t0 = time.perf_counter()
        sampled = self.runner.run(chunks)
        self.runner.synchronize()
        t1 = time.perf_counter()
        self.model_time_s += t1 - t0
        self.num_model_steps += 1
        self._pending = (decodes, finals, sampled)
        dt = t1 - self._mark
        self._mark = t1
        self.busy_time_s += dt
        if self.iterations is not None:
            self.iterations.append((batch.num_prefill_tokens, batch.num_decode_seqs, batch.num_kv_tokens,
                                    batch.prefill_attn_pairs, dt, t1 - t0))  # fmt: skip
        return dt

    def step(self, decision: Decision) -> Batch:
        batch = super().step(decision)
        if self._pending is not None:
            decodes, finals, sampled = self._pending
            self._pending = None
            first_decode = len(sampled) - len(decodes)
            for i, r in enumerate(decodes):  # a decode round's token counts even if r was preempted after it
                self._append(r, sampled[first_decode + i])
            for r, i, out_before in finals:  # it counts unless r was preempted before its prefill landed
                if r.num_output_tokens == out_before + 1:
                    self._append(r, sampled[i])
        else:
            self._mark = time.perf_counter()  # nothing ran: the decision's time is not an iteration's
        if self.realtime:
            lag = self.engine.now_s - (time.perf_counter() - self._wall0)
            if lag > 0:  # the engine jumped an idle gap: live through it
                time.sleep(lag)
                self._mark = time.perf_counter()
        return batch

    def pause(self) -> None:
        """Stop this runtime's clock until ``resume()`` (in lockstep, during another runtime's turn)."""
        if self._paused_at is not None:
            raise RuntimeError("Runtime.pause: already paused")
        self._paused_at = time.perf_counter()

    def resume(self) -> None:
        """Restart the clock ``pause()`` stopped."""
        if self._paused_at is None:
            raise RuntimeError("Runtime.resume: not paused")
        gap = time.perf_counter() - self._paused_at
        self._paused_at = None
        self._mark += gap
        self._wall0 += gap

    def _table(self, r: Request) -> list[int]:
        off = self.block_offset
        return [b + off for b in r.block_table] if off else r.block_table

    def _append(self, r: Request, token: int | None) -> None:
        assert token is not None, f"no token sampled for {r}"
        self.output_tokens.setdefault(r.request_id, []).append(token)
        if r.status == Status.FINISHED:
            self.prompts.drop(r.request_id)

    def _sequence(self, r: Request) -> np.ndarray:
        """Prompt plus the tokens produced so far: what a (re)started prefill computes."""
        prompt = self.prompts.prompt(r)
        out = self.output_tokens.get(r.request_id)
        if not out:
            return prompt
        return np.concatenate([prompt, np.asarray(out[: r.num_output_tokens], dtype=np.int64)])

    def loop_overhead_s(self) -> float:
        """Mean wall time per model step spent outside the model: engine, observation, policy."""
        if not self.num_model_steps:
            return 0.0
        return (self.busy_time_s - self.model_time_s) / self.num_model_steps

    # ------------------------------------------------------------------------------------------ checks
    def check_invariants(self) -> None:
        """The simulator's invariants, plus: every request holds as many sampled tokens as the engine counts."""
        super().check_invariants()
        self.engine.sync_all()
        for r in self.arrived_requests():
            n = len(self.output_tokens.get(r.request_id, ()))
            assert n == r.num_output_tokens, f"{r}: {n} sampled tokens, engine counts {r.num_output_tokens}"

    def metrics(self) -> dict[str, float]:
        out = super().metrics()
        out["model_time_s"] = self.model_time_s
        out["model_steps"] = float(self.num_model_steps)
        out["loop_overhead_s"] = self.loop_overhead_s()
        return out
