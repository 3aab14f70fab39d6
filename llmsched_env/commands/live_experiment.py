"""The live experiment's command line: ``python -m llmsched_env.commands.live_experiment --out OUT [options]`` runs
``llmsched_env.live.experiment`` (schedulers compared on one vLLM server in paired blocks, against predictions written
first; on the shipped workloads, a user's trace or a user's server); the report: ``python -m llmsched_env.live.verdict
OUT``.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from llmsched_env.adapters.vllm import VllmMissingError, require_vllm
from llmsched_env.commands.entry import command, keep, refuse, reject
from llmsched_env.commands.evaluate_args import (
    ENGINE_LIMITS,
    add_engine_limits,
    add_trace_options,
    as_flags,
    engine_limits,
    stray_trace_options,
    trace_options,
    unread_trace_option,
)
from llmsched_env.commands.help import given_options
from llmsched_env.common.outputs import Inputs, check_inputs_apart, written_in
from llmsched_env.costs.loader import cost_model_path
from llmsched_env.live.design import MIN_AA_PAIRS
from llmsched_env.live.experiment import (
    EXPERIMENT_FILES,
    EXPERIMENT_FOLDERS,
    PRESET,
    RECORD_NAME,
    ExperimentConfig,
    ExperimentError,
    replication_config,
    run_experiment,
)
from llmsched_env.live.host import HOST_BUSY_MAX
from llmsched_env.live.server import cli_parser
from llmsched_env.live.workloads import WORKLOADS
from llmsched_env.workloads.traces import TRACE_FORMATS

__all__ = ["main"]

PROG = "python -m llmsched_env.commands.live_experiment"

def experiment_inputs(args: argparse.Namespace) -> Inputs:
    """The files an experiment reads that its options name: ``--trace``, ``--tuned``, a ``--cost-model`` file and
    the record of the run ``--replicate`` names."""
    model = cost_model_path(args.cost_model) if args.cost_model is not None else None
    return [("--trace", args.trace), ("--tuned", args.tuned), ("--cost-model", model), ("--replicate", args.replicate)]


@command(PROG)
def main(argv: list[str] | None = None) -> None:
    """Run the live experiment that ``argv`` describes; a bad option: one usage line; an ``--out`` or ``--replicate``
    folder refused, the experiment's own failure, Ctrl-C, a signal or a full disk: one line (``entry.command``)."""
    p = cli_parser("llmsched_env.commands.live_experiment", __doc__)
    p.add_argument("--out", type=Path, required=True, help="the run folder (must not hold an earlier run)")
    p.add_argument("--quick", action="store_true", help="one workload, 3 rounds, no reference (~15 min)")
    p.add_argument("--workloads", default=None, help=f"comma list of {', '.join(WORKLOADS)} (or --trace)")
    trace = p.add_argument_group("your own traffic (instead of --workloads; the options of llmsched-evaluate --trace)")
    add_trace_options(trace, replaces="--workloads")
    add_engine_limits(p, "the server's engine limits (with --trace; default: the shipped workloads' server)")
    p.add_argument("--loads", default=None,
                   help="the cells' loads (x the knee), comma list, for every workload (default: chosen where the "
                   "simulator predicts material differences)")  # fmt: skip
    p.add_argument("--aa-rounds", type=int, default=None,
                   help=f"A/A pairs per cell before the predictions (at least {MIN_AA_PAIRS}; --quick 2)")  # fmt: skip
    p.add_argument("--replicate", type=Path, default=None, metavar="RUN",
                   help="rerun RUN's design (workloads, policies, cells, rounds) on the streams of --seed (not RUN's);"
                   " then compare: python -m llmsched_env.live.verdict OUT --replicates RUN")  # fmt: skip
    user = p.add_argument_group("your own server (instead of the one the experiment starts)")
    user.add_argument(
        "--address",
        default=None,
        metavar="HOST:PORT",
        help="drive a server you launch with the printed line (its adapter config, written here)",
    )
    user.add_argument("--model", default=None, help="the model that server serves (the client's tokenizer)")
    user.add_argument(
        "--tuned",
        default=None,
        metavar="TABLE",
        help="the table tuned plays (llmsched-tune's, for this traffic; the server loads it at start)",
    )
    user.add_argument("--cost-model", default=None, help=f"the cost model its policies see (default {PRESET})")
    p.add_argument("--policies", default=None, help="compared with fcfs (default: slo_aware,tuned,learned)")
    p.add_argument("--min-rounds", type=int, default=None)
    p.add_argument("--budget-min", type=float, default=None, help="time budget in minutes (default 80; quick 9)")
    p.add_argument("--no-reference", action="store_true", help="skip vLLM's own scheduler")
    p.add_argument("--no-pin", action="store_true", help="leave CPU placement to the OS")
    p.add_argument("--host-override", action="store_true",
                   help=f"run on a host the guard refuses (others or steal over {HOST_BUSY_MAX * 100:.0f}%% of the "
                   "server's CPUs, or a calibration x3 off the reference), recorded in the report's first "
                   "line")  # fmt: skip
    p.add_argument("--port", type=int, default=8011)
    p.add_argument("--seed", type=int, default=0,
                   help="which compared and A/A streams the rounds play (0: those of the committed runs)")  # fmt: skip
    p.add_argument(
        "--engine-nice", type=int, default=ExperimentConfig.engine_nice,
        help="niceness of the engine core's threads (0-19, default %(default)s): the client and the API server "
        "on its CPU run first; 0 leaves their priority as it is",
    )  # fmt: skip
    args = p.parse_args(argv)
    if (args.out / RECORD_NAME).exists():  # what the folder holds: one error line, no usage block
        refuse(p.prog, f"--out {args.out}: it holds an earlier run ({RECORD_NAME}); choose a new folder")
    try:  # every file it reads apart from what it writes (a link loop named by its option)
        check_inputs_apart(experiment_inputs(args), written_in("--out", args.out, EXPERIMENT_FILES, EXPERIMENT_FOLDERS))
    except ValueError as exc:
        p.error(str(exc))
    kw: dict[str, Any] = {"port": args.port, "pin": not args.no_pin, "engine_nice": args.engine_nice, "seed": args.seed,
                          "host_override": args.host_override}  # fmt: skip
    if args.workloads:
        kw["workloads"] = tuple(args.workloads.split(","))
    if args.policies:
        kw["policies"] = tuple(args.policies.split(","))
    if args.min_rounds is not None:
        kw["min_rounds"] = args.min_rounds
    if args.aa_rounds is not None:
        kw["aa_rounds"] = args.aa_rounds
    for name in ("address", "model", "tuned", "cost_model"):
        if getattr(args, name) is not None:
            kw[name] = getattr(args, name)
    if args.address is None and (given := [f"--{n.replace('_', '-')}" for n in ("model", "tuned", "cost_model")
                                           if getattr(args, n) is not None]):  # fmt: skip
        p.error(f"{', '.join(given)} go with --address (the server the experiment starts serves its own)")
    try:
        if args.trace is not None:
            if args.workloads or args.replicate:
                p.error("--trace is the one workload: leave out --workloads and --replicate")
            if args.trace_format is None:
                p.error(f"--trace needs --trace-format ({', '.join(TRACE_FORMATS)})")
            if unread := unread_trace_option(given_options(p, argv), args.trace_format):  # azure's columns
                p.error(unread)
            kw["trace"], kw["limits"] = trace_options(args), engine_limits(args)
        elif stray := stray_trace_options(given_options(p, argv), ENGINE_LIMITS):
            p.error(f"{', '.join(stray)} without --trace do nothing")
        if args.loads is not None:
            kw["loads"] = {"*": tuple(float(x) for x in args.loads.split(","))}
    except ValueError as exc:
        reject(p, exc, as_flags(str(exc)) if args.trace is not None else f"--loads: {exc}")
    if args.budget_min is not None:
        kw["budget_s"] = args.budget_min * 60.0
    if args.no_reference:
        kw["reference"] = False
    if args.replicate is not None:
        try:  # RUN's record, read: one error line for what it holds
            config = replication_config(args.replicate, args.out, kw.pop("seed"), **kw)
        except ValueError as exc:
            refuse(p.prog, str(exc))
    else:
        try:
            config = ExperimentConfig.quick_of(args.out, **kw) if args.quick else ExperimentConfig(args.out, **kw)
        except ValueError as exc:  # a trace file that fails its checks: one error line
            reject(p, exc)
    if config.min_rounds > config.max_rounds:
        config = replace(config, max_rounds=config.min_rounds)

    if not config.address:  # the experiment starts its own vLLM server, in this interpreter
        try:
            require_vllm()
        except VllmMissingError as exc:
            refuse(p.prog, f"{exc} (or drive a server you launch: --address)")
    keep(
        f"{config.out} keeps the blocks played so far (experiment.json, log.txt; an experiment does not resume)",
        "rerun with a new --out",
    )
    try:
        run_experiment(config)
    except ExperimentError as exc:
        sys.exit(f"{p.prog}: {exc}")


if __name__ == "__main__":
    main()
