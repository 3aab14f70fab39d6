"""Static rules of production engines and papers: the same knobs at every iteration.

Every rule here starts from vLLM v1's defaults (``fcfs_decision``) and changes one or two knobs; the engine
core implements each queue order, so a rule is only a choice of options from the action space.
"""

from __future__ import annotations

from dataclasses import replace

from baselines.base import StaticPolicy, nearest_option
from llmsched_env.decision.actions import UNLIMITED
from llmsched_env.decision.policy import PolicyContext
from llmsched_env.engine.batch import Decision, QueueOrder

__all__ = [
    "DEFAULT_TOKEN_BUDGET", "FCFSPolicy", "KVGuardPolicy", "LPMPolicy", "PrefillFirstPolicy", "PriorityAgingPolicy",
    "SJFPolicy", "SPRWPolicy", "VTCPolicy", "fcfs_decision",
]

DEFAULT_TOKEN_BUDGET = 2048  # vLLM v1's default max_num_batched_tokens for online serving


def fcfs_decision(ctx: PolicyContext) -> Decision:
    """vLLM v1's default scheduler as action-space knobs.

    FCFS order; decode-first hybrid (every running decode, then chunked prefills); the token budget option
    nearest 2048 but at most the engine's ``max_num_batched_tokens``; no per-request chunk cap (the largest
    option); admit as many as fit; no KV reserve (vLLM admits while blocks are free); no shedding.
    """
    spec = ctx.action_spec
    target = min(DEFAULT_TOKEN_BUDGET, ctx.engine.max_num_batched_tokens)
    budgets = spec.token_budget_values
    fitting = [b for b in budgets if b <= target] or [budgets[0]]
    return Decision(
        order=QueueOrder.FCFS,
        token_budget=nearest_option(fitting, target),
        chunk_cap=spec.chunk_cap_values[-1],
        prefill_first=False,
        max_admit=UNLIMITED,
        kv_reserve=0.0,
        shed=False,
    )


class FCFSPolicy(StaticPolicy):
    """``fcfs``: vLLM v1 default (FCFS, decode-first chunked prefill, budget ~2048, admit all that fit)."""

    name = "fcfs"

    def decide(self, ctx: PolicyContext) -> Decision:
        return fcfs_decision(ctx)


class PriorityAgingPolicy(StaticPolicy):
    """``priority_aging``: vLLM's ``--scheduling-policy priority`` with aging: tenant priority (lower first)
    minus waited time over the engine's aging constant, so low-priority work cannot starve. Else fcfs."""

    name = "priority_aging"

    def decide(self, ctx: PolicyContext) -> Decision:
        return replace(fcfs_decision(ctx), order=QueueOrder.PRIORITY_AGING)


class VTCPolicy(StaticPolicy):
    """``vtc``: Virtual Token Counter fair queueing (Sheng et al., OSDI'24): the least-served tenant (by
    weighted input + 2 × output tokens) goes first; the engine keeps the counters and lifts a returning
    tenant's counter to the least active one. Else fcfs."""

    name = "vtc"

    def decide(self, ctx: PolicyContext) -> Decision:
        return replace(fcfs_decision(ctx), order=QueueOrder.VTC)


class SJFPolicy(StaticPolicy):
    """``sjf``: shortest prefill first (as in SGLang's/FastServe-style length-aware queues), with the
    engine's starvation guard (the oldest request goes first once it has waited > 10 s). Else fcfs."""

    name = "sjf"

    def decide(self, ctx: PolicyContext) -> Decision:
        return replace(fcfs_decision(ctx), order=QueueOrder.SJF)


class SPRWPolicy(StaticPolicy):
    """``sprw``: shortest predicted remaining work first, as predicted-length schedulers do (learning-to-rank
    and predicted-SJF schedulers): each waiting request's prefill tokens plus its predicted output tokens
    (``length_prediction``), the least first; the engine's starvation guard
    (the oldest request goes first once it has waited > 10 s). Else fcfs. Without a length prediction it
    orders by prefill alone, as ``sjf``. Needs the schema-2 action space (SPRW is not a schema-1 order)."""

    name = "sprw"

    def decide(self, ctx: PolicyContext) -> Decision:
        return replace(fcfs_decision(ctx), order=QueueOrder.SPRW)


class LPMPolicy(StaticPolicy):
    """``lpm``: SGLang's longest-prefix-match order (among the oldest waiting requests, the one with the
    most prompt blocks already in the prefix cache first), to raise cache hits. Else fcfs."""

    name = "lpm"

    def decide(self, ctx: PolicyContext) -> Decision:
        return replace(fcfs_decision(ctx), order=QueueOrder.LPM)


class PrefillFirstPolicy(StaticPolicy):
    """``prefill_first``: vLLM v0 / SGLang default batch mix: an iteration with pending prefill runs only
    prefill and decodes wait (better TTFT and throughput, worse TPOT stalls). FCFS, budget as fcfs."""

    name = "prefill_first"

    def decide(self, ctx: PolicyContext) -> Decision:
        return replace(fcfs_decision(ctx), prefill_first=True)


class KVGuardPolicy(StaticPolicy):
    """``kv_guard``: conservative admission in the spirit of Orca's reservation and SGLang's
    ``new_token_ratio``: keep 10% of the KV pool free when admitting and admit at most 8 per iteration,
    trading queueing delay for fewer recompute preemptions. Else fcfs."""

    name = "kv_guard"
    KV_RESERVE = 0.1
    MAX_ADMIT = 8

    def decide(self, ctx: PolicyContext) -> Decision:
        return replace(fcfs_decision(ctx), kv_reserve=self.KV_RESERVE, max_admit=self.MAX_ADMIT)
