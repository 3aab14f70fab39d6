"""What the simulator predicts for a block of the live experiment: the block's stream served under an arm's policy
(``live.sim.simulate``, clock from the fitted model, the policy seeing the adapter's), its statistics computed as
the live block's are (``live.blocks``), with the constant ``frontend_delay_s`` added to every TTFT and E2E.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from llmsched_env.costs.base import CostModel
from llmsched_env.decision.policy_spec import PolicySpec
from llmsched_env.engine.config import EngineConfig, TenantConfig
from llmsched_env.live.blocks import METRICS, block_metrics
from llmsched_env.live.sim import simulate
from llmsched_env.live.workloads import stream_requests

__all__ = ["mean_prediction", "predict_block"]


def predict_block(
    stream: Sequence[dict[str, Any]], spec: PolicySpec, engine: EngineConfig, tenants: Sequence[TenantConfig],
    clock_model: CostModel, policy_model: CostModel, frontend_delay_s: float, nominal_rate_rps: float, seed: int = 0,
    scenario: str = "",
) -> dict[str, float]:  # fmt: skip
    """The ``METRICS``, ``preemptions`` and ``shed`` predicted for ``stream`` under ``spec`` (``scenario``: the
    tuned table's entry)."""
    requests = stream_requests(stream, tenants)
    result = simulate(
        requests, spec, engine, tenants, clock_model, policy_model, seed, nominal_rate_rps, scenario=scenario
    )
    names = [str(r["tenant"]) for r in stream]
    arrivals = np.array([float(r["timestamp"]) for r in stream])
    succeeded = np.isfinite(result.ttft_s)
    ttft, e2e = result.ttft_s + frontend_delay_s, result.e2e_s + frontend_delay_s
    ends = arrivals[succeeded] + e2e[succeeded]
    duration = float(ends.max() - arrivals.min()) if ends.size else math.nan
    slos = {t.name: t for t in tenants}
    metrics, _, _ = block_metrics(names, ttft, result.tpot_s, e2e, succeeded, slos, duration)
    metrics["preemptions"] = float(result.metrics.get("preemptions", 0.0))
    metrics["shed"] = float(result.metrics.get("num_rejected", 0.0))
    return metrics


def mean_prediction(blocks: Sequence[dict[str, float]]) -> dict[str, float]:
    """The mean of per-block predictions, key by key (NaNs left out; NaN where every block has none)."""
    keys = [*METRICS, "preemptions", "shed"]
    out = {}
    for k in keys:
        values = np.array([b[k] for b in blocks], dtype=np.float64)
        finite = values[np.isfinite(values)]
        out[k] = float(finite.mean()) if finite.size else math.nan
    return out
