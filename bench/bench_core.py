"""Simulator and env speed: 10,000 requests with Azure-conversation lengths under the fcfs baseline.

    python bench/bench_core.py [--num-requests 10000] [--rate 8] [--env-steps 200000]
    python bench/bench_core.py --compare ce542b8 --repeats 3 --env-steps 100000   # side by side with a commit

Prints, on one core:
- the bare simulator loop (core only, the fcfs decision every iteration): iterations/s and requests/s;
- the closed loop through the env (observation, mask, the fcfs policy's act, env.step): steps/s;
- ``env.step`` with random masked actions: steps/s;
- peak RSS of the process.

``--compare REV`` runs the same bench on this tree and on commit ``REV`` (checked out in a temporary git
worktree, run with its own code) alternately, ``--repeats`` times each, in fresh processes, and prints each
figure's range on both and the ratio of their medians (this tree / REV): speed judged side by side, under the
same load. ``REV`` must have this bench with the same options and output lines.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import gymnasium as gym
import numpy as np
from timing import run_to_end

import baselines
import llmsched_env  # noqa: F401
from llmsched_env.costs.loader import load_cost_model
from llmsched_env.engine.config import SLO_CLASSES, EngineConfig, TenantConfig
from llmsched_env.sim.simulator import Simulator
from llmsched_env.workloads.scenarios import trace_path
from llmsched_env.workloads.workload import LengthDist, TenantWorkload, WorkloadConfig, generate, tenant_configs

TRACE = trace_path("azure-conv")


def azure_workload(num_requests: int, rate: float) -> WorkloadConfig:
    lengths = LengthDist.from_file(TRACE, max_prompt_len=8192, max_output_len=2048)
    tenant = TenantConfig("conv", SLO_CLASSES["chat"])
    return WorkloadConfig((TenantWorkload(tenant, rate, lengths),), num_requests=num_requests)


def bench_simulator(wl: WorkloadConfig, engine: EngineConfig) -> tuple[float, float, int]:
    cost = load_cost_model("llama3-8b-h100")
    requests = generate(wl, np.random.default_rng(0))
    env = gym.make("LLMSched-v1", workload=wl, engine=engine)
    policy = baselines.make("fcfs", env.unwrapped.policy_context())  # type: ignore[attr-defined]
    spec = env.unwrapped.action_spec  # type: ignore[attr-defined]
    sim = Simulator(engine, tenant_configs(wl), cost, requests)
    obs = np.zeros(env.observation_space.shape, dtype=np.float32)
    decision = spec.decode(policy.act(obs, spec.mask(sim.engine)))  # fcfs's knobs do not depend on state
    elapsed = run_to_end(sim, decision)
    m = sim.metrics()
    print(
        f"  simulated {m['duration_s']:.0f} s, {int(m['num_finished'])} finished, "
        f"slo_attainment {m['slo_attainment']:.3f}, kv_usage_mean {m['kv_usage_mean']:.2f}, "
        f"preemptions {int(m['preemptions'])}"
    )
    return sim.num_steps / elapsed, len(requests) / elapsed, sim.num_steps


def bench_env_policy(wl: WorkloadConfig, engine: EngineConfig) -> float:
    env = gym.make("LLMSched-v1", workload=wl, engine=engine)
    policy = baselines.make("fcfs", env.unwrapped.policy_context())  # type: ignore[attr-defined]
    obs, _ = env.reset(seed=0)
    masks = env.unwrapped.action_masks  # type: ignore[attr-defined]
    steps = 0
    t0 = time.perf_counter()
    done = False
    while not done:
        obs, _, term, trunc, _ = env.step(policy.act(obs, masks()))
        steps += 1
        done = term or trunc
    return steps / (time.perf_counter() - t0)


def bench_env_random(wl: WorkloadConfig, engine: EngineConfig, num_steps: int) -> float:
    env = gym.make("LLMSched-v1", workload=wl, engine=engine)
    spec = env.unwrapped.action_spec  # type: ignore[attr-defined]
    rng = np.random.default_rng(0)
    # Random actions drawn up front; each step applies the current mask (masked components take their only
    # valid option), so every action the env sees is valid.
    pool = np.stack([rng.integers(0, n, size=4096) for n in spec.nvec], axis=1)
    env.reset(seed=0)
    masks = env.unwrapped.action_masks  # type: ignore[attr-defined]
    project = spec.project
    t0 = time.perf_counter()
    for i in range(num_steps):
        _, _, term, trunc, _ = env.step(project(pool[i & 4095], masks()))
        if term or trunc:
            env.reset()
    return num_steps / (time.perf_counter() - t0)


# The figures compared: label -> the pattern of its output line (a number with thousands separators).
FIGURES = {
    "bare simulator loop, iterations/s": r"bare simulator loop \(fcfs\): ([\d,]+) iterations/s",
    "env closed loop, steps/s": r"env closed loop .*: ([\d,]+) steps/s",
    "env.step, random masked actions, steps/s": r"env.step with random masked actions: ([\d,]+) steps/s",
    "peak RSS, MB": r"peak RSS: ([\d,]+) MB",
}
ROOT = Path(__file__).resolve().parents[1]


def parse_figures(output: str) -> dict[str, float]:
    """The ``FIGURES`` in one run's output; ``ValueError`` naming the first one missing."""
    found = {}
    for label, pattern in FIGURES.items():
        match = re.search(pattern, output)
        if match is None:
            raise ValueError(f"no '{label}' figure in the bench's output:\n{output[-2000:]}")
        found[label] = float(match.group(1).replace(",", ""))
    return found


def _run(root: Path, bench_args: list[str]) -> dict[str, float]:
    """One run of ``root``'s bench_core.py in a fresh process on ``root``'s code, one thread."""
    env = {**os.environ, "PYTHONPATH": str(root), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    cmd = [sys.executable, str(root / "bench" / "bench_core.py"), *bench_args]
    done = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} (in {root}) failed:\n{done.stderr[-2000:]}")
    return parse_figures(done.stdout)


@contextlib.contextmanager
def worktree(rev: str) -> Iterator[Path]:
    """Commit ``rev`` checked out in a temporary git worktree (with ``../shared`` beside it, where older commits
    read the traces from), removed on exit."""
    with tempfile.TemporaryDirectory(prefix="llmsched-compare-") as tmp:
        other = Path(tmp) / "tree"
        shared = ROOT.parent / "shared"
        if shared.is_dir():
            (Path(tmp) / "shared").symlink_to(shared)
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(other), rev], check=True,
                       capture_output=True)  # fmt: skip
        try:
            yield other
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(other)], check=False,
                           capture_output=True)  # fmt: skip


def compare(rev: str, repeats: int, bench_args: list[str]) -> str:
    """Run the bench on this tree and on ``rev`` alternately, ``repeats`` times each; the table of figures."""
    with worktree(rev) as other:
        runs: dict[str, list[dict[str, float]]] = {"rev": [], "this": []}
        for i in range(repeats):
            for name, root in (("rev", other), ("this", ROOT)):
                runs[name].append(_run(root, bench_args))
                print(f"  run {i + 1}/{repeats} of {rev if name == 'rev' else 'this tree'} done", file=sys.stderr)
    return format_comparison(rev, runs["rev"], runs["this"])


def format_comparison(rev: str, theirs: list[dict[str, float]], mine: list[dict[str, float]]) -> str:
    """A Markdown table: each figure's range on ``rev`` and on this tree, and the ratio of the medians."""
    lines = [f"| figure | {rev} | this tree | this / {rev} (medians) |", "|---|---|---|---|"]
    for label in FIGURES:
        a, b = [r[label] for r in theirs], [r[label] for r in mine]
        ratio = statistics.median(b) / statistics.median(a)
        lines.append(f"| {label} | {_span(a)} | {_span(b)} | {ratio:.2f}x |")
    return "\n".join(lines)


def _span(values: list[float]) -> str:
    lo, hi = min(values), max(values)
    return f"{lo:,.0f}" if lo == hi else f"{lo:,.0f}-{hi:,.0f}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--num-requests", type=int, default=10_000)
    p.add_argument("--rate", type=float, default=10.0, help="arrival rate, req/s (the engine saturates near 10)")
    p.add_argument("--env-steps", type=int, default=200_000)
    p.add_argument("--compare", metavar="REV", help="run side by side with this git commit (see above)")
    p.add_argument("--repeats", type=int, default=3, help="with --compare: runs of each tree (default 3)")
    args = p.parse_args()
    if args.compare:
        if args.repeats < 1:
            p.error(f"--repeats must be >= 1, got {args.repeats}")
        bench_args = ["--num-requests", str(args.num_requests), "--rate", str(args.rate)]
        print(compare(args.compare, args.repeats, [*bench_args, "--env-steps", str(args.env_steps)]))
        return
    engine = EngineConfig()
    wl = azure_workload(args.num_requests, args.rate)
    print(f"workload: {args.num_requests} requests, Azure conv lengths, Poisson {args.rate} req/s; {engine}")
    its, rps, n = bench_simulator(wl, engine)
    print(f"bare simulator loop (fcfs): {its:,.0f} iterations/s, {rps:,.0f} requests/s ({n:,} iterations)")
    print(f"env closed loop (obs + mask + fcfs.act + env.step): {bench_env_policy(wl, engine):,.0f} steps/s")
    print(f"env.step with random masked actions: {bench_env_random(wl, engine, args.env_steps):,.0f} steps/s")
    print(f"peak RSS: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")


if __name__ == "__main__":
    main()
