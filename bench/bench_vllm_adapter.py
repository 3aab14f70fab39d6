"""The adapter's overhead inside vLLM's real scheduler: policy decision time per vLLM step against vLLM's own
``schedule()`` time on the same steps.

    python bench/bench_vllm_adapter.py                  # needs the vllm extra (bench/vllm_check.sh builds one)
    python bench/bench_vllm_adapter.py --steps 600 --sizes 100,1000,3000

For each backlog size (requests of the ``default`` scenario's evaluation episode, all waiting at time 0) and
each policy (``fcfs``, ``slo_aware`` and the shipped generalist ``learned``, an MLP run in numpy), it runs
vLLM's scheduler in the loop (``adapters.vllm.loop``) for ``--steps`` steps and prints the mean time per step of
the adapter (observation encoding + action mask + ``act``, on the adapter's worker thread, handoff included +
setting vLLM's knobs + its bookkeeping hooks) and of vLLM's own ``schedule()``, and their ratio. A trained
agent holds each decision for the ``iterations_per_step`` it was trained with (``hold``), as ``evaluate.py``
runs it. ``abort_us`` is the part of the adapter's time spent inside vLLM's ``finish_requests`` aborting the
requests shedding gave up on (vLLM's work done for the policy); ``overhead`` is all adapter time over vLLM's
``schedule()``, ``decision`` the same without the aborts. Target: <= 10% at 100 and 1,000 requests.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

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
    args = p.parse_args()
    try:
        require_vllm()
    except RuntimeError as exc:
        raise SystemExit(f"bench_vllm_adapter: {exc}") from None
    import gymnasium as gym

    import llmsched_env  # noqa: F401
    from llmsched_env.adapters.vllm.loop import VllmLoop

    print(
        f"{'policy':<12} {'hold':>4} {'requests':>8} {'steps':>6} {'adapter_us':>10} {'abort_us':>8} "
        f"{'vllm_us':>9} {'overhead':>9} {'decision':>9}"
    )
    for size in (int(x) for x in args.sizes.split(",")):
        env = gym.make("LLMSched-v0", scenario="default", num_requests=size).unwrapped
        for policy in args.policies:
            requests = env.episode_requests(0)
            for r in requests:
                r.arrival_s = 0.0
            # a trained agent holds each decision as it was trained (its policy.json): the loop reads it
            loop = VllmLoop(env.engine_config, env.tenants, env.cost_model, requests, policy)
            while not loop.done and loop.num_steps < args.steps:
                loop.step()
            s = loop.scheduler
            n = max(s.num_steps, 1)
            name = Path(policy).name if os.sep in policy else policy
            print(
                f"{name:<12} {s.iterations_per_step:>4} {size:>8} {s.num_steps:>6} {s.adapter_time_s / n * 1e6:>10.1f} "
                f"{s.abort_time_s / n * 1e6:>8.1f} {s.vllm_time_s / n * 1e6:>9.1f} "
                f"{s.adapter_time_s / s.vllm_time_s:>9.1%} {(s.adapter_time_s - s.abort_time_s) / s.vllm_time_s:>9.1%}",
                flush=True,
            )


if __name__ == "__main__":
    main()
