"""What the version floors in pyproject.toml exist for, run as a user would: MaskablePPO trained over
``SubprocVecEnv`` workers (sb3-contrib before 2.6 fails here: its mask check pickles each worker's bound
``action_masks`` method), with the progress bars on (tqdm) and TensorBoard and safetensors written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import train


@pytest.mark.slow  # a training of its own: the fast tier trains once (tests/trained_run.py)
def test_maskable_ppo_trains_over_subprocess_workers(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    torch.set_num_threads(1)
    out = tmp_path / "run"
    argv = [
        "--scenario", "mixed-slo", "--algo", "maskable_ppo", "--out", str(out), "--timesteps", "128",
        "--n-envs", "2", "--vec-env", "subproc", "--bc", "none", "--eval-baselines", "fcfs",
        "--hp", "n_steps=64", "--hp", "batch_size=64", "--hp", "eval_freq=128", "--hp", "eval_episodes=1",
        "--hp", "env_kwargs.num_requests=20", "--hp", "env_kwargs.iterations_per_step=32",
    ]  # fmt: skip
    assert train.main(argv) == 0
    assert json.loads((out / "summary.json").read_text())["timesteps"] == 128
    assert (out / "policy.safetensors").is_file()
    assert any((out / "tb").rglob("events.out.tfevents.*"))
    assert "step/s" in capsys.readouterr().err  # a tqdm bar ran on stderr
