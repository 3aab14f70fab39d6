"""train.py and llmsched-evaluate on cluster scenarios: a router trains, exports, loads and is judged by routers."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")

from agents.cli import main as train_main
from llmsched_env.commands.evaluate import main, parse
from llmsched_env.runtime.policy_file import load_policy_file

TINY = [
    "--timesteps", "256", "--n-envs", "1", "--hp", "n_steps=128", "--hp", "batch_size=64", "--hp", "eval_freq=128",
    "--hp", "eval_episodes=1", "--hp", "env_kwargs.num_requests=60", "--hp", "bc_steps=200",
    "--eval-baselines", "round_robin,least_outstanding", "--no-progress",
]  # fmt: skip


@pytest.fixture(scope="module")
def router_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("router")
    assert train_main(["--scenario", "cluster-azure-conv-4", "--out", str(out), *TINY]) == 0
    return out


@pytest.mark.slow
def test_a_trained_router_exports_and_evaluates_against_the_routing_baselines(router_run: Path, tmp_path) -> None:
    meta = json.loads((router_run / "policy.json").read_text())
    assert meta["action_components"] == ["replica"] and meta["action_nvec"] == [4] and meta["iterations_per_step"] == 1
    summary = json.loads((router_run / "summary.json").read_text())
    assert set(summary["baseline_attainment"]) == {"round_robin", "least_outstanding"}
    out = tmp_path / "ev"
    argv = ["--scenarios", "cluster-azure-conv-4", "--policies", f"round_robin,prefix_affinity,agent={router_run}",
            "--num-requests", "60", "--seeds", "0,1", "--out", str(out), "--check-invariants"]  # fmt: skip
    assert main(argv) == 0
    rows = json.loads((out / "results.json").read_text())
    assert [r["policy"] for r in rows] == ["round_robin"] * 2 + ["prefix_affinity"] * 2 + ["agent"] * 2
    assert all(r["num_finished"] + r["num_rejected"] == 60 for r in rows)
    assert all("imbalance/requests_max_mean" in r for r in rows)
    assert (out / "attainment_vs_load.png").is_file()


@pytest.mark.slow  # a training of its own: the fast tier trains once (tests/trained_run.py)
def test_router_policy_acts_like_sb3_on_the_cluster_env(router_run: Path) -> None:
    import gymnasium as gym
    from sb3_contrib import MaskablePPO

    import llmsched_env  # noqa: F401

    model = MaskablePPO.load(str(router_run / "best_model.zip"), device="cpu")
    policy = load_policy_file(router_run)
    env = gym.make("LLMSchedCluster-v0", scenario="cluster-azure-conv-4", num_requests=40).unwrapped
    obs, _ = env.reset(seed=3)
    for _ in range(30):
        mask = env.action_masks()
        ours = policy.act(obs, mask)
        theirs, _ = model.predict(obs, action_masks=mask, deterministic=True)
        assert int(ours[0]) == int(np.asarray(theirs).item())
        obs, _, done, _, _ = env.step(ours)
        if done:
            break


@pytest.mark.slow  # a training of its own: the fast tier trains once (tests/trained_run.py)
def test_policies_and_scenarios_must_match_in_kind(router_run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cases = [
        (["--scenarios", "cluster-azure-conv-4", "--policies", "fcfs"], "single-node schedulers"),
        (["--scenarios", "mixed-slo", "--policies", "round_robin"], "routers"),
        (["--scenarios", "mixed-slo,cluster-mooncake-4", "--policies", "fcfs"], "separately"),
        (["--scenarios", "mixed-slo", "--policies", f"r={router_run}"], "does not fit"),
        (["--scenarios", "cluster-azure-conv-8", "--policies", f"r={router_run}"], "action space mismatch"),
    ]
    for argv, message in cases:
        with pytest.raises(SystemExit):
            parse(argv)
        assert message in capsys.readouterr().err
