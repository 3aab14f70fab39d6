"""Rules that size the token budget from the TPOT SLO through the cost model: in the decode-first hybrid the
iteration time is every decode's inter-token gap, so Sarathi-Serve (OSDI'24) picks the largest chunk meeting the
target; ``slo_aware`` does so per iteration for the current decodes, with EDF and early rejection."""

from __future__ import annotations

import numpy as np

from baselines.base import BaselinePolicy, StaticPolicy, check_observation
from llmsched_env.costs.base import CostModel
from llmsched_env.decision.actions import UNLIMITED, ActionSpec
from llmsched_env.decision.policy import PolicyContext
from llmsched_env.engine.batch import Decision, QueueOrder

TYPICAL_CONTEXT_TOKENS = 1024  # context length assumed for each running decode when pricing an iteration


def hybrid_step_time_s(cost_model: CostModel, token_budget: int, num_decodes: int,
                       context_tokens: int = TYPICAL_CONTEXT_TOKENS) -> float:  # fmt: skip
    """A full decode-first iteration: ``num_decodes`` decodes at ``context_tokens`` each, the rest of
    ``token_budget`` one fresh prefill chunk."""
    p = max(token_budget - num_decodes, 0)
    return cost_model.step_time_s(p, num_decodes, num_decodes * context_tokens, p * (p + 1) / 2)


def tpot_budget(cost_model: CostModel, spec: ActionSpec, tpot_s: float, num_decodes: int,
                context_tokens: int = TYPICAL_CONTEXT_TOKENS) -> int:  # fmt: skip
    """The largest token-budget option whose full iteration takes at most ``tpot_s`` (else the smallest)."""
    best = spec.token_budget_values[0]
    for b in spec.token_budget_values:
        if hybrid_step_time_s(cost_model, b, num_decodes, context_tokens) <= tpot_s:
            best = b
    return best


def tightest_tpot_s(ctx: PolicyContext) -> float:
    return min(t.slo.tpot_s for t in ctx.tenants)


class SarathiPolicy(StaticPolicy):
    """``sarathi``: Sarathi-Serve stall-free batching: FCFS with one budget (= chunk cap), the largest whose
    iteration with ``max_num_seqs / 2`` decodes meets the tightest TPOT SLO."""

    name = "sarathi"

    def decide(self, ctx: PolicyContext) -> Decision:
        spec = ctx.action_spec
        budget = tpot_budget(ctx.cost_model, spec, tightest_tpot_s(ctx), ctx.engine.max_num_seqs // 2)
        return _budget_decision(QueueOrder.FCFS, budget, shed=False)


class SLOAwarePolicy(BaselinePolicy):
    """``slo_aware``: EDF, early rejection of hopeless requests, and per iteration the ``tpot_budget`` for the
    observed decodes (``run/num_decoding``), precomputed for every count so ``act`` is a lookup."""

    name = "slo_aware"
    bounded_act = True  # a lookup by the number of decodes (``decision.policy.bounded_act``)

    def __init__(self, ctx: PolicyContext, seed: int | None = None) -> None:
        super().__init__(ctx, seed)
        feature = "run/num_decoding"
        if feature not in ctx.obs_names:
            raise ValueError(f"slo_aware needs the observation feature {feature!r}; got {ctx.obs_names}")
        self._obs_index = ctx.obs_names.index(feature)
        self._obs_size = len(ctx.obs_names)
        self._max_seqs = ctx.engine.max_num_seqs
        tpot_s = tightest_tpot_s(ctx)
        self.budgets = [tpot_budget(ctx.cost_model, self.spec, tpot_s, d) for d in range(self._max_seqs + 1)]
        self._set_actions([_budget_decision(QueueOrder.EDF, b, shed=True) for b in self.budgets])

    def num_decodes(self, observation: np.ndarray) -> int:
        """Running decodes, read back from the normalised observation (clamped to the engine's range)."""
        d = int(float(observation[self._obs_index]) * self._max_seqs + 0.5)
        return 0 if d < 0 else min(d, self._max_seqs)

    def act(self, observation: np.ndarray, action_mask: np.ndarray) -> np.ndarray:
        if getattr(observation, "shape", None) != (self._obs_size,):  # one comparison; the message in the helper
            check_observation("SLOAwarePolicy", observation, self._obs_size)
        return self._emit(self.num_decodes(observation), action_mask)


def _budget_decision(order: QueueOrder, budget: int, shed: bool) -> Decision:
    """Decode-first hybrid with ``budget`` as both token budget and chunk cap, admitting all that fit."""
    return Decision(order=order, token_budget=budget, chunk_cap=budget, max_admit=UNLIMITED, shed=shed)
