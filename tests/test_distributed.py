"""Scale-out: llmsched-evaluate --ray gives what the serial path gives (2 local worker processes); a sweep's
line per training comes as that training ends; the local pool listens on no network port and never starts Ray.

Training sweeps on Ray with real trainings: tests/test_train.py.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any, TextIO

import pytest

from agents import sweep
from agents.train_config import TrainConfig
from llmsched_env.commands.evaluate import main
from llmsched_env.evaluation.distributed import ray_imap

ROOT = Path(__file__).resolve().parents[1]


def _rows(folder: Path) -> list[dict]:
    rows = json.loads((folder / "results.json").read_text())
    return [{k: v for k, v in r.items() if k != "wall_s"} for r in rows]


@pytest.mark.slow
def test_evaluate_on_ray_equals_the_serial_run(tmp_path: Path) -> None:
    fixture = Path(__file__).resolve().parent / "data" / "policies" / "mixed-slo"  # a policy file, run on Ray too
    grid = ["--policies", f"fcfs,slo_aware,agent={fixture}", "--scenarios", "mixed-slo",
            "--loads", "1,1.2", "--seeds", "0,1", "--num-requests", "60", "--no-plots"]  # fmt: skip
    assert main([*grid, "--out", str(tmp_path / "serial")]) == 0
    assert main([*grid, "--workers", "2", "--out", str(tmp_path / "ray")]) == 0
    serial = _rows(tmp_path / "serial")
    assert len(serial) == 12 and _rows(tmp_path / "ray") == serial
    cap = ["--capacity", "--policies", "fcfs", "--scenarios", "bursty", "--num-requests", "60", "--no-plots"]
    assert main([*cap, "--out", str(tmp_path / "cap_serial")]) == 0
    assert main([*cap, "--workers", "2", "--out", str(tmp_path / "cap_ray")]) == 0
    assert _rows(tmp_path / "cap_ray") == _rows(tmp_path / "cap_serial")


def _when(marker: str, timeout_s: float = 120.0) -> None:
    """A task that ends only once ``marker`` exists. The driver creates it when it has reported the other task's
    result, so the order in which the results come is set, not a race: a marker made by the other task itself
    would still let this one's result reach the driver first (the other, descheduled on a busy machine between
    making it and sending its result, failed 2 runs in 10 beside two busy processes on 2 cores). Where the driver
    reported nothing before all tasks ended, this one times out and its error ends the run."""
    deadline = time.monotonic() + timeout_s
    while not Path(marker).exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{marker} never appeared: the driver reported nothing while this task ran")
        time.sleep(0.01)


def test_ray_imap_yields_each_result_as_its_task_ends(tmp_path: Path) -> None:
    marker = str(tmp_path / "second-reported")
    jobs = [(marker, True), (marker, False)]  # the first task ends only once the second's result has come
    # a lambda travels by value (cloudpickle), so the workers need not import this test module
    results = ray_imap(lambda m, wait: _when(m) if wait else None, jobs, num_cpus=2)
    first = next(results)
    Path(marker).touch()
    assert (first, list(results)) == ((1, None), [(0, None)])


class _MarkingStdout:
    """stdout that creates ``marker`` once a line holding ``needle`` has been written to it."""

    def __init__(self, stream: TextIO, needle: str, marker: str) -> None:
        self.stream, self.needle, self.marker = stream, needle, marker

    def write(self, text: str) -> int:
        written = self.stream.write(text)
        if self.needle in text:
            Path(self.marker).touch()
        return written

    def __getattr__(self, name: str) -> Any:  # flush, isatty, encoding, ...: the stream's
        return getattr(self.stream, name)


def test_a_ray_sweep_prints_each_training_as_it_ends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    marker = str(tmp_path / "seed1-printed")

    def fake_training(argv: list[str], cwd: str) -> dict:  # seed 0 ends only once seed 1's line is printed
        if argv[argv.index("--seed") + 1] == "0":
            _when(marker)
        return {"out": argv[argv.index("--out") + 1], "returncode": 0, "summary": {"best_eval_attainment": 0.5}}

    monkeypatch.setattr(sweep, "train_task", fake_training)  # a nested function travels by value, too
    configs = sweep.sweep_configs(TrainConfig(scenario="bursty"), tmp_path, seeds=[0, 1])
    with monkeypatch.context() as patch:  # undone before capsys restores the real stdout
        patch.setattr(sys, "stdout", _MarkingStdout(sys.stdout, "bursty-seed1:", marker))
        results = sweep.run_sweep(configs, tmp_path, ray="local", ray_cpus=2)
    assert [Path(r["out"]).name for r in results] == ["bursty-seed0", "bursty-seed1"]  # in the order of configs
    out, err = capsys.readouterr()
    lines = [line for line in out.splitlines() if "exit 0" in line]
    assert len(lines) == 2 and "bursty-seed1:" in lines[0] and "bursty-seed0:" in lines[1]  # as each ended
    assert "2 trainings in parallel" in err and "0/2 [" in err and "training/s" in err  # the bar counts trainings


def _listening_inodes() -> set[str]:
    """The socket inodes of every listening TCP socket on this machine (Linux /proc)."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        if os.path.exists(table):
            with open(table) as fh:
                for line in fh.readlines()[1:]:
                    fields = line.split()
                    if fields[3] == "0A":  # LISTEN
                        inodes.add(fields[9])
    return inodes


def _listeners_of_family() -> list[str]:
    """On a local worker: the listening TCP sockets held by the driver (this worker's parent) or any of its
    children (the pool's workers), as 'pid:inode'."""
    parent = os.getppid()
    pids = {parent}
    for task in os.listdir(f"/proc/{parent}/task"):
        with open(f"/proc/{parent}/task/{task}/children") as fh:
            pids.update(int(pid) for pid in fh.read().split())
    listening, found = _listening_inodes(), []
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:[") and target[8:-1] in listening:
                found.append(f"{pid}:{target[8:-1]}")
    return found


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_the_local_pool_listens_on_no_port_and_starts_no_ray(monkeypatch: pytest.MonkeyPatch) -> None:
    ray = pytest.importorskip("ray")

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("a local run must not start Ray (its servers listen on every interface)")

    monkeypatch.setattr(ray, "init", refuse)
    results = dict(ray_imap(_listeners_of_family, [(), ()], address="local", num_cpus=2))
    assert results == {0: [], 1: []}


@pytest.mark.parametrize("cpus", [0, -1, 1.5, True])
def test_a_bad_cpu_count_is_refused_before_anything_starts(cpus: object) -> None:
    with pytest.raises(ValueError, match="num_cpus must be an integer >= 1"):
        ray_imap(time.sleep, [(0.0,)], num_cpus=cpus)  # type: ignore[arg-type]


def test_bad_worker_counts_and_the_old_spellings_are_usage_errors_naming_the_new_one(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from agents.cli import main as train_main

    cases = [
        (["--workers", "0"], "--workers: must be >= 1"),
        (["--ray-cpus", "2"], "unrecognized arguments: --ray-cpus"),  # the old spelling: removed
        (["--ray"], "--ray needs the ADDRESS of a Ray cluster; for local worker processes give --workers N"),
        (["--workers", "2", "--ray", "10.0.0.1:6379"], "not both"),
    ]
    for command in (main, train_main):
        for argv, message in cases:
            with pytest.raises(SystemExit) as exc:
                command([*argv, "--num-requests", "5"] if command is main else [*argv, "--seeds", "0,1"])
            err = capsys.readouterr().err
            assert exc.value.code == 2 and message in err and "Traceback" not in err, (argv, err)


def test_a_ray_address_that_does_not_answer_is_one_usage_line_not_a_hang(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--ray`` to a port nothing listens on is refused at once; to a port that accepts connections and says
    nothing (no Ray cluster), within ``LLMSCHED_RAY_CONNECT_TIMEOUT_S`` (here 3 s), by both commands, in one
    usage line naming the address, before any run."""
    import socket
    import threading

    pytest.importorskip("ray")
    from agents.cli import main as train_main
    from llmsched_env.evaluation.distributed import check_ray_address

    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    dead = f"127.0.0.1:{closed.getsockname()[1]}"
    closed.close()  # bound then closed: nothing listens there
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    accepted: list[socket.socket] = []
    threading.Thread(target=lambda: [accepted.append(silent.accept()[0]) for _ in range(8)], daemon=True).start()
    mute = f"127.0.0.1:{silent.getsockname()[1]}"
    monkeypatch.setenv("LLMSCHED_RAY_CONNECT_TIMEOUT_S", "3")
    try:
        with pytest.raises(ValueError, match=f"--ray {dead}: cannot connect to 127.0.0.1"):
            check_ray_address(dead)
        for command in (main, train_main):
            argv = ["--ray", mute, "--num-requests", "5"] if command is main else ["--ray", mute, "--seeds", "0,1"]
            with pytest.raises(SystemExit) as exc:
                command(argv)
            err = capsys.readouterr().err
            last = err.strip().splitlines()[-1]
            assert exc.value.code == 2 and f"error: --ray {mute}: no Ray cluster answered within 3 s" in last, err
            assert "Traceback" not in err
        for bad in ("soon", "1e308", "0"):
            monkeypatch.setenv("LLMSCHED_RAY_CONNECT_TIMEOUT_S", bad)
            with pytest.raises(ValueError, match=f"LLMSCHED_RAY_CONNECT_TIMEOUT_S='{bad}': expected a number"):
                check_ray_address(mute)
    finally:
        silent.close()
        for conn in accepted:
            conn.close()
