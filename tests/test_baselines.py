"""Baselines: every one runs valid episodes, and each rule does what its paper says on a micro-scenario.

Micro-scenarios drive the core ``Simulator`` through the baseline's actions (observation -> action ->
``ActionSpec.decode`` -> ``Simulator.step``), with the engine's invariants checked every step.
"""

from __future__ import annotations

import re
from pathlib import Path

import gymnasium
import numpy as np
import pytest

import baselines
import llmsched_env  # noqa: F401  (registers LLMSched-v0)
from llmsched_env.costs.loader import load_cost_model
from llmsched_env.decision.actions import UNLIMITED, ActionSpec
from llmsched_env.decision.observation import ObservationEncoder
from llmsched_env.decision.policy import Policy
from llmsched_env.engine.config import EngineConfig, SLOClass, TenantConfig
from llmsched_env.engine.request import Request, Status
from llmsched_env.envs.single_node import PolicyContext
from llmsched_env.sim.simulator import Simulator
from llmsched_env.workloads.workload import LengthDist, TenantWorkload, WorkloadConfig

COST = load_cost_model("llama3-8b-h100")
CHAT = SLOClass("chat", ttft_s=1.0, tpot_s=0.1)
# every baseline that these micro-contexts can build: tuned needs its scenario in its table (tests/test_tuned.py)
NAMES = [n for n in baselines.available() if n != "tuned"]


def in_mask(spec: ActionSpec, action: np.ndarray, mask: np.ndarray) -> bool:
    offsets = np.concatenate([[0], np.cumsum(spec.nvec)[:-1]])
    return action.shape == (len(spec.nvec),) and bool(mask[offsets + action].all())


def make_ctx(engine: EngineConfig, tenants: list[TenantConfig]) -> tuple[PolicyContext, ObservationEncoder]:
    spec = ActionSpec.for_engine(engine)
    enc = ObservationEncoder(engine, tenants, nominal_rate_rps=1.0)
    return PolicyContext(engine, tuple(tenants), COST, spec, enc.names), enc


def run_micro(
    name: str, requests: list[Request], tenants: list[TenantConfig], engine: EngineConfig | None = None
) -> Simulator:
    """Drive a Simulator to the end through baseline ``name``'s actions."""
    engine = engine or EngineConfig(max_num_seqs=1)
    ctx, enc = make_ctx(engine, tenants)
    spec = ctx.action_spec
    policy = baselines.make(name, ctx, seed=0)
    sim = Simulator(engine, tenants, COST, requests)
    last_s = 0.0
    for _ in range(100_000):
        if sim.done:
            break
        obs = enc.encode(sim.engine, last_s)
        mask = spec.mask(sim.engine)
        action = policy.act(obs, mask)
        assert in_mask(spec, action, mask), f"{name}: {action} outside the mask"
        if isinstance(policy, baselines.SLOAwarePolicy):
            assert policy.num_decodes(obs) == sim.engine.num_decoding
        t0 = sim.now_s
        sim.step(spec.decode(action))
        last_s = sim.now_s - t0
        sim.check_invariants()
    assert sim.done, f"{name}: the micro-scenario did not drain"
    return sim


def two_tenants(ttft_b_s: float = 1.0, ttft_a_s: float = 1.0) -> list[TenantConfig]:
    return [
        TenantConfig("a", slo=SLOClass("a", ttft_s=ttft_a_s, tpot_s=0.1)),
        TenantConfig("b", slo=SLOClass("b", ttft_s=ttft_b_s, tpot_s=0.1)),
    ]


# ------------------------------------------------------------------------------------------ registry, API
def test_registry_lists_every_required_baseline() -> None:
    required = {
        "fcfs",
        "priority_aging",
        "slo_aware",
        "sarathi",
        "vtc",
        "sjf",
        "prefill_first",
        "random",
        "lpm",
        "kv_guard",
    }
    assert required | {"tuned"} <= set(baselines.available())


def test_make_unknown_name_lists_the_available_ones() -> None:
    ctx, _ = make_ctx(EngineConfig(), [TenantConfig("t", slo=CHAT)])
    with pytest.raises(ValueError, match="unknown scheduler 'nope'") as err:
        baselines.make("nope", ctx)
    assert all(n in str(err.value) for n in NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_act_returns_a_fresh_int64_action_and_rejects_a_bad_mask(name: str) -> None:
    ctx, _ = make_ctx(EngineConfig(), [TenantConfig("t", slo=CHAT)])
    policy = baselines.make(name, ctx, seed=1)
    assert isinstance(policy, Policy)
    spec = ctx.action_spec
    obs = np.zeros(len(ctx.obs_names), dtype=np.float32)
    mask = np.ones(spec.mask_size, dtype=bool)
    a = policy.act(obs, mask)
    assert a.dtype == np.int64 and in_mask(spec, a, mask)
    a[:] = 0  # the caller owns the array: mutating it must not change the next answer
    assert in_mask(spec, policy.act(obs, mask), mask)
    with pytest.raises(ValueError, match="shape"):
        policy.act(obs, mask[:-1])
    empty = mask.copy()
    empty[: spec.nvec[0]] = False
    with pytest.raises(ValueError, match="component 0"):
        policy.act(obs, empty)


@pytest.mark.parametrize("ctx", [None, "ctx", 3])
def test_a_context_or_seed_of_the_wrong_type_is_a_type_error_naming_the_argument(ctx: object) -> None:
    """``make("slo_aware", None)`` and ``SLOAwarePolicy("ctx")`` were ``AttributeError``s deep in a constructor."""
    for name in [*baselines.available(), "tuned"]:
        with pytest.raises(TypeError, match=r"argument 'ctx' must be a PolicyContext \(env\.unwrapped\.policy_context"):
            baselines.make(name, ctx)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="SLOAwarePolicy: argument 'ctx' must be a PolicyContext"):
        baselines.SLOAwarePolicy(ctx)  # type: ignore[arg-type]
    for router in baselines.available_routers():
        with pytest.raises(TypeError, match="argument 'ctx' must be a RouterContext"):
            baselines.make_router(router, ctx)  # type: ignore[arg-type]
    good, _ = make_ctx(EngineConfig(), [TenantConfig("t", slo=CHAT)])
    with pytest.raises(TypeError, match="RandomPolicy: argument 'seed' must be None or an integer, got 'x'"):
        baselines.make("random", good, seed="x")  # type: ignore[arg-type]
    baselines.make("random", good, seed=np.int64(3))  # a numpy integer is a seed


def test_an_observation_of_the_wrong_shape_is_a_value_error_naming_the_argument() -> None:
    """``slo_aware.act(np.zeros(3), mask)`` was an ``IndexError``; so was a router's on a short observation."""
    ctx, _ = make_ctx(EngineConfig(), [TenantConfig("t", slo=CHAT)])
    policy = baselines.make("slo_aware", ctx)
    mask = np.ones(ctx.action_spec.mask_size, dtype=bool)
    size = len(ctx.obs_names)
    for bad, shape in ((np.zeros(3), "(3,)"), (np.zeros((1, size)), f"(1, {size})"), ([0.0] * size, "list")):
        message = rf"SLOAwarePolicy\.act: argument 'observation' must be an array of shape \({size},\).*got "
        message += re.escape(shape)
        with pytest.raises(ValueError, match=message):
            policy.act(bad, mask)  # type: ignore[arg-type]
    policy.act(np.zeros(size, dtype=np.float32), mask)
    env = gymnasium.make("LLMSchedCluster-v0", num_replicas=2)
    env.reset(seed=0)
    rctx = env.unwrapped.policy_context()
    for router in ("least_outstanding", "least_kv_load", "prefix_affinity", "power_of_two"):
        with pytest.raises(ValueError, match=r"\.act: argument 'observation' must be an array of shape"):
            baselines.make_router(router, rctx, seed=0).act(np.zeros(3), np.ones(2, dtype=bool))
    env.close()


def test_a_policy_label_may_not_take_another_policys_name(tmp_path: Path) -> None:
    """``--policies fcfs=PATH`` credited the learned policy's rows to ``fcfs``: a label that is a baseline's,
    ``learned``'s or ``lookahead``'s name must denote that policy."""
    from llmsched_env.decision.policy_spec import resolve_policy

    assert resolve_policy("fcfs=fcfs").baseline == "fcfs"
    assert resolve_policy("mine=fcfs").name == "mine"
    for entry, named in (("fcfs=slo_aware", "fcfs"), ("random=sjf", "random"), ("round_robin=fcfs", "round_robin")):
        message = rf"^policy '{entry}' is named '{named}', the name of the baseline"
        with pytest.raises(ValueError, match=message) as info:
            resolve_policy(entry)
        assert "\n" not in str(info.value)
    table = tmp_path / "fcfs.json"  # a tuned table named after its stem: 'fcfs'
    table.write_text(baselines.TunedPolicy.shipped_table.read_text())
    for entry in (f"fcfs={table}", str(table), f"learned={table}", f"lookahead={table}"):
        with pytest.raises(ValueError, match=r"is named '(fcfs|learned|lookahead)', the name of .*\(NAME=PATH"):
            resolve_policy(entry)


def test_fcfs_knobs_are_vllm_v1_defaults() -> None:
    ctx, _ = make_ctx(EngineConfig(), [TenantConfig("t", slo=CHAT)])
    d = baselines.make("fcfs", ctx).decision_for(0)
    assert (d.token_budget, d.chunk_cap, d.max_admit, d.kv_reserve, d.shed, d.prefill_first) == (
        2048,
        4096,
        UNLIMITED,
        0.0,
        False,
        False,
    )
    small, _ = make_ctx(EngineConfig(max_num_batched_tokens=1024), [TenantConfig("t", slo=CHAT)])
    assert baselines.make("fcfs", small).decision_for(0).token_budget == 1024
    guard = baselines.make("kv_guard", ctx).decision_for(0)
    assert (guard.kv_reserve, guard.max_admit) == (0.1, 8)


@pytest.mark.parametrize("tpot_s", [0.012, 0.02, 0.05, 0.1])
def test_tpot_budgets_are_the_largest_option_meeting_the_slo(tpot_s: float) -> None:
    tenants = [TenantConfig("t", slo=SLOClass("t", ttft_s=1.0, tpot_s=tpot_s)), TenantConfig("u", slo=CHAT)]
    ctx, _ = make_ctx(EngineConfig(), tenants)
    budgets = ctx.action_spec.token_budgets
    sarathi = baselines.make("sarathi", ctx).decision_for(0)
    slo = baselines.make("slo_aware", ctx)
    assert isinstance(slo, baselines.SLOAwarePolicy)
    for d, b in [(64, sarathi.token_budget), *((d, slo.budgets[d]) for d in (0, 1, 64, 128))]:
        fits = [x for x in budgets if baselines.slo.hybrid_step_time_s(COST, x, d) <= tpot_s]
        assert b == (max(fits) if fits else budgets[0])
    assert sarathi.chunk_cap == sarathi.token_budget


# ------------------------------------------------------------------------------------------ episodes
def run_episode(
    name: str, seed: int, check_invariants: bool = True
) -> tuple[list[tuple[int, ...]], dict[str, float], int]:
    """A 100-request episode under load on a small KV pool (queues, preemptions); actions, metrics, and the
    number of requests finished or rejected."""
    env = gymnasium.make(
        "LLMSched-v1",
        num_requests=100,
        load=4.0,
        engine={"num_kv_blocks": 1024},
        check_invariants=check_invariants,
    )
    u = env.unwrapped
    spec = u.action_spec
    policy = baselines.make(name, u.policy_context(), seed=seed)
    obs, _ = env.reset(seed=seed)
    actions = []
    for _ in range(200_000):
        mask = u.action_masks()
        action = policy.act(obs, mask)
        assert in_mask(spec, action, mask), f"{name}: {action} outside the mask"
        if isinstance(policy, baselines.SLOAwarePolicy):  # it reads the decode count back from obs
            assert policy.num_decodes(obs) == u.sim.engine.num_decoding
        obs, _, terminated, truncated, info = env.step(action)
        assert not info["action_projected"]
        actions.append(tuple(action.tolist()))
        if terminated or truncated:
            break
    assert terminated and not truncated
    engine = u.sim.engine
    resolved = len(engine.finished) + len(engine.rejected)
    return actions, info["metrics"], resolved


@pytest.mark.parametrize("name", NAMES)
def test_every_baseline_runs_a_valid_episode_deterministically(name: str) -> None:
    actions, metrics, resolved = run_episode(name, seed=3)
    assert resolved == 100, f"{name}: only {resolved} of 100 requests finished or were rejected"
    again, metrics_again, _ = run_episode(name, seed=3, check_invariants=False)
    assert again == actions and metrics_again == metrics


def test_random_depends_on_its_seed() -> None:
    first = run_episode("random", seed=3, check_invariants=False)[0]
    assert first != run_episode("random", seed=4, check_invariants=False)[0]


# ------------------------------------------------------------------------------------------ micro-scenarios
def fifo_scenario() -> list[Request]:
    """The engine holds one request; a long one (tenant b) then a short one (tenant a) queue behind it."""
    return [
        Request(0, 0.0, prompt_len=100, output_len=20, tenant=0),
        Request(1, 0.001, prompt_len=800, output_len=5, tenant=1),
        Request(2, 0.002, prompt_len=50, output_len=5, tenant=0),
    ]


@pytest.mark.parametrize(("name", "first", "then"), [("fcfs", 1, 2), ("sjf", 2, 1)])
def test_fcfs_admits_the_oldest_and_sjf_the_shortest_prompt_first(name: str, first: int, then: int) -> None:
    r = run_micro(name, fifo_scenario(), two_tenants()).requests
    assert r[first].first_scheduled_s < r[then].first_scheduled_s


def test_slo_aware_serves_the_least_slack_request_first() -> None:
    """Tenant a may wait 10 s, tenant b only 1 s: b's later arrival has the earlier deadline."""
    reqs = lambda: [  # noqa: E731
        Request(0, 0.0, 100, 20, tenant=0),
        Request(1, 0.001, 100, 5, tenant=0),
        Request(2, 0.002, 100, 5, tenant=1),
    ]
    tenants = two_tenants(ttft_a_s=10.0, ttft_b_s=1.0)
    r = run_micro("slo_aware", reqs(), tenants).requests
    assert r[2].first_scheduled_s < r[1].first_scheduled_s
    assert all(q.status == Status.FINISHED for q in r)
    r = run_micro("fcfs", reqs(), tenants).requests
    assert r[1].first_scheduled_s < r[2].first_scheduled_s


def test_slo_aware_sheds_a_request_that_cannot_meet_its_ttft() -> None:
    """b's 0.1 s TTFT passes while the only slot decodes a 60-token answer (~0.5 s)."""
    reqs = lambda: [Request(0, 0.0, 100, 60, tenant=0), Request(1, 0.001, 100, 5, tenant=1)]  # noqa: E731
    tenants = two_tenants(ttft_a_s=10.0, ttft_b_s=0.1)
    r = run_micro("slo_aware", reqs(), tenants).requests
    assert r[1].status == Status.REJECTED and r[1].reject_reason == "ttft_unreachable"
    assert r[0].status == Status.FINISHED
    r = run_micro("fcfs", reqs(), tenants).requests
    assert r[1].status == Status.FINISHED  # without shedding it is served, late


def test_vtc_serves_the_least_served_tenant_first() -> None:
    """Tenant a is served a 2000-token prompt and 50 tokens; when a and b both wait, b goes first."""
    reqs = lambda: [  # noqa: E731
        Request(0, 0.0, 2000, 50, tenant=0),
        Request(1, 0.001, 100, 5, tenant=0),
        Request(2, 0.002, 100, 5, tenant=1),
    ]
    r = run_micro("vtc", reqs(), two_tenants()).requests
    assert r[2].first_scheduled_s < r[1].first_scheduled_s
    r = run_micro("fcfs", reqs(), two_tenants()).requests
    assert r[1].first_scheduled_s < r[2].first_scheduled_s


def test_lpm_prefers_the_request_whose_prefix_is_cached() -> None:
    shared = (7, 8)  # two 512-token prefix blocks: 1024 shared prompt tokens
    reqs = lambda: [  # noqa: E731
        Request(0, 0.0, 1100, 5, tenant=0, prefix_ids=shared),
        Request(1, 0.001, 1100, 5, tenant=0),
        Request(2, 0.002, 1100, 5, tenant=0, prefix_ids=shared),
    ]
    tenants = [TenantConfig("t", slo=CHAT)]
    r = run_micro("lpm", reqs(), tenants).requests
    assert r[2].first_scheduled_s < r[1].first_scheduled_s
    assert r[2].num_prefix_hit_tokens == 1024
    r = run_micro("fcfs", reqs(), tenants).requests
    assert r[1].first_scheduled_s < r[2].first_scheduled_s


def test_a_shared_prefix_hits_the_cache_after_the_first_request_finished() -> None:
    reqs = [Request(0, 0.0, 1100, 5, prefix_ids=(3, 4)), Request(1, 5.0, 1200, 5, prefix_ids=(3, 4))]
    sim = run_micro("fcfs", reqs, [TenantConfig("t", slo=CHAT)])
    assert reqs[0].finish_s is not None and reqs[0].finish_s < reqs[1].arrival_s
    assert reqs[0].num_prefix_hit_tokens == 0
    assert reqs[1].num_prefix_hit_tokens == 1024 and sim.engine.num_prefix_hit_tokens == 1024
    assert all(r.status == Status.FINISHED for r in reqs)


def test_a_preempted_request_later_finishes_with_all_its_tokens() -> None:
    """20 blocks of 16 tokens; two requests of 300 tokens each cannot both decode to the end."""
    engine = EngineConfig(num_kv_blocks=20, block_size=16, max_num_seqs=4)
    reqs = [Request(0, 0.0, 100, 200), Request(1, 0.0, 100, 200)]
    sim = run_micro("fcfs", reqs, [TenantConfig("t", slo=CHAT)], engine)
    assert sim.engine.num_preemptions >= 1 and reqs[1].num_preemptions >= 1
    for r in reqs:
        assert r.status == Status.FINISHED and r.num_output_tokens == r.output_len


def test_priority_aging_serves_the_higher_priority_tenant_first() -> None:
    tenants = [TenantConfig("low", slo=CHAT, priority=1), TenantConfig("high", slo=CHAT, priority=0)]
    reqs = [Request(0, 0.0, 100, 20, tenant=0), Request(1, 0.001, 100, 5, tenant=0), Request(2, 0.002, 100, 5, 1)]
    r = run_micro("priority_aging", reqs, tenants).requests
    assert r[2].first_scheduled_s < r[1].first_scheduled_s


def test_prefill_first_stalls_decodes_while_prefill_is_pending() -> None:
    """With prefill-first the running request's decode waits for the newcomer's prefill iteration."""
    workload = WorkloadConfig(
        (TenantWorkload(TenantConfig("t", slo=CHAT), 50.0, LengthDist.fixed(2000, 50)),), num_requests=20
    )
    tpot = {}
    for name in ("fcfs", "prefill_first"):
        env = gymnasium.make("LLMSched-v1", workload=workload, check_invariants=True)
        u = env.unwrapped
        policy = baselines.make(name, u.policy_context())
        obs, _ = env.reset(seed=0)
        done = False
        while not done:
            obs, _, term, trunc, info = env.step(policy.act(obs, u.action_masks()))
            done = term or trunc
        tpot[name] = info["metrics"]
    assert tpot["prefill_first"]["tpot_p99_s"] > tpot["fcfs"]["tpot_p99_s"]
