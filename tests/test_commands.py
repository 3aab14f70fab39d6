"""The commands: llmsched-evaluate runs baselines and writes results; train.py trains and saves a model."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import gymnasium as gym
import pytest
import torch

import train
from agents import SB3Policy
from llmsched_env.commands.evaluate import main, parse
from llmsched_env.envs.episode import run_episode
from llmsched_env.evaluation import run_grid


def test_evaluate_writes_one_row_per_policy_scenario_seed(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "res"
    argv = ["--policies", "fcfs,slo_aware", "--seeds", "0,1", "--num-requests", "40", "--out", str(out)]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "attain" in printed and "slo_aware" in printed
    with open(out / "results.csv") as f:
        rows = list(csv.DictReader(f))
    runs = [(r["policy"], r["seed"]) for r in rows]
    assert runs == [("fcfs", "0"), ("fcfs", "1"), ("slo_aware", "0"), ("slo_aware", "1")]
    keys = ("ttft_p99_s", "tpot_p50_s", "itl_p99_s", "e2el_p50_s", "slo_attainment", "goodput_rps", "jain_fairness")
    for key in keys:
        assert key in rows[0]
    assert all(float(r["num_requests"]) == 40 for r in rows)
    assert len(json.loads((out / "results.json").read_text())) == 4


def test_evaluate_is_deterministic_by_seed(tmp_path: Path) -> None:
    args = ["--policies", "random", "--seeds", "3", "--num-requests", "40", "--loads", "2"]
    a = run_grid(parse(args)[1]).rows
    b = run_grid(parse(args)[1]).rows
    drop = ("wall_s",)
    assert [{k: v for k, v in r.items() if k not in drop} for r in a] == [
        {k: v for k, v in r.items() if k not in drop} for r in b
    ]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--policies", "nope"], "unknown policy"),
        (["--scenarios", "nope"], "unknown scenario"),
        (["--seeds", "a,b"], "comma-separated list of int"),
        (["--num-requests", "0"], "--num-requests"),
    ],
)
def test_evaluate_rejects_bad_arguments(argv: list[str], message: str, capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit):
        parse(argv)
    assert message in capsys.readouterr().err


COMMON = [
    "--timesteps", "256", "--n-envs", "1", "--hp", "bc_steps=200", "--hp", "eval_freq=128", "--hp", "eval_episodes=1",
    "--hp", "env_kwargs.num_requests=30", "--hp", "env_kwargs.iterations_per_step=32", "--eval-baselines",
    "fcfs,slo_aware", "--no-progress",
]  # fmt: skip
ALGO_HP = {
    "maskable_ppo": ["--hp", "n_steps=128", "--hp", "batch_size=64"],
    "ppo": ["--hp", "n_steps=128", "--hp", "batch_size=64"],
    "recurrent_ppo": ["--hp", "n_steps=128", "--hp", "batch_size=64"],
    "a2c": ["--hp", "n_steps=8"],
    "dqn": ["--hp", "learning_starts=64", "--hp", "batch_size=32"],
}
TINY = COMMON + ALGO_HP["maskable_ppo"]


def _tags(folder: Path) -> set[str]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    tags: set[str] = set()
    for events in folder.rglob("events.out.tfevents.*"):
        acc = EventAccumulator(str(events))
        acc.Reload()
        tags |= set(acc.Tags()["scalars"])
    return tags


def test_train_writes_a_complete_run_folder(tmp_path: Path) -> None:
    torch.set_num_threads(1)
    out = tmp_path / "run"
    assert train.main(["--scenario", "mixed-slo", "--out", str(out), *TINY]) == 0
    for name in ("config.yml", "args.json", "command.txt", "model.zip", "best_model.zip", "policy.json",
                 "policy.safetensors", "summary.json", "bc.json"):  # fmt: skip
        assert (out / name).exists(), name
    assert any((out / "checkpoints").glob("model_*_steps.zip"))
    tags = _tags(out / "tb")
    assert {"episode/slo_attainment", "episode/goodput_rps", "episode/ttft_p99_s", "episode/jain_fairness"} <= tags
    assert {"eval/slo_attainment", "eval/attainment_over_best_baseline", "train/value_loss"} <= tags
    assert any(t.startswith("episode/tenant/") and t.endswith("/slo_attainment") for t in tags)
    config = (out / "config.yml").read_text()
    assert "bc_warmstart: slo_aware" in config and "num_requests: 30" in config
    # the SB3 model acts as a Policy on the env it was trained for
    policy = SB3Policy.load(out / "model.zip")
    env = gym.make("LLMSched-v0", scenario="mixed-slo", num_requests=30, iterations_per_step=32)
    assert run_episode(env, policy, seed=0)["num_requests"] == 30
    # evaluate.py loads the exported policy from the run folder and holds its actions as in training
    results = tmp_path / "eval"
    argv = [
        "--policies",
        f"fcfs,agent={out}",
        "--scenarios",
        "mixed-slo",
        "--num-requests",
        "30",
        "--out",
        str(results),
    ]
    assert main([*argv, "--no-plots"]) == 0
    with open(results / "results.csv") as f:
        rows = list(csv.DictReader(f))
    assert [r["policy"] for r in rows] == ["fcfs", "agent"]
    assert (
        float(rows[1]["num_iterations"]) > 0
        and json.loads((out / "policy.json").read_text())["iterations_per_step"] == 32
    )
    # resume continues from the latest checkpoint
    assert train.main(["--scenario", "mixed-slo", "--out", str(out), "--resume", *TINY]) == 0
    assert '"timesteps": 512' in (out / "summary.json").read_text()


@pytest.mark.parametrize("algo", ["ppo", "a2c", "dqn", "recurrent_ppo"])
def test_train_other_algorithms(tmp_path: Path, algo: str) -> None:
    torch.set_num_threads(1)
    out = tmp_path / algo
    assert train.main(["--scenario", "bursty", "--algo", algo, "--out", str(out), *COMMON, *ALGO_HP[algo]]) == 0
    assert (out / "model.zip").exists() and (out / "summary.json").exists()
    assert (out / "policy.json").exists() == (algo in ("ppo", "a2c"))  # MLP actor-critics export


def test_train_rejects_bad_arguments(capsys: pytest.CaptureFixture) -> None:
    for argv, message in (
        (["--out", "x", "--scenario", "nope"], "unknown scenario"),
        (["--out", "x", "--hp", "novalue"], "key=value"),
        (["--out", "x", "--bc", "nope"], "unknown --bc baseline"),
    ):
        with pytest.raises(SystemExit):
            train.parse_args(argv)
        assert message in capsys.readouterr().err


def test_loading_a_corrupt_model_is_a_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "model.zip"
    bad.write_bytes(b"not a zip")
    with pytest.raises(ValueError, match=str(bad)):
        SB3Policy.load(bad)
