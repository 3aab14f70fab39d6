"""The routing ``lookahead`` bound (decision.planners.bounds): rules switched every k arrivals on cluster forks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest

import llmsched_env  # noqa: F401
from llmsched_env.decision.planners.bounds import RULES, RouteLookaheadPolicy
from llmsched_env.decision.planners.lookahead import BOUND_MARK, LookaheadConfig
from llmsched_env.decision.registry import make_router
from llmsched_env.envs.episode import run_episode
from llmsched_env.evaluation.config import EvalConfig
from llmsched_env.evaluation.grid import run_grid
from tests.bench_scripts import bench_script, write_capacities
from tests.episode_steps import episode_steps

SMALL = LookaheadConfig(k=12, horizon=12, tail=12)


def _cluster(num_requests: int = 60, load: float = 1.6, check: bool = False) -> gym.Env:
    # Mooncake's long shared-prefix prompts over 4 replicas: at this load the rules differ by several requests
    return gym.make(
        "LLMSchedCluster-v0", scenario="cluster-mooncake-4-fitted", split="test", num_requests=num_requests, load=load,
        check_invariants=check,
    )  # fmt: skip



def _steps(env: gym.Env, policy: Any, seed: int) -> tuple[list[tuple[Any, ...]], dict[str, float]]:
    """Every observation, reward and replica of the episode, and its metrics."""
    return episode_steps(env, policy, seed, "replica")


@pytest.mark.parametrize("rule", ["least_kv_load", "random"])  # random: a base outside the candidate rules
def test_with_one_rule_as_its_base_alone_it_replays_that_rule_exactly(rule: str) -> None:
    env = _cluster(40, check=True)  # the cluster's invariants checked at every step, the rollouts' included
    made: list[RouteLookaheadPolicy] = []
    config = LookaheadConfig(k=8, horizon=8, tail=8, candidates="base", base=rule)

    def bound(e: gym.Env) -> RouteLookaheadPolicy:
        made.append(RouteLookaheadPolicy(e, config, seed=3))
        return made[-1]

    env.reset(seed=3)
    want = _steps(env, make_router(rule, env.unwrapped.policy_context(), 3), 3)
    got = _steps(env, bound, 3)
    assert got == want  # every observation, reward, replica and metric, through the rollouts' snapshots
    la = made[0]
    assert la.base_source == rule and la.num_switches == 0
    assert la.num_decisions == 40 // 8  # one per 8 arrivals


@pytest.mark.parametrize("seed", [0, 1])
def test_never_below_any_rule_and_its_plan_replays_exactly(seed: int) -> None:
    env = _cluster()
    met = {}
    for name in RULES:
        env.reset(seed=seed)
        m = run_episode(env, make_router(name, env.unwrapped.policy_context(), seed), seed)
        met[name] = m["slo_attainment"]
    assert len(set(met.values())) > 1  # the rules differ here, so the bound has something to choose
    made: list[RouteLookaheadPolicy] = []

    def bound(e: gym.Env) -> RouteLookaheadPolicy:
        made.append(RouteLookaheadPolicy(e, SMALL, seed=seed))
        return made[-1]

    _, got = _steps(env, bound, seed)
    la = made[0]
    assert got["slo_attainment"] >= max(met.values())
    assert la.planned_met == round(got["slo_attainment"] * 60)  # the env's steps met what the plan found
    best = max(met, key=met.__getitem__)
    assert la.base_source.startswith(best) and la.num_rollouts == la.num_decisions * len(RULES)
    again = _steps(env, lambda e: RouteLookaheadPolicy(e, SMALL, seed=seed), seed)[1]
    assert again == got  # same seed, same plan, same metrics


def test_in_an_evaluation_it_is_a_row_marked_as_a_bound_and_bad_options_are_one_line() -> None:
    config = EvalConfig(
        scenarios=["cluster-mooncake-4-fitted"], policies=["least_kv_load", "lookahead:k=8,horizon=8,tail=16"],
        seeds=[0], loads=[1.6], num_requests=60, split="test",
    )  # fmt: skip
    rows = run_grid(config).rows
    assert rows[1]["policy"] == "lookahead:k=8,horizon=8,tail=16" + BOUND_MARK
    assert rows[1]["slo_attainment"] >= rows[0]["slo_attainment"]
    for entry, match in [
        ("lookahead:candidates=requests", "candidates=requests .* applies to single-node scenarios"),
        ("lookahead:base=fcfs", "base 'fcfs' is no router"),
    ]:
        with pytest.raises(ValueError, match=match) as err:
            EvalConfig(scenarios=["cluster-azure-conv-4"], policies=[entry])
        assert "\n" not in str(err.value)
    env = gym.make("LLMSched-v1", scenario="mixed-slo", num_requests=20)
    env.reset(seed=0)
    with pytest.raises(ValueError, match="is no cluster"):
        RouteLookaheadPolicy(env, SMALL)
    cluster = _cluster()
    with pytest.raises(ValueError, match="reset the env"):
        RouteLookaheadPolicy(cluster, SMALL)


def test_the_headline_gives_a_router_scenario_with_no_trained_router_its_rules_and_bound(tmp_path: Path) -> None:
    bound = "lookahead" + BOUND_MARK
    caps = {"round_robin": (1.0, 1.2), "least_kv_load": (1.4, 1.6), bound: (1.6, 1.8)}
    results = write_capacities(tmp_path / "cluster-x-capacity", "cluster-x", caps)
    headline = bench_script("headline")
    (row,) = headline.collect(tmp_path)
    assert row["best_named"] == "least_kv_load" and row["bound"] == bound and row["ratio"] is None
    text = headline.markdown([row], "learned router", "best router")
    assert "| `cluster-x` | — | — | `least_kv_load` 1.50 ± 1.27 | — | `least_kv_load` | — | — | — | 1.70 ±" in text
    assert headline.collect(tmp_path, "learned") == []  # the generalist's table has no router rows
    results.write_text(results.read_text().replace("cluster-x", "single-x"))
    assert headline.collect(tmp_path) == []  # a single-node scenario is judged only with its agent
