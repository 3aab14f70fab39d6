"""The adapter's overhead inside vLLM's real scheduler: policy decision time per vLLM step against vLLM's own
``schedule()`` time on the same steps.

    python bench/bench_vllm_adapter.py                  # needs the vllm extra (bench/vllm_check.sh builds one)
    python bench/bench_vllm_adapter.py --steps 600 --sizes 100,1000,3000

For each backlog size (requests of the ``default`` scenario's evaluation episode, all waiting at time 0) and
each policy (``fcfs``, ``slo_aware`` and the shipped generalist ``learned``, an MLP run in numpy), it runs
vLLM's scheduler in the loop (``adapters.vllm.loop``) for ``--steps`` steps and prints the mean time per step of
the adapter (observation encoding + action mask + ``act`` under its deadline + setting vLLM's knobs + shedding +
its bookkeeping around vLLM's calls) and of vLLM's own ``schedule()``, and their ratio. A trained
agent holds each decision for the ``iterations_per_step`` it was trained with (``hold``), as ``evaluate.py``
runs it. ``abort_us`` is the part of the adapter's time spent inside vLLM's ``finish_requests`` aborting the
requests shedding gave up on, freeing them included (vLLM's work done for the policy); ``overhead`` is all
adapter time over vLLM's ``schedule()``, ``decision`` the same without the aborts. Target: <= 10% at 100 and
1,000 requests.

``--hooks`` runs each policy once more with timers around the llmsched code that vLLM's own ``schedule()`` and
``update_from_output()`` call back (the policy's waiting queue, the admission/preemption/finish bookkeeping)
and prints ``hooks_us``, that time per step (timers included: an upper bound), counted above as vLLM's, and
``own+hooks``: the decision share with that time moved from vLLM's side to the adapter's, (adapter - abort +
hooks) / (vLLM - hooks).
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import baselines  # noqa: E402, F401  (registers the baselines where llmsched is not installed)
from llmsched_env.adapters.vllm import require_vllm  # noqa: E402
from llmsched_env.commands.evaluate_args import csv_list  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="100,1000", help="backlog sizes (requests waiting at time 0)")
    p.add_argument("--steps", type=int, default=400, help="vLLM steps timed per run")
    p.add_argument(
        "--policies",
        type=csv_list(str),
        default=["fcfs", "slo_aware", "learned"],
        help="as llmsched-evaluate names them",
    )
    p.add_argument("--hooks", action="store_true", help="also time the llmsched code vLLM's own calls run")
    args = p.parse_args()
    try:
        require_vllm()
    except RuntimeError as exc:
        raise SystemExit(f"bench_vllm_adapter: {exc}") from None
    import gymnasium as gym

    import llmsched_env  # noqa: F401

    # as vLLM's engine core does once it has started: what exists now (vLLM, torch, the package) is left out of
    # the garbage collector's full passes, which otherwise stopped one step for about 0.3 s here, charged to
    # whichever part of the step happened to run then
    gc.collect()
    gc.freeze()

    print(
        f"{'policy':<12} {'hold':>4} {'requests':>8} {'steps':>6} {'adapter_us':>10} {'abort_us':>8} "
        f"{'vllm_us':>9} {'overhead':>9} {'decision':>9}" + (f" {'hooks_us':>8} {'own+hooks':>9}" if args.hooks else "")
    )
    for size in (int(x) for x in args.sizes.split(",")):
        env = gym.make("LLMSched-v1", scenario="default", num_requests=size).unwrapped
        for policy in args.policies:
            s = _backlog(env, policy, args.steps).scheduler
            n = max(s.num_steps, 1)
            hooks = ""
            if args.hooks:
                h = _hooks_s(env, policy, args.steps)  # the same steps, replayed: the same decisions
                own = (s.adapter_time_s - s.abort_time_s + h) / (s.vllm_time_s - h)
                hooks = f" {h / n * 1e6:>8.1f} {own:>9.1%}"
            name = Path(policy).name if os.sep in policy else policy
            print(
                f"{name:<12} {s.iterations_per_step:>4} {size:>8} {s.num_steps:>6} {s.adapter_time_s / n * 1e6:>10.1f} "
                f"{s.abort_time_s / n * 1e6:>8.1f} {s.vllm_time_s / n * 1e6:>9.1f} "
                f"{s.adapter_time_s / s.vllm_time_s:>9.1%} {(s.adapter_time_s - s.abort_time_s) / s.vllm_time_s:>9.1%}"
                f"{hooks}",
                flush=True,
            )


def _backlog(env: Any, policy: str, steps: int) -> Any:
    """vLLM's scheduler in the loop under ``policy`` for at most ``steps`` steps of the env's evaluation episode,
    every request waiting at time 0; the ``VllmLoop``. A trained agent holds each decision as it was trained
    (its policy.json): the loop reads it."""
    from llmsched_env.adapters.vllm.loop import VllmLoop
    from llmsched_env.sim.setup import SimSetup

    requests = env.episode_requests(0)
    for r in requests:
        r.arrival_s = 0.0
    loop = VllmLoop(SimSetup(env.engine_config, env.tenants, env.cost_model, requests, policy))
    while not loop.done and loop.num_steps < steps:
        loop.step()
    return loop


def _hooks_s(env: Any, policy: str, steps: int) -> float:
    """The time, in seconds over the run, spent in llmsched code while vLLM's own ``schedule()`` or
    ``update_from_output()`` runs (a second run of the same episode with timers around those callbacks)."""
    from vllm.v1.core.sched.scheduler import Scheduler

    from llmsched_env.adapters.vllm.state import VllmState
    from llmsched_env.adapters.vllm.waiting import PolicyWaitingQueue

    depth = {"vllm": 0, "hook": 0}
    total = [0.0]

    def in_vllm(f: Any) -> Any:
        def run(*a: Any, **k: Any) -> Any:
            depth["vllm"] += 1
            try:
                return f(*a, **k)
            finally:
                depth["vllm"] -= 1

        return run

    def hook(f: Any) -> Any:
        def run(*a: Any, **k: Any) -> Any:
            if not depth["vllm"] or depth["hook"]:
                return f(*a, **k)
            depth["hook"] += 1
            t0 = time.perf_counter()
            try:
                return f(*a, **k)
            finally:
                total[0] += time.perf_counter() - t0
                depth["hook"] -= 1

        return run

    patched = [(Scheduler, n, in_vllm) for n in ("schedule", "update_from_output")]
    patched += [(VllmState, n, hook) for n in ("admitted", "left_running", "finished", "shadow_of")]
    patched += [
        (PolicyWaitingQueue, n, hook)
        for n in ("add_request", "prepend_request", "prepend_requests", "peek_request", "pop_request",
                  "remove_request", "remove_requests", "__bool__", "__len__", "__iter__")
    ]  # fmt: skip
    saved = [(cls, name, cls.__dict__[name]) for cls, name, _ in patched]
    try:
        for cls, name, wrap in patched:
            setattr(cls, name, wrap(cls.__dict__[name]))
        _backlog(env, policy, steps)
    finally:
        for cls, name, f in saved:
            setattr(cls, name, f)
    return total[0]


if __name__ == "__main__":
    main()
