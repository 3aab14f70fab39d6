"""Capacity probes that stop once decided (``evaluation.decided``) and the direct episode (``DirectEpisode``): the
same verdicts, trajectories, metrics and capacities as whole runs through the env's steps."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from llmsched_env.envs.episode import DirectEpisode, Episode
from llmsched_env.evaluation import EvalConfig
from llmsched_env.evaluation.capacity import AT_CAPACITY, CAPACITY_TARGET, find_capacity
from llmsched_env.evaluation.decided import HIGH, LOW, ProbeCell, attainment_bounds
from llmsched_env.evaluation.grid import acting_policy, run_cell
from llmsched_env.evaluation.identity import TRAJECTORY, trajectory_fingerprint
from llmsched_env.evaluation.sustained import scenario_windows
from llmsched_env.workloads.library import get_scenario
from tests.recorded import recorded_capacities

BASELINES = ["fcfs", "prefill_first", "priority_aging", "sjf", "sprw", "lpm", "vtc", "kv_guard", "sarathi",
             "slo_aware", "random", "tuned", "learned"]  # fmt: skip


@pytest.mark.parametrize(
    ("scenario", "policies", "checked"),
    [
        ("mixed-slo", BASELINES, False),
        ("remote-kv", BASELINES, False),
        ("mixed-slo", ["lpm", "slo_aware"], True),
    ],
)
def test_a_direct_episode_plays_the_envs_trajectory(scenario: str, policies: list[str], checked: bool) -> None:
    config = EvalConfig(scenarios=[scenario], policies=policies, seeds=[1], split="val", num_requests=60,
                        check_invariants=checked)  # fmt: skip
    for spec in config.policies:
        played = []
        for kind in (Episode, DirectEpisode):
            env = config.make_env(config.scenarios[0], 1.4, spec.iterations_per_step, spec.schema)
            episode = kind(env, acting_policy(config, spec, env, 1), 1)  # checked: the invariants every iteration
            while not episode.advance():
                n, met, missed = episode.tally()
                assert met + missed <= n == 60
            played.append((episode.metrics, trajectory_fingerprint(env.unwrapped.sim)))
            env.close()
        assert played[0] == played[1], spec.name


def test_a_direct_episode_keeps_the_envs_hold_and_truncation() -> None:
    config = EvalConfig(scenarios=["bursty"], policies=["learned", "sjf"], seeds=[0], num_requests=80)
    for spec in config.policies:
        played = []
        for kind in (Episode, DirectEpisode):
            env = config.make_env(config.scenarios[0], 2.0, 3, spec.schema)  # each decision held 3 iterations
            env.unwrapped.max_steps = 100  # truncated mid-episode
            episode = kind(env, acting_policy(config, spec, env, 0), 0)
            while not episode.advance():
                pass
            played.append((episode.metrics, trajectory_fingerprint(env.unwrapped.sim), env.unwrapped.sim.num_steps))
            env.close()
        assert played[0] == played[1] and played[0][2] == 102  # the env checks after each held step (3 iterations)


@pytest.mark.parametrize(("scenario", "policy"), [("mixed-slo", "fcfs"), ("tenants-on-off", "slo_aware"),
                                                  ("cluster-azure-conv-4", "round_robin")])  # fmt: skip
@pytest.mark.parametrize("seeds", [(0,), (0, 2, 3)])
def test_a_probe_stops_with_the_verdict_of_its_whole_runs(scenario: str, policy: str, seeds: tuple[int, ...]) -> None:
    config = EvalConfig(scenarios=[scenario], policies=[policy], seeds=list(seeds), num_requests=120)
    sc, spec = config.scenarios[0], config.policies[0]
    stopped = 0
    for load in (0.5, 1.0, 1.6, 2.5, 4.0):
        whole = run_cell(config, sc, load, spec).rows
        mean = np.mean([r["slo_attainment"] for r in whole])
        cell = ProbeCell(config, sc, load, spec, seeds)
        try:
            rows = cell.decide(CAPACITY_TARGET)
            bounds = [attainment_bounds(r) for r in rows]
            for (low, high), full in zip(bounds, whole, strict=True):
                assert low <= full["slo_attainment"] <= high
            low, high = np.mean([b[0] for b in bounds]), np.mean([b[1] for b in bounds])
            assert low >= CAPACITY_TARGET or high < CAPACITY_TARGET or not any(r.get("stopped_early") for r in rows)
            assert (low >= CAPACITY_TARGET) == (mean >= CAPACITY_TARGET)  # the verdict of the whole runs
            stopped += sum(bool(r.get("stopped_early")) for r in rows)  # a cluster's outcomes come late: fewer
            for r in rows:
                assert (LOW in r) == (HIGH in r) == bool(r.get("stopped_early"))
            finished = cell.finish()  # played on to the end: the whole runs' rows
            for a, b in zip(finished, whole, strict=True):
                assert a[TRAJECTORY] == b[TRAJECTORY] and a["slo_attainment"] == b["slo_attainment"]
        finally:
            cell.close()
    assert stopped > 0 or config.is_cluster  # some probe was decided before its end


def test_a_search_finds_the_same_capacity_and_plays_its_load_whole() -> None:
    config = EvalConfig(scenarios=["bursty"], policies=["fcfs", "slo_aware"], seeds=[0, 1], num_requests=200)
    sc = config.scenarios[0]
    for spec in config.policies:
        for seed in (None, 1):
            early = find_capacity(config, sc, spec, seed=seed)
            whole = find_capacity(config, sc, spec, seed=seed, decide_early=False, latency=False)
            assert early["capacity_load"] == whole["capacity_load"] > 0
            assert early[TRAJECTORY] != whole[TRAJECTORY]  # it played less
            at = early["capacity_load"]
            seeds = config.seeds if seed is None else [seed]
            rows = run_cell(config, sc, at, spec, seeds=seeds).rows
            for name in AT_CAPACITY:
                assert early[f"at_capacity_{name}"] == pytest.approx(sum(r[name] for r in rows) / len(rows), abs=0)
            assert early["at_capacity_slo_attainment"] >= CAPACITY_TARGET
            assert not any(k.startswith("at_capacity") for k in whole)


def test_a_search_past_the_sustained_windows_finds_the_same_capacity() -> None:
    # 60-request bursty windows stop being sustained at a low load: the search grows them above it
    sc = replace(get_scenario("bursty"), num_requests=60)
    config = EvalConfig(scenarios=[sc], seeds=[0, 1])
    cap = scenario_windows(config, sc).max_load((0, 1))
    early = find_capacity(config, sc, "fcfs")
    whole = find_capacity(config, sc, "fcfs", decide_early=False, latency=False)
    assert early["capacity_load"] == whole["capacity_load"] > 1.5 * cap
    assert early["window_requests"] == whole["window_requests"] > 60  # the capacity load's runs played whole
    assert early["max_sustained_load"] == whole["max_sustained_load"]
    sized = EvalConfig(scenarios=[sc], seeds=[0, 1], num_requests=early["window_requests"])
    rows = run_cell(sized, sc, early["capacity_load"], sized.policies[0]).rows
    assert early["at_capacity_goodput_rps"] == np.mean([r["goodput_rps"] for r in rows])


@pytest.mark.parametrize("case", recorded_capacities(quick=True), ids=lambda c: f"{c.scenario}-{c.policy}-{c.seed}")
def test_recorded_capacities_are_found_again(case) -> None:
    assert case.search() == case.capacity_load


@pytest.mark.slow
@pytest.mark.parametrize("case", recorded_capacities(quick=False), ids=lambda c: f"{c.scenario}-{c.policy}-{c.seed}")
def test_every_recorded_rule_capacity_is_found_again(case) -> None:
    assert case.search() == case.capacity_load


@pytest.mark.parametrize("policy", ["lookahead:k=8", "mpc:futures=2,horizon=32"])
def test_the_planners_searches_stop_early_with_the_same_capacity(policy: str) -> None:
    config = EvalConfig(scenarios=["bursty"], policies=[policy], seeds=[0], num_requests=80)
    sc, spec = config.scenarios[0], config.policies[0]
    early = find_capacity(config, sc, spec, seed=0, latency=False)
    whole = find_capacity(config, sc, spec, seed=0, decide_early=False, latency=False)
    assert early["capacity_load"] == whole["capacity_load"] > 0 and early[TRAJECTORY] != whole[TRAJECTORY]
