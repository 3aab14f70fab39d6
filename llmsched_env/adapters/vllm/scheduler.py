"""Any llmsched policy deciding vLLM's batches: ``LLMSchedScheduler``, a subclass of vLLM v1's ``Scheduler``, and
``LLMSchedAsyncScheduler``, the same over vLLM's ``AsyncScheduler`` (for vLLM running with async scheduling).

Every ``schedule()`` it encodes vLLM's state into llmsched's observation and action mask (``VllmState`` is an
``EngineState``: the same features, by name, as llmsched's engine gives), asks the policy, and sets vLLM's
knobs from the ``Decision`` before running vLLM's own ``schedule()`` (``contract.vllm_knobs``; the table is in
``contract``'s docstring).

Each step's decision comes from ``decision.loop.DecisionLoop``, as the env's and the runtime's do (held for
``iterations_per_step`` steps, corrected where the mask forbids it), under a hard deadline (``policy_timeout_s``;
``decision.decider.TimedDecider``: a ``SIGALRM`` timer where vLLM schedules on its main thread, else a worker
thread): a policy that raises, returns a malformed action, or has not answered by its deadline leaves that
decision to vLLM's own behaviour (the loop's ``ENGINE_DEFAULT`` fallback: every knob restored to vLLM's setting,
FCFS order), counted by cause in ``stats`` (``decision.loop.DecisionStats``). A hung policy cannot hold
``schedule()`` past its timeout. The
bookkeeping is incremental: hooks on admission, preemption and finishing keep per-tenant counters, so a step
costs O(tenants + prefilling requests + changes), not O(requests).

Configuration (``config.AdapterConfig``, checked in full before vLLM builds anything): the constructor keyword
``adapter=`` offline, else ``AdapterConfig.from_env()`` (``vllm serve --scheduler-cls
llmsched_env.adapters.vllm.scheduler.LLMSchedScheduler`` with ``LLMSCHED_VLLM_CONFIG=config.yaml``, or
``LLMSCHED_POLICY`` / ``LLMSCHED_TENANTS`` / ...). A request's tenant is
``sampling_params.extra_args["llmsched_tenant"]`` (default: the first tenant). The clock is ``time.time()``
(vLLM stamps ``arrival_time`` with it) unless a ``clock`` is given (``SimClock`` offline).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from vllm.v1.core.sched.async_scheduler import AsyncScheduler
from vllm.v1.core.sched.output import SchedulerOutput
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.engine import EngineCoreOutput, EngineCoreOutputs
from vllm.v1.request import Request as VllmRequest
from vllm.v1.request import RequestStatus

from llmsched_env.adapters.vllm import require_vllm
from llmsched_env.adapters.vllm.config import CONFIG_ENV, AdapterConfig
from llmsched_env.adapters.vllm.contract import VllmKnobs, adapter_spaces, batch_features, vllm_knobs
from llmsched_env.adapters.vllm.serve_log import LABEL_KEY, ServeLog
from llmsched_env.adapters.vllm.state import TENANT_KEY, SimClock, VllmState, engine_config_of
from llmsched_env.adapters.vllm.waiting import PolicyWaitingQueue
from llmsched_env.decision.loop import ENGINE_DEFAULT, DecisionLoop
from llmsched_env.decision.policy import Policy, PolicyContext
from llmsched_env.decision.policy_file import action_options
from llmsched_env.engine.batch import Decision, QueueOrder

__all__ = [
    "CONFIG_ENV",
    "TENANT_KEY",
    "AdapterConfig",
    "LLMSchedAsyncScheduler",
    "LLMSchedScheduler",
    "PolicyWaitingQueue",
    "SimClock",
    "VllmState",
]

_COMPLETED = (RequestStatus.FINISHED_STOPPED, RequestStatus.FINISHED_LENGTH_CAPPED)


if TYPE_CHECKING:  # the adapter is always mixed in before vLLM's Scheduler: checked against it
    from vllm.v1.core.sched.scheduler import Scheduler as _SchedulerBase
else:
    _SchedulerBase = object


class _LLMSchedAdapter(_SchedulerBase):
    """The adapter, mixed in before vLLM's ``Scheduler`` or ``AsyncScheduler`` (see the module docstring).

    Keywords beyond vLLM's: ``adapter`` (an ``AdapterConfig``; default ``AdapterConfig.from_env()``),
    ``llmsched_policy`` (a ``Policy`` object, overriding ``adapter.policy``), ``clock`` (seconds, comparable with
    requests' ``arrival_time``; default ``time.time``)."""

    _async = False  # whether the vLLM class mixed with is the AsyncScheduler

    def __init__(
        self,
        *args: Any,
        adapter: AdapterConfig | None = None,
        llmsched_policy: Policy | None = None,
        clock: Callable[[], float] | None = None,
        **kwargs: Any,
    ) -> None:
        vllm_version = require_vllm()
        cfg = adapter if adapter is not None else AdapterConfig.from_env()
        resolved = cfg.resolve()  # the whole configuration checked before vLLM allocates anything
        super().__init__(*args, **kwargs)
        self._check_vllm_config()
        self.adapter = cfg
        self.clock: Callable[[], float] = clock if clock is not None else time.time
        self.engine_config = engine_config_of(self)
        cost_model = resolved.cost_model
        self.state = VllmState(self, self.engine_config, cfg.tenants, cost_model, self.clock)
        spec = resolved.spec
        schema = int(getattr(llmsched_policy, "schema_version", spec.schema))
        self.action_spec, self.encoder = adapter_spaces(self.engine_config, cfg.tenants, schema, cfg.nominal_rate_rps)
        self.context = PolicyContext(
            self.engine_config, self.state.tenants, cost_model, self.action_spec, self.encoder.names, resolved.scenario
        )
        if llmsched_policy is not None:
            policy = llmsched_policy
        else:
            policy = spec.make_for(self.context, cfg.seed)
            if spec.path is not None:  # an exported policy must fit this engine and these tenants
                spec.load().check_compatible(
                    self.encoder.names,
                    self.action_spec.nvec,
                    schema_version=schema,
                    action_options=action_options(self.action_spec),
                )
        default_hold = spec.iterations_per_step if llmsched_policy is None else 1
        self.iterations_per_step = cfg.iterations_per_step or default_hold
        # the step between the policy and vLLM's knobs; vLLM's own settings where the policy fails
        self.decisions = DecisionLoop(
            self.action_spec,
            self.encoder,
            policy,
            hold=self.iterations_per_step,
            fallback=ENGINE_DEFAULT,
            timeout_s=cfg.policy_timeout_s,
            deadline_mode=cfg.policy_deadline,
            name="llmsched-policy",
        )
        self.stats = self.decisions.stats
        self.num_kv_blocks = self.engine_config.num_kv_blocks
        # vLLM's own settings, restored whenever the policy's step falls back
        self.base_knobs = self._knobs_now()
        self.queue = PolicyWaitingQueue(self.state, self._cached_blocks)
        self.waiting = self.queue
        # the (decision, running requests, decodes) vLLM's knobs were last set for
        self._knobs_key: tuple[Decision | None, int, int] | None = None
        # aborted by shedding, reported by the next update_from_output: (request id, client, finish reason, events)
        self.shed_requests: list[tuple[str, int, Any, Any]] = []
        self.num_shed = 0
        self.adapter_time_s = 0.0  # encode + mask + act + apply + bookkeeping, summed over steps
        self.abort_time_s = 0.0  # of that, vLLM's finish_requests aborting the requests shedding gave up
        self.vllm_time_s = 0.0  # vLLM's own schedule(), summed over steps
        self.num_steps = 0
        self.log = ServeLog(cfg.log_dir) if cfg.log_dir else None
        if self.log is not None:
            self.log.engine(
                {
                    **dataclasses.asdict(self.engine_config),
                    "tenants": [{"name": t.name, "ttft_s": t.slo.ttft_s, "tpot_s": t.slo.tpot_s,
                                 "weight": t.weight, "priority": t.priority} for t in self.state.tenants],
                    "policy": cfg.policy,
                    "iterations_per_step": self.iterations_per_step,
                    "policy_deadline": self.decisions.deadline,
                    "vllm": "==".join(vllm_version),
                }
            )  # fmt: skip
        self._step_start: tuple[float, float, Any] | None = None  # (t0, t1, features) of the step being run

    @property
    def llmsched_policy(self) -> Policy:
        """The llmsched policy deciding each step (not ``policy``: vLLM's Scheduler keeps its SchedulingPolicy
        there); setting it installs a new one (its own deadline timer) from the next decision on."""
        policy = self.decisions.policy
        assert policy is not None
        return policy

    @llmsched_policy.setter
    def llmsched_policy(self, policy: Policy) -> None:
        self.decisions.policy = policy

    def _check_vllm_config(self) -> None:
        sc = self.scheduler_config
        if sc.policy != "fcfs":
            raise ValueError(
                f"LLMSchedScheduler orders the waiting queue itself: start vLLM with --scheduling-policy fcfs, "
                f"not {sc.policy!r}"
            )
        if bool(getattr(sc, "async_scheduling", False)) != self._async:
            raise ValueError(
                "vLLM runs with async scheduling: use --scheduler-cls "
                "llmsched_env.adapters.vllm.scheduler.LLMSchedAsyncScheduler, or start vLLM with --no-async-scheduling"
                if not self._async
                else "LLMSchedAsyncScheduler needs vLLM's async scheduling (--async-scheduling); without it use "
                "llmsched_env.adapters.vllm.scheduler.LLMSchedScheduler"
            )

    def _knobs_now(self) -> VllmKnobs:
        return VllmKnobs(
            QueueOrder.FCFS,
            self.max_num_scheduled_tokens,
            self.scheduler_config.long_prefill_token_threshold,
            self.max_num_active_reqs,
            self.kv_cache_manager.watermark_blocks,
        )

    def _cached_blocks(self, vreq: VllmRequest) -> int:
        _, n, _ = self.kv_cache_manager.get_computed_blocks(vreq)
        return n // self.block_size

    # -- the step ------------------------------------------------------------------------------------------
    def schedule(self, *args: Any, **kwargs: Any) -> SchedulerOutput:
        t0 = time.perf_counter()
        wall0 = time.time() if self.log is not None else 0.0
        state = self.state
        state.expire_ttft()
        decision = self.decisions.next(state)  # held, checked against the mask; a new one every k steps
        self._apply(decision)
        t1 = time.perf_counter()
        out = super().schedule(*args, **kwargs)
        t2 = time.perf_counter()
        for d in out.scheduled_new_reqs:
            state.admitted(d.req_id)
            state.shadows[d.req_id].num_prefix_hit_tokens += d.num_computed_tokens  # found in the prefix cache
        for rid in out.scheduled_cached_reqs.resumed_req_ids:
            state.admitted(rid)
        if self.log is not None:
            features = batch_features(out.num_scheduled_tokens, self.requests)
            self._step_start = (wall0, time.time(), features)
        self.adapter_time_s += (t1 - t0) + (time.perf_counter() - t2)
        self.vllm_time_s += t2 - t1
        self.num_steps += 1
        return out

    def _apply(self, d: Decision | None) -> None:
        """Set vLLM's knobs from ``d``; vLLM's own settings for None."""
        if d is not None and d.shed:
            self._shed_heads()
        n_running = len(self.running)
        decodes = n_running - len(self._inflight_prefills)
        key = (d, n_running, decodes)
        if key == self._knobs_key:  # the same decision over the same batch: vLLM's knobs are set already
            if d is not None and d.order == QueueOrder.LPM:
                self.queue.set_order(QueueOrder.LPM)  # the window of the oldest requests, scored anew
            return
        self._knobs_key = key
        k = vllm_knobs(d, self.base_knobs, n_running, decodes, self.num_kv_blocks)
        self.queue.set_order(k.order)
        self.max_num_scheduled_tokens = k.max_num_scheduled_tokens
        self.scheduler_config.long_prefill_token_threshold = k.long_prefill_token_threshold
        self.max_num_active_reqs = k.max_num_active_reqs
        self.kv_cache_manager.watermark_blocks = k.watermark_blocks

    def _shed_heads(self) -> None:
        """Abort every tenant's waiting head while its TTFT is out of reach (the engine's ``_shed_heads``), in one
        call to vLLM."""
        state = self.state
        queue, num_waiting, hopeless = state.queue, state.num_waiting, state.hopeless
        doomed: list[VllmRequest] = []
        for t in range(len(state.tenants)):
            if not num_waiting[t]:
                continue
            head = queue.head(t)
            if head is None or not hopeless(head):  # most steps: the head can still make it
                continue
            for sh in queue.in_order(t):
                if not hopeless(sh):
                    break
                doomed.append(state.vreqs[sh.request_id])
        if doomed:
            t0 = time.perf_counter()
            self.finish_requests([v.request_id for v in doomed], RequestStatus.FINISHED_ABORTED)
            # what the clients are told (by the next update_from_output), kept without the requests themselves:
            # freeing them (their token lists) is part of aborting them, done here, not in a later step
            self.shed_requests += [
                (v.request_id, v.client_index, v.get_finished_reason(), v.take_events()) for v in doomed
            ]
            self.num_shed += len(doomed)
            del doomed
            self.abort_time_s += time.perf_counter() - t0

    # -- hooks into vLLM's bookkeeping ----------------------------------------------------------------------
    def _preempt_request(self, request: VllmRequest, *args: Any, **kwargs: Any) -> None:
        self.state.left_running(request)
        self.state.shadows[request.request_id].num_preemptions += 1
        super()._preempt_request(request, *args, **kwargs)

    def _free_request(self, request: VllmRequest, *args: Any, **kwargs: Any) -> Any:
        state = self.state
        if request.request_id in state.running_ids:
            state.left_running(request)
        result = super()._free_request(request, *args, **kwargs)
        if self.log is not None:
            self._log_request(request)
        state.finished(request, completed=request.status in _COMPLETED)
        return result

    def _log_request(self, vreq: VllmRequest) -> None:
        sh = self.state.shadows.get(vreq.request_id)
        if sh is None or self.log is None:
            return
        extra = vreq.sampling_params.extra_args if vreq.sampling_params is not None else None
        label = extra.get(LABEL_KEY) if extra else None
        self.log.request(
            {
                "id": vreq.request_id,
                "label": None if label is None else str(label),
                "tenant": self.state.tenants[sh.tenant].name,
                "arrival": vreq.arrival_time,
                "first_scheduled": sh.first_scheduled_s,
                "first_token": sh.first_token_s,
                "finish": self.clock(),
                "prompt_tokens": vreq.num_prompt_tokens,
                "cached_tokens": sh.num_prefix_hit_tokens,
                "output_tokens": vreq.num_output_tokens,
                "status": str(vreq.status.name).removeprefix("FINISHED_").lower(),
                "preemptions": sh.num_preemptions,
            }
        )

    def update_from_output(self, scheduler_output: SchedulerOutput, model_runner_output: Any) -> Any:
        t0 = time.perf_counter()
        wall2 = time.time() if self.log is not None else 0.0
        state = self.state
        decodes_t = state.decodes_per_tenant(self._inflight_prefills)
        t1 = time.perf_counter()
        outputs = super().update_from_output(scheduler_output, model_runner_output)
        t2 = time.perf_counter()
        state.decoded(decodes_t)
        if self.shed_requests:  # tell the clients of the requests shedding aborted
            for request_id, client, reason, events in self.shed_requests:
                eco = outputs.get(client)
                if eco is None:
                    eco = outputs[client] = EngineCoreOutputs()
                eco.outputs.append(
                    EngineCoreOutput(request_id=request_id, new_token_ids=[], finish_reason=reason, events=events)
                )
            self.shed_requests = []
        if self.log is not None and self._step_start is not None:
            s0, s1, features = self._step_start
            self._step_start = None
            self.log.step(s0, s1, wall2, time.time(), features, bool(self.has_unfinished_requests()))
        self.adapter_time_s += (t1 - t0) + (time.perf_counter() - t2)
        return outputs


class LLMSchedScheduler(_LLMSchedAdapter, Scheduler):
    """vLLM v1's ``Scheduler`` with an llmsched policy setting its knobs every step (see the module docstring).
    For vLLM without async scheduling (vLLM's CPU build always; ``--no-async-scheduling`` on GPUs)."""


class LLMSchedAsyncScheduler(_LLMSchedAdapter, AsyncScheduler):
    """The same over vLLM's ``AsyncScheduler``, for vLLM with async scheduling (0.33's default on GPUs): vLLM
    schedules step n + 1 while step n runs, so the policy sees the state one step behind."""

    _async = True
