"""Randomised synthetic scenarios (workloads/randomized.py): determinism, the space's bounds and checks, requests
that always fit their engine, episodes that resolve every request, and the nominal-rate estimate against the
library's measured knees."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import llmsched_env  # noqa: F401  (registers LLMSched-v0)
from llmsched_env.costs.loader import load_cost_model
from llmsched_env.decision.registry import make_scheduler
from llmsched_env.engine.config import SLO_CLASSES, EngineConfig
from llmsched_env.envs.episode import run_episode
from llmsched_env.workloads.library import get_scenario
from llmsched_env.workloads.randomized import (
    ENGINE_CHOICES,
    FIT_COPIES,
    LENGTH_FAMILIES,
    RandomizedSpace,
    nominal_rate_rps,
    random_scenario,
    random_scenarios,
    workload_nominal_rate_rps,
)
from llmsched_env.workloads.scenarios import slo_scale


def _requests(seed: int, split: str = "train", n: int = 300):
    source = random_scenario(seed).source(split)
    return source.sample(np.random.default_rng(seed), n, 1.0)


def _first_seed_per_engine() -> dict[EngineConfig, int]:
    seeds: dict[EngineConfig, int] = {}
    seed = 0
    while len(seeds) < len(ENGINE_CHOICES):
        seeds.setdefault(random_scenario(seed).engine, seed)
        seed += 1
    return seeds


def test_same_seed_gives_an_equal_scenario_and_equal_requests():
    for seed in range(5):
        assert random_scenario(seed) == random_scenario(seed)
    a, b = _requests(3), _requests(3)
    assert [(r.arrival_s, r.prompt_len, r.output_len, r.tenant, r.prefix_ids) for r in a] == [
        (r.arrival_s, r.prompt_len, r.output_len, r.tenant, r.prefix_ids) for r in b
    ]


def test_different_seeds_differ():
    scenarios = random_scenarios(range(20))
    assert [s.name for s in scenarios] == [f"random-{i}" for i in range(20)]
    workloads = [s.make_source.workload for s in scenarios]  # type: ignore[attr-defined]
    assert all(workloads[i] != workloads[j] for i in range(20) for j in range(i))
    assert len({(s.engine, s.cost_model) for s in scenarios}) > 3


def test_tenant_counts_stay_in_bounds_and_reach_both_ends():
    counts = []
    for seed in range(300):
        tenants = random_scenario(seed, num_requests=50).source("train").tenants
        names = [t.name for t in tenants]
        assert len(set(names)) == len(names)
        counts.append(len(tenants))
    assert min(counts) == 1 and max(counts) == 16
    space = RandomizedSpace(min_tenants=3, max_tenants=3)
    assert {len(random_scenario(seed, space).source("val").tenants) for seed in range(20)} == {3}


def test_the_space_is_drawn_from():
    space = RandomizedSpace(
        slo_classes=("chat", "batch"),
        length_families=("short_chat",),
        arrival_kinds=("gamma",),
        engines=(ENGINE_CHOICES[0],),
        cost_models=("llama3-8b-a100",),
        max_priority=0,
        prefix_prob=0.0,
    )
    for seed in range(10):
        scenario = random_scenario(seed, space)
        assert scenario.engine == ENGINE_CHOICES[0] and scenario.cost_model == "llama3-8b-a100"
        for t in scenario.make_source.workload.tenants:  # type: ignore[attr-defined]
            assert t.tenant.slo.name in ("chat", "batch") and t.tenant.priority == 0 and t.prefix_share == 0
            assert t.lengths.max_prompt_len == 2048 and type(t.arrival).__name__ == "GammaArrivals"
            assert 1.0 <= t.arrival.cv <= 4.0


def test_slos_scale_with_the_cost_model():
    for seed in range(8):
        scenario = random_scenario(seed)
        scale = slo_scale(load_cost_model(scenario.cost_model))
        for t in scenario.source("test").tenants:
            reference = SLO_CLASSES[t.slo.name]
            assert t.slo.ttft_s == pytest.approx(reference.ttft_s * scale)
            assert t.slo.tpot_s == pytest.approx(reference.tpot_s * scale)


def test_every_request_fits_its_engine():
    families_seen = set()
    for seed in range(60):
        engine = random_scenario(seed).engine
        for t in random_scenario(seed).make_source.workload.tenants:  # type: ignore[attr-defined]
            families_seen.add(t.tenant.name.split("-")[1])
        for r in _requests(seed, "val" if seed % 2 else "train"):
            assert r.prompt_len >= 1 and r.output_len >= 1
            assert r.prompt_len + r.output_len <= engine.max_model_len
            blocks = -(-(r.prompt_len + r.output_len) // engine.block_size)
            assert FIT_COPIES * blocks <= engine.num_kv_blocks
    assert families_seen == set(LENGTH_FAMILIES)


def _run(seed: int, num_requests: int, check_invariants: bool) -> None:
    env = gym.make(
        "LLMSched-v1", scenario=random_scenario(seed), num_requests=num_requests, check_invariants=check_invariants
    )
    try:
        policy = make_scheduler("fcfs", env.unwrapped.policy_context(), seed=0)
        metrics = run_episode(env, policy, seed=seed)
        engine = env.unwrapped.sim.engine
        assert env.unwrapped.sim.done
        assert metrics["num_unfinished"] == 0
        assert engine.num_good + engine.num_missed == num_requests
        assert not [r.reject_reason for r in engine.rejected if r.reject_reason.startswith("exceeds")]
    finally:
        env.close()


def test_episodes_on_every_engine_resolve_every_request():
    for seed in _first_seed_per_engine().values():
        _run(seed, 200, check_invariants=False)


def test_an_episode_keeps_the_core_invariants():
    # The invariant check walks the KV pool every iteration: on the small engine (32k KV tokens) it stays fast.
    _run(_first_seed_per_engine()[ENGINE_CHOICES[-1]], 60, check_invariants=True)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("min_tenants", 0),
        ("max_tenants", 0),
        ("slo_classes", ("chat", "nope")),
        ("slo_classes", ()),
        ("length_families", ("short_chat", "short_chat")),
        ("arrival_kinds", ("diurnal",)),
        ("gamma_cv_range", (4.0, 1.0)),
        ("on_off_cycle_s", (0.0, 10.0)),
        ("on_fraction_range", (0.5, 1.5)),
        ("load_range", (-1.0, 2.0)),
        ("load_range", (1.0,)),
        ("weight_range", (0.0, 1.0)),
        ("max_priority", -1),
        ("prefix_prob", 1.5),
        ("prefix_share_range", (0.2, 2.0)),
        ("engines", ()),
        ("engines", (EngineConfig(max_num_seqs=32, max_num_batched_tokens=32),)),
        ("engines", (EngineConfig(num_kv_blocks=64),)),
        ("cost_models", ("no-such-preset",)),
        ("cost_models", "llama3-8b-h100"),
    ],
)
def test_bad_space_fields_name_the_field(field, value):
    with pytest.raises(ValueError, match=field):
        RandomizedSpace(**{field: value})


def test_random_scenario_checks_its_arguments():
    with pytest.raises(ValueError, match="seed"):
        random_scenario(-1)
    with pytest.raises(ValueError, match="num_requests"):
        random_scenario(0, num_requests=0)
    with pytest.raises(ValueError, match="space"):
        random_scenario(0, space="default")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="mix"):
        nominal_rate_rps(EngineConfig(), "llama3-8b-h100", [])


def test_the_nominal_rate_is_the_estimate():
    for seed in range(10):
        scenario = random_scenario(seed)
        source = scenario.source("train")
        estimate = workload_nominal_rate_rps(scenario.engine, scenario.cost_model, source.workload)
        assert source.nominal_rate_rps() == pytest.approx(estimate, rel=1e-6)


@pytest.mark.parametrize("name", ["default", "sharegpt-poisson", "mixed-slo", "short-long"])
def test_nominal_rate_estimate_is_within_3x_of_the_library_knee(name):
    scenario = get_scenario(name)
    source = scenario.source("val")
    estimate = workload_nominal_rate_rps(scenario.engine, scenario.cost_model, source.workload)
    assert 1 / 3 <= source.nominal_rate_rps() / estimate <= 3
