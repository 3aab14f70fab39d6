"""Any llmsched ``Policy`` deciding vLLM's batches: ``LLMSchedScheduler``, a subclass of vLLM v1's ``Scheduler``.

Every ``schedule()`` it encodes vLLM's state into llmsched's observation and action mask (``VllmState`` is an
``EngineState``: the same features, by name, as llmsched's engine gives), asks the policy, and sets vLLM's
knobs from the ``Decision`` before running vLLM's own ``schedule()``:

| Decision | vLLM knob |
|---|---|
| ``order`` | the waiting queue (``PolicyWaitingQueue``, llmsched's ``WaitingQueues`` ordering) |
| ``token_budget`` | ``max_num_scheduled_tokens`` (at least the running decodes: decodes never stall) |
| ``chunk_cap`` | ``scheduler_config.long_prefill_token_threshold`` (0 when the cap is the whole budget) |
| ``max_admit`` | ``max_num_active_reqs`` = running + ``max_admit`` (capped at ``max_num_seqs``) |
| ``kv_reserve`` | ``kv_cache_manager.watermark_blocks`` = ceil(reserve x usable blocks) |
| ``shed`` | ``finish_requests(ids, FINISHED_ABORTED)`` on tenant queue heads whose first token cannot meet its TTFT |
| ``prefill_first`` | not expressible: vLLM always runs the decode-first hybrid (see the docs) |

A policy that raises, returns an invalid action or answers after ``policy_timeout_s`` leaves that step to
vLLM's own behaviour (every knob restored to vLLM's setting, FCFS order) and is counted by reason
(``stats``, ``runtime.serve.ServeStats``). The bookkeeping is incremental: hooks on admission, preemption and
finishing keep per-tenant counters, so a step costs O(tenants + prefilling requests + changes), not O(requests).

Configuration: constructor keyword ``adapter=AdapterConfig(...)`` offline, else ``AdapterConfig.from_env()``
(``vllm serve --scheduler-cls llmsched_env.adapters.vllm.scheduler.LLMSchedScheduler`` with
``LLMSCHED_VLLM_CONFIG=config.yaml`` or ``LLMSCHED_POLICY`` / ``LLMSCHED_TENANTS`` / ``LLMSCHED_COST_MODEL``).
A request's tenant is ``sampling_params.extra_args["llmsched_tenant"]`` (default: the first tenant). The clock
is ``time.time()`` (vLLM stamps ``arrival_time`` with it) unless a ``clock`` is given (``SimClock`` offline).
"""

from __future__ import annotations

import heapq
import json
import math
import os
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from vllm.v1.core.sched.output import SchedulerOutput
from vllm.v1.core.sched.request_queue import RequestQueue
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.engine import EngineCoreOutput, EngineCoreOutputs
from vllm.v1.request import Request as VllmRequest
from vllm.v1.request import RequestStatus

from llmsched_env.adapters.vllm import require_vllm
from llmsched_env.costs.base import CostModel, prefill_time_s
from llmsched_env.costs.loader import load_cost_model
from llmsched_env.decision.actions import ActionSpec
from llmsched_env.decision.observation import make_encoder
from llmsched_env.decision.policy import Policy, PolicyContext, reads_observation
from llmsched_env.decision.registry import make_policy
from llmsched_env.decision.schema import SCHEMA_VERSION
from llmsched_env.engine.batch import Decision, QueueOrder
from llmsched_env.engine.config import SLO_CLASSES, EngineConfig, SLOClass, TenantConfig
from llmsched_env.engine.queues import WaitingQueues
from llmsched_env.engine.request import Request, tpot_s
from llmsched_env.runtime.serve import ServeStats

__all__ = [
    "CONFIG_ENV",
    "TENANT_KEY",
    "AdapterConfig",
    "LLMSchedScheduler",
    "PolicyWaitingQueue",
    "SimClock",
    "VllmState",
]

CONFIG_ENV = "LLMSCHED_VLLM_CONFIG"  # path of a YAML or JSON file holding AdapterConfig's fields
TENANT_KEY = "llmsched_tenant"  # sampling_params.extra_args key naming a request's tenant
_LPM_WINDOW = 64  # as llmsched's engine: LPM scores the oldest waiting requests
_RATE_TAU_S = 10.0  # the engine's arrival-rate time constant
_LATENCY_EWMA = 0.05  # the engine's latency average weight


class SimClock:
    """A settable clock for offline runs: ``clock()`` returns ``now_s``."""

    def __init__(self, now_s: float = 0.0) -> None:
        self.now_s = now_s

    def __call__(self) -> float:
        return self.now_s


def _tenant(entry: Any, where: str) -> TenantConfig:
    """A ``TenantConfig`` from ``{name, slo, weight, priority}`` (``slo`` a class name or ``{ttft_s, tpot_s}``)."""
    if isinstance(entry, TenantConfig):
        return entry
    if not isinstance(entry, dict) or "name" not in entry:
        raise ValueError(f"{where}: a tenant must be a mapping with a 'name', got {entry!r}")
    unknown = set(entry) - {"name", "slo", "weight", "priority"}
    if unknown:
        raise ValueError(f"{where}: tenant {entry['name']!r} has unknown field(s) {sorted(unknown)}")
    slo = entry.get("slo", "chat")
    if isinstance(slo, str):
        if slo not in SLO_CLASSES:
            raise ValueError(f"{where}: tenant {entry['name']!r}: unknown slo {slo!r}; one of {', '.join(SLO_CLASSES)}")
        slo_class = SLO_CLASSES[slo]
    elif isinstance(slo, dict) and set(slo) == {"ttft_s", "tpot_s"}:
        slo_class = SLOClass(str(entry["name"]), float(slo["ttft_s"]), float(slo["tpot_s"]))
    else:
        raise ValueError(f"{where}: tenant {entry['name']!r}: slo must be a class name or {{ttft_s, tpot_s}}")
    return TenantConfig(str(entry["name"]), slo_class, float(entry.get("weight", 1.0)), int(entry.get("priority", 0)))


@dataclass(frozen=True)
class AdapterConfig:
    """What ``LLMSchedScheduler`` runs: ``policy`` (a registered scheduler name, or the path of an exported
    policy: a folder with ``policy.json`` + ``policy.safetensors``, or the JSON), the ``tenants`` with their
    SLO classes (``TenantConfig``s or mappings), the ``cost_model`` (a preset name or a ``CostModel``; it prices
    shedding), the decision
    held for ``iterations_per_step`` steps, the ``policy_timeout_s`` past which vLLM's own step is used,
    ``nominal_rate_rps`` (the ``arrival/rate`` feature's unit) and ``seed`` (random policies)."""

    policy: str = "fcfs"
    tenants: tuple[Any, ...] = (TenantConfig("default"),)
    cost_model: str | CostModel = "llama3-8b-h100"
    iterations_per_step: int = 1
    policy_timeout_s: float = 0.1
    nominal_rate_rps: float = 1.0
    seed: int = 0
    where: str = field(default="AdapterConfig", compare=False)

    def __post_init__(self) -> None:
        w = self.where
        if not isinstance(self.policy, str) or not self.policy:
            raise ValueError(f"{w}: policy must be a scheduler name or a policy file path, got {self.policy!r}")
        tenants = tuple(_tenant(t, w) for t in self.tenants)
        if not tenants:
            raise ValueError(f"{w}: tenants needs at least one tenant")
        names = [t.name for t in tenants]
        if len(set(names)) != len(names):
            raise ValueError(f"{w}: tenant names must be unique, got {names}")
        object.__setattr__(self, "tenants", tenants)
        if isinstance(self.iterations_per_step, bool) or not isinstance(self.iterations_per_step, int):
            raise ValueError(f"{w}: iterations_per_step must be an integer >= 1, got {self.iterations_per_step!r}")
        if self.iterations_per_step < 1:
            raise ValueError(f"{w}: iterations_per_step must be an integer >= 1, got {self.iterations_per_step!r}")
        for name in ("policy_timeout_s", "nominal_rate_rps"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
                raise ValueError(f"{w}: {name} must be a number > 0, got {v!r}")

    @classmethod
    def from_file(cls, path: str | Path) -> AdapterConfig:
        """Read a YAML (``.yaml``/``.yml``) or JSON file of ``AdapterConfig``'s fields; ``ValueError`` naming the
        file and the field for anything wrong."""
        p = Path(path)
        try:
            text = p.read_text()
        except OSError as exc:
            raise ValueError(f"{p}: cannot read the llmsched adapter config: {exc.strerror}") from None
        try:
            if p.suffix in (".yaml", ".yml"):
                import yaml

                data = yaml.safe_load(text)
            else:
                data = json.loads(text)
        except Exception as exc:
            raise ValueError(f"{p}: not valid {'YAML' if p.suffix in ('.yaml', '.yml') else 'JSON'}: {exc}") from None
        if not isinstance(data, dict):
            raise ValueError(f"{p}: expected a mapping of AdapterConfig fields, got {type(data).__name__}")
        fields = {
            "policy",
            "tenants",
            "cost_model",
            "iterations_per_step",
            "policy_timeout_s",
            "nominal_rate_rps",
            "seed",
        }
        unknown = set(data) - fields
        if unknown:
            raise ValueError(f"{p}: unknown field(s) {sorted(unknown)}; known: {sorted(fields)}")
        if "tenants" in data:
            if not isinstance(data["tenants"], list):
                raise ValueError(f"{p}: tenants must be a list of mappings")
            data["tenants"] = tuple(data["tenants"])
        return cls(**data, where=str(p))

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> AdapterConfig:
        """``LLMSCHED_VLLM_CONFIG`` (a file, see ``from_file``), else ``LLMSCHED_POLICY``, ``LLMSCHED_TENANTS``
        (``name:slo_class,...``), ``LLMSCHED_COST_MODEL``, ``LLMSCHED_POLICY_TIMEOUT_S``; defaults otherwise."""
        env = os.environ if environ is None else environ
        if env.get(CONFIG_ENV):
            return cls.from_file(env[CONFIG_ENV])
        kwargs: dict[str, Any] = {"where": "environment"}
        if env.get("LLMSCHED_POLICY"):
            kwargs["policy"] = env["LLMSCHED_POLICY"]
        if env.get("LLMSCHED_COST_MODEL"):
            kwargs["cost_model"] = env["LLMSCHED_COST_MODEL"]
        if env.get("LLMSCHED_POLICY_TIMEOUT_S"):
            try:
                kwargs["policy_timeout_s"] = float(env["LLMSCHED_POLICY_TIMEOUT_S"])
            except ValueError:
                raise ValueError(
                    f"environment: LLMSCHED_POLICY_TIMEOUT_S must be a number, got {env['LLMSCHED_POLICY_TIMEOUT_S']!r}"
                ) from None
        if env.get("LLMSCHED_TENANTS"):
            tenants = []
            for item in env["LLMSCHED_TENANTS"].split(","):
                name, _, slo = item.partition(":")
                tenants.append({"name": name.strip(), "slo": slo.strip() or "chat"})
            kwargs["tenants"] = tuple(tenants)
        return cls(**kwargs)


def engine_config_of(scheduler: Scheduler) -> EngineConfig:
    """The llmsched ``EngineConfig`` of a vLLM scheduler's limits (vLLM's null block is not usable)."""
    sc = scheduler.scheduler_config
    return EngineConfig(
        num_kv_blocks=scheduler.kv_cache_manager.block_pool.num_gpu_blocks - 1,
        block_size=scheduler.block_size,
        max_num_seqs=sc.max_num_seqs,
        max_num_batched_tokens=sc.max_num_batched_tokens,
        max_model_len=scheduler.max_model_len,
    )


class _CachedFreeCounter:
    """Counts free blocks that still hold a block hash (llmsched's ``num_cached_blocks``) by wrapping the
    free-block queue's moves: O(blocks moved), never a scan. A block's hash does not change while it is free
    (vLLM hashes blocks in use and evicts when it takes one off the queue), except on a prefix-cache reset or
    a connector eviction, after which ``recount()`` rescans once."""

    def __init__(self, scheduler: Scheduler) -> None:
        self.pool = scheduler.kv_cache_manager.block_pool
        q = self.pool.free_block_queue
        self.count = 0
        self.recount()
        pop1, popn, rm, app1, appn, prepn = q.popleft, q.popleft_n, q.remove, q.append, q.append_n, q.prepend_n

        def popleft() -> Any:
            b = pop1()
            self.count -= b._block_hash is not None
            return b

        def popleft_n(n: int) -> Any:
            out = popn(n)
            self.count -= sum(b._block_hash is not None for b in out)
            return out

        def remove(b: Any) -> None:
            rm(b)
            self.count -= b._block_hash is not None

        def append(b: Any) -> None:
            app1(b)
            self.count += b._block_hash is not None

        def append_n(blocks: list[Any]) -> None:
            appn(blocks)
            self.count += sum(b._block_hash is not None for b in blocks)

        def prepend_n(blocks: list[Any]) -> None:
            prepn(blocks)
            self.count += sum(b._block_hash is not None for b in blocks)

        q.popleft, q.popleft_n, q.remove, q.append, q.append_n, q.prepend_n = (
            popleft,
            popleft_n,
            remove,
            append,
            append_n,
            prepend_n,
        )

    def recount(self) -> None:
        """Rescan the pool (O(blocks)): after a prefix-cache reset or a connector eviction only."""
        q = self.pool.free_block_queue
        self.count = sum(1 for b in q.get_all_free_blocks() if b._block_hash is not None)


class _PoolView:
    """The ``PoolState`` of vLLM's block pool (its null block excluded)."""

    def __init__(self, scheduler: Scheduler, num_blocks: int) -> None:
        self._pool = scheduler.kv_cache_manager.block_pool
        self._num_blocks = num_blocks
        self._cached = _CachedFreeCounter(scheduler)

    @property
    def num_free_blocks(self) -> int:
        return self._pool.free_block_queue.num_free_blocks

    @property
    def num_used(self) -> int:
        return self._num_blocks - self._pool.free_block_queue.num_free_blocks

    @property
    def num_cached_blocks(self) -> int:
        return self._cached.count


class VllmState:
    """vLLM's scheduler state as llmsched's ``EngineState``: live views of vLLM's running list, in-flight
    prefills and block pool, plus per-tenant counters and one shadow llmsched ``Request`` per live vLLM request
    (tenant, arrival, lengths), kept by the scheduler's hooks."""

    def __init__(
        self,
        scheduler: Scheduler,
        config: EngineConfig,
        tenants: Sequence[TenantConfig],
        cost_model: CostModel,
        clock: Callable[[], float],
    ) -> None:
        self._s = scheduler
        self.config = config
        self.tenants = tuple(tenants)
        self.cost_model = cost_model
        self.clock = clock
        n = len(self.tenants)
        self.tenant_index = {t.name: k for k, t in enumerate(self.tenants)}
        self.pool = _PoolView(scheduler, config.num_kv_blocks)
        self.vtc = [0.0] * n
        self._ttft = [t.slo.ttft_s for t in self.tenants]
        self._tpot = [t.slo.tpot_s for t in self.tenants]
        self._weights = [t.weight for t in self.tenants]
        self.queue = WaitingQueues(self._ttft, [t.priority * 10.0 for t in self.tenants], self.vtc)
        self.num_waiting = self.queue.num_waiting
        self.waiting_tokens = self.queue.waiting_tokens
        self.waiting_predicted = self.queue.waiting_predicted  # all 0: vLLM requests carry no length prediction
        self.num_running_t = [0] * n
        self.service_tokens = [0] * n
        self.num_good_t = [0] * n
        self.num_missed_t = [0] * n
        self.num_good = 0
        self.num_missed = 0
        self.num_fetching = 0  # no remote KV store here
        self.ttft_ratio_ewma = 0.0
        self.tpot_ratio_ewma = 0.0
        self.running_total_blocks = 0
        self.rate_est = 0.0
        self._rate_t = 0.0
        self.shadows: dict[str, Request] = {}  # vLLM request id -> its shadow
        self.vreqs: dict[int, VllmRequest] = {}  # shadow id -> the vLLM request
        self.awaiting_first: dict[str, Request] = {}  # running, first token not yet out
        self.running_ids: set[str] = set()  # vLLM ids of the requests in vLLM's running list
        self._ttft_heap: list[tuple[float, int, Request]] = []
        # shadow id -> ((prefill tokens, cached tokens), the latest start from which its TTFT is reachable)
        self._shed_after: dict[int, tuple[tuple[int, int], float]] = {}
        self._next_id = 0

    # -- the EngineState views ---------------------------------------------------------------------------
    @property
    def now_s(self) -> float:
        return self.clock()

    @property
    def running(self) -> list[VllmRequest]:
        return self._s.running

    @property
    def prefilling(self) -> set[VllmRequest]:
        return self._s._inflight_prefills

    @property
    def num_decoding(self) -> int:
        return len(self._s.running) - len(self._s._inflight_prefills)

    def head(self, t: int) -> Request | None:
        return self.queue.head(t)

    def oldest_waiting(self) -> Request | None:
        return self.queue.best(QueueOrder.FCFS, self.now_s, 10.0)

    def remaining_prefill_tokens(self) -> int:
        return sum(r.num_tokens - r.num_computed_tokens for r in self._s._inflight_prefills)

    def next_fetch_ready_s(self) -> float | None:
        return None

    def arrival_rate(self) -> float:
        dt = self.now_s - self._rate_t
        return self.rate_est * math.exp(-dt / _RATE_TAU_S) if dt > 0 else self.rate_est

    # -- bookkeeping hooks -------------------------------------------------------------------------------
    def shadow_of(self, vreq: VllmRequest) -> Request:
        """The shadow of ``vreq`` (made on its first sight), its output count synced (a preempted request
        recomputes its outputs: its waiting tokens include them)."""
        sh = self.shadows.get(vreq.request_id)
        if sh is None:
            sh = self._arrive(vreq)
        sh.num_output_tokens = vreq.num_output_tokens
        return sh

    def _arrive(self, vreq: VllmRequest) -> Request:
        extra = vreq.sampling_params.extra_args if vreq.sampling_params is not None else None
        name = extra.get(TENANT_KEY) if extra else None
        t = self.tenant_index.get(name, 0) if name is not None else 0
        sh = Request(self._next_id, vreq.arrival_time, vreq.num_prompt_tokens, max(vreq.max_tokens, 1), tenant=t)
        self._next_id += 1
        self.shadows[vreq.request_id] = sh
        self.vreqs[sh.request_id] = vreq
        decay = math.exp(-(sh.arrival_s - self._rate_t) / _RATE_TAU_S) if sh.arrival_s > self._rate_t else 1.0
        self.rate_est = self.rate_est * decay + 1.0 / _RATE_TAU_S
        self._rate_t = max(self._rate_t, sh.arrival_s)
        if self.num_waiting[t] == 0 and self.num_running_t[t] == 0:  # the engine's VTC counter lift
            active = [self.vtc[k] for k in range(len(self.tenants)) if self.num_waiting[k] or self.num_running_t[k]]
            if active:
                self.vtc[t] = max(self.vtc[t], min(active))
        heapq.heappush(self._ttft_heap, (sh.arrival_s + self._ttft[t], sh.request_id, sh))
        return sh

    def admitted(self, rid: str) -> None:
        """vLLM moved request ``rid`` into its running list this step."""
        sh = self.shadows[rid]
        t = sh.tenant
        self.num_running_t[t] += 1
        self.running_total_blocks += -(-sh.total_len // self.config.block_size)
        self.running_ids.add(rid)
        if sh.first_scheduled_s is None:
            sh.first_scheduled_s = self.now_s
            self.vtc[t] += sh.prompt_len / self._weights[t]
            self.service_tokens[t] += sh.prompt_len
        if sh.first_token_s is None:
            self.awaiting_first[rid] = sh

    def left_running(self, vreq: VllmRequest) -> None:
        """``vreq`` leaves the running list (preempted or finished)."""
        sh = self.shadows[vreq.request_id]
        self.running_ids.discard(vreq.request_id)
        self.num_running_t[sh.tenant] -= 1
        self.running_total_blocks -= -(-sh.total_len // self.config.block_size)
        self.awaiting_first.pop(vreq.request_id, None)

    def decoded(self) -> None:
        """A step ran: every running decode produced a token (service and VTC, as the engine counts), and
        requests whose prefill completed have their first token now."""
        now = self.now_s
        for rid, sh in list(self.awaiting_first.items()):
            vreq = self.vreqs[sh.request_id]
            if vreq.num_output_tokens > 0:
                sh.first_token_s = now
                del self.awaiting_first[rid]

    def count_decodes(self, per_tenant: Sequence[int]) -> None:
        for t, n in enumerate(per_tenant):
            if n:
                self.vtc[t] += 2 * n / self._weights[t]
                self.service_tokens[t] += 2 * n

    def finished(self, vreq: VllmRequest) -> None:
        """``vreq`` is finished (any finished status): resolve its SLO and forget its shadow."""
        sh = self.shadows.pop(vreq.request_id, None)
        if sh is None:
            return
        del self.vreqs[sh.request_id]
        self._shed_after.pop(sh.request_id, None)
        if sh in self.queue:
            self.queue.remove(sh)
        t = sh.tenant
        first = sh.first_token_s
        done = vreq.status in (RequestStatus.FINISHED_STOPPED, RequestStatus.FINISHED_LENGTH_CAPPED)
        if first is None or not done:
            self._resolve(sh, met=False)
            return
        now = self.now_s
        ttft_ratio = (first - sh.arrival_s) / self._ttft[t]
        tpot_ratio = float(tpot_s(first, now, max(vreq.num_output_tokens, 1))) / self._tpot[t]
        self.ttft_ratio_ewma += _LATENCY_EWMA * (ttft_ratio - self.ttft_ratio_ewma)
        self.tpot_ratio_ewma += _LATENCY_EWMA * (tpot_ratio - self.tpot_ratio_ewma)
        self._resolve(sh, met=ttft_ratio <= 1.0 and tpot_ratio <= 1.0)

    def _resolve(self, sh: Request, met: bool) -> None:
        if sh.slo_resolved:
            return
        sh.slo_resolved = True
        if met:
            self.num_good += 1
            self.num_good_t[sh.tenant] += 1
        else:
            self.num_missed += 1
            self.num_missed_t[sh.tenant] += 1

    def expire_ttft(self) -> None:
        """Requests still without a first token past their TTFT deadline count as misses from now on."""
        heap, now = self._ttft_heap, self.now_s
        while heap and heap[0][0] < now:
            _, _, sh = heapq.heappop(heap)
            if sh.first_token_s is None:
                self._resolve(sh, met=False)

    def hopeless(self, sh: Request) -> bool:
        """Even alone and unchunked, ``sh``'s first token would come after its TTFT deadline (the engine's rule):
        its prefill priced for the tokens left after the prefix-cache hit vLLM would give it now."""
        if sh.first_token_s is not None:
            return False
        n = sh.num_prefill_tokens
        _, cached, _ = self._s.kv_cache_manager.get_computed_blocks(self.vreqs[sh.request_id])
        latest = self._shed_after.get(sh.request_id)
        if latest is None or latest[0] != (n, cached):  # priced once per (prefill length, cached tokens)
            price = prefill_time_s(self.cost_model, n, num_cached_tokens=cached)
            latest = ((n, cached), sh.arrival_s + self._ttft[sh.tenant] - price)
            self._shed_after[sh.request_id] = latest
        return self.now_s > latest[1]


class PolicyWaitingQueue(RequestQueue):
    """vLLM's waiting queue in the order the policy chose (``order``), over llmsched's ``WaitingQueues``: one
    FIFO per tenant, the best head picked in O(tenants) (SJF by a heap, LPM by the engine's window of the
    oldest requests scored by cached prefix blocks). A preempted request goes back to the head of its tenant's
    queue, as in vLLM. ``QueueOrder.FCFS`` is vLLM's own order."""

    def __init__(self, state: VllmState, lookup_cached_blocks: Callable[[VllmRequest], int]) -> None:
        self._state = state
        self._q = state.queue
        self._cached_blocks = lookup_cached_blocks
        self.order = QueueOrder.FCFS
        self._lpm: list[Request] = []
        self.sjf_starvation_s = 10.0

    def set_order(self, order: QueueOrder) -> None:
        self.order = order
        if order == QueueOrder.LPM:
            window = self._q.oldest(_LPM_WINDOW)
            vreqs = self._state.vreqs
            window.sort(key=lambda r: -self._cached_blocks(vreqs[r.request_id]))  # stable: FCFS among equals
            self._lpm = window
        else:
            self._lpm = []

    def _best(self) -> Request | None:
        if self._lpm:
            for r in self._lpm:
                if r in self._q:
                    return r
        return self._q.best(self.order, self._state.now_s, self.sjf_starvation_s)

    def add_request(self, request: VllmRequest) -> None:
        self._q.push(self._state.shadow_of(request))

    def prepend_request(self, request: VllmRequest) -> None:
        self._q.push(self._state.shadow_of(request), front=True)

    def prepend_requests(self, requests: Iterable[VllmRequest]) -> None:
        for r in requests:  # as deque.extendleft: the last one ends up first
            self.prepend_request(r)

    def peek_request(self) -> VllmRequest:
        r = self._best()
        if r is None:
            raise IndexError("peek from an empty queue")
        return self._state.vreqs[r.request_id]

    def pop_request(self) -> VllmRequest:
        r = self._best()
        if r is None:
            raise IndexError("pop from an empty queue")
        self._q.remove(r)
        return self._state.vreqs[r.request_id]

    def remove_request(self, request: VllmRequest) -> None:
        sh = self._state.shadows.get(request.request_id)
        if sh is None or sh not in self._q:
            raise ValueError(f"request {request.request_id} is not waiting")
        self._q.remove(sh)

    def remove_requests(self, requests: Iterable[VllmRequest]) -> None:
        for request in requests:
            sh = self._state.shadows.get(request.request_id)
            if sh is not None and sh in self._q:
                self._q.remove(sh)

    def __bool__(self) -> bool:
        return len(self._q) > 0

    def __len__(self) -> int:
        return len(self._q)

    def __iter__(self) -> Iterator[VllmRequest]:
        vreqs = self._state.vreqs
        return iter([vreqs[r.request_id] for r in self._q.requests()])


def is_policy_path(spec: str) -> bool:
    """Whether an adapter's ``policy`` names an exported policy file or folder (else a scheduler's name)."""
    return os.sep in spec or spec.endswith(".json") or Path(spec).is_dir()


def load_policy(spec: str, ctx: PolicyContext, seed: int, schema: int = SCHEMA_VERSION) -> Policy:
    """A registered scheduler by name, or an exported policy (folder or JSON path) checked against ``ctx``'s
    observations and actions, of observation ``schema``; ``ValueError`` naming the policy otherwise."""
    if is_policy_path(spec):
        from llmsched_env.runtime.policy_file import action_options, load_policy_file

        exported = load_policy_file(spec)
        exported.check_compatible(
            ctx.obs_names, ctx.action_spec.nvec, schema_version=schema, action_options=action_options(ctx.action_spec)
        )
        return exported
    return make_policy(spec, ctx, seed)  # type: ignore[return-value]


def policy_schema(spec: str, policy: Policy | None) -> int:
    """The observation schema the adapter encodes for: an exported policy's (given as an object or a path),
    else the current one."""
    if policy is not None:
        return int(getattr(policy, "schema_version", SCHEMA_VERSION))
    if is_policy_path(spec):
        from llmsched_env.runtime.policy_file import load_policy_file

        return int(load_policy_file(spec).schema_version)
    return SCHEMA_VERSION


class LLMSchedScheduler(Scheduler):
    """vLLM v1's scheduler with an llmsched policy setting its knobs every step (see the module docstring).

    Keywords beyond vLLM's: ``adapter`` (an ``AdapterConfig``; default ``AdapterConfig.from_env()``),
    ``llmsched_policy`` (a ``Policy`` object, overriding ``adapter.policy``), ``clock`` (seconds, comparable with
    requests' ``arrival_time``; default ``time.time``)."""

    def __init__(
        self,
        *args: Any,
        adapter: AdapterConfig | None = None,
        llmsched_policy: Policy | None = None,
        clock: Callable[[], float] | None = None,
        **kwargs: Any,
    ) -> None:
        require_vllm()
        super().__init__(*args, **kwargs)
        if self.scheduler_config.policy != "fcfs":
            raise ValueError(
                f"LLMSchedScheduler orders the waiting queue itself: start vLLM with --scheduling-policy fcfs, "
                f"not {self.scheduler_config.policy!r}"
            )
        cfg = adapter if adapter is not None else AdapterConfig.from_env()
        self.adapter = cfg
        self.clock: Callable[[], float] = clock if clock is not None else time.time
        self.engine_config = engine_config_of(self)
        cost_model = cfg.cost_model if isinstance(cfg.cost_model, CostModel) else load_cost_model(cfg.cost_model)
        self.state = VllmState(self, self.engine_config, cfg.tenants, cost_model, self.clock)
        schema = policy_schema(cfg.policy, llmsched_policy)
        self.action_spec = ActionSpec.for_engine(self.engine_config, schema)
        self.encoder = make_encoder(schema, self.engine_config, self.state.tenants, cfg.nominal_rate_rps)
        self.context = PolicyContext(
            self.engine_config, self.state.tenants, cost_model, self.action_spec, self.encoder.names
        )
        self.policy: Policy = (
            llmsched_policy if llmsched_policy is not None else load_policy(cfg.policy, self.context, cfg.seed, schema)
        )
        self._reads_obs = reads_observation(self.policy)
        self._zero_obs = np.zeros(self.encoder.size, dtype=np.float32)
        self.stats = ServeStats()
        self.num_kv_blocks = self.engine_config.num_kv_blocks
        # vLLM's own settings, restored whenever the policy's step falls back
        self.base_token_budget = self.max_num_scheduled_tokens
        self.base_chunk_cap = self.scheduler_config.long_prefill_token_threshold
        self.base_active_reqs = self.max_num_active_reqs
        self.base_watermark_blocks = self.kv_cache_manager.watermark_blocks
        self.queue = PolicyWaitingQueue(self.state, self._cached_blocks)
        self.waiting = self.queue
        self.decision: Decision | None = None  # the step's decision (None: vLLM's own)
        self._hold = 0
        self._action: np.ndarray | None = None  # the policy's action behind ``decision``
        self._last_step_start = 0.0
        self._last_step_s = 0.0
        self.shed_requests: list[VllmRequest] = []  # aborted by shedding, reported by the next update_from_output
        self.num_shed = 0
        self.adapter_time_s = 0.0  # encode + mask + act + apply + bookkeeping, summed over steps
        self.abort_time_s = 0.0  # of that, vLLM's finish_requests aborting the requests shedding gave up
        self.vllm_time_s = 0.0  # vLLM's own schedule(), summed over steps
        self.num_steps = 0

    def _cached_blocks(self, vreq: VllmRequest) -> int:
        _, n, _ = self.kv_cache_manager.get_computed_blocks(vreq)
        return n // self.block_size

    # -- the step ------------------------------------------------------------------------------------------
    def schedule(self, throttle_prefills: bool = False) -> SchedulerOutput:
        t0 = time.perf_counter()
        state = self.state
        state.expire_ttft()
        if self._hold > 0:
            self._hold -= 1
            decision = self.decision
            action = self._action
            if action is not None:  # the held action, projected onto what the mask allows now (as the env does)
                mask = self.action_spec.mask(state)
                if not self.action_spec.allows(action, mask):
                    decision = self.action_spec.decode(self.action_spec.project(action, mask))
        else:
            decision = self._decide()
            self._hold = self.adapter.iterations_per_step - 1
            self.decision = decision
            now = state.now_s
            self._last_step_s = now - self._last_step_start
            self._last_step_start = now
        self._apply(decision)
        t1 = time.perf_counter()
        out = super().schedule(throttle_prefills)
        t2 = time.perf_counter()
        for d in out.scheduled_new_reqs:
            state.admitted(d.req_id)
        for rid in out.scheduled_cached_reqs.resumed_req_ids:
            state.admitted(rid)
        self.adapter_time_s += (t1 - t0) + (time.perf_counter() - t2)
        self.vllm_time_s += t2 - t1
        self.num_steps += 1
        return out

    def _decide(self) -> Decision | None:
        """The policy's decision now, or None (vLLM's own step) when it fails, counted by reason."""
        t0 = time.perf_counter()
        state, spec, stats = self.state, self.action_spec, self.stats
        obs = self.encoder.encode(state, self._last_step_s) if self._reads_obs else self._zero_obs
        mask = spec.mask(state)
        reason = None
        action = None
        try:
            raw = self.policy.act(obs, mask)
        except Exception as exc:  # a failing policy must not stop serving
            reason, stats.last_error = "error", f"{type(exc).__name__}: {exc}"
        else:
            try:
                spec.decode(raw)
                action = np.asarray(raw, dtype=np.int64)
            except ValueError as exc:
                reason, stats.last_error = "invalid", f"invalid action {raw!r}: {exc}"
            else:
                if time.perf_counter() - t0 > self.adapter.policy_timeout_s:
                    reason, stats.last_error = "timeout", f"policy took over {self.adapter.policy_timeout_s} s"
        stats.num_decisions += 1
        stats.policy_time_s += time.perf_counter() - t0
        if reason is not None:
            stats.num_fallbacks += 1
            stats.fallbacks[reason] += 1
            self._action = None
            return None
        assert action is not None
        self._action = action
        if not spec.allows(action, mask):
            action = spec.project(action, mask)
        return spec.decode(action)

    def _apply(self, d: Decision | None) -> None:
        """Set vLLM's knobs from ``d``; vLLM's own settings for None."""
        if d is None:
            self.queue.set_order(QueueOrder.FCFS)
            self.max_num_scheduled_tokens = self.base_token_budget
            self.scheduler_config.long_prefill_token_threshold = self.base_chunk_cap
            self.max_num_active_reqs = self.base_active_reqs
            self.kv_cache_manager.watermark_blocks = self.base_watermark_blocks
            return
        if d.shed:
            self._shed_heads()
        self.queue.set_order(d.order)
        n_running = len(self.running)
        decodes = n_running - len(self._inflight_prefills)
        self.max_num_scheduled_tokens = min(self.base_token_budget, max(d.token_budget, decodes))
        self.scheduler_config.long_prefill_token_threshold = 0 if d.chunk_cap >= self.base_token_budget else d.chunk_cap
        self.max_num_active_reqs = min(self.base_active_reqs, n_running + d.max_admit)
        self.kv_cache_manager.watermark_blocks = math.ceil(d.kv_reserve * self.num_kv_blocks)

    def _shed_heads(self) -> None:
        """Abort every tenant's waiting head while its TTFT is out of reach (the engine's ``_shed_heads``), in one
        call to vLLM."""
        state = self.state
        doomed: list[VllmRequest] = []
        for t in range(len(state.tenants)):
            if not state.num_waiting[t]:
                continue
            for sh in state.queue.in_order(t):
                if not state.hopeless(sh):
                    break
                doomed.append(state.vreqs[sh.request_id])
        if doomed:
            t0 = time.perf_counter()
            self.finish_requests([v.request_id for v in doomed], RequestStatus.FINISHED_ABORTED)
            self.abort_time_s += time.perf_counter() - t0
            self.shed_requests += doomed
            self.num_shed += len(doomed)

    # -- hooks into vLLM's bookkeeping ----------------------------------------------------------------------
    def _preempt_request(self, request: VllmRequest, timestamp: float, drop_stale_output: bool = False) -> None:
        self.state.left_running(request)
        self.state.shadows[request.request_id].num_preemptions += 1
        super()._preempt_request(request, timestamp, drop_stale_output)

    def _free_request(self, request: VllmRequest, delay_free_blocks: bool = False) -> Any:
        if request.request_id in self.state.running_ids:
            self.state.left_running(request)
        result = super()._free_request(request, delay_free_blocks)
        self.state.finished(request)
        return result

    def update_from_output(self, scheduler_output: SchedulerOutput, model_runner_output: Any) -> Any:
        t0 = time.perf_counter()
        state = self.state
        prefilling_t = [0] * len(state.tenants)
        for r in self._inflight_prefills:
            prefilling_t[state.shadows[r.request_id].tenant] += 1
        decodes_t = [n - p for n, p in zip(state.num_running_t, prefilling_t, strict=True)]
        t1 = time.perf_counter()
        outputs = super().update_from_output(scheduler_output, model_runner_output)
        t2 = time.perf_counter()
        state.count_decodes(decodes_t)
        state.decoded()
        if self.shed_requests:  # tell the clients of the requests shedding aborted
            for vreq in self.shed_requests:
                eco = outputs.get(vreq.client_index)
                if eco is None:
                    eco = outputs[vreq.client_index] = EngineCoreOutputs()
                eco.outputs.append(
                    EngineCoreOutput(
                        request_id=vreq.request_id,
                        new_token_ids=[],
                        finish_reason=vreq.get_finished_reason(),
                        events=vreq.take_events(),
                    )
                )
            self.shed_requests = []
        self.adapter_time_s += (t1 - t0) + (time.perf_counter() - t2)
        return outputs
