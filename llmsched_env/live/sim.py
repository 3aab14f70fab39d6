"""A live run's requests (``replay``), or a block's predicted stream (``predict_block``), served again by llmsched's
simulator through ``decision.serve``: the clock priced by the setup's fitted ``clock``, the engine and policy
seeing its ``cost_model``. TTFT, TPOT, E2E and the wait before the first step per request in send order.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from llmsched_env.costs.base import CostModel
from llmsched_env.decision.actions import ActionSpec
from llmsched_env.decision.observation import make_encoder
from llmsched_env.decision.planners.mpc import planning_view
from llmsched_env.decision.policy import PolicyContext, start_episode
from llmsched_env.decision.policy_spec import PolicySpec, resolve_policy
from llmsched_env.decision.registry import make_scheduler
from llmsched_env.decision.serve import ServeOptions, serve
from llmsched_env.engine.config import EngineConfig, TenantConfig
from llmsched_env.engine.request import Request, Status, tpot_s
from llmsched_env.live.blocks import COMPONENT_KEYS, METRICS, block_metrics, flat_components, latency_components
from llmsched_env.live.logs import LiveRun
from llmsched_env.live.workloads import stream_requests
from llmsched_env.sim.metrics import token_times
from llmsched_env.sim.setup import SimSetup

__all__ = ["Latencies", "ReplayResult", "mean_prediction", "predict_block", "replay", "replay_requests", "simulate"]


@dataclass(frozen=True, eq=False)
class Latencies:
    """Per request in send order (NaN: none): ``ttft_s``, ``tpot_s``, ``e2e_s``; the run's ``throughput_rps``."""

    ttft_s: np.ndarray
    tpot_s: np.ndarray
    e2e_s: np.ndarray
    throughput_rps: float

    def shifted(self, delay_s: float) -> Latencies:
        """The same with ``delay_s`` added to every TTFT and E2E (a constant front-end delay)."""
        return replace(self, ttft_s=self.ttft_s + delay_s, e2e_s=self.e2e_s + delay_s)


@dataclass(frozen=True, eq=False)
class ReplayResult(Latencies):
    """A replay's latencies, with the policy's name, the simulator's metrics (``Simulator.metrics``) and per request
    the ``wait_s`` from arrival to first scheduled (NaN: unfinished)."""

    policy: str = ""
    metrics: dict[str, float] = field(default_factory=dict)
    wait_s: np.ndarray = field(default_factory=lambda: np.zeros(0))


def replay_requests(run: LiveRun, tenants: Sequence[TenantConfig]) -> list[Request]:
    """The run's requests as llmsched ``Request``s in send order, arrivals from the first server-side arrival;
    ``ValueError`` naming the file and line or entry for an unknown tenant or a length of 0."""
    index = {t.name: k for k, t in enumerate(tenants)}
    start = run.start_s
    out = []
    for i, (plan, rec) in enumerate(zip(run.plan, run.server, strict=True)):
        where = f"{run.log_dir / 'requests.jsonl'}:{rec.line}"
        if rec.tenant not in index:
            raise ValueError(f"{where}: field 'tenant' {rec.tenant!r} is not a tenant given ({', '.join(index)})")
        if rec.prompt_tokens < 1:
            raise ValueError(f"{where}: field 'prompt_tokens' must be >= 1 to replay, got {rec.prompt_tokens}")
        if plan.output_tokens < 1:
            raise ValueError(f"requests.json of run {run.name}: label {plan.label!r}: output_tokens must be >= 1")
        out.append(Request(i, rec.arrival_s - start, rec.prompt_tokens, plan.output_tokens, index[rec.tenant]))
    return out


def simulate(setup: SimSetup) -> ReplayResult:
    """Serve ``setup``'s fresh requests under its policy, priced by its ``clock``; latencies in the requests' order."""
    requests = setup.requests
    spec = resolve_policy(setup.policy) if isinstance(setup.policy, str) else setup.policy
    engine, tenants, seen = setup.config, setup.tenants, setup.cost_model
    sim = setup.with_requests(sorted(requests, key=lambda r: (r.arrival_s, r.request_id))).simulator()
    action_spec = ActionSpec.for_engine(engine, spec.schema)
    encoder = make_encoder(spec.schema, engine, tenants, setup.rate_rps())
    # a planner (mpc) plans on a plain copy of the replay's state, priced by the model the policy sees
    ctx = PolicyContext(
        engine, tenants, seen, action_spec, encoder.names, setup.scenario, planning_state=lambda: planning_view(sim)
    )
    chosen = spec.make_for(ctx, setup.seed)
    start_episode(chosen)
    fallback = make_scheduler("fcfs", ctx)
    # a planner's time is not the simulator's (on vLLM it plans off the critical path): no wall-clock deadline
    options = ServeOptions(
        iterations_per_step=setup.iterations_per_step or spec.iterations_per_step,
        policy_timeout_s=None if spec.mpc is not None else ServeOptions.policy_timeout_s,
    )
    metrics, _ = serve(sim, chosen, encoder, action_spec, fallback, options)
    rounds = np.asarray(sim.engine.round_end_s, dtype=np.float64)
    ttft, tpot, e2e, wait = (np.full(len(requests), np.nan) for _ in range(4))
    for r in requests:
        if r.status != Status.FINISHED:
            continue
        t = token_times(r, rounds)
        i = r.request_id
        ttft[i], e2e[i] = t[0] - r.arrival_s, t[-1] - r.arrival_s
        if r.first_scheduled_s is not None:  # (a finished request was scheduled)
            wait[i] = r.first_scheduled_s - r.arrival_s
        if len(t) > 1:
            tpot[i] = tpot_s(float(t[0]), float(t[-1]), len(t))
    return ReplayResult(ttft, tpot, e2e, metrics["request_throughput_rps"], spec.name, metrics, wait)


def replay(
    run: LiveRun, policy: str | PolicySpec, engine: EngineConfig, tenants: Sequence[TenantConfig],
    cost_model: CostModel, policy_cost_model: CostModel | None = None, **options: Any,
) -> ReplayResult:  # fmt: skip
    """``simulate`` of ``run``'s requests priced by ``cost_model``; engine and policy see ``policy_cost_model``."""
    requests = replay_requests(run, tenants)
    seen = policy_cost_model or cost_model
    return simulate(SimSetup(engine, tuple(tenants), seen, tuple(requests), policy, clock=cost_model, **options))


def predict_block(stream: Sequence[dict[str, Any]], setup: SimSetup, frontend_delay_s: float) -> dict[str, float]:
    """The metrics predicted for ``stream`` under ``setup``, ``frontend_delay_s`` added to every TTFT and E2E; with
    the preemptions, the requests shed and each latency's mean split into its parts (``COMPONENT_KEYS``: the front
    end is ``frontend_delay_s``)."""
    tenants = setup.tenants
    requests = stream_requests(stream, tenants)
    result = simulate(setup.with_requests(requests))
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
    done = succeeded & np.isfinite(result.wait_s)
    out_tokens = np.array([r.output_len for r in requests], dtype=np.float64)
    parts = latency_components(ttft[done], e2e[done], out_tokens[done], result.wait_s[done], result.ttft_s[done],
                               result.e2e_s[done])  # fmt: skip
    return {**metrics, **flat_components(parts)}


def mean_prediction(blocks: Sequence[dict[str, float]]) -> dict[str, float]:
    """The mean of per-block predictions, key by key (NaNs left out; NaN where every block has none); the
    ``COMPONENT_KEYS`` over the blocks that hold them, left out where none does (predictions made before them)."""
    keys = [*METRICS, "preemptions", "shed", *(k for k in COMPONENT_KEYS if any(k in b for b in blocks))]
    out = {}
    for k in keys:
        values = np.array([b[k] for b in blocks if k in b], dtype=np.float64)
        finite = values[np.isfinite(values)]
        out[k] = float(finite.mean()) if finite.size else math.nan
    return out
