"""Evaluate scheduling policies on llmsched workloads and print a metrics table.

    python evaluate.py --policies fcfs,slo_aware --seeds 0,1 --out results/

Runs every (policy, scenario, load, seed) episode to its end through ``LLMSched-v0``; each policy acts on
the observation and action mask only, as an agent would. Prints one row per run and writes
``results.csv`` and ``results.json`` (one row per run, one column per metric) into ``--out``.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym

import baselines
import llmsched_env  # noqa: F401  (registers LLMSched-v0)
from llmsched_env.core.metrics import format_table
from llmsched_env.decision import Policy

SCENARIOS = ("default",)
# metric key -> short column header of the terminal table (every metric goes to results.csv)
TABLE_COLUMNS = {
    "slo_attainment": "attain",
    "goodput_rps": "goodput/s",
    "ttft_p50_s": "ttft p50",
    "ttft_p99_s": "ttft p99",
    "tpot_p50_s": "tpot p50",
    "tpot_p99_s": "tpot p99",
    "itl_p99_s": "itl p99",
    "e2el_p50_s": "e2e p50",
    "request_throughput_rps": "req/s",
    "jain_fairness": "jain",
    "preemptions": "preempt",
    "rejection_rate": "reject",
    "kv_usage_mean": "kv mean",
}


def run_episode(env: gym.Env, policy: Policy, seed: int) -> dict[str, float]:
    """Run one episode of ``env`` under ``policy``; return ``info["metrics"]`` of its last step."""
    obs, _ = env.reset(seed=seed)
    unwrapped: Any = env.unwrapped
    while True:
        action = policy.act(obs, unwrapped.action_masks())
        obs, _, terminated, truncated, info = env.step(action)
        if terminated or truncated:
            return dict(info["metrics"])


def _csv_list(text: str, kind: type = str) -> list[Any]:
    try:
        return [kind(x.strip()) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a comma-separated list of {kind.__name__}, got {text!r}") from None


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--policies", type=_csv_list, default=["fcfs"], help=f"baselines: {','.join(baselines.available())}")
    p.add_argument("--scenarios", type=_csv_list, default=["default"], help=f"workloads: {','.join(SCENARIOS)}")
    p.add_argument("--loads", type=lambda s: _csv_list(s, float), default=[1.0], help="arrival-rate multipliers")
    p.add_argument("--seeds", type=lambda s: _csv_list(s, int), default=[0])
    p.add_argument("--num-requests", type=int, default=1000, help="requests per episode")
    p.add_argument("--cost-model", default="llama3-8b-h100", help="cost-model preset name or JSON path")
    p.add_argument("--out", type=Path, default=None, help="folder for results.csv and results.json")
    p.add_argument("--check-invariants", action="store_true", help="verify the core's invariants every step")
    args = p.parse_args(argv)
    unknown = [name for name in args.policies if name not in baselines.available()]
    if unknown:
        p.error(f"unknown policy {unknown}; available: {', '.join(baselines.available())}")
    bad = [s for s in args.scenarios if s not in SCENARIOS]
    if bad:
        p.error(f"unknown scenario {bad}; available: {', '.join(SCENARIOS)}")
    if args.num_requests < 1:
        p.error("--num-requests must be >= 1")
    return args


def evaluate(args: argparse.Namespace) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for scenario in args.scenarios:
        for load in args.loads:
            env = gym.make(
                "LLMSched-v0",
                num_requests=args.num_requests,
                load=load,
                cost_model=args.cost_model,
                check_invariants=args.check_invariants,
            )
            ctx = env.unwrapped.policy_context()  # type: ignore[attr-defined]
            for name in args.policies:
                for seed in args.seeds:
                    policy = baselines.make(name, ctx, seed=seed)
                    t0 = time.perf_counter()
                    metrics = run_episode(env, policy, seed)
                    row: dict[str, Any] = {"policy": name, "scenario": scenario, "load": load, "seed": seed}
                    row.update(metrics)
                    row["wall_s"] = time.perf_counter() - t0
                    rows.append(row)
            env.close()
    return rows


def print_table(rows: Sequence[dict[str, Any]]) -> None:
    keys = ("policy", "scenario", "load", "seed", *TABLE_COLUMNS)
    short = [{TABLE_COLUMNS.get(k, k): row.get(k, "") for k in keys} for row in rows]
    print("llmsched evaluation (times in seconds)")
    print(format_table(short, [TABLE_COLUMNS.get(k, k) for k in keys]))


def write_results(rows: Sequence[dict[str, Any]], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    columns: list[str] = []
    for row in rows:
        columns += [k for k in row if k not in columns]
    with open(out / "results.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)
    (out / "results.json").write_text(json.dumps(list(rows), indent=1))


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    rows = evaluate(args)
    print_table(rows)
    if args.out is not None:
        write_results(rows, args.out)
        print(f"wrote {args.out / 'results.csv'} and {args.out / 'results.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
