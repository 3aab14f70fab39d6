"""Static rules of production engines and papers: each starts from vLLM v1's defaults (``fcfs_decision``) and
changes one or two knobs, the same at every iteration.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, ClassVar

from baselines.base import StaticPolicy, nearest_option
from llmsched_env.decision.actions import UNLIMITED
from llmsched_env.decision.policy import PolicyContext
from llmsched_env.engine.batch import Decision, QueueOrder

DEFAULT_TOKEN_BUDGET = 2048  # vLLM v1's default max_num_batched_tokens for online serving


def fcfs_decision(ctx: PolicyContext) -> Decision:
    """vLLM v1's default scheduler as action-space knobs: FCFS, decode-first, the budget option nearest 2048 (at
    most the engine's), no chunk cap, admit all that fit, no KV reserve, no shedding."""
    spec = ctx.action_spec
    target = min(DEFAULT_TOKEN_BUDGET, ctx.engine.max_num_batched_tokens)
    budgets = spec.token_budget_values
    fitting = [b for b in budgets if b <= target] or [budgets[0]]
    return Decision(QueueOrder.FCFS, nearest_option(fitting, target), spec.chunk_cap_values[-1], False, UNLIMITED, 0.0,
                    False)  # fmt: skip


class FCFSPolicy(StaticPolicy):
    """``fcfs``: vLLM v1 default (FCFS, decode-first chunked prefill, budget ~2048, admit all that fit). Its
    subclasses change ``changes`` of its knobs."""

    name = "fcfs"
    changes: ClassVar[dict[str, Any]] = {}

    def decide(self, ctx: PolicyContext) -> Decision:
        return replace(fcfs_decision(ctx), **self.changes) if self.changes else fcfs_decision(ctx)


def _variant(class_name: str, name: str, doc: str, **changes: Any) -> type[FCFSPolicy]:
    """A subclass of ``FCFSPolicy`` named ``class_name`` (registered as ``name``) that changes ``changes``."""
    return type(class_name, (FCFSPolicy,), {"__doc__": f"``{name}``: {doc}", "name": name, "changes": changes})


PriorityAgingPolicy = _variant("PriorityAgingPolicy", "priority_aging", "vLLM's priority scheduling with aging (tenant "
                               "priority minus waited time).", order=QueueOrder.PRIORITY_AGING)
VTCPolicy = _variant("VTCPolicy", "vtc", "Virtual Token Counter fair queueing (Sheng et al., OSDI'24): the "
                     "least-served tenant first.", order=QueueOrder.VTC)
SJFPolicy = _variant("SJFPolicy", "sjf", "shortest prefill first, with the engine's starvation guard (10 s).",
                     order=QueueOrder.SJF)
SPRWPolicy = _variant("SPRWPolicy", "sprw", "shortest predicted remaining work (prefill + predicted output tokens) "
                      "first, with the starvation guard; prefill alone without a prediction. Needs the schema-2 "
                      "action space.", order=QueueOrder.SPRW)
LPMPolicy = _variant("LPMPolicy", "lpm", "SGLang's longest-prefix-match order among the oldest waiting requests.",
                     order=QueueOrder.LPM)
PrefillFirstPolicy = _variant("PrefillFirstPolicy", "prefill_first", "vLLM v0 / SGLang default: an iteration with "
                              "pending prefill runs only prefill.", prefill_first=True)
KVGuardPolicy = _variant("KVGuardPolicy", "kv_guard", "conservative admission (Orca, SGLang's new_token_ratio): keep "
                         "10% of the KV pool free, admit at most 8 per iteration.", kv_reserve=0.1, max_admit=8)
