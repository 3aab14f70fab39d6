"""The vLLM adapter's contract with llmsched, without vLLM (the default suite): the observation names and action
space the adapter builds are the env's, the observation and mask ``VllmState`` yields over a stand-in of vLLM's
scheduler equal the engine's in the same state, and the knob mapping. tests/test_vllm_adapter.py checks, with
vLLM, that the stand-in reads only what vLLM's classes have."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import llmsched_env  # noqa: F401
from llmsched_env.adapters.vllm.contract import VllmKnobs, adapter_spaces, batch_features, vllm_knobs
from llmsched_env.adapters.vllm.state import REQUEST_ATTRIBUTES, SCHEDULER_ATTRIBUTES, TENANT_KEY, VllmState
from llmsched_env.costs.loader import load_cost_model
from llmsched_env.decision.actions import ActionSpec
from llmsched_env.decision.observation import make_encoder
from llmsched_env.decision.schema import SCHEMA_VERSION
from llmsched_env.engine.batch import Decision, QueueOrder
from llmsched_env.engine.config import SLO_CLASSES, EngineConfig, TenantConfig
from llmsched_env.engine.engine import Engine
from llmsched_env.engine.request import Request
from llmsched_env.envs.single_node import env_id
from llmsched_env.workloads.lengths import LengthDist
from llmsched_env.workloads.workload import TenantWorkload, WorkloadConfig

CFG = EngineConfig(num_kv_blocks=256, block_size=16, max_num_seqs=16, max_num_batched_tokens=512, max_model_len=2048)
TENANTS = (
    TenantConfig("chat", SLO_CLASSES["chat"]),
    TenantConfig("batch", SLO_CLASSES["summarization"], weight=2.0, priority=1),
    TenantConfig("code", SLO_CLASSES["code"]),
)


def _env(schema: int) -> Any:
    lengths = LengthDist.fixed(100, 10)
    workload = WorkloadConfig(tuple(TenantWorkload(t, 1.0, lengths) for t in TENANTS), num_requests=10)
    return gym.make(env_id(schema), workload=workload, engine=CFG).unwrapped


@pytest.mark.parametrize("schema", [1, SCHEMA_VERSION])
def test_the_adapter_builds_the_envs_observation_and_action_space(schema: int) -> None:
    env = _env(schema)
    spec, encoder = adapter_spaces(CFG, TENANTS, schema, env.source.nominal_rate_rps())
    assert encoder.names == env.encoder.names  # name for name: a stale adapter fails here
    assert tuple(spec.nvec) == tuple(env.action_space.nvec)
    assert spec.token_budget_values == env.action_spec.token_budget_values
    env.close()


class _FreeQueue:
    """vLLM's free-block queue, as much of it as ``VllmState`` reads (no block holds a hash here)."""

    def __init__(self, n: int) -> None:
        self.blocks = [SimpleNamespace(_block_hash=None) for _ in range(n)]

    @property
    def num_free_blocks(self) -> int:
        return len(self.blocks)

    def get_all_free_blocks(self) -> list[Any]:
        return list(self.blocks)

    def popleft(self) -> Any:
        return self.blocks.pop(0)

    def popleft_n(self, n: int) -> list[Any]:
        out, self.blocks = self.blocks[:n], self.blocks[n:]
        return out

    def remove(self, b: Any) -> None:
        self.blocks.remove(b)

    def append(self, b: Any) -> None:
        self.blocks.append(b)

    def append_n(self, bs: list[Any]) -> None:
        self.blocks += bs

    def prepend_n(self, bs: list[Any]) -> None:
        self.blocks = bs + self.blocks


def _stand_in(config: EngineConfig) -> Any:
    """A stand-in of vLLM's ``Scheduler`` with the attributes ``VllmState`` reads (``SCHEDULER_ATTRIBUTES``)."""
    pool = SimpleNamespace(num_gpu_blocks=config.num_kv_blocks + 1, free_block_queue=_FreeQueue(config.num_kv_blocks))
    s = SimpleNamespace(
        running=[],
        _inflight_prefills=set(),
        kv_cache_manager=SimpleNamespace(block_pool=pool, get_computed_blocks=lambda vreq: ([], 0, False)),
        scheduler_config=SimpleNamespace(
            max_num_seqs=config.max_num_seqs, max_num_batched_tokens=config.max_num_batched_tokens
        ),
        block_size=config.block_size,
        max_model_len=config.max_model_len,
        max_num_scheduled_tokens=config.max_num_batched_tokens,
        max_num_active_reqs=config.max_num_seqs,
        requests={},
    )
    assert set(SCHEDULER_ATTRIBUTES) <= set(vars(s))
    return s


def _vreq(r: Request, tenant: str) -> Any:
    v = SimpleNamespace(
        request_id=str(r.request_id),
        arrival_time=r.arrival_s,
        num_prompt_tokens=r.prompt_len,
        max_tokens=r.output_len,
        sampling_params=SimpleNamespace(extra_args={TENANT_KEY: tenant}),
        num_output_tokens=0,
        num_tokens=r.prompt_len,
        num_computed_tokens=0,
        status="WAITING",
        client_index=0,
    )
    assert set(REQUEST_ATTRIBUTES) <= set(vars(v))
    return v


@pytest.mark.parametrize("schema", [1, SCHEMA_VERSION])
def test_vllm_state_gives_the_engines_observation_and_mask(schema: int) -> None:
    cost = load_cost_model("llama3-8b-h100")
    engine = Engine(CFG, TENANTS, cost)
    stand_in = _stand_in(CFG)
    clock = SimpleNamespace(now_s=0.0)
    state = VllmState(stand_in, engine_config_of_stand_in(stand_in), TENANTS, cost, lambda: clock.now_s)
    rng = np.random.default_rng(5)
    spec, encoder = adapter_spaces(CFG, TENANTS, schema, 2.0)
    engine_spec = ActionSpec.for_engine(CFG, schema)
    engine_encoder = make_encoder(schema, CFG, TENANTS, 2.0)
    t = 0.0
    for i in range(12):
        t += float(rng.exponential(0.3))
        r = Request(i, t, int(rng.integers(50, 900)), int(rng.integers(5, 200)), tenant=int(rng.integers(0, 3)))
        engine.advance_clock(t)
        engine.add_request(r)
        clock.now_s = t
        state.queue.push(state.shadow_of(_vreq(r, TENANTS[r.tenant].name)))
        state.expire_ttft()  # as LLMSchedScheduler.schedule() does before it encodes
        for last_step_s in (0.0, 0.02):
            ours = encoder.encode(state, last_step_s)
            theirs = engine_encoder.encode(engine, last_step_s)
            assert np.array_equal(ours, theirs), [
                (n, a, b) for n, a, b in zip(encoder.names, ours, theirs, strict=True) if a != b
            ]
        assert np.array_equal(spec.mask(state), engine_spec.mask(engine))
    clock.now_s = t + 5.0  # time passes: slack and waiting time move alike
    engine.advance_clock(t + 5.0)
    state.expire_ttft()
    assert np.array_equal(encoder.encode(state, 0.0), engine_encoder.encode(engine, 0.0))


def engine_config_of_stand_in(s: Any) -> EngineConfig:
    from llmsched_env.adapters.vllm.state import engine_config_of

    cfg = engine_config_of(s)
    assert cfg == CFG  # vLLM's null block is not counted
    return cfg


BASE = VllmKnobs(QueueOrder.FCFS, 2048, 0, 128, 0)


def test_a_fallback_restores_vllms_own_knobs_in_fcfs_order() -> None:
    assert vllm_knobs(None, BASE, num_running=10, num_decodes=8, num_kv_blocks=1000) == BASE


def test_the_knob_mapping() -> None:
    d = Decision(order=QueueOrder.EDF, token_budget=256, chunk_cap=128, max_admit=2, kv_reserve=0.1)
    k = vllm_knobs(d, BASE, num_running=10, num_decodes=8, num_kv_blocks=1000)
    assert k == VllmKnobs(QueueOrder.EDF, 256, 128, 12, 100)
    # decodes never stall: the budget is at least the running decodes, and never above vLLM's own
    assert vllm_knobs(d, BASE, 400, 300, 1000).max_num_scheduled_tokens == 300
    assert vllm_knobs(Decision(token_budget=4096), BASE, 0, 0, 1000).max_num_scheduled_tokens == 2048
    # a cap as large as the budget is no cap; admission 0 holds; the running list caps at vLLM's max
    assert vllm_knobs(Decision(chunk_cap=2048), BASE, 0, 0, 1000).long_prefill_token_threshold == 0
    assert vllm_knobs(Decision(max_admit=0), BASE, 5, 5, 1000).max_num_active_reqs == 5
    assert vllm_knobs(Decision(max_admit=1 << 30), BASE, 5, 5, 1000).max_num_active_reqs == 128


def test_batch_features_price_prefill_chunks_and_decodes_as_the_engine() -> None:
    prompt = SimpleNamespace(num_computed_tokens=512, num_tokens=1000, num_output_tokens=0)  # chunk 0..512
    resumed = SimpleNamespace(num_computed_tokens=300, num_tokens=300, num_output_tokens=20)  # recompute, one go
    decode = SimpleNamespace(num_computed_tokens=401, num_tokens=401, num_output_tokens=5)
    f = batch_features({"p": 512, "r": 300, "d": 1}, {"p": prompt, "r": resumed, "d": decode})
    assert (f.num_prefill_tokens, f.num_prefill_seqs, f.num_decode_seqs, f.num_kv_tokens) == (812, 2, 1, 401)
    assert f.prefill_attn_pairs == 512 * (0 + 513 / 2) + 300 * (0 + 301 / 2)


def _mirror(sim: Any, cost: Any, cfg: EngineConfig) -> tuple[VllmState, dict[int, int]]:
    """A ``VllmState`` over a stand-in scheduler in the state of ``sim``'s engine (running in admission order,
    waiting in queue order, counters), as the adapter's hooks would have kept it; and shadow id -> engine id."""
    engine = sim.engine
    engine.sync_all()
    stand_in = _stand_in(cfg)
    clock = SimpleNamespace(now_s=engine.now_s)
    state = VllmState(stand_in, cfg, TENANTS, cost, lambda: clock.now_s)
    vreqs = {}
    for r in sorted(engine.live_requests(), key=lambda q: q.request_id):  # shadow ids in the engine's id order
        v = _vreq(r, TENANTS[r.tenant].name)
        v.num_output_tokens, v.num_computed_tokens = r.num_output_tokens, r.num_computed_tokens
        sh = state.shadow_of(v)
        sh.first_scheduled_s, sh.first_token_s = r.first_scheduled_s, r.first_token_s
        sh.slo_resolved, sh.num_preemptions = r.slo_resolved, r.num_preemptions
        vreqs[r.request_id] = v
    stand_in.running = [vreqs[rid] for rid in engine.running]
    for t in range(len(TENANTS)):
        for r in engine.queue.in_order(t):
            state.queue.push(state.shadows[str(r.request_id)])
    state.vtc[:] = engine.vtc
    state.service_tokens[:] = engine.service_tokens
    return state, {sh.request_id: int(rid) for rid, sh in state.shadows.items()}


def test_a_planning_copy_of_vllms_state_plays_on_as_the_engine_in_that_state() -> None:
    """``simulator_of`` (the state the adapter gives mpc): over a scheduler in the state of an engine mid-run
    (prefills in flight, decodes, a queue), the copy holds every request where the engine does, passes the
    engine's invariants, and played on under the same decisions forms the same batches at the same times as the
    engine (no arrivals after now, each request at the length the copy was given: its max_tokens here)."""
    from llmsched_env.adapters.vllm.planning import simulator_of
    from llmsched_env.engine.invariants import check_engine
    from llmsched_env.sim.simulator import Simulator

    cost = load_cost_model("llama3-8b-h100")
    rng = np.random.default_rng(11)
    requests, t = [], 0.0
    for i in range(60):
        t += float(rng.exponential(0.01))
        prompt, out = int(rng.integers(50, 900)), int(rng.integers(5, 200))
        requests.append(Request(i, t, prompt, out, tenant=int(rng.integers(0, 3))))
    cfg = replace(CFG, num_kv_blocks=4096)  # no preemption: a preempted request's own blocks stay cached in vLLM
    sim = Simulator(cfg, TENANTS, cost, requests)
    engine = sim.engine
    for _ in range(300):  # on until every place is held: prefills in flight, decodes, a queue
        sim.step(Decision(token_budget=512, chunk_cap=256))
        if sim.num_steps > 20 and engine.prefilling and engine.num_decoding and engine.num_waiting_total:
            break
    assert engine.prefilling and engine.num_decoding and engine.num_waiting_total and not engine.num_preemptions
    state, original = _mirror(sim, cost, cfg)
    copy = simulator_of(state)
    check_engine(copy.engine)
    assert [original[r.request_id] for r in copy.engine.running.values()] == list(engine.running)
    assert sorted(original[r] for r in copy.engine.prefilling) == sorted(engine.prefilling)
    for t_ in range(len(TENANTS)):
        ours = [original[r.request_id] for r in copy.engine.queue.in_order(t_)]
        assert ours == [r.request_id for r in engine.queue.in_order(t_)]
    truth = sim.with_future([], [r.output_len for r in engine.live_requests()])
    decisions = [Decision(token_budget=512, chunk_cap=256), Decision(order=QueueOrder.EDF, chunk_cap=64)]
    for step in range(5000):
        if truth.done:
            break
        d = decisions[(step // 7) % 2]
        a, b = truth.step(d), copy.step(d)
        assert [(r.request_id, c) for r, c in zip(a.prefill_reqs, a.prefill_chunks, strict=True)] == [
            (original[r.request_id], c) for r, c in zip(b.prefill_reqs, b.prefill_chunks, strict=True)
        ], step
        assert (a.num_decode_seqs, a.num_admitted, a.num_preempted) == (b.num_decode_seqs, b.num_admitted, 0)
        assert truth.now_s == pytest.approx(copy.now_s, rel=1e-12, abs=1e-12)
        check_engine(copy.engine)
    assert truth.done and copy.done
