"""Evaluate scheduling policies on llmsched workloads and print a metrics table.

    python evaluate.py --policies fcfs,slo_aware,mine=runs/ppo0 --seeds 0,1,2 --out results/

Runs every (policy, scenario, load, seed) episode to its end through ``LLMSched-v0``; each policy acts on
the observation and action mask only, as an agent would. A policy is a baseline name or the path of an
exported policy (a run folder holding ``policy.json`` + ``policy.safetensors``, or the JSON itself),
optionally named ``alias=path``. Prints one row per run and, with several seeds, the mean and 95% confidence
half-width (Student t) per (policy, scenario, load). ``--out`` gets ``results.csv`` and ``results.json``
(one row per run, one column per metric), ``summary.csv`` and the plots (``--no-plots`` skips them);
``--tensorboard DIR`` writes every run's metrics as TensorBoard scalars (step = seed).

``--backend runtime --model tiny`` serves the same episodes on the torch runtime (a real model, paged KV
cache, the same core engine and the same policies) instead of the simulator; see the README's "Runtime".
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import re
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

import baselines
import llmsched_env  # noqa: F401  (registers LLMSched-v0)
from llmsched_env.cluster.scenarios import ClusterScenario, get_cluster_scenario, list_cluster_scenarios
from llmsched_env.decision.actions import ACTION_COMPONENTS, ActionSpec
from llmsched_env.decision.policy import Policy
from llmsched_env.engine.config import SLO_CLASSES
from llmsched_env.engine.request import Status, tpot_s
from llmsched_env.envs.episode import run_episode
from llmsched_env.sim.metrics import format_table, token_times
from llmsched_env.sim.simulator import Simulator
from llmsched_env.workloads.describe import describe_scenario
from llmsched_env.workloads.library import get_scenario, list_scenarios
from llmsched_env.workloads.scenarios import SPLITS, Scenario, scenario_from_trace
from llmsched_env.workloads.traces import TRACE_FORMATS

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
# metrics aggregated over seeds in summary.csv (as NAME_mean, NAME_ci95) and the second terminal table
SUMMARY_METRICS = {
    "slo_attainment": "attain",
    "goodput_rps": "goodput/s",
    "ttft_p99_s": "ttft p99",
    "tpot_p99_s": "tpot p99",
}
KEY_COLUMNS = ("policy", "scenario", "load", "seed")
# Student t 0.975 quantiles for 1..30 degrees of freedom (two-sided 95%)
_T975 = (12.7062, 4.3027, 3.1824, 2.7764, 2.5706, 2.4469, 2.3646, 2.3060, 2.2622, 2.2281,
         2.2010, 2.1788, 2.1604, 2.1448, 2.1314, 2.1199, 2.1098, 2.1009, 2.0930, 2.0860,
         2.0796, 2.0739, 2.0687, 2.0639, 2.0595, 2.0555, 2.0518, 2.0484, 2.0452, 2.0423)  # fmt: skip


@dataclass
class PolicySpec:
    """One entry of ``--policies``: a baseline (``baseline`` set) or an exported policy file (``exported``)."""

    name: str  # the ``policy`` column of the results
    baseline: str | None = None
    path: Path | None = None
    exported: Any = field(default=None, repr=False)  # an ExportedPolicy; one instance serves every seed

    @property
    def iterations_per_step(self) -> int:
        """Engine iterations each decision holds: 1 for baselines, the training setting for a trained policy."""
        if self.exported is None:
            return 1
        return int(self.exported.meta.get("iterations_per_step", 1))

    def make(self, env: gym.Env, seed: int) -> Policy:
        if self.baseline is not None:
            return baselines.make_for(self.baseline, env.unwrapped.policy_context(), seed=seed)  # type: ignore[attr-defined]
        return self.exported


def episode_details(sim: Simulator, kv_series: bool = True) -> dict[str, np.ndarray]:
    """Per-request latencies of the episode ``sim`` (the env's simulator or a runtime) just ran, for plots:
    ``ttft_s`` and ``tpot_s`` of every finished request (arrival order, the definitions of ``metrics``), and
    with ``kv_series`` the KV usage after every step (``kv_time_s`` from the first arrival, ``kv_usage`` in
    [0, 1])."""
    rounds = np.asarray(sim.engine.round_end_s, dtype=np.float64)
    ttft, tpot = [], []
    for r in sim.arrived_requests():
        if r.status == Status.FINISHED:
            t = token_times(r, rounds)
            ttft.append(t[0] - r.arrival_s)
            tpot.append(float(tpot_s(t[0], t[-1], len(t))))
    out = {"ttft_s": np.asarray(ttft, dtype=np.float64), "tpot_s": np.asarray(tpot, dtype=np.float64)}
    if kv_series:
        kv_t, kv_u = sim.kv_usage_series()
        out["kv_time_s"], out["kv_usage"] = kv_t - sim.start_s, kv_u
    return out


def _csv_list(text: str, kind: type = str) -> list[Any]:
    try:
        return [kind(x.strip()) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a comma-separated list of {kind.__name__}, got {text!r}") from None


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--policies",
        type=_csv_list,
        default=["fcfs"],
        help=f"baselines ({','.join(baselines.available())}) or exported policies: a run folder holding "
        "policy.json + policy.safetensors, or the JSON; name=path names one (default: the folder's name)",
    )
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
    p.add_argument("--out", type=Path, default=None, help="folder for results.csv/.json, summary.csv and plots")
    p.add_argument(
        "--plots",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="write PNG plots into --out (default: on when --out is given)",
    )
    p.add_argument("--tensorboard", type=Path, default=None, help="write each run's metrics as TensorBoard scalars")
    p.add_argument("--check-invariants", action="store_true", help="verify the core's invariants every step")
    p.add_argument(
        "--ray",
        nargs="?",
        const="local",
        default=None,
        metavar="ADDRESS",
        help="spread the runs over a Ray cluster (no ADDRESS: start a local Ray); needs the 'distributed' extra",
    )
    p.add_argument("--ray-cpus", type=int, default=None, help="CPUs of the local Ray (default: all)")
    rt = p.add_argument_group("torch runtime (--backend runtime)")
    rt.add_argument("--backend", choices=("sim", "runtime"), default="sim", help="simulator (default) or real model")
    rt.add_argument("--model", default="tiny", help="model preset of the runtime (tiny, llama-1b, llama3-8b)")
    rt.add_argument("--device", default=None, help="torch device (default: cuda if available, else cpu)")
    rt.add_argument("--dtype", default=None, choices=("float32", "bfloat16", "float16"), help="default: float32 on CPU")
    rt.add_argument("--weights", type=Path, default=None, help="local safetensors weights (default: seeded random)")
    rt.add_argument("--realtime", action="store_true", help="sleep through idle gaps instead of skipping them")
    rt.add_argument("--policy-timeout", type=float, default=0.1, help="seconds before a decision falls back to fcfs")
    args = p.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    if args.backend == "runtime":
        _runtime_args(p, args)
    args.policy_specs = [_policy_spec(p, entry) for entry in args.policies]
    names = [spec.name for spec in args.policy_specs]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        p.error(f"policy name(s) {dup} used twice; name each one with name=path")
    if args.plots and args.out is None:
        p.error("--plots needs --out (the folder the PNG files go to)")
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
        known = [*list_scenarios(), *list_cluster_scenarios()]
        bad = [s for s in args.scenarios if s not in known]
        if bad:
            p.error(f"unknown scenario {bad}; available: {', '.join(known)}")
        clusters = [s for s in args.scenarios if s in list_cluster_scenarios()]
        if clusters and len(clusters) != len(args.scenarios):
            p.error("evaluate cluster scenarios (routers) and single-node scenarios (schedulers) separately")
        if clusters and (args.backend == "runtime" or args.describe):
            p.error("--backend runtime and --describe are single-node only")
        args.scenario_objects = [get_cluster_scenario(s) if s in clusters else get_scenario(s) for s in args.scenarios]
        right = baselines.available_routers() if clusters else baselines.available()
        misplaced = [spec.baseline for spec in args.policy_specs if spec.baseline and spec.baseline not in right]
        if misplaced:
            kind = "single-node schedulers" if clusters else "routers (cluster scenarios only)"
            p.error(f"{misplaced} are {kind}; use {'routers' if clusters else 'schedulers'} here")
    if args.num_requests is not None and args.num_requests < 1:
        p.error("--num-requests must be >= 1")
    if any(load <= 0 for load in args.loads):
        p.error("--loads must be > 0")
    if not args.seeds or not args.loads or not args.policy_specs:
        p.error("--policies, --loads and --seeds each need at least one entry")
    _check_compatible(p, args)
    return args


def _policy_spec(p: argparse.ArgumentParser, entry: str) -> PolicySpec:
    """A baseline name, or ``[alias=]path`` of an exported policy, loaded and verified now."""
    names = [*baselines.available(), *baselines.available_routers()]
    if entry in names:
        return PolicySpec(entry, baseline=entry)
    alias, sep, target = entry.partition("=")
    if not sep:
        alias, target = "", entry
    elif not alias or not target:
        p.error(f"policy {entry!r}: expected name=path")
    if target in names:
        return PolicySpec(alias, baseline=target)
    path = Path(target).expanduser()
    if not path.exists():
        p.error(f"unknown policy {entry!r}: not a baseline ({', '.join(names)}) and no file or folder {path}")
    try:  # torch is imported only when a policy file is evaluated
        from llmsched_env.runtime.policy_file import load_policy_file
    except ImportError as exc:
        p.error(f"policy {path}: cannot load exported policies here: {exc}")
    try:
        exported = load_policy_file(path)
    except (ValueError, OSError, RuntimeError) as exc:  # PolicyFileError is a ValueError
        p.error(f"policy {path} is not a loadable exported policy: {exc}")
    folder = path if path.is_dir() else path.parent
    return PolicySpec(alias or folder.resolve().name, path=path, exported=exported)


def _check_compatible(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Every exported policy must fit every scenario's observations and actions (same names, same options)."""
    exported = [spec for spec in args.policy_specs if spec.exported is not None]
    if not exported:
        return
    from llmsched_env.runtime.policy_file import action_options

    for scenario in args.scenario_objects:
        env: Any = make_env(args, scenario, 1.0).unwrapped
        for spec in exported:
            options = action_options(env.action_spec) if isinstance(env.action_spec, ActionSpec) else None
            components = getattr(env.action_spec, "components", ACTION_COMPONENTS)
            try:
                spec.exported.check_compatible(
                    env.obs_names, env.action_spec.nvec, action_options=options, action_components=components
                )
            except ValueError as exc:
                p.error(f"policy {spec.path} cannot run on scenario {scenario.name!r}: {exc}")


def make_env(args: argparse.Namespace, scenario: Any, load: float, iterations_per_step: int = 1) -> gym.Env:
    common = {
        "scenario": scenario,
        "split": args.split,
        "num_requests": args.num_requests,
        "load": load,
        "cost_model": args.cost_model,
        "check_invariants": args.check_invariants,
    }
    if isinstance(scenario, ClusterScenario):  # a router decides per arrival: no iterations_per_step
        return gym.make("LLMSchedCluster-v0", **common)
    return gym.make("LLMSched-v0", iterations_per_step=iterations_per_step, **common)


def _spec(args: argparse.Namespace, policy: str | PolicySpec) -> PolicySpec:
    if isinstance(policy, PolicySpec):
        return policy
    for spec in getattr(args, "policy_specs", ()):
        if spec.name == policy:
            return spec
    return PolicySpec(policy, baseline=policy)


def _runtime_args(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Check the runtime options and pick the calibrated cost model the runtime's SLOs scale to."""
    try:
        import torch

        from llmsched_env.costs.loader import list_presets
        from llmsched_env.runtime.model import MODEL_PRESETS
    except ImportError as exc:
        p.error(f"--backend runtime needs torch: {exc}")
    if args.model not in MODEL_PRESETS:
        p.error(f"unknown --model {args.model!r}; presets: {', '.join(MODEL_PRESETS)}")
    args.device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        p.error("--device cuda: no CUDA device here")
    args.dtype = args.dtype or ("float32" if args.device == "cpu" else "bfloat16")
    if args.cost_model is None:
        preset = f"runtime-{args.model}-{args.device.split(':')[0]}"
        if preset not in list_presets():
            p.error(
                f"no calibrated cost model for {args.model} on {args.device}: run `python calibrate.py profile "
                f"--model {args.model} --device {args.device} --out {preset}.json` and pass --cost-model {preset}.json"
            )
        args.cost_model = preset
    args.runners = {}


def runtime_episode(args: argparse.Namespace, env: gym.Env, spec: PolicySpec, seed: int) -> tuple[dict, Simulator]:
    """Serve the episode ``env.reset(seed=seed)`` would simulate on the torch runtime instead: the same
    requests, with arrival times stretched by the cost model's ``slo_scale`` (the runtime's SLOs are scaled by
    it too, so a load means the same pressure as in the simulator), the same policy, fcfs as its fallback."""
    import torch

    from llmsched_env.decision.observation import ObservationEncoder
    from llmsched_env.runtime.executor import Runtime
    from llmsched_env.runtime.model import DTYPES
    from llmsched_env.runtime.runner import ModelRunner
    from llmsched_env.runtime.serve import serve
    from llmsched_env.workloads.scenarios import slo_scale

    u: Any = env.unwrapped
    cfg = u.engine_config
    key = (cfg.num_kv_blocks, cfg.block_size)
    if key not in args.runners:
        torch.set_num_threads(1)
        try:
            args.runners[key] = ModelRunner(
                args.model,
                num_blocks=cfg.num_kv_blocks,
                block_size=cfg.block_size,
                device=args.device,
                dtype=DTYPES[args.dtype],
                weights_path=args.weights,
            )
        except ValueError as exc:  # a bad --weights file: its loader names the file and the tensor
            raise SystemExit(f"evaluate.py: error: {exc}") from None
    dilation = slo_scale(u.cost_model)
    requests = u.episode_requests(seed)
    for r in requests:
        r.arrival_s *= dilation
    rt = Runtime(args.runners[key], cfg, u.tenants, u.cost_model, requests, seed=seed, realtime=args.realtime)
    encoder = ObservationEncoder(cfg, u.tenants, u.source.nominal_rate_rps() / dilation)
    metrics, _ = serve(
        rt,
        spec.make(env, seed),
        encoder,
        u.action_spec,
        baselines.make("fcfs", u.policy_context()),
        iterations_per_step=spec.iterations_per_step,
        policy_timeout_s=args.policy_timeout,
        check_invariants=args.check_invariants,
    )
    return metrics, rt


def run_policy(
    args: argparse.Namespace,
    scenario: Scenario,
    load: float,
    policy: str | PolicySpec,
    details: list[dict[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """Every seed of one (scenario, load, policy): one row of metrics per seed. With a ``details`` list,
    append each run's ``episode_details`` (the KV series only for the first seed at the first load)."""
    spec = _spec(args, policy)
    env = make_env(args, scenario, load, spec.iterations_per_step)
    rows = []
    for seed in args.seeds:
        t0 = time.perf_counter()
        if args.backend == "runtime":
            metrics, sim = runtime_episode(args, env, spec, seed)
        else:
            metrics = run_episode(env, spec.make(env, seed), seed)
            sim = getattr(env.unwrapped, "sim", None)  # None for a cluster (no per-request plot details)
        row: dict[str, Any] = {"policy": spec.name, "scenario": scenario.name, "load": load, "seed": seed}
        row.update(metrics)
        row["wall_s"] = time.perf_counter() - t0
        rows.append(row)
        if details is not None and sim is not None:
            first = seed == args.seeds[0] and load == args.loads[0]
            details.append({**{k: row[k] for k in KEY_COLUMNS}, **episode_details(sim, kv_series=first)})
    env.close()
    return rows


def evaluate(args: argparse.Namespace, details: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """Rows of every (scenario, load, policy, seed), in that nesting order; ``details`` as ``run_policy``.
    With ``--ray`` each (scenario, load, policy) runs as a Ray task; the rows come back in the same order."""
    grid = [(si, load, pi) for si in range(len(args.scenario_objects)) for load in args.loads
            for pi in range(len(args.policy_specs))]  # fmt: skip
    if args.ray:
        from llmsched_env.evaluation.distributed import ray_map

        jobs = [(_worker_argv(args.argv), os.getcwd(), si, load, pi, details is not None) for si, load, pi in grid]
        results = ray_map(_grid_task, jobs, address=args.ray, num_cpus=args.ray_cpus)
    else:
        results = [_run_cell(args, si, load, pi, details is not None) for si, load, pi in grid]
    rows: list[dict[str, Any]] = []
    for cell_rows, cell_details in results:
        rows += cell_rows
        if details is not None:
            details += cell_details
    return rows


def _worker_argv(argv: Sequence[str]) -> list[str]:
    """The command line a Ray worker re-parses: the same runs, without the driver-only options."""
    from llmsched_env.evaluation.distributed import strip_options

    return strip_options(
        argv,
        with_value=("--out", "--tensorboard", "--ray-cpus"),
        optional_value=("--ray",),
        flags=("--plots", "--no-plots"),
    )


def _run_cell(
    args: argparse.Namespace, si: int, load: float, pi: int, want_details: bool
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    details: list[dict[str, Any]] | None = [] if want_details else None
    rows = run_policy(args, args.scenario_objects[si], load, args.policy_specs[pi], details)
    return rows, details or []


def _grid_task(
    argv: list[str], cwd: str, si: int, load: float, pi: int, want_details: bool
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """One (scenario, load, policy) cell on a Ray worker: re-parse the command line, run every seed."""
    return _run_cell(_worker_args(argv, cwd), si, load, pi, want_details)


def _worker_args(argv: list[str], cwd: str) -> argparse.Namespace:
    if os.path.isdir(cwd):  # a local Ray: relative paths mean what they meant to the driver
        os.chdir(cwd)
    return parse_args(argv)


def _capacity_task(argv: list[str], cwd: str, si: int, pi: int) -> dict[str, Any]:
    args = _worker_args(argv, cwd)
    return capacity(args, args.scenario_objects[si], args.policy_specs[pi])


def t_quantile_975(df: int) -> float:
    """The 0.975 quantile of Student's t with ``df`` >= 1 degrees of freedom (table to 30, then the
    Cornish-Fisher expansion, within 1e-4)."""
    if df < 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {df}")
    if df <= len(_T975):
        return _T975[df - 1]
    z = 1.959964
    return (
        z
        + (z**3 + z) / (4 * df)
        + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)
        + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * df**3)
    )


def mean_ci95(values: Sequence[float]) -> tuple[float, float]:
    """Mean and 95% confidence half-width (Student t, sample std); the half-width is 0 for one value."""
    x = np.asarray(values, dtype=np.float64)
    if x.size == 0:
        raise ValueError("mean_ci95 needs at least one value")
    if x.size == 1:
        return float(x[0]), 0.0
    return float(x.mean()), t_quantile_975(x.size - 1) * float(x.std(ddof=1)) / math.sqrt(x.size)


def summarize(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (policy, scenario, load), in first-seen order: ``num_seeds`` and, for each of
    ``SUMMARY_METRICS``, ``NAME_mean`` and ``NAME_ci95`` over its seeds."""
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault((row["policy"], row["scenario"], row["load"]), []).append(row)
    out = []
    for (policy, scenario, load), runs in groups.items():
        agg: dict[str, Any] = {"policy": policy, "scenario": scenario, "load": load, "num_seeds": len(runs)}
        for key in SUMMARY_METRICS:
            agg[f"{key}_mean"], agg[f"{key}_ci95"] = mean_ci95([r[key] for r in runs])
        out.append(agg)
    return out


def capacity(
    args: argparse.Namespace, scenario: Scenario, policy: str | PolicySpec, target: float = 0.9
) -> dict[str, Any]:
    """The highest load (relative to nominal) at which ``policy``'s mean attainment over the seeds stays
    >= ``target``: bracket by doubling or halving from 1.0, then bisect to 2% (DistServe's capacity)."""
    spec = _spec(args, policy)

    def attainment(load: float) -> float:
        return float(np.mean([r["slo_attainment"] for r in run_policy(args, scenario, load, spec)]))

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
    u: Any = env.unwrapped
    nominal = u.cluster_rate_rps if isinstance(scenario, ClusterScenario) else u.nominal_rate_rps
    return {"policy": spec.name, "scenario": scenario.name, "capacity_load": lo, "capacity_rps": lo * nominal}


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


def print_summary(summary: Sequence[dict[str, Any]]) -> None:
    columns = ["policy", "scenario", "load", "seeds"]
    short = []
    for agg in summary:
        row = {"policy": agg["policy"], "scenario": agg["scenario"], "load": agg["load"], "seeds": agg["num_seeds"]}
        for key, head in SUMMARY_METRICS.items():
            row[head], row[f"{head} ±"] = agg[f"{key}_mean"], agg[f"{key}_ci95"]
        short.append(row)
    for head in SUMMARY_METRICS.values():
        columns += [head, f"{head} ±"]
    print("mean over seeds ± 95% confidence half-width (Student t)")
    print(format_table(short, columns))


def _write_csv(rows: Sequence[dict[str, Any]], path: Path) -> None:
    columns: list[str] = []
    for row in rows:
        columns += [k for k in row if k not in columns]
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)


def write_results(rows: Sequence[dict[str, Any]], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    _write_csv(rows, out / "results.csv")
    (out / "results.json").write_text(json.dumps(list(rows), indent=1))


def _safe_name(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text) or "_"


def write_tensorboard(rows: Sequence[dict[str, Any]], logdir: Path) -> list[Path]:
    """Every numeric column of ``rows`` as scalar ``eval/COLUMN`` (per tenant ``eval/tenant/NAME/...``), one
    run folder ``POLICY/SCENARIO/load_LOAD`` per (policy, scenario, load) and step = seed. Returns the folders."""
    from tensorboard.compat.proto.event_pb2 import Event
    from tensorboard.compat.proto.summary_pb2 import Summary
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    writers: dict[Path, EventFileWriter] = {}
    for row in rows:
        run = logdir / _safe_name(str(row["policy"])) / _safe_name(str(row["scenario"]))
        if "load" in row:
            run = run / f"load_{row['load']:g}"
        if run not in writers:
            run.mkdir(parents=True, exist_ok=True)
            writers[run] = EventFileWriter(str(run))
        values = [
            Summary.Value(tag=f"eval/{key}", simple_value=float(v))
            for key, v in row.items()
            if key not in KEY_COLUMNS and isinstance(v, (int, float)) and not isinstance(v, bool)
        ]
        event = Event(wall_time=time.time(), step=int(row.get("seed", 0)), summary=Summary(value=values))
        writers[run].add_event(event)
    for writer in writers.values():
        writer.close()
    return list(writers)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.describe:
        describe(args)
        return 0
    for spec in args.policy_specs:
        if spec.exported is not None:
            print(f"policy {spec.name}: {spec.exported.path} ({spec.exported.meta.get('algo', '?')})")
    plots = args.plots if args.plots is not None else args.out is not None
    summary: list[dict[str, Any]] = []
    details: list[dict[str, Any]] | None = [] if plots else None
    if args.capacity:
        cells = [(si, pi) for si in range(len(args.scenario_objects)) for pi in range(len(args.policy_specs))]
        if args.ray:
            from llmsched_env.evaluation.distributed import ray_map

            jobs = [(_worker_argv(args.argv), os.getcwd(), si, pi) for si, pi in cells]
            rows = ray_map(_capacity_task, jobs, address=args.ray, num_cpus=args.ray_cpus)
        else:
            rows = [capacity(args, args.scenario_objects[si], args.policy_specs[pi]) for si, pi in cells]
        print(format_table(rows, ["policy", "scenario", "capacity_load", "capacity_rps"]))
    else:
        rows = evaluate(args, details)
        print_table(rows)
        summary = summarize(rows)
        if len(args.seeds) > 1:
            print_summary(summary)
    if args.out is not None:
        write_results(rows, args.out)
        written = [args.out / "results.csv", args.out / "results.json"]
        if summary:
            _write_csv(summary, args.out / "summary.csv")
            written.append(args.out / "summary.csv")
        if plots:
            from llmsched_env.evaluation import plots as plotting  # matplotlib only when plotting

            if args.capacity:
                written.append(plotting.plot_capacity(rows, args.out / "capacity.png"))
            else:
                written += plotting.write_plots(args.out, rows, summary, details or [])
        print("wrote " + ", ".join(str(p) for p in written))
    if args.tensorboard is not None:
        write_tensorboard(rows, args.tensorboard)
        print(f"wrote TensorBoard events under {args.tensorboard} (tensorboard --logdir {args.tensorboard})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
