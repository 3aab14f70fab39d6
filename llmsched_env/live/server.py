"""A live vLLM server on 127.0.0.1 under any llmsched policy (or vLLM's own), loaded by vLLM's benchmark client:

    python -m llmsched_env.live.server --out runs/live --schedulers vllm,fcfs,slo_aware --rates 10,25,40

Per scheduler and repeat, ``vllm serve`` (through ``launch``) serves the tiny model in its own process group,
then the client sends the workload (``random`` or ``trace``, the same stream for every scheduler) at every rate;
each run's request labels are checked against the tenants the adapter logged (``check_tenants``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import signal
import subprocess
import sys
import time
import urllib.request
import zlib
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from llmsched_env.adapters.vllm.serve_log import LABEL_KEY
from llmsched_env.adapters.vllm.state import TENANT_KEY
from llmsched_env.common.checks import Parser
from llmsched_env.common.files import CONFIG_BYTES, RECORD_BYTES, parse_json, read_text
from llmsched_env.common.outputs import write_text_atomically
from llmsched_env.engine.config import SLO_CLASSES

__all__ = ["ExternalServer", "LiveServer", "check_tenants", "run_bench", "trace_stream", "unwind_on_sigterm"]

VLLM_OWN = "vllm"  # the scheduler name that means vLLM's own scheduler (no --scheduler-cls)
SCHEDULER_CLS = "llmsched_env.adapters.vllm.scheduler.LLMSchedScheduler"
TRACE_TENANTS = {"conv": "chat", "code": "code"}  # tenant -> the SLO class it is held to (scaled)


@dataclass
class LiveServer:
    """``vllm serve`` of ``model_dir`` on 127.0.0.1:``port`` with ``LLMSchedScheduler`` configured by
    ``adapter_config`` (None: vLLM's own); ``cpus``: (``taskset``'s CPU list, the CPU vLLM binds its worker to)."""

    model_dir: Path
    port: int
    log_path: Path
    adapter_config: Path | None = None
    engine_args: Sequence[str] = ()
    pid_path: Path | None = None
    kv_cache_gib: int = 1
    cpus: tuple[str, str] | None = None
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    def command(self) -> list[str]:
        # cpus: the API server (and vLLM's processes but its CPU worker's threads) under taskset on the first CPUs,
        # the worker's OpenMP threads bound by vLLM to the second (VLLM_CPU_OMP_THREADS_BIND, set in start())
        pin = ["taskset", "-c", self.cpus[0]] if self.cpus is not None else []
        cmd = [*pin, sys.executable, "-m", "llmsched_env.adapters.vllm.launch", "serve", str(self.model_dir)]
        cmd += ["--host", "127.0.0.1", "--port", str(self.port), "--dtype", "bfloat16", "--scheduling-policy", "fcfs"]
        if self.adapter_config is not None:
            cmd += ["--scheduler-cls", SCHEDULER_CLS]
        return cmd + list(self.engine_args)

    def start(self) -> None:
        env = dict(os.environ)
        env.setdefault("VLLM_CPU_KVCACHE_SPACE", str(self.kv_cache_gib))
        env.setdefault("HF_HUB_OFFLINE", "1")
        env.pop("LLMSCHED_VLLM_CONFIG", None)
        if self.cpus is not None:
            env["VLLM_CPU_OMP_THREADS_BIND"] = self.cpus[1]
        if self.adapter_config is not None:
            env["LLMSCHED_VLLM_CONFIG"] = str(self.adapter_config)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                self.command(), stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
        if self.pid_path is not None:
            write_text_atomically(self.pid_path, f"{self.proc.pid}\n")

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def wait_ready(self, timeout_s: float = 900.0) -> float:
        """Seconds until ``/health`` answered; ``RuntimeError`` with the log's tail if it died or timed out."""
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout_s:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"vllm serve exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(f"{self.base_url}/health", timeout=5) as r:
                    if r.status == 200:
                        return time.monotonic() - t0
            except OSError:
                pass
            time.sleep(1.0)
        raise RuntimeError(f"vllm serve did not answer /health within {timeout_s:.0f} s:\n{self.log_tail()}")

    def log_tail(self, lines: int = 25) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self) -> None:
        """SIGTERM to the server's process group, SIGKILL after 30 s (its children after 5 s more)."""
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        if not _group_gone(proc.pid, 5.0):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            _group_gone(proc.pid, 1.0)

    def __enter__(self) -> LiveServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


@dataclass
class ExternalServer:
    """A server the user launched at ``address`` (``HOST:PORT``) with ``adapter_config``: ``start`` says how to
    launch it (``launch_line``), ``wait_ready`` waits for its ``/health`` and for the adapter's answer in
    ``<control_file>.status`` (written at its start, so newer than the config) naming every policy expected;
    ``stop`` leaves it running. ``proc`` is None: its processes are not this one's."""

    address: str
    model: str
    adapter_config: Path
    control_file: Path
    policies: Sequence[str]
    engine_args: Sequence[str] = ()
    announce: Any = print
    proc: None = None

    @property
    def base_url(self) -> str:
        return f"http://{self.address}"

    def launch_line(self) -> str:
        """The shell line that serves ``model`` with this adapter config (add a GPU's own flags as usual)."""
        host, _, port = self.address.rpartition(":")
        cmd = ["vllm", "serve", self.model, "--host", host, "--port", port, "--scheduler-cls", SCHEDULER_CLS,
               *self.engine_args]  # fmt: skip
        return f"LLMSCHED_VLLM_CONFIG={shlex.quote(str(self.adapter_config))} " + shlex.join(cmd)

    def start(self) -> None:
        self.announce(f"launch the server (the experiment waits for it at {self.address}):\n  {self.launch_line()}")

    def wait_ready(self, timeout_s: float = 3600.0, poll_s: float = 1.0) -> float:
        """Seconds until the server answers with this config; ``RuntimeError`` after ``timeout_s``."""
        t0 = time.monotonic()
        written = self.adapter_config.stat().st_mtime
        status = Path(f"{self.control_file}.status")
        seen = ""
        while time.monotonic() - t0 < timeout_s:
            try:
                with urllib.request.urlopen(f"{self.base_url}/health", timeout=5) as r:
                    healthy = r.status == 200
            except OSError:
                healthy = False
            with contextlib.suppress(OSError, ValueError):
                answer = parse_json(read_text(status, CONFIG_BYTES))
                seen = f"{status} names {answer.get('loaded')}"
                if healthy and answer["at"] >= written and set(self.policies) <= set(answer["loaded"]):
                    return time.monotonic() - t0
            time.sleep(poll_s)
        raise RuntimeError(f"no server at {self.address} answered with {self.adapter_config} within {timeout_s:.0f} s"
                           f" ({seen or f'no {status}'}); launch it with: {self.launch_line()}")  # fmt: skip

    def stop(self) -> None:
        """Nothing: the user's server keeps running."""


def _group_gone(pgid: int, timeout_s: float) -> bool:
    """Whether process group ``pgid`` has no process left, polled for up to ``timeout_s`` seconds."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            return False
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.02)


# -- workloads --------------------------------------------------------------------------------------------
def trace_stream(
    num_requests: int, rate_rps: float, seed: int, split: str = "test", max_prompt: int = 1024, max_output: int = 256
) -> list[dict[str, Any]]:
    """``num_requests`` consecutive requests of the merged Azure traces from ``split``'s part at a ``seed``-chosen
    window, scaled to a mean rate of ``rate_rps``, lengths clipped."""
    from llmsched_env.workloads.public_traces import trace_path
    from llmsched_env.workloads.scenarios import trace_split
    from llmsched_env.workloads.traces import load_azure

    parts = []
    for tenant, key in (("conv", "azure-conv"), ("code", "azure-code")):
        t = trace_split(load_azure(trace_path(key), sort=True), split)
        assert t.arrival_s is not None
        rows = zip(t.arrival_s, t.prompt_len, t.output_len, strict=True)
        parts += [(float(a), int(p), int(o), tenant) for a, p, o in rows]
    parts.sort(key=lambda p: p[0])
    if len(parts) < num_requests:
        raise ValueError(f"the {split} part of the Azure traces has {len(parts)} requests, fewer than {num_requests}")
    start = int(np.random.default_rng(seed).integers(0, len(parts) - num_requests + 1))
    window = parts[start : start + num_requests]
    t0 = window[0][0]
    span = window[-1][0] - t0
    scale = (num_requests - 1) / rate_rps / span if span > 0 else 0.0
    return [{"timestamp": (a - t0) * scale, "input_length": min(p, max_prompt), "output_length": min(o, max_output),
             "tenant": tenant} for a, p, o, tenant in window]  # fmt: skip


def _write_timed_trace(stream: list[dict[str, Any]], path: Path, first_id: int, chunk: int = 16) -> None:
    """The stream as vLLM's ``timed_trace`` JSONL, each request with hash ids of its own (no prefix shared)."""
    next_id = first_id
    lines = []
    for r in stream:
        n = -(-r["input_length"] // chunk)
        ids = list(range(next_id, next_id + n))
        next_id += n
        keep = {k: r[k] for k in ("timestamp", "input_length", "output_length")}
        lines.append(json.dumps({**keep, "hash_ids": ids}) + "\n")
    write_text_atomically(path, "".join(lines))


# -- vLLM's client ------------------------------------------------------------------------------------------
@contextlib.contextmanager
def _tagged_samples(tenants: Sequence[str], prefix: str, sidecar: list[dict[str, Any]]) -> Iterator[None]:
    """While open, vLLM's benchmark tags request i with tenant ``tenants[i % len]`` and label ``prefix + i``."""
    from vllm.benchmarks import serve as bench

    original = bench.get_samples

    def tagged(*args: Any, **kwargs: Any) -> Any:
        samples = original(*args, **kwargs)
        for i, s in enumerate(samples):
            tenant, label = tenants[i % len(tenants)], f"{prefix}{i}"
            xargs = {TENANT_KEY: tenant, LABEL_KEY: label}
            s.request_overrides = {**(s.request_overrides or {}), "vllm_xargs": xargs}
            sidecar.append({"label": label, "tenant": tenant, "prompt_tokens": int(s.prompt_len),
                            "output_tokens": int(s.expected_output_len),
                            "send_s": None if s.timestamp is None else float(s.timestamp)})  # fmt: skip
        return samples

    bench.get_samples = tagged
    try:
        yield
    finally:
        bench.get_samples = original


def run_bench(
    base_url: str, model_dir: Path, out_dir: Path, workload: str, rate_rps: float, num_requests: int, seed: int,
    prefix: str, input_len: int = 256, output_len: int = 64, range_ratio: float = 0.5, split: str = "test",
    stream: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:  # fmt: skip
    """One run of vLLM's benchmark client writing ``result.json`` and ``requests.json`` into ``out_dir``; the result."""
    from vllm.benchmarks import serve as bench
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    out_dir.mkdir(parents=True, exist_ok=True)
    if workload == "stream":
        if not stream:
            raise ValueError("run_bench: workload 'stream' needs a non-empty stream")
        num_requests = len(stream)
    argv = ["--base-url", base_url, "--model", str(model_dir), "--backend", "vllm", "--endpoint", "/v1/completions"]
    argv += ["--num-prompts", str(num_requests), "--seed", str(seed), "--ready-check-timeout-sec", "0"]
    argv += ["--save-result", "--save-detailed", "--result-dir", str(out_dir), "--result-filename", "result.json"]
    argv += ["--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,90,99", "--disable-tqdm"]
    argv += ["--ignore-eos"]  # every request produces exactly its output length, as the simulator replays it
    if workload == "random":
        argv += ["--dataset-name", "random", "--random-input-len", str(input_len), "--random-output-len"]
        argv += [str(output_len), "--random-range-ratio", str(range_ratio), "--request-rate", str(rate_rps)]
        tenants: list[str] = ["chat"]
    elif workload in ("trace", "stream"):
        timed = stream if workload == "stream" and stream else trace_stream(num_requests, rate_rps, seed, split)
        path = out_dir / "timed_trace.jsonl"
        _write_timed_trace(timed, path, first_id=zlib.crc32(prefix.encode()) << 24)
        argv += ["--dataset-name", "timed_trace", "--dataset-path", str(path)]
        tenants = [r["tenant"] for r in timed]
    else:
        raise ValueError(f"unknown workload {workload!r}; random, trace or stream")
    parser = FlexibleArgumentParser()
    bench.add_cli_args(parser)
    args = parser.parse_args(argv)
    sidecar: list[dict[str, Any]] = []
    with _tagged_samples(tenants, prefix, sidecar):
        result = bench.main(args)
    write_text_atomically(out_dir / "requests.json", json.dumps(sidecar) + "\n")
    return result


def check_tenants(log_dir: Path, sidecar: list[dict[str, Any]]) -> dict[str, int]:
    """The count per tenant, once every request of ``sidecar`` was served once as its tenant by the adapter's log in
    ``log_dir``; else ``RuntimeError`` naming the first few mismatches."""
    sent = {r["label"]: r["tenant"] for r in sidecar}
    seen: dict[str, list[str]] = {}
    path = log_dir / "requests.jsonl"
    for line in read_text(path, RECORD_BYTES).splitlines() if path.is_file() else []:
        rec = parse_json(line)
        if rec.get("label") in sent:
            seen.setdefault(rec["label"], []).append(rec["tenant"])
    problems = [f"{lab}: never reached the scheduler" for lab in sent if lab not in seen]
    problems += [f"{lab}: served {len(t)} times" for lab, t in seen.items() if len(t) != 1]
    problems += [f"{lab}: sent as {sent[lab]!r}, served as {t[0]!r}" for lab, t in seen.items() if t[0] != sent[lab]]
    if problems:
        raise RuntimeError(f"tenant check failed in {path} ({len(problems)} problems): {'; '.join(problems[:5])}")
    return dict(Counter(sent.values()))


# -- the experiment -----------------------------------------------------------------------------------------
def write_adapter(path: Path, config: dict[str, Any]) -> Path:
    """``config`` written to ``path`` as JSON and loaded as the adapter will (a bad policy fails here, in one line)."""
    from llmsched_env.adapters.vllm.config import AdapterConfig

    write_text_atomically(path, json.dumps(config, indent=1) + "\n")
    AdapterConfig.from_file(path).resolve()
    return path


def _adapter_config(path: Path, policy: str, tenants: dict[str, tuple[float, float]], args: argparse.Namespace) -> None:
    config: dict[str, Any] = {
        "policy": policy, "tenants": [{"name": n, "slo": {"ttft_s": t, "tpot_s": p}} for n, (t, p) in tenants.items()],
        "cost_model": str(args.cost_model), "policy_timeout_s": args.policy_timeout_s,
        "nominal_rate_rps": args.nominal_rate_rps, "log_dir": str(path.parent / "server-log"),
        "policy_deadline": args.policy_deadline,
    }  # fmt: skip
    if args.tuned_scenario:
        config["scenario"] = args.tuned_scenario
    write_adapter(path, config)


def tenant_slos(workload: str, slo_scale: float) -> dict[str, tuple[float, float]]:
    """Each tenant's (TTFT, TPOT) targets: its SLO class's times ``slo_scale``."""
    classes = {"chat": "chat"} if workload == "random" else TRACE_TENANTS
    return {t: (SLO_CLASSES[c].ttft_s * slo_scale, SLO_CLASSES[c].tpot_s * slo_scale) for t, c in classes.items()}


def serve_args(
    max_model_len: int, max_num_seqs: int, max_num_batched_tokens: int, block_size: int, num_kv_blocks: int = 0
) -> list[str]:
    """``vllm serve``'s engine limits (``num_kv_blocks`` usable KV blocks, 0: what the memory holds)."""
    out = ["--max-model-len", str(max_model_len), "--max-num-seqs", str(max_num_seqs)]
    out += ["--max-num-batched-tokens", str(max_num_batched_tokens), "--block-size", str(block_size)]
    if num_kv_blocks:
        out += ["--num-gpu-blocks-override", str(num_kv_blocks + 1)]  # vLLM keeps one null block
    return out


def run_experiment(args: argparse.Namespace) -> None:
    """Every scheduler x rate x repeat of ``args`` (``main``), a fresh server per scheduler and repeat."""
    from llmsched_env.adapters.vllm.tiny_model import build_tiny_model

    out: Path = args.out
    model_dir = build_tiny_model(args.model_dir)
    tenants = tenant_slos(args.workload, args.slo_scale)
    out.mkdir(parents=True, exist_ok=True)
    record = {**vars(args), "out": str(out), "model_dir": str(model_dir), "tenants": tenants, "argv": sys.argv}
    write_text_atomically(out / "experiment.json", json.dumps(record, default=str, indent=1) + "\n")
    engine_args = serve_args(args.max_model_len, args.max_num_seqs, args.max_num_batched_tokens, args.block_size,
                             args.num_kv_blocks)  # fmt: skip
    for repeat in range(args.repeats):
        for name in args.schedulers:
            folder = out / _safe(name)
            folder.mkdir(parents=True, exist_ok=True)
            adapter = None
            if name != VLLM_OWN:
                adapter = folder / "adapter.json"
                _adapter_config(adapter, name, tenants, args)  # checked: a bad policy fails here, in one line
            log, pid = folder / "server.log", folder / "server.pid"
            server = LiveServer(model_dir, args.port, log, adapter, engine_args, pid)
            with server:
                ready_s = server.wait_ready()
                assert server.proc is not None  # started on entering the with block
                print(f"[{name}] repeat {repeat}: server ready in {ready_s:.0f} s (pid {server.proc.pid})", flush=True)
                warm = folder / f"warmup-{repeat}"
                run_bench(server.base_url, model_dir, warm, "random", 20.0, 40, 10_000 + repeat, f"w{repeat}-")
                for k, rate in enumerate(args.rates):
                    run = folder / f"{args.workload}-rate{rate:g}-rep{repeat}"
                    prefix = f"{_safe(name)}-{args.workload}-{rate:g}-{repeat}-"
                    # each run its own prompts (none found in the prefix cache from an earlier run of this
                    # server), the same for every scheduler at this rate and repeat
                    seed = 100 * repeat + k
                    result = run_bench(server.base_url, model_dir, run, args.workload, rate, args.num_requests,
                                       seed, prefix, split=args.split)  # fmt: skip
                    line = (
                        f"[{name}] {args.workload} rate {rate:g} repeat {repeat}: {result['completed']} done, "
                        f"{result['request_throughput']:.2f} req/s, TTFT p50 {result['median_ttft_ms']:.0f} ms"
                    )
                    if adapter is not None:
                        sidecar = parse_json(read_text(run / "requests.json", RECORD_BYTES))
                        time.sleep(1.5)  # the scheduler writes its log within a second of going idle
                        counts = check_tenants(folder / "server-log", sidecar)
                        line += f", tenants checked {counts}"
                    print(line, flush=True)


def unwind_on_sigterm() -> None:
    """Make SIGTERM unwind like Ctrl-C (``SystemExit``), so that ``LiveServer``'s exit stops the server."""

    def stop(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, stop)


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name.split("=")[0])


def _floats(text: str) -> list[float]:
    return [float(x) for x in text.split(",") if x]


def cli_parser(module: str, doc: str | None) -> argparse.ArgumentParser:
    """The parser of ``python -m MODULE``: the first paragraph of ``doc`` as its description, defaults shown."""
    return Parser(prog=f"python -m {module}", description=(doc or "").split("\n\n")[0],
                  formatter_class=argparse.ArgumentDefaultsHelpFormatter)  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    p = cli_parser("llmsched_env.live.server", __doc__)
    p.add_argument("--out", type=Path, required=True, help="folder of the runs")
    p.add_argument("--schedulers", type=lambda s: s.split(","), default=[VLLM_OWN, "fcfs"],
                   help="vllm (vLLM's own) or an llmsched policy as llmsched-evaluate names it (fcfs, slo_aware, "
                   "learned, tuned=TABLE.json, name=FOLDER)")  # fmt: skip
    p.add_argument("--workload", choices=("random", "trace"), default="random")
    p.add_argument("--rates", type=_floats, default=[10.0, 25.0, 40.0], help="offered loads, requests/s")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--num-requests", type=int, default=300)
    p.add_argument("--split", choices=("train", "val", "test"), default="test", help="trace part (--workload trace)")
    p.add_argument("--slo-scale", type=float, default=1.0, help="SLO classes (chat, code) times this")
    p.add_argument("--cost-model", default="runtime-tiny-cpu", help="the adapter's cost model (prices shedding)")
    p.add_argument("--nominal-rate-rps", type=float, default=1.0, help="unit of the arrival/rate feature")
    p.add_argument("--tuned-scenario", default="", help="the tuned table's entry (tuned=TABLE with several)")
    p.add_argument("--policy-timeout-s", type=float, default=0.1)
    p.add_argument("--policy-deadline", choices=("auto", "signal", "thread", "inline"), default="auto",
                   help="how the adapter enforces the policy timeout (AdapterConfig.policy_deadline)")  # fmt: skip
    p.add_argument("--model-dir", type=Path, default=Path(os.environ.get("TMPDIR", "/tmp")) / "llmsched-tiny-llama")
    p.add_argument("--port", type=int, default=8011)
    p.add_argument("--max-model-len", type=int, default=2048)
    p.add_argument("--max-num-seqs", type=int, default=64)
    p.add_argument("--max-num-batched-tokens", type=int, default=2048)
    p.add_argument("--block-size", type=int, default=128, help="tokens per KV block (vLLM's CPU default)")
    p.add_argument("--num-kv-blocks", type=int, default=0, help="usable KV blocks (0: what 1 GiB holds)")
    args = p.parse_args(argv)

    unwind_on_sigterm()
    run_experiment(args)


if __name__ == "__main__":
    main()
