"""The trained policies shipped in policies/ load and fit their scenario's env. The fast tier plays a few of
them (``FAST``: a minute or less in all on the 2-core machine); the slow tier plays every one. The schema-1
fixtures of tests/data/policies are played by the fingerprint."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest

import llmsched_env  # noqa: F401
from llmsched_env.decision.actions import ACTION_COMPONENTS
from llmsched_env.envs.episode import run_episode
from llmsched_env.runtime.policy_file import load_policy_file
from llmsched_env.workloads.library import list_scenarios

SHIPPED = sorted((Path(__file__).resolve().parents[1] / "policies").glob("*/policy.json"))
ROUTERS = [p for p in SHIPPED if p.parent.name != "generalist"]  # the trained routers, one per cluster scenario
FAST = {"cluster-azure-conv-4", "generalist:default"}  # whose episodes here take seconds


def _tiered(values: list, name: Callable[[Any], str] = str) -> list:
    """``values`` as parameters, those not named in ``FAST`` marked slow."""
    return [v if name(v) in FAST else pytest.param(v, marks=pytest.mark.slow) for v in values]


def test_policies_are_shipped() -> None:
    """The generalist and one trained router per cluster scenario; the per-scenario single-node agents are retired
    (two of them stay as schema-1 test fixtures, tests/data/policies)."""
    routers = ("cluster-azure-conv-4", "cluster-azure-conv-8", "cluster-mooncake-4", "cluster-mooncake-8")
    assert {p.parent.name for p in SHIPPED} == {"generalist", *routers}


@pytest.mark.parametrize("scenario", _tiered(list_scenarios(), lambda s: f"generalist:{s}"), ids=str)
def test_the_generalist_runs_on_every_scenario(scenario: str) -> None:
    policy = load_policy_file(SHIPPED[0].parents[1] / "generalist")
    assert policy.schema_version == 2 and policy.meta["scenario"] == "generalist"
    n = 10 if scenario in ("mooncake-conv", "remote-kv") else 30  # the invariant check scans their large pools
    env = gym.make(
        "LLMSched-v1", scenario=scenario, split="test", num_requests=n, check_invariants=True,
        iterations_per_step=policy.meta["iterations_per_step"], length_prediction="lognormal:0.5",
    )  # fmt: skip
    u = env.unwrapped
    policy.check_compatible(u.obs_names, u.action_spec.nvec, u.schema)
    metrics = run_episode(env, policy, seed=0)
    assert metrics["num_finished"] + metrics["num_rejected"] == n


def test_the_generalist_recipe_is_the_one_that_trained_the_shipped_policy() -> None:
    """``llmsched-train --scenario generalist --seed 0`` re-trains the shipped generalist (docs/training.md,
    Reproducibility) only while the yml recipe is the one in its run's config.yml."""
    import yaml

    from agents.train_config import TrainConfig, resolve_hyperparams

    shipped = yaml.safe_load((SHIPPED[0].parents[1] / "generalist" / "config.yml").read_text())
    assert (shipped.pop("algo"), shipped.pop("scenario")) == ("maskable_ppo", "generalist")
    assert shipped == resolve_hyperparams(TrainConfig(scenario="generalist"))


@pytest.mark.parametrize("path", _tiered(ROUTERS, lambda p: p.parent.name), ids=lambda p: p.parent.name)
def test_shipped_router_runs_on_its_scenario(path: Path) -> None:
    policy = load_policy_file(path)
    scenario = policy.meta["scenario"]
    assert scenario == path.parent.name and scenario.startswith("cluster-")
    env = gym.make("LLMSchedCluster-v0", scenario=scenario, split="test", num_requests=80, check_invariants=True)
    u = env.unwrapped
    components = getattr(u.action_spec, "components", ACTION_COMPONENTS)  # ("replica",) for a router
    policy.check_compatible(u.obs_names, u.action_spec.nvec, u.schema, action_components=components)
    metrics = run_episode(env, policy, seed=0)
    assert metrics["num_finished"] + metrics["num_rejected"] == 80
