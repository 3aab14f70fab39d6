"""Policy decision time against model step time, on the torch runtime.

    python bench/bench_policy_decision.py                                  # CPU, tiny preset
    python bench/bench_policy_decision.py --model llama-1b --device cuda --dtype bfloat16

Serves one evaluation episode of ``--scenario`` (its requests, SLOs scaled to the runtime's cost model and
arrivals stretched the same way, as ``evaluate.py --backend runtime`` does) on the runtime, once per policy:
the shipped generalist (``learned``, an MLP run in numpy by ``decision.policy_file``) and the ``slo_aware``
heuristic. Prints the mean time of one decision (observation encoding + action mask + ``act``) and of one
model step, and their ratio per engine iteration (an agent holds each decision for ``iterations_per_step``
iterations). Target: <= 2% of a step on a GPU with the ~1B preset.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import baselines  # noqa: E402, F401  (registers slo_aware where llmsched is not installed)
from llmsched_env.evaluation import EvalConfig, RuntimeOptions  # noqa: E402
from llmsched_env.evaluation.runtime_backend import Runners, runtime_episode  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="tiny")
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default=None)
    p.add_argument("--cost-model", default=None, help="calibrated preset (default: runtime-<model>-<device>)")
    p.add_argument("--scenario", default="azure-conv")
    p.add_argument("--num-requests", type=int, default=60)
    args = p.parse_args()
    if args.device == "cpu":
        torch.set_num_threads(1)
    runtime = RuntimeOptions(model=args.model, device=args.device, dtype=args.dtype)
    config = EvalConfig(
        scenarios=[args.scenario],
        policies=["learned", "slo_aware"],
        num_requests=args.num_requests,
        cost_model=args.cost_model,
        runtime=runtime,
    )
    env = config.make_env(config.scenarios[0], 1.0)  # type: ignore[arg-type]
    runners = Runners(runtime)
    where = f"{runtime.device} ({runtime.dtype})"
    print(f"model {args.model} on {where}, scenario {args.scenario}, {args.num_requests} requests")
    print(f"{'policy':<10} {'decision us':>12} {'iters/decision':>15} {'model step ms':>14} {'decision/step':>14}")
    for spec in config.policies:
        metrics, _ = runtime_episode(config, env, spec, 0, runners)  # type: ignore[arg-type]
        decision_s = metrics["policy_time_mean_s"]
        iters = metrics["num_iterations"] / max(metrics["policy_decisions"], 1)
        step_s = metrics["model_time_s"] / max(metrics["model_steps"], 1)
        share = decision_s / iters / step_s
        print(f"{spec.name:<10} {decision_s * 1e6:>12.1f} {iters:>15.2f} {step_s * 1e3:>14.2f} {100 * share:>13.2f}%")


if __name__ == "__main__":
    main()
