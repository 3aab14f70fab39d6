"""Any llmsched policy deciding vLLM's batches: ``LLMSchedScheduler`` (over vLLM v1's ``Scheduler``) and
``LLMSchedAsyncScheduler`` (over its ``AsyncScheduler``); docs/vllm.md. Each ``schedule()`` sets vLLM's knobs
from the policy's decision before vLLM's own ``schedule()``; a failing policy leaves the step to vLLM (counted
in ``stats``). A request's tenant is ``sampling_params.extra_args["llmsched_tenant"]``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
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
from llmsched_env.adapters.vllm.planning import simulator_of
from llmsched_env.adapters.vllm.serve_log import LABEL_KEY, ServeLog
from llmsched_env.adapters.vllm.state import TENANT_KEY, SimClock, VllmState, engine_config_of
from llmsched_env.adapters.vllm.waiting import PolicyWaitingQueue
from llmsched_env.common.files import ByteLimit, read_text
from llmsched_env.common.outputs import write_text_atomically
from llmsched_env.decision.loop import ENGINE_DEFAULT, DecisionLoop
from llmsched_env.decision.policy import Policy, PolicyContext
from llmsched_env.decision.policy_file import action_options
from llmsched_env.engine.batch import Decision, QueueOrder

__all__ = [
    "CONFIG_ENV", "TENANT_KEY", "AdapterConfig", "LLMSchedAsyncScheduler", "LLMSchedScheduler",
    "PolicyWaitingQueue", "SimClock", "VllmState",
]  # fmt: skip

_COMPLETED = (RequestStatus.FINISHED_STOPPED, RequestStatus.FINISHED_LENGTH_CAPPED)
_CONTROL_BYTES = ByteLimit("a control file", 4096)  # one policy name
_SHOWN_CHARS = 80  # of a refused control file's content, in the one-line message


if TYPE_CHECKING:  # the adapter is always mixed in before vLLM's Scheduler: checked against it
    from vllm.v1.core.sched.scheduler import Scheduler as _SchedulerBase
else:
    _SchedulerBase = object


class _LLMSchedAdapter(_SchedulerBase):
    """The adapter, mixed in before vLLM's ``Scheduler`` or ``AsyncScheduler``. Keywords beyond vLLM's: ``adapter``
    (default ``AdapterConfig.from_env()``), ``llmsched_policy`` (a ``Policy`` in place of ``adapter.policy``),
    ``clock`` (default ``time.time``, vLLM's ``arrival_time`` clock)."""

    _async = False  # whether the vLLM class mixed with is the AsyncScheduler

    def __init__(
        self, *args: Any, adapter: AdapterConfig | None = None, llmsched_policy: Policy | None = None,
        clock: Callable[[], float] | None = None, **kwargs: Any,
    ) -> None:  # fmt: skip
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
        schema = int(getattr(llmsched_policy, "schema_version", resolved.schema))
        self.action_spec, self.encoder = adapter_spaces(self.engine_config, cfg.tenants, schema, cfg.nominal_rate_rps)
        # a planner (mpc) plans in the background on a copy of vLLM's state, taken at its decision
        self.context = PolicyContext(self.engine_config, self.state.tenants, cost_model, self.action_spec,
                                     self.encoder.names, resolved.scenario, background_planning=True,
                                     planning_state=lambda: simulator_of(self.state))  # fmt: skip
        # every policy of the set by its resolved name, built now (not at a switch, in the middle of serving), each
        # with the steps its decisions hold
        self.loaded_policies: dict[str, Policy] = {}
        self._holds: dict[str, int] = {}
        for k, (spec, scenario) in enumerate(resolved.policies):
            if k == 0 and llmsched_policy is not None:
                self.loaded_policies[spec.name], self._holds[spec.name] = llmsched_policy, 1
                continue
            context = dataclasses.replace(self.context, scenario=scenario)
            self.loaded_policies[spec.name] = spec.make_for(context, cfg.seed)
            self._holds[spec.name] = spec.iterations_per_step
            if spec.path is not None:  # an exported policy must fit this engine and these tenants
                spec.load().check_compatible(self.encoder.names, self.action_spec.nvec, schema_version=schema,
                                             action_options=action_options(self.action_spec))  # fmt: skip
        self.active_policy = resolved.spec.name  # the name of the policy deciding now
        self.iterations_per_step = cfg.iterations_per_step or self._holds[self.active_policy]
        # the step between the policy and vLLM's knobs; vLLM's own settings where the policy fails
        self.decisions = DecisionLoop(self.action_spec, self.encoder, self.loaded_policies[self.active_policy],
                                      hold=self.iterations_per_step, fallback=ENGINE_DEFAULT,
                                      timeout_s=cfg.policy_timeout_s, deadline_mode=cfg.policy_deadline,
                                      name="llmsched-policy")  # fmt: skip
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
        self.control_file = cfg.control_file  # "" : no switching
        self.num_switches = 0
        self._control_key: tuple[int, int, int] | None = None  # (inode, mtime, size) of the control file last read
        self._control_text = ""  # its last content read (a refusal of the same content is logged once)
        self._refused: str | None = None  # the message of the last read, when it refused
        self.log = ServeLog(cfg.log_dir) if cfg.log_dir else None
        self._request_policy: dict[str, str] = {}  # with a log: request id -> the active policy when it was added
        self._fallbacks_seen: dict[str, int] = {}  # the loop's fallback counts at the last step logged
        if self.log is not None:
            self.log.engine(
                {
                    **dataclasses.asdict(self.engine_config),
                    "tenants": [{"name": t.name, "ttft_s": t.slo.ttft_s, "tpot_s": t.slo.tpot_s,
                                 "weight": t.weight, "priority": t.priority} for t in self.state.tenants],
                    "policy": cfg.policy,
                    "policies": list(self.loaded_policies),
                    "control_file": cfg.control_file or None,
                    "iterations_per_step": self.iterations_per_step,
                    "policy_deadline": self.decisions.deadline,
                    "vllm": "==".join(vllm_version),
                }
            )  # fmt: skip
        # (t0, t1, features, policy, fallback cause) of the step being run
        self._step_start: tuple[float, float, Any, str, str | None, Decision | None] | None = None
        if self.control_file:  # a status from an earlier server must not answer for this one
            self._write_status()

    @property
    def llmsched_policy(self) -> Policy:
        """The llmsched policy deciding each step (vLLM keeps its own in ``policy``); settable."""
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
        return VllmKnobs(QueueOrder.FCFS, self.max_num_scheduled_tokens,
                         self.scheduler_config.long_prefill_token_threshold, self.max_num_active_reqs,
                         self.kv_cache_manager.watermark_blocks)  # fmt: skip

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
            fallbacks, cause = self.stats.fallbacks, None
            if fallbacks != self._fallbacks_seen:  # counted by this step's next(): its decision was a fallback
                cause = next(c for c in fallbacks if fallbacks[c] != self._fallbacks_seen.get(c, 0))
                self._fallbacks_seen = dict(fallbacks)
            self._step_start = (wall0, time.time(), features, self.active_policy, cause, decision)
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
        """Abort every tenant's waiting heads while their TTFT is out of reach (the engine's rule), in one call."""
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
        policy = self._request_policy.pop(vreq.request_id, self.active_policy)
        sh = self.state.shadows.get(vreq.request_id)
        if sh is None or self.log is None:
            return
        extra = vreq.sampling_params.extra_args if vreq.sampling_params is not None else None
        label = extra.get(LABEL_KEY) if extra else None
        self.log.request({
            "id": vreq.request_id, "label": None if label is None else str(label),
            "tenant": self.state.tenants[sh.tenant].name, "arrival": vreq.arrival_time,
            "first_scheduled": sh.first_scheduled_s, "first_token": sh.first_token_s, "finish": self.clock(),
            "prompt_tokens": vreq.num_prompt_tokens, "cached_tokens": sh.num_prefix_hit_tokens,
            "output_tokens": vreq.num_output_tokens, "status": str(vreq.status.name).removeprefix("FINISHED_").lower(),
            "preemptions": sh.num_preemptions, "policy": policy,
        })  # fmt: skip

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
            s0, s1, features, policy, fallback, decision = self._step_start
            self._step_start = None
            busy = bool(self.has_unfinished_requests())
            self.log.step(s0, s1, wall2, time.time(), features, busy, policy, fallback, decision)
        self.adapter_time_s += (t1 - t0) + (time.perf_counter() - t2)
        return outputs

    # -- switching policies between blocks ------------------------------------------------------------------
    def add_request(self, request: VllmRequest) -> None:
        """vLLM's, after a switch to the policy the control file names when ``request`` reaches an empty engine."""
        if (
            self.control_file
            and not self.running
            and not len(self.waiting)
            and not len(getattr(self, "kv_holding_waiting", ()))  # waiting with blocks held, where vLLM has it
            and request.request_id not in self.requests  # not a streaming session's next input
        ):
            self._read_control()
        if self.log is not None:
            self._request_policy.setdefault(request.request_id, self.active_policy)
        super().add_request(request)

    def _read_control(self) -> None:
        """Read the control file if it changed; switch to the loaded policy it names or refuse another, and answer
        in the status file. Never raises: a bad control file must not stop serving."""
        path = self.control_file
        try:
            st = os.stat(path)
        except (OSError, ValueError):  # missing (the driver has not written it yet): no change
            return
        key = (st.st_ino, st.st_mtime_ns, st.st_size)  # an atomic replace changes the inode, a rewrite the rest
        if key == self._control_key:
            return
        self._control_key = key
        try:
            text = read_text(path, _CONTROL_BYTES).strip()
        except FileNotFoundError:  # removed since the stat
            return
        except (OSError, ValueError) as exc:  # a folder, a FIFO, over the limit, not UTF-8
            text = f"\0{exc}"  # what was read, to say a refusal once per content; never a policy name
            problem = f"cannot be read ({str(exc).splitlines()[0] if str(exc) else type(exc).__name__})"
        else:
            shown = text if len(text) <= _SHOWN_CHARS else text[: _SHOWN_CHARS - 3] + "..."
            problem = f"names {shown!r}, which is not loaded"
        if not text:  # empty: no change
            return
        new = text != self._control_text
        self._control_text = text
        if text in self.loaded_policies:
            self._refused = None
            if text != self.active_policy:
                self._switch(text)
        else:
            loaded = ", ".join(self.loaded_policies)
            self._refused = (
                f"llmsched: control file {path} {problem}; the policy stays {self.active_policy!r} (loaded: {loaded})"
            )
            if new:  # vLLM's log says it once per content, however often the driver rewrites it
                print(self._refused, file=sys.stderr, flush=True)
        self._write_status()  # every read answered, so a driver that rewrote the file sees a newer "at"

    def _switch(self, name: str) -> None:
        """Make the loaded policy ``name`` decide from the next step on, with its own hold, starting afresh."""
        before = self.active_policy
        summary = getattr(self.loaded_policies[before], "summary", None)  # a planner's counts, for vLLM's log
        if callable(summary):
            print(f"llmsched: {before}: {summary()}", file=sys.stderr, flush=True)
        self.decisions.policy = self.loaded_policies[name]
        self.decisions.reset()
        self.iterations_per_step = self.adapter.iterations_per_step or self._holds[name]
        self.decisions.hold = self.iterations_per_step
        self.active_policy = name
        self.num_switches += 1
        print(f"llmsched: policy {before} -> {name} (switch {self.num_switches})", file=sys.stderr, flush=True)

    def _write_status(self) -> None:
        """``<control_file>.status``: the active and loaded policies, the switches, the last read's refusal."""
        status = {"active": self.active_policy, "loaded": list(self.loaded_policies), "switches": self.num_switches,
                  "refused": self._refused, "at": time.time()}  # fmt: skip
        try:
            write_text_atomically(f"{self.control_file}.status", json.dumps(status) + "\n")
        except OSError as exc:  # the driver misses an answer; serving goes on
            print(f"llmsched: cannot write {self.control_file}.status: {exc}", file=sys.stderr, flush=True)


class LLMSchedScheduler(_LLMSchedAdapter, Scheduler):
    """vLLM v1's ``Scheduler`` with an llmsched policy setting its knobs every step, for vLLM without async
    scheduling (the CPU build; ``--no-async-scheduling`` on GPUs)."""


class LLMSchedAsyncScheduler(_LLMSchedAdapter, AsyncScheduler):
    """The same over vLLM's ``AsyncScheduler`` (0.33's default on GPUs): the policy sees the state a step behind."""

    _async = True
