"""Training: the command line (agents.cli, train.py) and the library (agents.training) write a complete run
folder, say what they do on stderr before training starts (silent with --no-progress), resume, train every
algorithm, and run sweeps serially or on Ray with the serial result."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import gymnasium as gym
import pytest
import torch

from agents import SB3Policy
from agents.cli import main as train_main
from agents.train_config import TrainConfig
from agents.training import BC_EPOCHS, train, val_window_note
from llmsched_env.envs.episode import run_episode
from tests.test_tensorboard import undocumented
from tests.trained_run import ALGO_HP, COMMON, DAGGER_ROUNDS, TINY_TRAIN, TrainedRun, tensorboard_scalars

STATUS = ("building 1 envs", "cloning the baseline slo_aware", "evaluating the baselines fcfs, slo_aware",
          "evaluating the start policy", "training maskable_ppo for 256 steps")  # fmt: skip


def test_train_writes_a_complete_run_folder(trained_run: TrainedRun) -> None:
    out = trained_run.out
    assert "behaviour cloning from slo_aware" in trained_run.stdout and "trained 256 steps" in trained_run.stdout
    summary_line = next(line for line in trained_run.stdout.splitlines() if line.startswith("trained 256 steps"))
    assert all(word in summary_line for word in ("cloning", "evaluations", "maskable_ppo", "the rest"))
    for name in ("config.yml", "args.json", "command.txt", "model.zip", "best_model.zip", "policy.json",
                 "policy.safetensors", "summary.json", "bc.json"):  # fmt: skip
        assert (out / name).exists(), name
    assert any((out / "checkpoints").glob("model_*_steps.zip"))
    summary = json.loads((out / "summary.json").read_text())  # every phase counted, none larger than the whole
    parts = [summary[k] for k in ("clone_wall_s", "eval_wall_s", "learn_wall_s")]
    assert min(parts) >= 0 and summary["clone_wall_s"] > 0 and sum(parts) <= summary["total_wall_s"]
    assert (out / "command.txt").read_text().startswith("llmsched-train --scenario mixed-slo")
    config = (out / "config.yml").read_text()
    assert "bc_warmstart: slo_aware" in config and "num_requests: 30" in config
    assert json.loads((out / "policy.json").read_text())["iterations_per_step"] == 32


def test_the_training_logs_tensorboard_tags(trained_run: TrainedRun) -> None:
    runs = tensorboard_scalars(trained_run.out / "tb")
    assert set(runs) == {"clone", "run_1"}  # the cloning on its own axis, beside learning's
    tags = runs["run_1"]
    assert {"episode/slo_attainment", "episode/goodput_rps", "episode/ttft_p99_s", "episode/jain_fairness"} <= set(tags)
    assert {"rollout/ep_rew_mean", "time/fps", "train/value_loss"} <= set(tags)
    assert any(t.startswith("episode/tenant/") and t.endswith("/slo_attainment") for t in tags)
    assert "eval/mean_slo_attainment" not in tags  # it was eval/slo_attainment again


def _steps(series: list[tuple[int, float]]) -> list[int]:
    return [step for step, _ in series]


def test_evaluations_are_logged_at_the_consoles_steps_with_ttft_and_tpot(trained_run: TrainedRun) -> None:
    tags = tensorboard_scalars(trained_run.out / "tb")["run_1"]
    console = [int(step) for step in re.findall(r"^eval @ (\d+):", trained_run.stdout, re.MULTILINE)]
    history = json.loads((trained_run.out / "summary.json").read_text())["eval_history"]
    assert console == [0, 128, 256] == [step for step, _ in history]
    assert tags["eval/slo_attainment"] == [(step, pytest.approx(value)) for step, value in history]
    for key in ("ttft_p50_s", "ttft_p99_s", "tpot_p50_s", "tpot_p99_s", "best_baseline_attainment"):
        assert _steps(tags[f"eval/{key}"]) == console and all(v > 0 for _, v in tags[f"eval/{key}"]), key
    assert all(p50 <= p99 for (_, p50), (_, p99) in zip(tags["eval/ttft_p50_s"], tags["eval/ttft_p99_s"], strict=True))
    # each PPO update at the step of the rollout it learnt from (n_steps=128), the last one included
    assert _steps(tags["train/value_loss"]) == _steps(tags["time/fps"]) == [128, 256]


def test_the_cloning_and_each_dagger_round_are_logged_per_epoch(trained_run: TrainedRun) -> None:
    clone = tensorboard_scalars(trained_run.out / "tb")["clone"]
    bc = json.loads((trained_run.out / "bc.json").read_text())
    rounds, epochs = bc["dagger"], BC_EPOCHS * (1 + bc["dagger"])
    assert rounds == DAGGER_ROUNDS
    for tag in ("policy_loss", "value_loss", "entropy", "accuracy", "accuracy/queue_order", "accuracy/shed"):
        assert _steps(clone[f"clone/{tag}"]) == list(range(1, epochs + 1)), tag
    assert all(0 <= v <= 1 for t, series in clone.items() if "accuracy" in t for _, v in series)
    losses = [v for _, v in clone["clone/policy_loss"]]
    assert losses[-1] < losses[0]  # it converges: the fit lowers its loss
    # one agreement per DAgger round, at the epochs its clone had been fitted for: bc.json's
    agreements = [(BC_EPOCHS * r, pytest.approx(bc[f"dagger{r}_agreement"])) for r in range(1, rounds + 1)]
    assert clone["clone/dagger_agreement"] == agreements
    starts = [BC_EPOCHS * r for r in range(rounds + 1)]
    assert clone["clone/labelled_steps"] == [(step, 200.0 * (r + 1)) for r, step in enumerate(starts)]
    assert _steps(clone["clone/collect_s"]) == starts  # a round's figures at its start; its fit's at its end
    assert _steps(clone["clone/fit_s"]) == [step + BC_EPOCHS for step in starts]
    assert clone["clone/final_accuracy"] == [(epochs, pytest.approx(bc["bc_accuracy"]))]


def test_the_trained_model_and_its_export_serve_episodes(trained_run: TrainedRun) -> None:
    torch.set_num_threads(1)
    policy = SB3Policy.load(trained_run.out / "model.zip")  # the SB3 model acts as a Policy on its env
    env = gym.make("LLMSched-v1", scenario="mixed-slo", num_requests=30, iterations_per_step=32)
    assert run_episode(env, policy, seed=0)["num_requests"] == 30
    # evaluate.py loaded the exported policy from the run folder and held its actions as in training
    with open(trained_run.evaluated / "results.csv") as f:
        rows = list(csv.DictReader(f))
    assert [r["policy"] for r in rows] == ["fcfs", "agent"]
    assert float(rows[1]["num_iterations"]) > 0


def test_resume_continues_from_the_latest_signed_checkpoint_silently(trained_run: TrainedRun) -> None:
    checkpoints = list((trained_run.out / "checkpoints").glob("model_*_steps.zip"))
    assert checkpoints and all(p.with_name(p.name + ".sig").exists() for p in checkpoints)  # each one signed
    summary = json.loads((trained_run.resumed / "summary.json").read_text())
    assert summary["timesteps"] == 384  # the budget asked for, not 256 more than the checkpoint's 256
    first = json.loads((trained_run.out / "summary.json").read_text())["eval_history"]
    assert [step for step, _ in first] == [0, 128, 256]
    assert summary["eval_history"][:3] == first  # the evaluations from before the resume are kept
    assert [step for step, _ in summary["eval_history"]] == [0, 128, 256, 384]
    assert (trained_run.resumed / "complete.json").is_file() and (trained_run.out / "complete.json").is_file()
    # --no-progress: no status line, no bar; only the warning that its 30-request val window is no sustained load
    warning = "periodic evaluation at eval_load 1.2: 1 of 1 val windows not sustained: seed 0's 30 requests arrive"
    lines = trained_run.resumed_stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(warning), trained_run.resumed_stderr
    assert lines[0].endswith("the checkpoints are compared on windows too short to hold that load")


def test_the_periodic_evaluation_says_when_its_val_windows_are_not_sustained() -> None:
    def val_env(n: int) -> gym.Env:
        return gym.make("LLMSched-v1", scenario="bursty", num_requests=n, split="val", load=1.2)

    assert val_window_note(val_env(600), [0, 1, 2], 1.2) is None
    note = val_window_note(val_env(20), [0, 1], 1.2)
    assert note is not None and note.startswith("2 of 2 val windows not sustained: seed ")
    assert "or at load 1.2 with about --hp eval_num_requests=" in note  # the val episodes' own size


def test_status_lines_come_on_stderr_before_training_starts(trained_run: TrainedRun) -> None:
    at = [trained_run.stderr.find(line) for line in STATUS]
    assert all(i >= 0 for i in at) and at == sorted(at), trained_run.stderr
    bar = trained_run.stderr.find("training:")  # the bar over training steps
    assert bar > at[-1] and "cloning slo_aware:" in trained_run.stderr and "baselines:" in trained_run.stderr
    assert not any(line in trained_run.stdout for line in STATUS)  # stdout holds results only


@pytest.mark.slow
@pytest.mark.parametrize("algo", ["ppo", "a2c", "dqn", "recurrent_ppo"])
def test_train_other_algorithms(tmp_path: Path, algo: str) -> None:
    torch.set_num_threads(1)
    out = tmp_path / algo
    argv = ["--scenario", "bursty", "--algo", algo, "--out", str(out), *COMMON, *ALGO_HP[algo], "--no-progress"]
    assert train_main(argv) == 0
    assert (out / "model.zip").exists() and (out / "summary.json").exists()
    assert (out / "policy.json").exists() == (algo in ("ppo", "a2c"))  # MLP actor-critics export
    written = {tag for tags in tensorboard_scalars(out / "tb").values() for tag in tags}
    assert {"eval/slo_attainment", "train/learning_rate"} <= written and undocumented(written) == set()


@pytest.mark.slow  # a training of its own: the fast tier trains once (tests/trained_run.py)
def test_the_library_trains_without_the_command_line(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    hp = {"n_steps": 128, "batch_size": 64, "eval_freq": 128, "eval_episodes": 1, "eval_num_requests": 40}
    hp["env_kwargs"] = {"num_requests": 30, "iterations_per_step": 32}
    config = TrainConfig(scenario="bursty", timesteps=128, n_envs=1, bc="none", hp=hp, eval_baselines=("fcfs",),
                         out=tmp_path / "lib", progress=False)  # fmt: skip
    run = train(config)
    err = capsys.readouterr().err  # progress=False: nothing but the warning about its 30-request val window
    assert run == tmp_path / "lib"
    assert all(line.startswith("periodic evaluation at eval_load") for line in err.splitlines()), err
    assert "seed 0's 40 requests arrive" in err  # the val episodes have their own size
    assert json.loads((run / "best.json").read_text())["eval_env"]["num_requests"] == 40
    summary = json.loads((run / "summary.json").read_text())
    assert summary["timesteps"] == 128 and set(summary["baseline_attainment"]) == {"fcfs"}
    assert json.loads((run / "args.json").read_text())["hp"]["env_kwargs"]["num_requests"] == 30
    assert not (run / "bc.json").exists() and (run / "policy.safetensors").is_file()


@pytest.mark.slow
def test_train_sweep_runs_one_training_per_trial_serially(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    sweep = tmp_path / "sweep"
    argv = ["--scenarios", "mixed-slo", "--seeds", "1", "--hp-grid", "gamma=0.99,0.995", "--out", str(sweep)]
    assert train_main([*argv, *TINY_TRAIN]) == 0
    printed = capsys.readouterr()
    assert printed.out.count("exit 0, best evaluation attainment") == 2  # one line per finished training
    assert "2 trainings, one after the other" in printed.err
    results = json.loads((sweep / "sweep.json").read_text())
    assert [Path(r["out"]).name for r in results] == ["mixed-slo-seed1-gamma=0.99", "mixed-slo-seed1-gamma=0.995"]
    gammas = [json.loads((Path(r["out"]) / "args.json").read_text())["hp"]["gamma"] for r in results]
    assert gammas == [0.99, 0.995] and all(r["summary"]["timesteps"] == 256 for r in results)


@pytest.mark.slow
def test_train_sweep_on_ray_equals_serial_trainings(tmp_path: Path) -> None:
    pytest.importorskip("ray")
    serial = tmp_path / "serial"
    argv = ["--scenario", "mixed-slo", "--seed", "1", "--out", str(serial), "--no-progress", *TINY_TRAIN]
    assert train_main(argv) == 0
    sweep = tmp_path / "sweep"
    argv = ["--scenarios", "mixed-slo", "--seeds", "1", "--workers", "2", "--out", str(sweep), *TINY_TRAIN]
    assert train_main(argv) == 0
    results = json.loads((sweep / "sweep.json").read_text())
    assert [Path(r["out"]).name for r in results] == ["mixed-slo-seed1"]
    for r in results:
        run = Path(r["out"])
        assert r["returncode"] == 0 and (run / "policy.safetensors").is_file() and (run / "train.log").is_file()
        assert list((run / "tb").rglob("events.out.tfevents.*"))
    sha = json.loads((serial / "policy.json").read_text())["tensors_sha256"]
    assert json.loads((sweep / "mixed-slo-seed1" / "policy.json").read_text())["tensors_sha256"] == sha


def test_tenant_tags_only_where_a_tenants_name_means_one_tenant() -> None:
    from agents.callbacks import log_metrics
    from agents.train_config import TrainConfig
    from agents.training import named_tenants

    metrics = {"slo_attainment": 0.9, "tenant/chat/slo_attainment": 1.0, "tenant/x7f3q/slo_attainment": 0.5}
    recorded: dict[str, float] = {}
    log_metrics(recorded.__setitem__, "episode", metrics, named_tenants(TrainConfig(scenario="generalist")))
    assert recorded == {"episode/slo_attainment": 0.9}  # a new workload every episode: `chat` is not one tenant
    recorded.clear()
    log_metrics(recorded.__setitem__, "episode", metrics, named_tenants(TrainConfig(scenario="mixed-slo")))
    assert "episode/tenant/x7f3q/slo_attainment" in recorded  # one scenario: every tenant is its own
