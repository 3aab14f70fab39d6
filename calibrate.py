"""Calibrate the simulator on the torch runtime, and measure how far the simulator is from it.

    python calibrate.py profile --model tiny --out llmsched_env/core/presets/runtime-tiny-cpu.json
    python calibrate.py fidelity --model tiny --preset runtime-tiny-cpu --out docs/results/fidelity-tiny-cpu

``profile`` times the model runner over a grid of batch shapes (``runtime.calibrate.ProfileGrid``), records
fcfs fitting episodes (real iterations with the serving loop's own time), fits the linear cost model and
writes it as a preset (with the grid samples beside it as CSV). ``fidelity`` replays the same workloads,
under several policies and loads, on the runtime and in the simulator priced by that preset, and writes the
relative errors of TTFT / TPOT / E2E at p50 and p99 and of the throughput (``fidelity.csv``,
``fidelity.json``, ``fidelity.md``). Unless ``--no-in-situ``, each workload is also replayed in lockstep with
fitting episodes and predicted by a model fitted to them (``runtime.fidelity``): the error without the
machine's speed drift since the preset was fitted. Fitting workloads (seeds 1000 and up) and the warm-up
workload (999) are never fidelity workloads (seeds you choose, default 1, 2).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

import baselines
from llmsched_env.costs.linear import fit_report
from llmsched_env.costs.loader import load_cost_model
from llmsched_env.runtime import calibrate as cal
from llmsched_env.runtime.executor import Runtime
from llmsched_env.runtime.fidelity import (
    FIDELITY_METRICS,
    FIT_LOADS,
    FIT_SEED,
    RUNTIME_ENGINE,
    WARMUP_SEED,
    FidelityWorkload,
    PolicyFactory,
    compare,
    drive,
    saturation_rps,
)
from llmsched_env.runtime.model import DTYPES, MODEL_PRESETS
from llmsched_env.runtime.runner import ModelRunner

QUICK_GRID = cal.ProfileGrid((0, 64, 512), (0, 512), (0, 1, 8), (128, 512))


def _factory(name: str) -> PolicyFactory:
    return lambda ctx: baselines.make(name, ctx, seed=0)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    for name in ("profile", "fidelity"):
        s = sub.add_parser(name)
        s.add_argument("--model", default="tiny", choices=sorted(MODEL_PRESETS), help="model preset")
        s.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
        s.add_argument("--dtype", default="float32", choices=sorted(DTYPES))
        s.add_argument("--weights", type=Path, default=None, help="local safetensors file or folder")
        s.add_argument("--seed", type=int, default=0, help="weights seed")
        s.add_argument("--threads", type=int, default=1, help="torch CPU threads")
        s.add_argument("--num-requests", type=int, default=FidelityWorkload.num_requests)
        s.add_argument("--out", type=Path, required=True)
        if name == "profile":
            s.add_argument("--repeats", type=int, default=3, help="timed runs per batch shape (median kept)")
            s.add_argument("--quick", action="store_true", help="a small grid (tests, smoke runs)")
            s.add_argument("--name", default=None, help="preset name (default: the file stem)")
            s.add_argument(
                "--fit-loads", default=",".join(map(str, FIT_LOADS)), help="loads of the recorded fitting episodes"
            )
        else:
            s.add_argument("--preset", required=True, help="cost-model preset name or JSON path")
            s.add_argument("--policies", default="fcfs,sjf,slo_aware")
            s.add_argument("--loads", default="0.5,0.8", help="fractions of the simulated saturation throughput")
            s.add_argument("--seeds", default="1,2")
            s.add_argument(
                "--no-in-situ", dest="in_situ", action="store_false", help="skip the lockstep in-situ replays"
            )
    args = p.parse_args(argv)
    if args.command == "profile":
        try:
            args.fit_loads = [float(x) for x in args.fit_loads.split(",") if x]
        except ValueError as exc:
            p.error(f"--fit-loads: {exc}")
    if args.command == "fidelity":
        args.policies = [x for x in args.policies.split(",") if x]
        unknown = [x for x in args.policies if x not in baselines.available()]
        if unknown:
            p.error(f"unknown policies {unknown}; baselines: {', '.join(baselines.available())}")
        try:
            args.loads = [float(x) for x in args.loads.split(",") if x]
            args.seeds = [int(x) for x in args.seeds.split(",") if x]
        except ValueError as exc:
            p.error(f"--loads/--seeds: {exc}")
        taken = [x for x in args.seeds if x >= FIT_SEED or x == WARMUP_SEED]
        if taken:
            p.error(
                f"seeds {taken}: {FIT_SEED} and up (fitting) and {WARMUP_SEED} (warm-up) are not fidelity "
                "workloads; choose others"
            )
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        p.error("--device cuda: no CUDA device here")
    return args


def _runner(args: argparse.Namespace, num_blocks: int = RUNTIME_ENGINE.num_kv_blocks) -> ModelRunner:
    torch.set_num_threads(args.threads)
    return ModelRunner(
        args.model,
        num_blocks=num_blocks,
        block_size=RUNTIME_ENGINE.block_size,
        device=args.device,
        dtype=DTYPES[args.dtype],
        seed=args.seed,
        weights_path=args.weights,
    )


def _write_rows(rows: Sequence[dict[str, Any]], path: Path) -> None:
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def profile_command(args: argparse.Namespace) -> dict[str, Any]:
    runner = _runner(args)
    workload = FidelityWorkload(num_requests=args.num_requests)
    t0 = time.perf_counter()
    grid = QUICK_GRID if args.quick else cal.ProfileGrid.for_engine(RUNTIME_ENGINE)
    samples = cal.profile(runner, grid, repeats=args.repeats)
    profile_s = time.perf_counter() - t0
    name = args.name or args.out.stem
    # Fitting episodes (seed FIT_SEED, fcfs) at fractions of the grid-only model's saturation rate: real
    # iterations with the serving loop's own time and real batch mixes.
    fcfs = _factory("fcfs")
    grid_model = cal.fit(samples, 0.0, name=name)
    sat = saturation_rps(grid_model, workload, RUNTIME_ENGINE, fcfs)
    iterations: list[cal.Sample] = []
    overheads = []
    for load in args.fit_loads:
        reqs = workload.requests(grid_model, sat * load, FIT_SEED)
        rt = Runtime(runner, RUNTIME_ENGINE, workload.tenants(grid_model), grid_model, reqs, record=True)
        drive(rt, fcfs, fcfs)
        iterations += cal.iteration_samples(rt)
        overheads.append(rt.loop_overhead_s())
    overhead = float(np.mean(overheads))
    desc = (
        f"runtime {args.model} {args.dtype} on {args.device}: fitted by `python calibrate.py profile` on "
        f"{len(samples)} batch shapes (plus {overhead * 1e6:.0f} us of serving-loop time per iteration) and "
        f"{len(iterations)} iterations of fcfs fitting episodes at loads {args.fit_loads}"
    )
    model = cal.fit(samples, overhead, name=name, description=desc, iterations=iterations)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    model.save(args.out)
    samples_path = args.out.with_suffix(".samples.csv")
    _write_rows(cal.samples_table(samples), samples_path)
    report = {
        "preset": str(args.out),
        "samples": str(samples_path),
        "profile_s": profile_s,
        "loop_overhead_s": overhead,
        "grid": fit_report(model, [(p, d, kv, q, t + overhead) for p, d, kv, q, t in samples]),
        "iterations": fit_report(model, iterations),
        "iterations_by_decodes": cal.residuals_by_decodes(model, iterations),
    }
    print(json.dumps(report, indent=2))
    print(model)
    return report


def _fmt(x: float) -> str:
    return "nan" if math.isnan(x) else f"{100 * x:.1f}%"


def fidelity_command(args: argparse.Namespace) -> list[dict[str, Any]]:
    # twice the engine's KV blocks: the in-situ fitting episodes run in the second half
    runner = _runner(args, 2 * RUNTIME_ENGINE.num_kv_blocks)
    model = load_cost_model(args.preset)
    workload = FidelityWorkload(num_requests=args.num_requests)
    policies = {name: _factory(name) for name in args.policies}
    kinds = {"preset": "err_"} | ({"in-situ": "err_insitu_"} if args.in_situ else {})

    def show(row: dict[str, Any]) -> None:
        for kind, prefix in kinds.items():
            errs = " ".join(f"{m.removesuffix('_s')}={_fmt(row[f'{prefix}{m}'])}" for m in FIDELITY_METRICS)
            print(f"{row['policy']:>10} load {row['load']:.2f} seed {row['seed']} {kind:>7}: {errs}", flush=True)

    rows = compare(
        runner, model, policies, _factory("fcfs"), args.loads, args.seeds, workload, progress=show, in_situ=args.in_situ
    )
    args.out.mkdir(parents=True, exist_ok=True)
    _write_rows(rows, args.out / "fidelity.csv")
    summary = {
        kind: {m: _stats([float(r[f"{prefix}{m}"]) for r in rows]) for m in FIDELITY_METRICS}
        for kind, prefix in kinds.items()
    }
    (args.out / "fidelity.json").write_text(
        json.dumps({"preset": str(args.preset), "model": args.model, "rows": rows, "summary": summary}, indent=2)
    )
    lines = [
        f"Fidelity of preset `{args.preset}` against the runtime ({args.model}, {args.dtype}, {args.device}); "
        f"{args.num_requests} requests per run, policies {', '.join(args.policies)}, loads {args.loads}, "
        f"seeds {args.seeds}. Relative errors of the simulator, mean (max) over the runs: against the preset, "
        "and in situ (a model fitted to fitting episodes served in lockstep with each replay).",
        "",
        "| metric | " + " | ".join(kinds) + " |",
        "|---|" + "---|" * len(kinds),
    ]
    for m in FIDELITY_METRICS:
        cells = [f"{_fmt(summary[k][m]['mean'])} ({_fmt(summary[k][m]['max'])})" for k in kinds]
        lines.append(f"| {m} | " + " | ".join(cells) + " |")
    (args.out / "fidelity.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return rows


def _stats(values: list[float]) -> dict[str, float]:
    v = np.asarray([x for x in values if not math.isnan(x)])
    if not len(v):
        return {"mean": float("nan"), "max": float("nan")}
    return {"mean": float(v.mean()), "max": float(v.max())}


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        if args.command == "profile":
            profile_command(args)
        else:
            fidelity_command(args)
    except ValueError as exc:
        print(f"calibrate.py: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
