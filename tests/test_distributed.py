"""Scale-out on Ray: evaluate.py --ray gives what the serial path gives (local Ray, 2 CPUs).

train.py --ray: tests/test_train.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("ray")

import evaluate

ROOT = Path(__file__).resolve().parents[1]


def _rows(folder: Path) -> list[dict]:
    rows = json.loads((folder / "results.json").read_text())
    return [{k: v for k, v in r.items() if k != "wall_s"} for r in rows]


def test_evaluate_on_ray_equals_the_serial_run(tmp_path: Path) -> None:
    grid = ["--policies", "fcfs,slo_aware,agent=policies/mixed-slo", "--scenarios", "mixed-slo",
            "--loads", "1,1.2", "--seeds", "0,1", "--num-requests", "60", "--no-plots"]  # fmt: skip
    assert evaluate.main([*grid, "--out", str(tmp_path / "serial")]) == 0
    assert evaluate.main([*grid, "--ray", "--ray-cpus", "2", "--out", str(tmp_path / "ray")]) == 0
    serial = _rows(tmp_path / "serial")
    assert len(serial) == 12 and _rows(tmp_path / "ray") == serial
    cap = ["--capacity", "--policies", "fcfs", "--scenarios", "bursty", "--num-requests", "60", "--no-plots"]
    assert evaluate.main([*cap, "--out", str(tmp_path / "cap_serial")]) == 0
    assert evaluate.main([*cap, "--ray", "local", "--ray-cpus", "2", "--out", str(tmp_path / "cap_ray")]) == 0
    assert _rows(tmp_path / "cap_ray") == _rows(tmp_path / "cap_serial")


def test_worker_command_line_drops_driver_options() -> None:
    argv = ["--policies", "fcfs", "--ray", "--seeds", "0", "--out", "x", "--no-plots", "--ray-cpus", "2"]
    assert evaluate._worker_argv(argv) == ["--policies", "fcfs", "--seeds", "0"]
    assert evaluate._worker_argv(["--ray", "ray://head:10001", "--out=x", "--loads", "1"]) == ["--loads", "1"]
