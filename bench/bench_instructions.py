"""Instructions per step, counted by valgrind: a speed figure that does not move with the machine's load.

    python bench/bench_instructions.py                      # this tree
    python bench/bench_instructions.py --compare ce542b8    # this tree and a commit, side by side

On a shared machine wall-clock figures spread widely (``bench_core.py --compare`` saw a single tree's runs
differ by up to 60% on 2026-12-03), so the speed work also reads the instructions the interpreter executes,
which valgrind's cachegrind counts exactly and which do not depend on what else runs. Each figure is
``(instructions of a run that plays N steps - instructions of the same run with 0 steps) / N``, on the first
N steps of a 1,500-request episode with Azure-conversation lengths, Poisson 10 req/s, the default engine:

- ``sim``: the bare simulator loop under ``fcfs``'s constant decision (``Simulator.step``);
- ``policy``: the env closed loop (``fcfs.act`` on the observation and mask, ``env.step``);
- ``env``: ``env.step`` with random masked actions (``ActionSpec.project`` on ``action_masks()``).

Instructions are not time (memory stalls are not counted, and the C code of numpy and of the interpreter
costs differently per instruction), but on this pure-Python loop they follow it closely. A commit is read
with its own code and its own ``bench/bench_core.py`` (its ``azure_workload``), so any commit since the bench
existed can be compared. Needs ``valgrind`` on the PATH; each figure takes about a minute.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from bench_core import ROOT, worktree

MODES = ("sim", "policy", "env")
STEPS = {"sim": 8000, "policy": 3000, "env": 3000}

# Run as `python -c INNER TREE MODE N` with PYTHONPATH=TREE: the tree's own code and its own bench_core.
INNER = """
import sys
tree, mode, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
sys.path.insert(0, tree + "/bench")
import numpy as np, gymnasium as gym
import bench_core as bc, baselines
env = gym.make("LLMSched-v1", workload=bc.azure_workload(1500, 10.0), engine=bc.EngineConfig())
u = env.unwrapped
spec = u.action_spec
rng = np.random.default_rng(0)
pool = np.stack([rng.integers(0, k, size=4096) for k in spec.nvec], axis=1)
obs, _ = env.reset(seed=0)
policy = baselines.make("fcfs", u.policy_context())
if mode == "env":
    for i in range(n):
        env.step(spec.project(pool[i & 4095], u.action_masks()))
elif mode == "policy":
    for i in range(n):
        obs = env.step(policy.act(obs, u.action_masks()))[0]
else:
    sim = u.sim
    decision = spec.decode(policy.act(obs, spec.mask(sim.engine)))
    for i in range(n):
        if sim.done:
            raise SystemExit("the episode ended before the steps asked for")
        sim.step(decision)
"""


def parse_refs(output: str) -> int:
    """The instruction count (``I refs``) in cachegrind's report; ValueError when there is none."""
    match = re.search(r"I\s+refs:\s+([\d,]+)", output)
    if match is None:
        raise ValueError(f"no instruction count in valgrind's output:\n{output[-2000:]}")
    return int(match.group(1).replace(",", ""))


def count(tree: Path, mode: str, steps: int) -> int:
    """Instructions of one run of ``mode`` for ``steps`` steps on ``tree``'s code."""
    env = {**os.environ, "PYTHONPATH": str(tree), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    cmd = ["valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null",
           sys.executable, "-c", INNER, str(tree), mode, str(steps)]  # fmt: skip
    done = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{mode} on {tree} failed:\n{done.stderr[-2000:]}")
    return parse_refs(done.stderr)


def per_step(tree: Path, mode: str, steps: int) -> float:
    """Instructions per step of ``mode`` on ``tree``: the run's count less that of the same run with no step."""
    return (count(tree, mode, steps) - count(tree, mode, 0)) / steps


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--compare", metavar="REV", help="also count commit REV's code, side by side")
    p.add_argument("--modes", default=",".join(MODES), help=f"comma-separated, of {', '.join(MODES)}")
    args = p.parse_args()
    modes = args.modes.split(",")
    if unknown := [m for m in modes if m not in MODES]:
        p.error(f"--modes: unknown {', '.join(unknown)} (known: {', '.join(MODES)})")
    if shutil.which("valgrind") is None:
        p.error("valgrind is not on the PATH (Debian/Ubuntu: apt install valgrind)")
    if not args.compare:
        for mode in modes:
            print(f"{mode}: {per_step(ROOT, mode, STEPS[mode]):,.0f} instructions/step")
        return
    with worktree(args.compare) as other:
        print(f"| figure | {args.compare} | this tree | {args.compare} / this (speed-up) |")
        print("|---|---|---|---|")
        for mode in modes:
            theirs, mine = per_step(other, mode, STEPS[mode]), per_step(ROOT, mode, STEPS[mode])
            print(f"| {mode}, instructions/step | {theirs:,.0f} | {mine:,.0f} | {theirs / mine:.2f}x |", flush=True)


if __name__ == "__main__":
    main()
