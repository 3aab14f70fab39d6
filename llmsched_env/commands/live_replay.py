"""Does llmsched's simulator predict a live vLLM server? Replay live benchmark runs and compare, metric by metric.

    python -m llmsched_env.commands.live_replay runs/live/slo_aware/random-rate{10,40}-rep0 \\
        --adapter-config runs/live/slo_aware/adapter.json --frontend-from runs/live/slo_aware/random-rate2-rep0 \\
        --engine-config num_kv_blocks=2048 block_size=16 max_num_seqs=32 max_num_batched_tokens=2048 \\
        max_model_len=4096 --out replay.csv
    python -m llmsched_env.commands.live_replay RUN_DIR --policy fcfs --tenants chat=chat,batch=batch \\
        --engine-config num_kv_blocks=2048 block_size=16 ...

Each RUN_DIR holds one `vllm bench serve` run against `vllm serve` with llmsched's scheduler: the result JSON
(--save-result --save-detailed) and the client's requests.json. The server's steps.jsonl and requests.jsonl are
in RUN_DIR, in server-log/ beside it or in --log-dir (a whole server log will do: its records are filtered by the
run's labels and span). --adapter-config (the server's adapter.json) gives its policy, tenants, the cost model its
policy saw, nominal rate, seed and scenario; --policy and --tenants override it.

The command fits a cost model to the runs' engine steps (or --fit-from's), each priced at its busy period unless
--duration says otherwise, replays every run's requests in the simulator under the policy and prints, per metric
(TTFT, TPOT, E2E at p50 and p99, throughput, completed requests): client and engine (the server log's) measures,
sim, their errors err_client and err_engine ((sim - live) / live), and frontend_s, the client - engine time the
simulator does not model. --frontend-from adds a light-load run's median client - engine TTFT to the simulated
TTFT and E2E.
"""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Sequence
from dataclasses import fields
from pathlib import Path
from typing import Any

from llmsched_env.adapters.vllm.config import AdapterConfig
from llmsched_env.commands.entry import command, keep, refuse
from llmsched_env.commands.help import DefaultsFormatter
from llmsched_env.common.checks import Parser
from llmsched_env.common.fields import parse_config
from llmsched_env.common.files import CONFIG_BYTES, parse_json, read_text
from llmsched_env.common.outputs import (
    Inputs,
    check_inputs_apart,
    check_output,
    file_output_path,
    write_csv,
    written_file,
)
from llmsched_env.costs.loader import load_cost_model
from llmsched_env.engine.config import EngineConfig, TenantConfig
from llmsched_env.live.logs import find_log_dir
from llmsched_env.live.replay import (
    DURATIONS,
    MAX_FRONTEND_DELAY_S,
    evaluate_runs,
    format_report,
    frontend_delay_s,
    load_run,
)
from llmsched_env.workloads.trace_options import tenant_slos

PROG = "python -m llmsched_env.commands.live_replay"


def parse_engine_config(pairs: Sequence[str]) -> EngineConfig:
    """``--engine-config``: an ``EngineConfig`` from ``KEY=VALUE`` items (the others at their defaults)."""
    return parse_config(EngineConfig, pairs, "--engine-config")


def _delay_s(text: str) -> float:
    """``--frontend-delay-s`` (an argparse ``type``): a finite number of seconds in [0, ``MAX_FRONTEND_DELAY_S``]."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not (math.isfinite(value) and 0.0 <= value <= MAX_FRONTEND_DELAY_S):
        raise argparse.ArgumentTypeError(
            f"must be a finite number of seconds in [0, {MAX_FRONTEND_DELAY_S:,.0f}] (a front-end delay: API "
            f"server, HTTP and tokenisation take milliseconds), got {text!r}"
        )
    return value


def logged_engine_config(log_dir: Path) -> EngineConfig:
    """The ``EngineConfig`` the adapter recorded in ``log_dir``/engine.json; ``ValueError`` naming the file."""
    path = log_dir / "engine.json"
    try:
        data = parse_json(read_text(path, CONFIG_BYTES))
        names = {f.name for f in fields(EngineConfig)}
        return EngineConfig(**{k: v for k, v in data.items() if k in names})
    except (OSError, ValueError, TypeError) as exc:
        raise ValueError(f"{path}: cannot read the server's engine limits ({exc}); give --engine-config") from None


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog=PROG, description=__doc__, formatter_class=DefaultsFormatter)
    p.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="live runs to replay and compare")
    p.add_argument("--engine-config", nargs="+", default=None, metavar="KEY=VALUE",
                   help="the server's limits as EngineConfig fields: num_kv_blocks (vLLM's KV blocks less its null "
                        "block), block_size, max_num_seqs, max_num_batched_tokens, max_model_len, ... (default: "
                        "the engine.json the adapter wrote in the server log)")  # fmt: skip
    p.add_argument(
        "--adapter-config",
        metavar="FILE",
        help="the server's llmsched adapter config (JSON or YAML): policy, tenants, cost model, ...",
    )
    p.add_argument("--policy", help="the server's policy, as the adapter names it (default: the adapter config's)")
    p.add_argument("--tenants", metavar="NAME=CLASS,...",
                   help="the server's tenants and SLO classes (a class name or TTFT_S:TPOT_S) (default: the "
                        "adapter config's)")  # fmt: skip
    p.add_argument("--log-dir", metavar="DIR", help="the server's logs (default: RUN_DIR, else RUN_DIR/../server-log)")
    p.add_argument(
        "--fit-from", metavar="RUN_DIR,...", help="fit the cost model to these runs' steps (default: the runs compared)"
    )
    p.add_argument("--duration", choices=DURATIONS, default="period",
                   help="what a step costs: the busy period between schedule() starts, t3 - t0, or model time "
                        "plus a constant")  # fmt: skip
    p.add_argument("--concave-decodes", action="store_true",
                   help="also fit the log2(1 + decodes) term (to --fit-from's runs, else the runs')")  # fmt: skip
    delay = p.add_mutually_exclusive_group()
    delay.add_argument(
        "--frontend-from",
        metavar="RUN_DIR",
        help="add this light-load run's median client - engine TTFT to the simulated TTFT and E2E",
    )
    delay.add_argument("--frontend-delay-s", type=_delay_s, default=0.0, metavar="S",
                       help=f"or add this many seconds (0 to {MAX_FRONTEND_DELAY_S:g})")  # fmt: skip
    p.add_argument(
        "--save-model", type=file_output_path, metavar="FILE.json", help="write the fitted cost model as a preset"
    )
    p.add_argument(
        "--out", type=file_output_path, metavar="FILE.csv", help="write the table as CSV (with policy and sim_delay_s)"
    )
    return p


def _tenants(text: str) -> tuple[TenantConfig, ...]:
    """``--tenants`` as ``TenantConfig`` entries; ``ValueError`` naming the option."""
    try:
        return tuple(TenantConfig(name, slo) for name, slo in tenant_slos(text).items())
    except ValueError as exc:
        raise ValueError(f"--tenants: {exc}") from None


def _server(args: argparse.Namespace) -> dict[str, Any]:
    """The server's policy settings for ``evaluate_runs``: the adapter config's, overridden by the options."""
    adapter = AdapterConfig.from_file(args.adapter_config) if args.adapter_config else None
    if adapter is None and (args.policy is None or args.tenants is None):
        raise ValueError("give --adapter-config, or both --policy and --tenants")
    tenants: tuple[TenantConfig, ...] = adapter.tenants if adapter is not None else ()
    if args.tenants is not None:
        tenants = _tenants(args.tenants)
    out: dict[str, Any] = {"policy": args.policy or (adapter.policy if adapter else ""), "tenants": tenants}
    if adapter is not None:
        seen = adapter.cost_model
        out["policy_cost_model"] = load_cost_model(seen) if isinstance(seen, str) else seen
        out.update(seed=adapter.seed, nominal_rate_rps=adapter.nominal_rate_rps, scenario=adapter.scenario,
                   iterations_per_step=adapter.iterations_per_step)  # fmt: skip
    return out


def replay_inputs(args: argparse.Namespace) -> Inputs:
    """The files and folders a replay reads that its options name: the runs (``RUN_DIR``, ``--fit-from``,
    ``--frontend-from``), ``--log-dir`` and ``--adapter-config``."""
    fit = [("--fit-from", d) for d in (args.fit_from or "").split(",") if d]
    return [("--adapter-config", args.adapter_config), *(("RUN_DIR", d) for d in args.run_dirs), *fit,
            ("--frontend-from", args.frontend_from), ("--log-dir", args.log_dir)]  # fmt: skip


@command(PROG)
def main(argv: Sequence[str] | None = None) -> None:
    """Parse, fit, replay, print; a bad option ends in one usage line, a run folder or file that fails its checks
    in one error line (``entry.command``: Ctrl-C, a signal, a full disk)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.adapter_config is None and (args.policy is None or args.tenants is None):
        parser.error("give --adapter-config, or both --policy and --tenants")
    try:  # the options' own values, and every file they read apart from what they write
        engine = parse_engine_config(args.engine_config) if args.engine_config else None
        if args.tenants is not None:
            _tenants(args.tenants)
        written = [written_file(option, path) for option, path in (("--out", args.out), ("--save-model",
                   args.save_model)) if path]  # fmt: skip
        if len(written) == 2 and os.path.realpath(args.out) == os.path.realpath(args.save_model):
            raise ValueError(f"--out and --save-model are the same file {args.out}: the CSV would overwrite the "
                             "fitted model; give two paths")  # fmt: skip
        check_inputs_apart(replay_inputs(args), written)
    except ValueError as exc:
        parser.error(str(exc))
    keep("nothing is written before the replays end (--out, --save-model)", "rerun it")
    try:  # what the run folders, logs and files named hold: one error line, no usage block
        for out in written:
            check_output(out.path, option=out.option, file=True)
        server = _server(args)
        runs = [load_run(d, log_dir=args.log_dir) for d in args.run_dirs]
        if engine is None:
            engine = logged_engine_config(Path(args.log_dir) if args.log_dir else find_log_dir(Path(args.run_dirs[0])))
        fit_dirs = [d for d in (args.fit_from or "").split(",") if d]
        fit_runs = [load_run(d, log_dir=args.log_dir) for d in fit_dirs] or None
        if args.frontend_from:
            delay = frontend_delay_s(load_run(args.frontend_from, log_dir=args.log_dir))
        else:
            delay = args.frontend_delay_s
        report = evaluate_runs(runs, engine=engine, fit_runs=fit_runs, duration=args.duration,
                               concave_decodes=args.concave_decodes, frontend_delay_s=delay, **server)  # fmt: skip
    except ValueError as exc:
        refuse(parser.prog, str(exc))
    print(format_report(report))
    if args.save_model:
        report.model.save(args.save_model)
    if args.out:
        write_csv(report.rows, Path(args.out))


if __name__ == "__main__":
    main()
