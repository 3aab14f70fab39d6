"""The one end-to-end training of the fast tier, run once per test session (the ``trained_run`` fixture of
``tests/conftest.py``): ``llmsched-train`` on mixed-slo with cloning, periodic evaluation, checkpoints and
TensorBoard, then ``llmsched-evaluate`` on its exported policy, then ``--resume`` of the run to a budget of
384 steps (after a copy of the folder as the training left it)."""

from __future__ import annotations

import contextlib
import io
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

__all__ = ["ALGO_HP", "COMMON", "TINY", "TINY_TRAIN", "TrainedRun", "train_once"]

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
        stdout, stderr = _run(train_main, [*argv, *COMMON, *ALGO_HP["maskable_ppo"]])
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
