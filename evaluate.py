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
import numpy as np

import baselines
import llmsched_env  # noqa: F401  (registers LLMSched-v0)
from llmsched_env.config import SLO_CLASSES
from llmsched_env.core.describe import describe_scenario
from llmsched_env.core.metrics import format_table
from llmsched_env.core.scenario_library import get_scenario, list_scenarios
from llmsched_env.core.scenarios import SPLITS, Scenario, scenario_from_trace
from llmsched_env.core.traces import TRACE_FORMATS
from llmsched_env.decision import Policy

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
    p.add_argument(
        "--scenarios", type=_csv_list, default=["default"], help=f"scenario library: {','.join(list_scenarios())}"
    )
    p.add_argument("--loads", type=lambda s: _csv_list(s, float), default=[1.0], help="rates relative to nominal")
    p.add_argument("--seeds", type=lambda s: _csv_list(s, int), default=[0])
    p.add_argument("--split", choices=SPLITS, default="eval", help="held-out evaluation part (default) or train")
    p.add_argument("--num-requests", type=int, default=None, help="requests per episode (default: the scenario's)")
    p.add_argument("--cost-model", default=None, help="cost-model preset name or JSON path (default: the scenario's)")
    p.add_argument("--trace", type=Path, default=None, help="evaluate on your own trace file instead of --scenarios")
    p.add_argument("--trace-format", choices=TRACE_FORMATS, default=None, help="format of --trace")
    p.add_argument("--trace-rate", type=float, default=None, help="arrival rate for --trace (req/s)")
    p.add_argument("--trace-slo", default="chat", help=f"SLO class for --trace: {','.join(SLO_CLASSES)}")
    p.add_argument(
        "--trace-columns",
        default=None,
        help="generic format: our field=your column, e.g. arrival=ts,prompt_len=input,output_len=output",
    )
    p.add_argument("--trace-time-unit", choices=("s", "ms"), default="s", help="generic format: timestamp unit")
    p.add_argument("--describe", action="store_true", help="describe the scenarios instead of running policies")
    p.add_argument("--capacity", action="store_true", help="search each policy's capacity (attainment >= 90%%)")
    p.add_argument("--out", type=Path, default=None, help="folder for results.csv and results.json")
    p.add_argument("--check-invariants", action="store_true", help="verify the core's invariants every step")
    args = p.parse_args(argv)
    unknown = [name for name in args.policies if name not in baselines.available()]
    if unknown:
        p.error(f"unknown policy {unknown}; available: {', '.join(baselines.available())}")
    if args.trace is not None:
        if args.trace_format is None:
            p.error(f"--trace needs --trace-format ({', '.join(TRACE_FORMATS)})")
        if args.trace_slo not in SLO_CLASSES:
            p.error(f"unknown --trace-slo {args.trace_slo!r}; available: {', '.join(SLO_CLASSES)}")
        options: dict[str, Any] = {}
        if args.trace_format == "generic":
            if not args.trace_columns:
                p.error("--trace-format generic needs --trace-columns (e.g. prompt_len=input,output_len=output)")
            try:
                options["columns"] = dict(kv.split("=", 1) for kv in args.trace_columns.split(","))
            except ValueError:
                p.error(f"--trace-columns must be field=column pairs separated by commas, got {args.trace_columns!r}")
            options["time_unit"] = args.trace_time_unit
        try:
            scenario = scenario_from_trace(args.trace, args.trace_format, args.trace_rate, args.trace_slo, **options)
        except ValueError as exc:
            p.error(str(exc))
        args.scenario_objects = [scenario]
    else:
        bad = [s for s in args.scenarios if s not in list_scenarios()]
        if bad:
            p.error(f"unknown scenario {bad}; available: {', '.join(list_scenarios())}")
        args.scenario_objects = [get_scenario(s) for s in args.scenarios]
    if args.num_requests is not None and args.num_requests < 1:
        p.error("--num-requests must be >= 1")
    if any(load <= 0 for load in args.loads):
        p.error("--loads must be > 0")
    return args


def make_env(args: argparse.Namespace, scenario: Scenario, load: float) -> gym.Env:
    return gym.make(
        "LLMSched-v0",
        scenario=scenario,
        split=args.split,
        num_requests=args.num_requests,
        load=load,
        cost_model=args.cost_model,
        check_invariants=args.check_invariants,
    )


def run_policy(args: argparse.Namespace, scenario: Scenario, load: float, name: str) -> list[dict[str, Any]]:
    """Every seed of one (scenario, load, policy)."""
    env = make_env(args, scenario, load)
    ctx = env.unwrapped.policy_context()  # type: ignore[attr-defined]
    rows = []
    for seed in args.seeds:
        policy = baselines.make(name, ctx, seed=seed)
        t0 = time.perf_counter()
        metrics = run_episode(env, policy, seed)
        row: dict[str, Any] = {"policy": name, "scenario": scenario.name, "load": load, "seed": seed}
        row.update(metrics)
        row["wall_s"] = time.perf_counter() - t0
        rows.append(row)
    env.close()
    return rows


def evaluate(args: argparse.Namespace) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for scenario in args.scenario_objects:
        for load in args.loads:
            for name in args.policies:
                rows += run_policy(args, scenario, load, name)
    return rows


def capacity(args: argparse.Namespace, scenario: Scenario, name: str, target: float = 0.9) -> dict[str, Any]:
    """The highest load (relative to nominal) at which ``name``'s mean attainment over the seeds stays
    >= ``target``: bracket by doubling or halving from 1.0, then bisect to 2% (DistServe's capacity)."""

    def attainment(load: float) -> float:
        return float(np.mean([r["slo_attainment"] for r in run_policy(args, scenario, load, name)]))

    lo, hi = 0.0, 0.0
    load = 1.0
    if attainment(load) >= target:
        lo = load
        while hi == 0.0 and load < 64:
            load *= 2
            if attainment(load) >= target:
                lo = load
            else:
                hi = load
        hi = hi or load
    else:
        hi = load
        while lo == 0.0 and load > 1 / 64:
            load /= 2
            if attainment(load) >= target:
                lo = load
            else:
                hi = load
    while lo > 0 and hi / lo > 1.02:
        mid = (lo * hi) ** 0.5
        if attainment(mid) >= target:
            lo = mid
        else:
            hi = mid
    env = make_env(args, scenario, 1.0)
    nominal = env.unwrapped.nominal_rate_rps  # type: ignore[attr-defined]
    return {"policy": name, "scenario": scenario.name, "capacity_load": lo, "capacity_rps": lo * nominal}


def describe(args: argparse.Namespace) -> None:
    for scenario in args.scenario_objects:
        for load in args.loads:
            d = describe_scenario(scenario, args.split, load, args.seeds[0])
            print(f"== {d['name']}: {d['description']}")
            print(f"   engine {d['engine']}")
            print(f"   cost model {d['cost_model']}; remote KV {d['remote_kv']}")
            pr, out = d["prompt"], d["output"]
            print(
                f"   {args.split} episode at load {load}: {d['num_requests']} requests over {d['duration_s']:.0f} s, "
                f"{d['rate_rps']:.2f} req/s, inter-arrival CV {d['interarrival_cv']:.2f}, "
                f"{d['share_with_prefix_ids']:.0%} with prefix ids"
            )
            print(
                f"   prompt p50/p90/p99 {pr['p50']:.0f}/{pr['p90']:.0f}/{pr['p99']:.0f}, "
                f"output {out['p50']:.0f}/{out['p90']:.0f}/{out['p99']:.0f} tokens"
            )
            for t in d["tenants"]:
                tp, to = t["prompt"], t["output"]
                print(
                    f"   tenant {t['name']:<12} {t['share']:5.0%} {t['rate_rps']:6.2f} req/s  {t['slo']}  "
                    f"weight {t['weight']:g} priority {t['priority']}  "
                    f"prompt p50 {tp['p50']:.0f} output p50 {to['p50']:.0f}"
                )
            print(
                f"   engine capacity estimate {d['capacity_estimate_rps']:.2f} req/s "
                f"(compute {d['compute_bound_rps']:.2f}, KV {d['kv_bound_rps']:.2f}): "
                f"offered load {d['offered_load']:.2f}"
            )


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
    if args.describe:
        describe(args)
        return 0
    if args.capacity:
        rows = [capacity(args, sc, name) for sc in args.scenario_objects for name in args.policies]
        print(format_table(rows, ["policy", "scenario", "capacity_load", "capacity_rps"]))
    else:
        rows = evaluate(args)
        print_table(rows)
    if args.out is not None:
        write_results(rows, args.out)
        print(f"wrote {args.out / 'results.csv'} and {args.out / 'results.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
