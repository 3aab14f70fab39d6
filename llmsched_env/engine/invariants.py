"""The engine's invariants, checked by tests after every step (O(state)): every request in exactly one place with
a matching status, incremental aggregates equal to a recount, decoders holding their next round's blocks and an
event, block reference counts equal to the tables holding them, the last batch within its budgets.
"""

from __future__ import annotations

from llmsched_env.engine.engine import Engine
from llmsched_env.engine.request import Request, Status


class Places:
    """Where each request was found, for the "in exactly one place" checks of the engine and the cluster."""

    def __init__(self) -> None:
        self.seen: dict[int, str] = {}

    def __len__(self) -> int:
        return len(self.seen)

    def place(self, r: Request, where: str) -> None:
        """``r`` is in ``where``; AssertionError naming both places if it was already found elsewhere."""
        assert r.request_id not in self.seen, f"request {r.request_id} is in {self.seen[r.request_id]} and {where}"
        self.seen[r.request_id] = where


def check_engine(engine: Engine) -> None:
    """Raise AssertionError naming the first inconsistency found in ``engine``."""
    seen = Places()
    place = seen.place
    engine.queue.check_invariants()
    for r in engine.queue.requests():
        place(r, "waiting")
        assert r.status == Status.WAITING and not r.block_table, f"waiting {r} holds state"
    refs: dict[int, int] = {}
    num_dec = 0
    dec_base = 0
    for r in engine.running.values():
        place(r, "running")
        assert r.status == Status.RUNNING, f"running {r} has status {r.status.name}"
        for b in r.block_table:
            refs[b] = refs.get(b, 0) + 1
        assert (r.request_id in engine.prefilling) != r.decoding, f"{r}: prefilling and decoding disagree"
        if r.decoding:
            num_dec += 1
            dec_base += r.prompt_len + r.decode_out0 - r.decode_round0
            out = r.decode_out0 + engine.num_rounds - r.decode_round0
            assert out < r.output_len, f"{r} should have finished"
            need = engine.pool.blocks_for(r.prompt_len + out)
            assert len(r.block_table) >= need, f"{r} lacks a KV block for the next round"
            assert r.event_round >= engine.num_rounds, f"{r} has a past event {r.event_round}"
            assert r in engine.decode_events.get(r.event_round, ()), f"{r} is missing from its event bucket"
        else:
            assert r.num_computed_tokens < r.num_prefill_tokens, f"{r} finished prefill but is not decoding"
            need = engine.pool.blocks_for(r.num_computed_tokens)
            assert len(r.block_table) >= need, f"{r} has fewer blocks than computed tokens"
    assert num_dec == engine.num_decoding and dec_base == engine.decode_base, "decode aggregates drifted"
    total_blocks = sum(engine.pool.blocks_for(r.total_len) for r in engine.running.values())
    assert total_blocks == engine.running_total_blocks, "running_total_blocks drifted"
    for t in range(len(engine.tenants)):
        n = sum(1 for r in engine.running.values() if r.tenant == t)
        assert n == engine.num_running_t[t], f"tenant {t}: num_running drifted"
    assert len(engine.running) <= engine.config.max_num_seqs, "more running requests than max_num_seqs"
    for r in engine.finished:
        place(r, "finished")
        assert r.status == Status.FINISHED and r.num_output_tokens == r.output_len and not r.block_table
        assert len(r.prefill_token_s) == len(r.token_segments), f"{r}: token records misaligned"
    for r in engine.rejected:
        place(r, "rejected")
        assert r.status == Status.REJECTED and r.reject_reason and not r.block_table
    for r in engine.handed_off:  # gone to a decode engine: its status is that engine's business now
        place(r, "handed off")
        assert engine.prefill_only and r.first_token_s is not None, f"{r} was handed off before its first token"
    for r in engine.landed:
        place(r, "landed")
        assert r.status == Status.TRANSFERRING and not r.block_table, f"landed {r} holds state"
        assert r.num_computed_tokens == r.prompt_len + r.num_output_tokens - 1, f"landed {r}: KV count is off"
    assert len(seen) == engine.num_arrived, f"{len(seen)} requests placed but {engine.num_arrived} arrived"
    assert engine.num_good + engine.num_missed <= engine.num_arrived, "a request was resolved twice"
    engine.pool.check_invariants(refs)
    ends = engine.round_end_s
    assert len(ends) < 2 or ends[-2] <= ends[-1], "the round clock went back"
    assert not engine.round_end_s or engine.round_end_s[-1] <= engine.now_s, "a round ends in the future"
    batch = engine.last_batch
    if batch is not None:
        d = batch.decision
        assert batch.num_tokens <= engine.config.max_num_batched_tokens, "batch exceeds max_num_batched_tokens"
        assert batch.num_prefill_tokens <= max(d.token_budget, 0), "prefill exceeds the token budget"
        assert batch.num_tokens <= max(d.token_budget, batch.num_decode_seqs), "batch exceeds the token budget"
        alone = len(batch.prefill_reqs) == 1 and batch.num_decode_seqs == 0  # no one to starve: no cap (vLLM)
        assert alone or all(c <= d.chunk_cap for c in batch.prefill_chunks), "a chunk exceeds the chunk cap"
        assert batch.num_admitted <= d.max_admit, "admitted more than max_admit"
