"""vLLM in the loop: vLLM's scheduler (``LLMSchedScheduler``) makes every batch, llmsched's cost model prices it on a
simulated clock, a fake model samples the tokens; ``sim.metrics.compute_metrics`` gives the simulator's metrics.
"""

from __future__ import annotations

from typing import Any

from llmsched_env.adapters.vllm.config import AdapterConfig
from llmsched_env.adapters.vllm.offline import fake_output, make_scheduler, to_vllm_request
from llmsched_env.adapters.vllm.scheduler import LLMSchedScheduler
from llmsched_env.adapters.vllm.state import TENANT_KEY, SimClock
from llmsched_env.decision.serve import decision_metrics
from llmsched_env.engine.batch import Batch, Decision
from llmsched_env.engine.request import Request, Status
from llmsched_env.sim.metrics import compute_metrics
from llmsched_env.sim.setup import SimSetup
from llmsched_env.sim.simulator import check_arrival_order, idle_tick_s, wake_s

__all__ = ["VllmLoop", "run_vllm_loop"]

_DECISION = Decision()  # a placeholder: the Batch below is only priced, never built by llmsched's engine


class VllmLoop:
    """One episode of ``setup``'s requests (filled in as served) through vLLM's scheduler under its policy, each step
    priced by its ``clock``; past ``policy_timeout_s`` a step is vLLM's own."""

    def __init__(self, setup: SimSetup, policy_timeout_s: float = 0.1) -> None:
        self.config = config = setup.config
        self.tenants = setup.tenants
        self.cost_model = cost_model = setup.cost_model
        self.price_model = setup.clock or cost_model  # what each step costs on the clock
        self.requests = list(setup.requests)
        check_arrival_order(self.requests)
        self.start_s = self.requests[0].arrival_s if self.requests else 0.0
        self.clock = SimClock(self.start_s)
        policy = setup.policy
        adapter = AdapterConfig(
            policy=policy if isinstance(policy, str) else "fcfs", tenants=self.tenants, cost_model=cost_model,
            iterations_per_step=setup.iterations_per_step, nominal_rate_rps=setup.nominal_rate_rps or 1.0,
            seed=setup.seed, policy_timeout_s=policy_timeout_s, scenario=setup.scenario,
        )  # fmt: skip
        self.scheduler: LLMSchedScheduler = make_scheduler(
            config, scheduler_cls=LLMSchedScheduler, adapter=adapter,
            llmsched_policy=None if isinstance(policy, str) else policy, clock=self.clock,
        )  # fmt: skip
        self.idle_tick_s = idle_tick_s(cost_model)
        self.token_log: list[float] = []  # every decode token's time, each request's segment contiguous
        self._open: dict[int, list[float]] = {}  # request id -> decode token times of its open segment
        self._in_prefill: set[int] = set()  # admitted (or resumed), its prefill token not out yet
        self._by_id = {r.request_id: r for r in self.requests}
        self._next = 0
        self.num_steps = 0

    @property
    def now_s(self) -> float:
        return self.clock.now_s

    @property
    def done(self) -> bool:
        return self._next >= len(self.requests) and not self.scheduler.has_requests()

    def _arrive(self) -> None:
        reqs, s, cfg = self.requests, self.scheduler, self.config
        while self._next < len(reqs) and reqs[self._next].arrival_s <= self.clock.now_s:
            r = reqs[self._next]
            self._next += 1
            if r.total_len > cfg.max_model_len:
                self._reject(r, "exceeds_max_model_len")
            elif -(-r.total_len // cfg.block_size) > cfg.num_kv_blocks:
                self._reject(r, "exceeds_kv_capacity")
            else:
                vreq = to_vllm_request(r, cfg.block_size)
                assert vreq.sampling_params is not None
                vreq.sampling_params.extra_args = {TENANT_KEY: self.tenants[r.tenant].name}
                s.add_request(vreq)

    def _reject(self, r: Request, reason: str) -> None:
        r.status = Status.REJECTED
        r.reject_reason = reason
        r.finish_s = self.clock.now_s

    def _close(self, r: Request) -> None:
        """Close ``r``'s open decode segment (its tokens go to the time log)."""
        times = self._open.pop(r.request_id, None)
        if times is not None:
            start = len(self.token_log)
            self.token_log.extend(times)
            r.token_segments.append((start, len(self.token_log)))

    def step(self) -> None:
        """One vLLM step, priced and timed; or an idle jump when nothing ran."""
        self._arrive()
        s = self.scheduler
        if not s.has_requests():
            if self._next < len(self.requests):
                self.clock.now_s = max(self.clock.now_s, self.requests[self._next].arrival_s)
            return
        start = self.clock.now_s
        out = s.schedule()
        for d in out.scheduled_new_reqs:
            self._admitted(d.req_id, out.num_scheduled_tokens[d.req_id])
        for rid in out.scheduled_cached_reqs.resumed_req_ids:
            self._admitted(rid, out.num_scheduled_tokens[rid])
        for rid in out.preempted_req_ids:
            r = self._by_id[int(rid)]
            r.num_preemptions += 1
            self._in_prefill.discard(r.request_id)
            self._close(r)
        batch = Batch(_DECISION)
        sampled: list[Request] = []
        requests = s.requests
        for rid, n in out.num_scheduled_tokens.items():
            vreq = requests[rid]
            before = vreq.num_computed_tokens - n  # schedule() has advanced it already
            r = self._by_id[int(rid)]
            if r.request_id in self._in_prefill:
                batch.add_prefill(r, n, before)
            else:
                batch.num_decode_seqs += n
                batch.num_kv_tokens += vreq.num_tokens
            if vreq.num_computed_tokens >= vreq.num_tokens:
                sampled.append(r)
        if out.total_num_scheduled_tokens == 0:
            self._outputs(s.update_from_output(out, fake_output(s, out)))
            arrival = self.requests[self._next].arrival_s if self._next < len(self.requests) else None
            self.clock.now_s = wake_s(start, arrival, None, s.get_request_counts()[1] > 0, self.idle_tick_s)
        else:
            end = start + batch.time_s(self.price_model)
            self.clock.now_s = end
            for r in sampled:
                r.num_output_tokens += 1
                if r.request_id in self._in_prefill:
                    self._in_prefill.discard(r.request_id)
                    r.prefill_token_s.append(end)
                    if r.first_token_s is None:
                        r.first_token_s = end
                    self._open[r.request_id] = []
                else:
                    self._open[r.request_id].append(end)
            self._outputs(s.update_from_output(out, fake_output(s, out)))
        self.num_steps += 1

    def _outputs(self, outputs: dict[int, Any]) -> None:
        for eco in outputs.values():
            for o in eco.outputs:
                if o.finish_reason is not None:
                    self._finished(self._by_id[int(o.request_id)])

    def _admitted(self, rid: str, num_scheduled: int) -> None:
        r = self._by_id[int(rid)]
        vreq = self.scheduler.requests[rid]
        cached = vreq.num_computed_tokens - num_scheduled
        r.status = Status.RUNNING
        r.num_prefix_hit_tokens += cached
        r.num_admitted_tokens += vreq.num_tokens
        if r.first_scheduled_s is None:
            r.first_scheduled_s = self.clock.now_s
        self._in_prefill.add(r.request_id)

    def _finished(self, r: Request) -> None:
        self._close(r)
        self._in_prefill.discard(r.request_id)
        r.finish_s = self.clock.now_s
        if r.num_output_tokens >= r.output_len:
            r.status = Status.FINISHED
        else:  # aborted by shedding before its first token
            r.status = Status.REJECTED
            r.reject_reason = "ttft_unreachable"

    def run(self, max_steps: int = 10_000_000) -> dict[str, float]:
        """Serve every request to its end; the metrics and the adapter's counts. ``RuntimeError`` past ``max_steps``."""
        while not self.done:
            if self.num_steps >= max_steps:
                raise RuntimeError(f"vLLM loop: not drained after {max_steps} steps")
            self.step()
        return self.metrics()

    def metrics(self) -> dict[str, float]:
        for r in list(self._open):
            self._close(self._by_id[r])
        s = self.scheduler
        duration = max(self.clock.now_s - self.start_s, 1e-9)
        extra = {
            "num_iterations": float(self.num_steps), "duration_s": duration, "num_shed": float(s.num_shed),
            **decision_metrics(s.stats),
        }  # fmt: skip
        return compute_metrics(self.requests[: self._next], self.tenants, self.token_log, duration, extra)


def run_vllm_loop(setup: SimSetup, policy_timeout_s: float = 0.1) -> dict[str, float]:
    """The metrics of serving ``setup``'s requests through vLLM's scheduler: ``VllmLoop(...).run()``."""
    return VllmLoop(setup, policy_timeout_s).run()
