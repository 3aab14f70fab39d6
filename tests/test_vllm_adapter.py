"""LLMSchedScheduler: llmsched policies deciding vLLM's real v1 scheduler on the CPU (fake model outputs), and
vLLM in the simulator's loop. Marked ``vllm``: skipped where vLLM is not importable (tests/conftest.py); the
last test checks evaluate's one-line error there instead."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from llmsched_env.engine.config import EngineConfig, TenantConfig
from llmsched_env.engine.request import Request

ROOT = Path(__file__).resolve().parents[1]
CFG = EngineConfig(num_kv_blocks=256, block_size=16, max_num_seqs=16, max_num_batched_tokens=512, max_model_len=2048)
TENANTS = (TenantConfig("default"),)


def _make(policy: Any = "fcfs", cfg: EngineConfig = CFG, tenants: tuple[Any, ...] = TENANTS, **kw: Any) -> Any:
    from llmsched_env.adapters.vllm.offline import make_scheduler
    from llmsched_env.adapters.vllm.scheduler import AdapterConfig, LLMSchedScheduler, SimClock

    clock = SimClock()
    name = policy if isinstance(policy, str) else "fcfs"
    obj = None if isinstance(policy, str) else policy
    adapter = AdapterConfig(policy=name, tenants=tenants, **kw)
    s = make_scheduler(cfg, scheduler_cls=LLMSchedScheduler, adapter=adapter, llmsched_policy=obj, clock=clock)
    return s, clock


def _add(s: Any, r: Request, tenant: str | None = None) -> None:
    from llmsched_env.adapters.vllm.offline import to_vllm_request
    from llmsched_env.adapters.vllm.scheduler import TENANT_KEY

    v = to_vllm_request(r, CFG.block_size)
    if tenant is not None:
        v.sampling_params.extra_args = {TENANT_KEY: tenant}
    s.add_request(v)


def _drain(s: Any, clock: Any, max_steps: int = 5000) -> dict[str, str]:
    """Run to the end; request id -> finish reason, each reported once."""
    finished: dict[str, str] = {}
    for _ in range(max_steps):
        if not s.has_requests():
            return finished
        _step_recording(s, clock, finished)
    raise AssertionError("not drained")


def _step_recording(s: Any, clock: Any, finished: dict[str, str]) -> None:
    """One step (10 ms of the clock); the requests it finished into ``finished`` (request id -> reason), each
    reported once."""
    from llmsched_env.adapters.vllm.offline import fake_output

    out = s.schedule()
    clock.now_s += 0.01
    for eco in s.update_from_output(out, fake_output(s, out)).values():
        for o in eco.outputs:
            if o.finish_reason is not None:
                assert o.request_id not in finished, f"request {o.request_id} finished twice"
                finished[o.request_id] = str(o.finish_reason)


def _step(s: Any, clock: Any) -> Any:
    from llmsched_env.adapters.vllm.offline import fake_output

    out = s.schedule()
    clock.now_s += 0.01
    s.update_from_output(out, fake_output(s, out))
    return out


class _Fixed:
    """A policy returning one fixed action (index per component)."""

    reads_observation = False

    def __init__(self, action: list[int]) -> None:
        self.action = np.array(action, dtype=np.int64)

    def act(self, observation: np.ndarray, action_mask: np.ndarray) -> np.ndarray:
        return self.action


def _action(s: Any, **knobs: Any) -> list[int]:
    from llmsched_env.engine.batch import Decision

    return s.action_spec.encode(Decision(**knobs)).tolist()


@pytest.mark.vllm
@pytest.mark.parametrize(
    "name",
    ["fcfs", "prefill_first", "priority_aging", "sjf", "lpm", "vtc", "kv_guard", "sarathi", "slo_aware", "random"],
)
def test_every_baseline_drains_without_loss(name: str) -> None:
    s, clock = _make(name, tenants=(TenantConfig("a"), TenantConfig("b", weight=2.0)))
    rng = np.random.default_rng(3)
    ids = set()
    for i in range(40):
        r = Request(i, 0.0, int(rng.integers(20, 600)), int(rng.integers(1, 40)), prefix_ids=(i % 3,))
        _add(s, r, "ab"[i % 2])
        ids.add(str(i))
    finished = _drain(s, clock)
    assert set(finished) == ids  # none lost, none twice (checked in _drain)
    assert s.stats.num_fallbacks == 0 and s.stats.num_decisions == s.num_steps
    st = s.state
    assert st.num_good + st.num_missed == 40 and not st.shadows and st.running_total_blocks == 0
    assert sum(st.num_running_t) == 0 and sum(st.num_waiting) == 0


@pytest.mark.vllm
def test_mpc_plans_in_the_background_on_a_copy_of_vllms_state_and_loses_nothing() -> None:
    """mpc inside vLLM: every k steps it takes a copy of vLLM's state (``planning.simulator_of``: every live
    request where vLLM holds it, the engine's invariants kept) to a worker thread and adopts the plan's setting at
    the first step after it lands; the requests all drain, none twice, and no decision falls back."""
    from llmsched_env.adapters.vllm.planning import simulator_of
    from llmsched_env.engine.invariants import check_engine

    tenants = (TenantConfig("a"), TenantConfig("b", weight=2.0))
    s, clock = _make("mpc:k=8,futures=2,horizon=8,tail=8,base=fcfs", tenants=tenants)
    policy = s.llmsched_policy
    rng = np.random.default_rng(6)
    for i in range(40):
        r = Request(i, 0.0, int(rng.integers(20, 600)), int(rng.integers(2, 60)), prefix_ids=(i % 3,))
        _add(s, r, "ab"[i % 2])
    finished: dict[str, str] = {}

    def step() -> None:
        if policy._pending is not None:  # offline the clock is simulated: let the plan land before the next step
            policy._pending.result(timeout=60)
        _step_recording(s, clock, finished)

    for _ in range(12):
        step()
    copy = simulator_of(s.state)
    check_engine(copy.engine)
    assert s.running and len(copy.engine.running) + copy.engine.num_waiting_total == len(s.running) + len(s.waiting)
    assert all(r.block_table for r in copy.engine.running.values())
    for _ in range(5000):
        if not s.has_requests():
            break
        step()
    assert set(finished) == {str(i) for i in range(40)}
    assert s.stats.num_fallbacks == 0 and policy.planner.num_decisions >= 5 and policy.num_adopted >= 5
    policy.close()


@pytest.mark.vllm
@pytest.mark.parametrize("name", ["fcfs", "slo_aware", "sjf", "vtc"])
def test_the_async_variant_drains_without_loss_with_two_batches_in_flight(name: str) -> None:
    """vLLM's engine core with async scheduling keeps two batches in flight: it schedules step n + 1 before the
    output of step n comes back. The fake model's output is made when a batch is scheduled, delivered later."""
    from collections import deque

    from llmsched_env.adapters.vllm.offline import fake_output, make_scheduler
    from llmsched_env.adapters.vllm.scheduler import AdapterConfig, LLMSchedAsyncScheduler, SimClock

    clock = SimClock()
    tenants = (TenantConfig("a"), TenantConfig("b", weight=2.0))
    adapter = AdapterConfig(policy=name, tenants=tenants)
    s = make_scheduler(CFG, scheduler_cls=LLMSchedAsyncScheduler, async_scheduling=True, adapter=adapter, clock=clock)
    rng = np.random.default_rng(4)
    for i in range(30):
        r = Request(i, 0.0, int(rng.integers(20, 600)), int(rng.integers(1, 30)), prefix_ids=(i % 3,))
        _add(s, r, "ab"[i % 2])
    in_flight: deque[Any] = deque()
    finished: dict[str, str] = {}
    for _ in range(5000):
        if not s.has_requests() and not in_flight:
            break
        if len(in_flight) < 2 and s.has_requests():
            out = s.schedule()
            in_flight.append((out, fake_output(s, out)))
            continue
        out, model_out = in_flight.popleft()
        clock.now_s += 0.01
        for eco in s.update_from_output(out, model_out).values():
            for o in eco.outputs:
                if o.finish_reason is not None:
                    assert o.request_id not in finished, f"request {o.request_id} finished twice"
                    finished[o.request_id] = str(o.finish_reason)
    assert set(finished) == {str(i) for i in range(30)}
    st = s.state
    assert st.num_good + st.num_missed == 30 and not st.shadows and sum(st.num_running_t) == 0
    assert s.stats.num_fallbacks == 0


@pytest.mark.vllm
def test_the_scheduler_class_must_match_vllms_async_setting() -> None:
    from llmsched_env.adapters.vllm.offline import make_scheduler
    from llmsched_env.adapters.vllm.scheduler import AdapterConfig, LLMSchedAsyncScheduler, LLMSchedScheduler

    with pytest.raises(ValueError, match="LLMSchedAsyncScheduler, or start vLLM with --no-async-scheduling"):
        make_scheduler(CFG, scheduler_cls=LLMSchedScheduler, async_scheduling=True, adapter=AdapterConfig())
    with pytest.raises(ValueError, match="needs vLLM's async scheduling"):
        make_scheduler(CFG, scheduler_cls=LLMSchedAsyncScheduler, async_scheduling=False, adapter=AdapterConfig())


@pytest.mark.vllm
def test_observation_names_match_the_engine() -> None:
    import gymnasium as gym

    import llmsched_env  # noqa: F401
    from llmsched_env.workloads.lengths import LengthDist
    from llmsched_env.workloads.workload import TenantWorkload, WorkloadConfig

    tenants = (TenantConfig("a"), TenantConfig("b"))
    s, clock = _make("slo_aware", tenants=tenants)
    for i in range(6):
        _add(s, Request(i, 0.0, 300, 5), "ab"[i % 2])
    _step(s, clock)
    obs = s.encoder.encode(s.state)
    workload = WorkloadConfig(tuple(TenantWorkload(t, 1.0, LengthDist.fixed(100, 10)) for t in tenants), 10)
    env = gym.make("LLMSched-v1", workload=workload, engine=CFG).unwrapped
    assert s.encoder.names == env.encoder.names  # the env's current schema, name for name
    idx = s.encoder.index
    assert obs[idx["run/num_prefilling"]] > 0 and obs[idx["kv/used"]] > 0
    assert obs[idx["queue/num_waiting"]] == pytest.approx(sum(s.state.num_waiting) / CFG.max_num_seqs)


@pytest.mark.vllm
def test_the_stand_in_of_the_contract_test_reads_only_what_vllm_has() -> None:
    """tests/test_vllm_contract.py checks VllmState over a stand-in scheduler with these attributes; vLLM's own
    scheduler and requests must have every one of them."""
    from llmsched_env.adapters.vllm.state import REQUEST_ATTRIBUTES, SCHEDULER_ATTRIBUTES

    s, _ = _make()
    _add(s, Request(0, 0.0, 40, 3))
    missing = [a for a in SCHEDULER_ATTRIBUTES if not hasattr(s, a)]
    vreq = s.requests["0"]
    missing += [f"Request.{a}" for a in REQUEST_ATTRIBUTES if not hasattr(vreq, a)]
    pool = s.kv_cache_manager.block_pool
    missing += [a for a in ("num_gpu_blocks", "free_block_queue") if not hasattr(pool, a)]
    q = pool.free_block_queue
    names = ("num_free_blocks", "get_all_free_blocks", "popleft", "popleft_n", "remove", "append", "append_n")
    missing += [f"free_block_queue.{a}" for a in (*names, "prepend_n") if not hasattr(q, a)]
    assert not missing


@pytest.mark.vllm
def test_token_budget_caps_the_step() -> None:
    s, clock = _make()
    s.llmsched_policy = _Fixed(_action(s, token_budget=256, chunk_cap=512))
    for i in range(4):
        _add(s, Request(i, 0.0, 400, 5))
    out = _step(s, clock)
    assert out.total_num_scheduled_tokens == 256
    s2, clock2 = _make()
    for i in range(4):
        _add(s2, Request(i, 0.0, 400, 5))
    assert _step(s2, clock2).total_num_scheduled_tokens == 512  # vLLM's own budget


@pytest.mark.vllm
def test_admission_cap_zero_holds_and_fallback_restores() -> None:
    s, clock = _make()
    _add(s, Request(0, 0.0, 100, 50))
    _step(s, clock)  # one running request
    s.llmsched_policy = _Fixed(_action(s, max_admit=0))
    _add(s, Request(1, 0.0, 100, 5))
    out = _step(s, clock)
    assert list(out.num_scheduled_tokens) == ["0"] and len(s.waiting) == 1
    s.llmsched_policy = _Fixed(_action(s, max_admit=1))
    out = _step(s, clock)
    assert "1" in out.num_scheduled_tokens


@pytest.mark.vllm
def test_edf_admits_the_earliest_deadline_first() -> None:
    from llmsched_env.engine.config import SLO_CLASSES

    tenants = (TenantConfig("batch", SLO_CLASSES["batch"]), TenantConfig("chat", SLO_CLASSES["chat"]))
    for order, first in (("EDF", "1"), ("FCFS", "0")):
        from llmsched_env.engine.batch import QueueOrder

        s, clock = _make(tenants=tenants)
        s.llmsched_policy = _Fixed(_action(s, order=QueueOrder[order], max_admit=1))
        _add(s, Request(0, 0.0, 100, 5), "batch")  # arrives first, 60 s deadline
        _add(s, Request(1, 0.001, 100, 5), "chat")  # 1 s deadline
        clock.now_s = 0.01
        out = _step(s, clock)
        assert list(out.num_scheduled_tokens) == [first], order


@pytest.mark.vllm
def test_kv_reserve_holds_admission_when_the_pool_is_near_full() -> None:
    cfg = EngineConfig(num_kv_blocks=40, block_size=16, max_num_seqs=16, max_num_batched_tokens=512, max_model_len=2048)
    results = {}
    for reserve in (0.0, 0.4):
        s, clock = _make(cfg=cfg)
        s.llmsched_policy = _Fixed(_action(s, kv_reserve=reserve))
        _add(s, Request(0, 0.0, 300, 100))  # 19 + 7 blocks over its life
        _step(s, clock)
        _add(s, Request(1, 0.0, 160, 5))  # needs 11 blocks: leaves 40-19-11 = 10 < 16 reserved
        out = _step(s, clock)
        results[reserve] = "1" in out.num_scheduled_tokens
        assert s.kv_cache_manager.watermark_blocks == (16 if reserve else 0)
    assert results == {0.0: True, 0.4: False}


@pytest.mark.vllm
def test_shedding_aborts_a_hopeless_request() -> None:
    from llmsched_env.engine.config import SLO_CLASSES

    s, clock = _make(tenants=(TenantConfig("i", SLO_CLASSES["interactive"]),))
    s.llmsched_policy = _Fixed(_action(s, shed=True, max_admit=0))  # hold, so only shedding can remove it
    _add(s, Request(0, 0.0, 100, 50))
    s.llmsched_policy = _Fixed(_action(s, max_admit=1))
    _step(s, clock)
    _add(s, Request(1, 0.0, 1000, 5))
    s.llmsched_policy = _Fixed(_action(s, shed=True, max_admit=0))
    clock.now_s = 0.3  # past the 0.25 s TTFT target
    from llmsched_env.adapters.vllm.offline import fake_output

    out = s.schedule()
    outputs = s.update_from_output(out, fake_output(s, out))
    reasons = {o.request_id: o.finish_reason for eco in outputs.values() for o in eco.outputs}
    assert reasons.get("1") is not None and s.num_shed == 1 and "1" not in s.requests
    assert s.state.num_missed_t[0] == 1


@pytest.mark.vllm
def test_shedding_prices_the_prefill_left_after_vllms_prefix_cache_hit() -> None:
    """A request whose whole prompt is out of TTFT reach but whose uncached rest is not stays (the engine's
    rule); one with nothing cached is shed."""
    from llmsched_env.costs.base import prefill_time_s
    from llmsched_env.engine.config import SLOClass

    n, shared = 1600, 1536  # 24 prefix ids of 64 tokens: 96 cached blocks of 16
    s, clock = _make()
    full = prefill_time_s(s.state.cost_model, n)
    rest = prefill_time_s(s.state.cost_model, n, num_cached_tokens=shared)
    slo = SLOClass("mid", ttft_s=(full + rest) / 2, tpot_s=1.0)
    s, clock = _make(tenants=(TenantConfig("t", slo),))
    _add(s, Request(0, 0.0, n, 2, prefix_ids=tuple(range(24)), prefix_id_tokens=64))
    assert _drain(s, clock) == {"0": "length"}
    t0 = clock.now_s
    _add(s, Request(2, t0, n, 2, prefix_ids=tuple(range(100, 124)), prefix_id_tokens=64))  # the head
    _add(s, Request(1, t0, n, 2, prefix_ids=tuple(range(24)), prefix_id_tokens=64))
    s.llmsched_policy = _Fixed(_action(s, shed=True, max_admit=0))
    clock.now_s = t0 + 0.001  # the old rule (now + full > deadline) would shed both, as they are heads in turn
    assert clock.now_s + full > t0 + slo.ttft_s
    _step(s, clock)
    assert s.num_shed == 1 and "2" not in s.requests and "1" in s.requests
    s.llmsched_policy = _Fixed(_action(s, max_admit=1))
    assert _drain(s, clock) == {"1": "length"}


@pytest.mark.vllm
def test_vllms_cache_is_asked_only_between_the_two_deadlines_of_a_head() -> None:
    """``hopeless`` prices a head with no cache hit and with the largest hit possible (all but its last token):
    before the first deadline it stays, after the second it is shed, and only in between is vLLM's prefix
    cache asked."""
    from llmsched_env.costs.base import prefill_time_s

    s, clock = _make()
    n = 1600
    _add(s, Request(0, 0.0, n, 2))
    sh = s.state.shadows["0"]
    deadline = s.state.tenants[sh.tenant].slo.ttft_s
    cost = s.state.cost_model
    uncached = deadline - prefill_time_s(cost, n)
    fully_cached = deadline - prefill_time_s(cost, n, num_cached_tokens=n - 1)
    assert 0.0 < uncached < fully_cached
    lookup = s.kv_cache_manager.get_computed_blocks
    calls: list[str] = []

    def counted(vreq: Any, *args: Any) -> Any:
        calls.append(vreq.request_id)
        return lookup(vreq, *args)

    s.kv_cache_manager.get_computed_blocks = counted
    clock.now_s = uncached
    assert not s.state.hopeless(sh) and calls == []
    clock.now_s = (uncached + fully_cached) / 2
    assert s.state.hopeless(sh) and calls == ["0"]  # nothing cached: out of reach
    clock.now_s = fully_cached + 1e-6
    assert s.state.hopeless(sh) and calls == ["0"]  # out of reach whatever is cached: not asked


@pytest.mark.vllm
def test_the_cached_block_count_is_rescanned_after_a_prefix_cache_reset() -> None:
    """A reset drops every block's hash without moving a block on the free queue: the count of cached free
    blocks the observation reads is rescanned, not left counting blocks that no lookup can find."""
    s, clock = _make()
    _add(s, Request(0, 0.0, 600, 2, prefix_ids=tuple(range(8)), prefix_id_tokens=64))
    assert _drain(s, clock) == {"0": "length"}
    pool = s.state.pool
    assert pool.num_cached_blocks > 0
    assert s.reset_prefix_cache()
    assert pool.num_cached_blocks == 0
    free = s.kv_cache_manager.block_pool.free_block_queue.get_all_free_blocks()
    assert not any(b.block_hash is not None for b in free)


class _Raises:
    def act(self, observation: np.ndarray, action_mask: np.ndarray) -> np.ndarray:
        raise RuntimeError("boom")


class _Slow:
    def __init__(self, action: list[int]) -> None:
        self.action = action

    def act(self, observation: np.ndarray, action_mask: np.ndarray) -> np.ndarray:
        time.sleep(1.0)  # twenty times the timeout: the deadline fires first under any load
        return np.array(self.action)


@pytest.mark.vllm
@pytest.mark.parametrize("kind", ["error", "invalid", "timeout"])
def test_a_bad_policy_falls_back_to_vllm_and_is_counted(kind: str) -> None:
    # the slow policy misses its deadline twenty times over; the others get one no load reaches, so that a busy
    # machine never turns their error or invalid action (or the fixed policy after it) into a timeout
    s, clock = _make(policy_timeout_s=0.05 if kind == "timeout" else 30.0)
    tight = _action(s, token_budget=256, chunk_cap=128, max_admit=1, kv_reserve=0.4)
    policy = {"error": _Raises(), "invalid": _Fixed([99, 0, 0, 0, 0, 0, 0]), "timeout": _Slow(tight)}[kind]
    s.llmsched_policy = policy
    for i in range(4):
        _add(s, Request(i, 0.0, 400, 5))
    out = _step(s, clock)
    assert s.stats.fallbacks[kind] == 1 and s.stats.num_fallbacks == 1
    assert out.total_num_scheduled_tokens == 512  # vLLM's own budget, chunking and admission
    assert s.max_num_active_reqs == s.base_knobs.max_num_active_reqs and s.kv_cache_manager.watermark_blocks == 0
    if kind != "timeout":  # the next decision is the policy's again (a fixed one could not miss 30 s)
        s.llmsched_policy = _Fixed(tight)
        _step(s, clock)
        assert s.max_num_scheduled_tokens <= 256 and s.stats.num_fallbacks == 1


@pytest.mark.vllm
@pytest.mark.parametrize("mode", ["signal", "thread"])
def test_a_hung_policy_cannot_hold_schedule_past_its_timeout(mode: str) -> None:
    import threading

    release = threading.Event()

    class Hangs:
        calls = 0

        def act(self, observation: np.ndarray, action_mask: np.ndarray) -> np.ndarray:
            self.calls += 1
            if self.calls == 1:
                release.wait()  # stuck until interrupted (signal) or let go by the test (thread)
            return np.array(tight)

    s, clock = _make(policy_timeout_s=0.05, policy_deadline=mode)
    tight = _action(s, token_budget=256, chunk_cap=128, max_admit=1)
    s.llmsched_policy = hung = Hangs()
    for i in range(4):
        _add(s, Request(i, 0.0, 400, 5))
    out = _step(s, clock)  # the stuck call: vLLM's own step (a step held by it would never return)
    assert out.total_num_scheduled_tokens > 256 and s.stats.fallbacks["timeout"] == 1
    if mode == "thread":  # the call is still stuck: the next steps fall back at once, without calling it
        for _ in range(2):
            assert _step(s, clock).total_num_scheduled_tokens > 256
        assert hung.calls == 1 and s.stats.fallbacks["timeout"] == 3
        release.set()
    for _ in range(3000):  # the policy decides again (within 30 s): interrupted (signal), or its late answer dropped
        _step(s, clock)
        if s.stats.num_decisions > s.stats.num_fallbacks:
            break
        time.sleep(0.01)
    assert hung.calls == 2 and s.max_num_scheduled_tokens <= 256


@pytest.mark.vllm
def test_an_exported_policy_loads_and_runs() -> None:
    import gymnasium as gym

    for path, env_id in [(ROOT / "policies" / "generalist", "LLMSched-v1"),
                         (ROOT / "tests" / "data" / "policies" / "mixed-slo", "LLMSched-v0")]:  # fmt: skip
        scenario = "mixed-slo"
        env = gym.make(env_id, scenario=scenario).unwrapped
        s, clock = _make(str(path), cfg=env.engine_config, tenants=env.tenants)
        assert type(s.llmsched_policy).__name__ == "ExportedPolicy"
        for i, r in enumerate(env.episode_requests(0)[:30]):
            _add(s, Request(i, 0.0, r.prompt_len, r.output_len), env.tenants[r.tenant].name)
        assert len(_drain(s, clock)) == 30 and s.stats.num_fallbacks == 0
    with pytest.raises(ValueError, match="does not fit"):
        _make(str(ROOT / "tests" / "data" / "policies" / "mixed-slo"))  # one tenant: other observation names


@pytest.mark.vllm
def test_config_from_env_and_file(tmp_path: Path) -> None:
    from llmsched_env.adapters.vllm.scheduler import AdapterConfig

    cfg = AdapterConfig.from_env({"LLMSCHED_POLICY": "slo_aware", "LLMSCHED_TENANTS": "a:chat,b:batch"})
    assert cfg.policy == "slo_aware" and [t.name for t in cfg.tenants] == ["a", "b"]
    assert cfg.tenants[1].slo.ttft_s == 60.0
    f = tmp_path / "c.yaml"
    f.write_text("policy: fcfs\ntenants:\n  - {name: x, slo: {ttft_s: 2.0, tpot_s: 0.2}}\n")
    cfg = AdapterConfig.from_env({"LLMSCHED_VLLM_CONFIG": str(f)})
    assert cfg.tenants[0].slo.ttft_s == 2.0
    f.write_text("polcy: fcfs\n")
    with pytest.raises(ValueError, match=r"c\.yaml: unknown field\(s\) \['polcy'\]"):
        AdapterConfig.from_file(f)
    f.write_text("tenants:\n  - {name: x, slo: fast}\n")
    with pytest.raises(ValueError, match="unknown slo 'fast'"):
        AdapterConfig.from_file(f)


def _loop_metrics(policy: str, seed: int) -> dict[str, float]:
    import gymnasium as gym

    from llmsched_env.adapters.vllm.loop import run_vllm_loop
    from llmsched_env.sim.setup import SimSetup

    env = gym.make("LLMSched-v1", scenario="default", num_requests=60, load=2.0).unwrapped
    return run_vllm_loop(SimSetup(env.engine_config, env.tenants, env.cost_model, env.episode_requests(seed), policy))


@pytest.mark.vllm
def test_in_the_loop_mode_is_deterministic_and_loses_nothing() -> None:
    a = _loop_metrics("slo_aware", 1)
    b = _loop_metrics("slo_aware", 1)
    a.pop("policy_time_mean_s"), b.pop("policy_time_mean_s")  # wall time: the one thing a seed does not fix
    assert a == b
    assert a["num_requests"] == 60 and a["num_finished"] + a["num_rejected"] == 60
    assert 0.0 < a["slo_attainment"] <= 1.0 and a["ttft_p50_s"] > 0 and a["tpot_p50_s"] > 0
    c = _loop_metrics("slo_aware", 2)
    c.pop("policy_time_mean_s")
    assert c != a


@pytest.mark.vllm
def test_evaluate_engine_vllm_prints_both_attainments() -> None:
    from llmsched_env.evaluation import EvalConfig
    from llmsched_env.evaluation.vllm_engine import compare_engines

    rows = compare_engines(EvalConfig(policies=["fcfs"], num_requests=40, loads=[1.5]))
    assert len(rows) == 1 and {"sim_attainment", "vllm_attainment", "gap"} <= set(rows[0])
    assert rows[0]["gap"] == pytest.approx(rows[0]["vllm_attainment"] - rows[0]["sim_attainment"])


def test_evaluate_engine_vllm_says_so_in_one_line_without_vllm() -> None:
    import importlib.util

    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vllm is installed here")
    proc = subprocess.run(
        [sys.executable, str(ROOT / "evaluate.py"), "--engine", "vllm"], capture_output=True, text=True, cwd=ROOT
    )
    assert proc.returncode == 2
    last = proc.stderr.strip().splitlines()[-1]
    assert "--engine vllm: vLLM is not installed" in last and "Traceback" not in proc.stderr
