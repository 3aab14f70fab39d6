"""A live run's request stream replayed in llmsched's simulator, request by request.

``replay`` builds one llmsched ``Request`` per request of the run: its server-side arrival (relative to the
run's first), the prompt length the server counted, the exact output length the client asked for (the client
ignores EOS, so every request runs to it) and its tenant. It serves them with a ``Simulator`` under the same
policy, resolved as ``llmsched-evaluate --policies`` and the vLLM adapter resolve one, through the serving
loop (``decision.serve``: the env's observation, mask and decision holding, an ``fcfs`` fallback), and returns
each request's TTFT, TPOT and E2E in the run's send order, with the request throughput.

The simulator's clock is priced by ``cost_model`` (typically ``fit.fit_live_cost_model`` of the run's
steps); the engine and the policy see ``policy_cost_model`` when given: the model the live server's adapter
was configured with, which a policy such as ``slo_aware`` sizes its token budget by.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

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
from llmsched_env.live.logs import LiveRun
from llmsched_env.sim.metrics import token_times
from llmsched_env.sim.repriced import RepricedSimulator

__all__ = ["Latencies", "ReplayResult", "replay", "replay_requests", "simulate"]


@dataclass(frozen=True, eq=False)
class Latencies:
    """Per request, in the run's send order (NaN where a request has none): ``ttft_s``, ``tpot_s`` (only for
    a request of more than one output token) and ``e2e_s``; and the run's ``throughput_rps``."""

    ttft_s: np.ndarray
    tpot_s: np.ndarray
    e2e_s: np.ndarray
    throughput_rps: float

    def shifted(self, delay_s: float) -> Latencies:
        """The same with ``delay_s`` added to every TTFT and E2E (a constant front-end delay)."""
        return replace(self, ttft_s=self.ttft_s + delay_s, e2e_s=self.e2e_s + delay_s)


@dataclass(frozen=True, eq=False)
class ReplayResult(Latencies):
    """A replay's latencies, with the policy's name and the simulator's metrics (``Simulator.metrics``)."""

    policy: str = ""
    metrics: dict[str, float] = field(default_factory=dict)


def replay_requests(run: LiveRun, tenants: Sequence[TenantConfig]) -> list[Request]:
    """The run's requests as llmsched ``Request``s in send order (``request_id`` = index in ``run.plan``),
    arrivals in seconds from the run's first server-side arrival; ``ValueError`` naming the file and line or
    entry for a tenant not among ``tenants`` or a length of 0."""
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


def replay(
    run: LiveRun,
    policy: str | PolicySpec,
    engine: EngineConfig,
    tenants: Sequence[TenantConfig],
    cost_model: CostModel,
    policy_cost_model: CostModel | None = None,
    seed: int = 0,
    nominal_rate_rps: float | None = None,
    scenario: str = "",
    iterations_per_step: int | None = None,
) -> ReplayResult:
    """Serve ``run``'s requests (``replay_requests``) in the simulator under ``policy`` (a name for
    ``resolve_policy``, or a ``PolicySpec``) on ``engine`` and ``tenants``, priced by ``cost_model``; see the
    module docstring. ``nominal_rate_rps`` is the observation's arrival-rate unit (the live adapter's
    setting; default: the run's mean arrival rate), ``scenario`` the tuned baseline's table entry and
    ``iterations_per_step`` how long a decision holds (default: the policy's own, 1 for a baseline)."""
    requests = replay_requests(run, tenants)
    return simulate(requests, policy, engine, tenants, cost_model, policy_cost_model, seed, nominal_rate_rps,
                    scenario, iterations_per_step)  # fmt: skip


def simulate(
    requests: Sequence[Request],
    policy: str | PolicySpec,
    engine: EngineConfig,
    tenants: Sequence[TenantConfig],
    cost_model: CostModel,
    policy_cost_model: CostModel | None = None,
    seed: int = 0,
    nominal_rate_rps: float | None = None,
    scenario: str = "",
    iterations_per_step: int | None = None,
) -> ReplayResult:
    """Serve ``requests`` (``request_id`` = their position, arrivals in seconds) in the simulator under
    ``policy``, each iteration priced by ``cost_model`` while the engine and the policy see ``policy_cost_model``
    (default: the same), as ``replay`` describes; the latencies come back in ``requests``' order. The requests
    are changed as they are served: pass fresh ones."""
    spec = resolve_policy(policy) if isinstance(policy, str) else policy
    tenants = tuple(tenants)
    seen = policy_cost_model or cost_model
    ordered = sorted(requests, key=lambda r: (r.arrival_s, r.request_id))
    sim = RepricedSimulator(cost_model, engine, tenants, seen, ordered)
    action_spec = ActionSpec.for_engine(engine, spec.schema)
    span = ordered[-1].arrival_s - ordered[0].arrival_s
    rate = nominal_rate_rps or (len(ordered) / span if span > 0 else 1.0)
    encoder = make_encoder(spec.schema, engine, tenants, rate)
    # a planner (mpc) plans on a plain copy of the replay's state, priced by the model the policy sees
    ctx = PolicyContext(
        engine, tenants, seen, action_spec, encoder.names, scenario, planning_state=lambda: planning_view(sim)
    )
    chosen = spec.make_for(ctx, seed)
    start_episode(chosen)
    fallback = make_scheduler("fcfs", ctx)
    # a planner's time is not the simulator's (on vLLM it plans off the critical path): no wall-clock deadline
    options = ServeOptions(
        iterations_per_step=iterations_per_step or spec.iterations_per_step,
        policy_timeout_s=None if spec.mpc is not None else ServeOptions.policy_timeout_s,
    )
    metrics, _ = serve(sim, chosen, encoder, action_spec, fallback, options)
    rounds = np.asarray(sim.engine.round_end_s, dtype=np.float64)
    ttft, tpot, e2e = (np.full(len(requests), np.nan) for _ in range(3))
    for r in requests:
        if r.status != Status.FINISHED:
            continue
        t = token_times(r, rounds)
        i = r.request_id
        ttft[i], e2e[i] = t[0] - r.arrival_s, t[-1] - r.arrival_s
        if len(t) > 1:
            tpot[i] = tpot_s(float(t[0]), float(t[-1]), len(t))
    return ReplayResult(ttft, tpot, e2e, metrics["request_throughput_rps"], spec.name, metrics)
