"""The one end-to-end training of the fast tier, run once per test session (the ``trained_run`` fixture of
``tests/conftest.py``): ``llmsched-train`` on mixed-slo with cloning and two DAgger rounds, periodic
evaluation, checkpoints and TensorBoard, then ``llmsched-evaluate`` on its exported policy, then ``--resume`` of
the run to a budget of 384 steps (after a copy of the folder as the training left it). ``tensorboard_scalars``
reads a run folder's events back."""

from __future__ import annotations

import contextlib
import io
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "ALGO_HP",
    "COMMON",
    "DAGGER_ROUNDS",
    "TINY",
    "TINY_TRAIN",
    "TrainedRun",
    "tensorboard_scalars",
    "train_once",
]

COMMON = [
    "--timesteps", "256", "--n-envs", "1", "--hp", "bc_steps=200", "--hp", "eval_freq=128", "--hp", "eval_episodes=1",
    "--hp", "env_kwargs.num_requests=30", "--hp", "env_kwargs.iterations_per_step=32", "--eval-baselines",
    "fcfs,slo_aware",
]  # fmt: skip
ALGO_HP = {
    "maskable_ppo": ["--hp", "n_steps=128", "--hp", "batch_size=64"],
    "ppo": ["--hp", "n_steps=128", "--hp", "batch_size=64"],
    "recurrent_ppo": ["--hp", "n_steps=128", "--hp", "batch_size=64"],
    "a2c": ["--hp", "n_steps=8"],
    "dqn": ["--hp", "learning_starts=64", "--hp", "batch_size=32"],
}
TINY = [*COMMON, *ALGO_HP["maskable_ppo"], "--no-progress"]
DAGGER_ROUNDS = 2  # the trained run's: its TensorBoard holds one agreement per round
TINY_TRAIN = [
    "--timesteps", "256", "--n-envs", "1", "--bc", "none", "--hp", "eval_freq=128", "--hp", "eval_episodes=1",
    "--hp", "n_steps=128", "--hp", "batch_size=64", "--hp", "env_kwargs.num_requests=30",
    "--hp", "env_kwargs.iterations_per_step=32", "--eval-baselines", "fcfs",
]  # fmt: skip


@dataclass(frozen=True)
class TrainedRun:
    """The run folder as the training left it (``out``, a copy) and what the training printed (``stdout``,
    ``stderr``: status lines and bars); ``evaluated``: ``llmsched-evaluate``'s results folder for fcfs and the
    exported policy; ``resumed``: the run folder after ``--resume --no-progress`` (``resumed_stderr``: what that
    printed on stderr)."""

    out: Path
    stdout: str
    stderr: str
    evaluated: Path
    resumed: Path
    resumed_stderr: str


def _run(main: Callable[[list[str]], int], argv: list[str]) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    assert code == 0, f"{argv}: exit {code}\n{err.getvalue()[-2000:]}"
    return out.getvalue(), err.getvalue()


def train_once(base: Path) -> TrainedRun:
    """Train, evaluate and resume under ``base`` (the checkpoint key under ``base/config``, not the user's)."""
    import torch

    from agents.cli import main as train_main
    from llmsched_env.commands.evaluate import main as evaluate_main

    torch.set_num_threads(1)
    saved = os.environ.get("XDG_CONFIG_HOME")
    os.environ["XDG_CONFIG_HOME"] = str(base / "config")
    try:
        run = base / "run"
        argv = ["--scenario", "mixed-slo", "--out", str(run)]
        dagger = ["--hp", f"bc_dagger={DAGGER_ROUNDS}"]
        stdout, stderr = _run(train_main, [*argv, *COMMON, *ALGO_HP["maskable_ppo"], *dagger])
        out = base / "trained"
        shutil.copytree(run, out)
        evaluated = base / "eval"
        policies = ["--policies", f"fcfs,agent={out}", "--scenarios", "mixed-slo", "--num-requests", "30"]
        _run(evaluate_main, [*policies, "--out", str(evaluated), "--no-plots", "--no-progress"])
        _, resumed_stderr = _run(train_main, [*argv, "--resume", *TINY, "--timesteps", "384"])  # 128 more
    finally:
        if saved is None:
            os.environ.pop("XDG_CONFIG_HOME", None)
        else:
            os.environ["XDG_CONFIG_HOME"] = saved
    return TrainedRun(out, stdout, stderr, evaluated, run, resumed_stderr)


def tensorboard_scalars(folder: Path) -> dict[str, dict[str, list[tuple[int, float]]]]:
    """Every scalar under ``folder`` (a run's ``tb/``): run (``clone``, ``run_1``) -> tag -> [(step, value)]."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    runs: dict[str, dict[str, list[tuple[int, float]]]] = {}
    for events in sorted({p.parent for p in folder.rglob("events.out.tfevents.*")}):
        acc = EventAccumulator(str(events), size_guidance={"scalars": 0})  # 0: every point, not a sample
        acc.Reload()
        tags = acc.Tags()["scalars"]
        runs[events.relative_to(folder).as_posix()] = {t: [(e.step, e.value) for e in acc.Scalars(t)] for t in tags}
    return runs
