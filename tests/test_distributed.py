"""Scale-out on Ray: llmsched-evaluate --ray and train.py --ray give what the serial paths give (local Ray, 2 CPUs)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

pytest.importorskip("ray")

import train
from llmsched_env.commands.evaluate import main
from llmsched_env.evaluation.distributed import ray_imap, strip_options

ROOT = Path(__file__).resolve().parents[1]
TINY_TRAIN = [
    "--timesteps", "256", "--n-envs", "1", "--bc", "none", "--hp", "eval_freq=128", "--hp", "eval_episodes=1",
    "--hp", "n_steps=128", "--hp", "batch_size=64", "--hp", "env_kwargs.num_requests=30",
    "--hp", "env_kwargs.iterations_per_step=32", "--eval-baselines", "fcfs",
]  # fmt: skip


def _rows(folder: Path) -> list[dict]:
    rows = json.loads((folder / "results.json").read_text())
    return [{k: v for k, v in r.items() if k != "wall_s"} for r in rows]


def test_evaluate_on_ray_equals_the_serial_run(tmp_path: Path) -> None:
    grid = ["--policies", "fcfs,slo_aware,agent=policies/mixed-slo", "--scenarios", "mixed-slo",
            "--loads", "1,1.2", "--seeds", "0,1", "--num-requests", "60", "--no-plots"]  # fmt: skip
    assert main([*grid, "--out", str(tmp_path / "serial")]) == 0
    assert main([*grid, "--ray", "--ray-cpus", "2", "--out", str(tmp_path / "ray")]) == 0
    serial = _rows(tmp_path / "serial")
    assert len(serial) == 12 and _rows(tmp_path / "ray") == serial
    cap = ["--capacity", "--policies", "fcfs", "--scenarios", "bursty", "--num-requests", "60", "--no-plots"]
    assert main([*cap, "--out", str(tmp_path / "cap_serial")]) == 0
    assert main([*cap, "--ray", "local", "--ray-cpus", "2", "--out", str(tmp_path / "cap_ray")]) == 0
    assert _rows(tmp_path / "cap_ray") == _rows(tmp_path / "cap_serial")


def test_strip_options_drops_driver_options() -> None:
    drop = {"with_value": ("--out", "--ray-cpus"), "optional_value": ("--ray",), "flags": ("--no-plots",)}
    argv = ["--policies", "fcfs", "--ray", "--seeds", "0", "--out", "x", "--no-plots", "--ray-cpus", "2"]
    assert strip_options(argv, **drop) == ["--policies", "fcfs", "--seeds", "0"]
    assert strip_options(["--ray", "ray://head:10001", "--out=x", "--loads", "1"], **drop) == ["--loads", "1"]


def test_ray_imap_yields_each_result_as_its_task_ends() -> None:
    jobs = [(3.0,), (0.0,)]  # the second task ends first
    # a lambda travels by value (cloudpickle), so the workers need not import this test module
    assert list(ray_imap(lambda s: time.sleep(s), jobs, num_cpus=2)) == [(1, None), (0, None)]


def test_train_sweep_on_ray_equals_serial_trainings(tmp_path: Path) -> None:
    serial = tmp_path / "serial"
    assert (
        train.main(["--scenario", "mixed-slo", "--seed", "1", "--out", str(serial), "--no-progress", *TINY_TRAIN]) == 0
    )
    sweep = tmp_path / "sweep"
    argv = ["--scenarios", "mixed-slo", "--seeds", "1", "--ray", "--ray-cpus", "2", "--out", str(sweep), *TINY_TRAIN]
    assert train.main(argv) == 0
    results = json.loads((sweep / "sweep.json").read_text())
    assert [Path(r["out"]).name for r in results] == ["mixed-slo-seed1"]
    for r in results:
        run = Path(r["out"])
        assert r["returncode"] == 0 and (run / "policy.safetensors").is_file() and (run / "train.log").is_file()
        assert list((run / "tb").rglob("events.out.tfevents.*"))
    sha = json.loads((serial / "policy.json").read_text())["tensors_sha256"]
    assert json.loads((sweep / "mixed-slo-seed1" / "policy.json").read_text())["tensors_sha256"] == sha


def test_train_sweep_names_runs_per_trial(tmp_path: Path) -> None:
    args = train.parse_args(
        ["--scenarios", "mixed-slo,bursty", "--seeds", "0,1", "--hp-grid", "learning_rate=1e-4,3e-4", "--out", "r"]
    )
    runs = train.sweep_runs(args)
    assert len(runs) == 8
    out, cmd = runs[1]
    assert out.name == "mixed-slo-seed0-learning_rate=3e-4"
    assert cmd[cmd.index("--hp") + 1] == "learning_rate=3e-4" and "--scenarios" not in cmd
