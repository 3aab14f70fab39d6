"""Lockstep parity: vLLM's v1 scheduler and llmsched's engine (its vLLM-v1 settings) fed the same requests, their
batches compared step by step (tokens per request, preemptions, finishes); after a divergence each runs on under
its own rules. ``python -m llmsched_env.adapters.vllm.parity`` prints the agreement on the shipped workloads.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from llmsched_env.adapters.vllm.offline import fake_output, make_scheduler, to_vllm_request
from llmsched_env.costs.base import CostModel
from llmsched_env.costs.loader import load_cost_model
from llmsched_env.engine.batch import Decision, QueueOrder
from llmsched_env.engine.config import EngineConfig, TenantConfig
from llmsched_env.engine.engine import Engine
from llmsched_env.engine.invariants import check_engine
from llmsched_env.engine.request import Request, Status
from llmsched_env.workloads.library import SCENARIOS

__all__ = ["ParityCase", "ParityReport", "compare", "default_cases", "main", "scenario_requests"]

_UNLIMITED = 1 << 30


@dataclass
class ParityReport:
    """How often the two engines' steps agreed, the ``mismatches``, and per engine the preemptions and prefix hits."""

    name: str
    num_requests: int
    num_refused: int = 0  # requests longer than max_model_len or the KV pool: neither engine runs them
    steps: int = 0
    identical_steps: int = 0
    mismatches: Counter[str] = field(default_factory=Counter)
    preemptions: list[int] = field(default_factory=lambda: [0, 0])
    prefix_hit_tokens: tuple[int, int] = (0, 0)
    first_token_step_equal: float = 1.0  # share of requests whose first token came in the same step
    finish_step_equal: float = 1.0  # share of requests that finished in the same step
    first_divergence: str = ""
    divergences: list[str] = field(default_factory=list)

    @property
    def agreement(self) -> float:
        return self.identical_steps / self.steps if self.steps else 1.0

    def row(self) -> str:
        return (
            f"{self.name:<38} {self.num_requests - self.num_refused:>5} {self.steps:>6} {100 * self.agreement:>8.2f}% "
            f"{self.preemptions[0]:>7} {self.preemptions[1]:>7} "
            f"{100 * self.first_token_step_equal:>8.2f}% {100 * self.finish_step_equal:>8.2f}%"
        )


HEADER = (
    f"{'workload':<38} {'reqs':>5} {'steps':>6} {'identical':>9} {'pre.ll':>7} {'pre.vl':>7} "
    f"{'1st tok=':>9} {'finish=':>9}"
)


@dataclass(frozen=True)
class ParityCase:
    """One comparison: a workload and the engine limits both engines run under."""

    name: str
    requests: tuple[Request, ...]
    engine: EngineConfig
    chunk_cap: int = 0  # vLLM's long_prefill_token_threshold; 0: none
    reserve_full_prefill: bool = True
    # llmsched's decision each step (None: FCFS over the whole budget, chunk_cap as vLLM's, admission unlimited)
    decision: Decision | None = None
    vllm_engine: EngineConfig | None = None  # vLLM's limits where they differ from llmsched's (None: ``engine``)
    watermark: float = 0.0  # vLLM's --watermark


def _copy(r: Request) -> Request:
    return Request(r.request_id, r.arrival_s, r.prompt_len, r.output_len, 0, r.prefix_ids or None, r.prefix_id_tokens)


def compare(
    case: ParityCase, cost_model: CostModel, check: bool = False, max_steps: int = 1_000_000,
    engine_rules: dict[str, Any] | None = None,
) -> ParityReport:  # fmt: skip
    """Run ``case`` through both engines in lockstep, counting the steps they agree on."""
    cfg = case.engine
    requests = sorted((_copy(r) for r in case.requests), key=lambda r: (r.arrival_s, r.request_id))
    rules = {"reserve_full_prefill": case.reserve_full_prefill, **(engine_rules or {})}
    engine = Engine(replace(cfg, **rules), [TenantConfig("all")], cost_model)
    vllm = make_scheduler(case.vllm_engine or cfg, chunk_cap=case.chunk_cap, watermark=case.watermark,
                          reserve_full_prefill=case.reserve_full_prefill)  # fmt: skip
    budget = cfg.max_num_batched_tokens
    decision = case.decision or Decision(
        order=QueueOrder.FCFS, token_budget=budget, chunk_cap=case.chunk_cap or budget, max_admit=_UNLIMITED,
    )  # fmt: skip
    report = ParityReport(case.name, len(requests))  # reqs: the requests both ran (refused ones not counted)
    by_id = {r.request_id: r for r in requests}
    first_ll: dict[int, int] = {}
    first_vl: dict[int, int] = {}
    finish_ll: dict[int, int] = {}
    finish_vl: dict[int, int] = {}
    preempt_count = {r.request_id: 0 for r in requests}
    nxt = 0
    if requests:
        engine.advance_clock(requests[0].arrival_s)
    while report.steps < max_steps:
        while nxt < len(requests) and requests[nxt].arrival_s <= engine.now_s:
            r = requests[nxt]
            engine.add_request(r)
            if r.status != Status.REJECTED:  # longer than the model or the pool: vLLM's front end refuses it too
                vllm.add_request(to_vllm_request(r, cfg.block_size))
            else:
                report.num_refused += 1
            nxt += 1
        if not engine.has_work and not vllm.has_requests():
            if nxt >= len(requests):
                break
            engine.advance_clock(requests[nxt].arrival_s)
            continue
        step = report.steps
        # llmsched's batch: prefill chunks, and one token for every decoding request in a decode round
        batch = engine.schedule(decision)
        ll_tokens = dict(zip((r.request_id for r in batch.prefill_reqs), batch.prefill_chunks, strict=True))
        if batch.decode_round:
            for r in engine.running.values():
                if r.decoding:
                    ll_tokens[r.request_id] = ll_tokens.get(r.request_id, 0) + 1
        ll_preempted = {rid for rid, r in by_id.items() if r.num_preemptions != preempt_count[rid]}
        for rid in ll_preempted:
            preempt_count[rid] = by_id[rid].num_preemptions
        # vLLM's
        out = vllm.schedule()
        vl_tokens = {int(rid): n for rid, n in out.num_scheduled_tokens.items()}
        vl_preempted = {int(rid) for rid in (out.preempted_req_ids or ())}
        live_before = set(vllm.requests)
        # run both
        if batch.is_empty:
            wake = requests[nxt].arrival_s if nxt < len(requests) else engine.now_s + 1e-3
            engine.advance_clock(max(wake, engine.now_s))
        else:
            engine.complete(batch, engine.now_s + batch.time_s(cost_model))
        n_fin = len(engine.finished)
        vllm.update_from_output(out, fake_output(vllm, out))
        ll_finished = {r.request_id for r in engine.finished[n_fin - (n_fin - len(finish_ll)) :]} - set(finish_ll)
        vl_finished = {int(rid) for rid in live_before - set(vllm.requests)}
        if check:
            check_engine(engine)
        for rid in ll_finished:
            finish_ll[rid] = step
        for rid in vl_finished:
            finish_vl[rid] = step
        for rid in ll_tokens:
            r = by_id[rid]
            if r.first_token_s is not None and rid not in first_ll:
                first_ll[rid] = step
        for rid in vl_tokens:
            if rid not in first_vl and (rid in vl_finished or vllm.requests[str(rid)].num_output_tokens > 0):
                first_vl[rid] = step
        report.steps += 1
        report.preemptions[0] += len(ll_preempted)
        report.preemptions[1] += len(vl_preempted)
        same_tokens = ll_tokens == vl_tokens
        same_preempt = ll_preempted == vl_preempted
        same_finish = ll_finished == vl_finished
        if same_tokens and same_preempt and same_finish:
            report.identical_steps += 1
            continue
        report.mismatches.update(k for k, same in (("tokens", same_tokens), ("preempted", same_preempt),
                                                   ("finished", same_finish)) if not same)  # fmt: skip
        if len(report.divergences) < 20:
            report.divergences.append(_describe(step, ll_tokens, vl_tokens, ll_preempted, vl_preempted, by_id))
    report.first_divergence = report.divergences[0] if report.divergences else ""
    stats = vllm.kv_cache_manager.prefix_cache_stats
    hits = int(getattr(stats, "hits", 0)) if stats is not None else 0
    report.prefix_hit_tokens = (engine.num_prefix_hit_tokens, hits)
    ran = [k for k, r in by_id.items() if r.status != Status.REJECTED]
    n = max(len(ran), 1)
    report.first_token_step_equal = sum(first_ll.get(k) == first_vl.get(k) for k in ran) / n
    report.finish_step_equal = sum(finish_ll.get(k) == finish_vl.get(k) for k in ran) / n
    return report


def _describe(
    step: int, ll: dict[int, int], vl: dict[int, int], ll_pre: set[int], vl_pre: set[int], by_id: dict[int, Request],
) -> str:  # fmt: skip
    diff = sorted(k for k in set(ll) | set(vl) if ll.get(k) != vl.get(k))[:6]
    parts = [f"req {k}: llmsched {ll.get(k, 0)} vLLM {vl.get(k, 0)} ({by_id[k]!r})" for k in diff]
    if ll_pre != vl_pre:
        parts.append(f"preempted llmsched {sorted(ll_pre)} vLLM {sorted(vl_pre)}")
    return f"step {step}: " + "; ".join(parts)


def scenario_requests(name: str, num_requests: int, load: float, seed: int, cost_model: CostModel) -> list[Request]:
    """An evaluation window of ``num_requests`` requests of library scenario ``name`` at ``load``."""
    scenario = SCENARIOS.get(name)
    source = scenario.source("test", cost_model)
    return source.sample(np.random.default_rng(seed), num_requests, load)


def default_cases(num_requests: int = 1000, seed: int = 0) -> list[ParityCase]:
    """The comparisons the docs report: two traces, roomy and tight pools, with and without a chunk cap."""
    cost_model = load_cost_model("llama3-8b-a100")
    roomy = EngineConfig(
        num_kv_blocks=8192, block_size=16, max_num_seqs=128, max_num_batched_tokens=2048, max_model_len=16384
    )
    tight = replace(roomy, num_kv_blocks=1024)
    # vLLM refuses to start with a max_model_len its KV pool cannot hold: the tight pool gets a shorter one
    long_roomy = replace(roomy, max_model_len=131072, num_kv_blocks=16384)
    long_tight = replace(long_roomy, num_kv_blocks=4096, max_model_len=4096 * 16)
    azure = tuple(scenario_requests("azure-conv", num_requests, 1.0, seed, cost_model))
    mooncake = tuple(scenario_requests("mooncake-conv", num_requests, 1.0, seed, cost_model))
    return [
        ParityCase("azure-conv roomy", azure, roomy),
        ParityCase("azure-conv roomy, chunk cap 512", azure, roomy, chunk_cap=512),
        ParityCase("azure-conv KV pressure", azure, tight),
        ParityCase("azure-conv KV pressure, chunk cap 512", azure, tight, chunk_cap=512),
        ParityCase("mooncake-conv roomy", mooncake, long_roomy),
        ParityCase("mooncake-conv KV pressure", mooncake, long_tight),
        ParityCase("mooncake-conv KV pressure, cap 512", mooncake, long_tight, chunk_cap=512),
    ]


def main(argv: Sequence[str] | None = None) -> int:
    """Print the step agreement of vLLM's scheduler and llmsched's engine on the shipped workloads."""
    parser = argparse.ArgumentParser(prog="python -m llmsched_env.adapters.vllm.parity", description=__doc__)
    parser.add_argument("--num-requests", type=int, default=1000, help="requests per workload (default 1000)")
    parser.add_argument("--seed", type=int, default=0, help="which window of each trace (default 0)")
    parser.add_argument("--only", default="", help="run only the cases whose name contains this")
    parser.add_argument("--divergences", type=int, default=3, help="divergent steps shown per case (default 3)")
    parser.add_argument(
        "--first-chunk-admission",
        choices=("both", "llmsched"),
        default=None,
        help="admission checks only the first chunk (reserve_full_prefill off) in both engines, or in llmsched's "
        "alone to see what the rule changes (default: both reserve the whole prefill, vLLM's default)",
    )
    args = parser.parse_args(argv)
    cost_model = load_cost_model("llama3-8b-a100")
    print(HEADER)
    worst = 1.0
    for case in default_cases(args.num_requests, args.seed):
        if args.only and args.only not in case.name:
            continue
        rules = None
        if args.first_chunk_admission == "both":
            case = replace(case, reserve_full_prefill=False)
        elif args.first_chunk_admission == "llmsched":
            rules = {"reserve_full_prefill": False}
        report = compare(case, cost_model, engine_rules=rules)
        worst = min(worst, report.agreement)
        print(report.row(), flush=True)
        for line in report.divergences[: args.divergences]:
            print("    " + line)
    print(f"lowest agreement: {100 * worst:.2f}% of steps identical")
    return 0


if __name__ == "__main__":
    sys.exit(main())
