"""The two bench scripts behind the generalist's checkpoint selection on val: exporting a checkpoint as a policy
folder (``bench/export_checkpoint.py``) and ranking candidates by capacity relative to ``tuned``
(``bench/ratio_to_tuned.py``)."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

from agents.cli import main as train_main
from agents.sb3 import ALGOS
from llmsched_env.runtime.policy_file import load_policy_file
from tests.bench_scripts import bench_script


@pytest.mark.slow  # a training of its own: the fast tier trains once (tests/trained_run.py)
def test_an_exported_checkpoint_acts_as_the_model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    torch.set_num_threads(1)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    run = tmp_path / "run"
    train_main([
        "--scenario", "mixed-slo", "--timesteps", "256", "--n-envs", "1", "--bc", "none", "--hp", "eval_freq=128",
        "--hp", "eval_episodes=1", "--hp", "n_steps=128", "--hp", "batch_size=64", "--hp",
        "env_kwargs.num_requests=30", "--hp", "env_kwargs.iterations_per_step=32", "--eval-baselines", "fcfs",
        "--no-progress", "--out", str(run), "--seed", "3",
    ])  # fmt: skip
    checkpoint = sorted((run / "checkpoints").glob("model_*_steps.zip"))[-1]
    steps = bench_script("export_checkpoint").export_checkpoint(checkpoint, tmp_path / "exported")
    policy = load_policy_file(tmp_path / "exported")
    assert policy.meta["timesteps"] == steps and policy.meta["seed"] == 3
    assert policy.meta["iterations_per_step"] == 32 and policy.meta["scenario"] == "mixed-slo"
    model = ALGOS["maskable_ppo"].load(str(checkpoint), device="cpu")
    env = gym.make("LLMSched-v1", scenario="mixed-slo", num_requests=30, load=2.0)
    obs, _ = env.reset(seed=0)
    for _ in range(20):
        mask = env.unwrapped.action_masks()
        mine = model.predict(obs, deterministic=True, action_masks=mask)[0]
        np.testing.assert_array_equal(policy.act(obs, mask), mine)
        obs, _, terminated, truncated, _ = env.step(mine)
        if terminated or truncated:
            break


def test_ratio_to_tuned_ranks_by_paired_ratios(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    rows = [("tuned", "a", 0, 2.0), ("tuned", "a", 1, 4.0), ("x", "a", 0, 1.0), ("x", "a", 1, 4.0),
            ("tuned", "b", 0, 1.0), ("x", "b", 0, 1.5), ("y", "c", 0, 9.0)]  # fmt: skip
    path = tmp_path / "results.csv"
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["policy", "scenario", "seed", "capacity_load", "capacity_rps"])
        w.writerows([(*r, 0.0) for r in rows])
    script = bench_script("ratio_to_tuned")
    assert script.ratios([path], "tuned") == {"x": {"a": 0.75, "b": 1.5}}  # y has no tuned beside it: left out
    monkeypatch.setattr("sys.argv", ["ratio_to_tuned.py", str(path)])
    script.main()
    geo = math.sqrt(0.75 * 1.5)
    assert f"| `x` | {geo:.3f} | a 0.750 |" in capsys.readouterr().out


def test_per_seed_results_are_read_with_errors_that_name_the_file(tmp_path: Path) -> None:
    from llmsched_env.evaluation.capacity import read_per_seed

    first, second = tmp_path / "a.csv", tmp_path / "b.csv"
    first.write_text("policy,scenario,seed,capacity_load\nfcfs,x,0,1.5\nfcfs,x,1,2.0\n")
    second.write_text("policy,scenario,seed,capacity_load\nfcfs,x,1,3.0\nsjf,y,0,0.5\n")
    assert read_per_seed([first, second]) == {"x": {"fcfs": {0: 1.5, 1: 3.0}}, "y": {"sjf": {0: 0.5}}}
    with pytest.raises(ValueError, match=r"nope\.csv: no such file"):
        read_per_seed([tmp_path / "nope.csv"])
    (bad := tmp_path / "bad.csv").write_text("policy,scenario,seed,capacity_load\nfcfs,x,zero,1.5\n")
    with pytest.raises(ValueError, match=r"bad.csv:2: seed or capacity_load is not a number"):
        read_per_seed([bad])
    (old := tmp_path / "old.csv").write_text("policy,scenario,capacity_load\nfcfs,x,1.5\n")
    with pytest.raises(ValueError, match=r"old\.csv: no seed"):
        read_per_seed([old])
