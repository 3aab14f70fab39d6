"""Calibrate the simulator on the torch runtime, and measure how far the simulator is from it.

    llmsched-calibrate profile --model tiny                      # -> results/calibrate/runtime-tiny-cpu.json
    llmsched-calibrate fidelity --model tiny --preset runtime-tiny-cpu --policies fcfs,sjf,slo_aware \\
        --loads 0.4,0.7 --seeds 1,2                             # -> results/calibrate/fidelity-tiny-cpu/

profile times the model over a grid of batch shapes and fcfs fitting episodes, fits the linear cost model and
writes it as a preset (load it by its path: evaluate.py --cost-model PATH). fidelity replays the same workloads on
the runtime and in the simulator priced by that preset and reports the relative errors of TTFT / TPOT / E2E at
p50 and p99 and of the throughput (unless --no-in-situ, also against a model fitted in lockstep). From Python:
llmsched_env.runtime.profiling.profile_preset and llmsched_env.runtime.fidelity_report.run_fidelity.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from llmsched_env.commands.entry import command, keep, reject
from llmsched_env.commands.evaluate_args import add_runner_options, runner_spec
from llmsched_env.commands.help import DefaultsFormatter, program
from llmsched_env.common.checks import Parser, check_unique
from llmsched_env.common.outputs import (
    Inputs,
    Written,
    check_input_links,
    check_inputs_apart,
    check_output,
    file_output_path,
    output_path,
    written_in,
)
from llmsched_env.costs.loader import cost_model_path
from llmsched_env.evaluation.progress import Progress, status
from llmsched_env.runtime.names import FIDELITY_REQUESTS, FIT_LOADS

PROG = ("llmsched-calibrate", "calibrate.py")
_UNITS = {"grid": "shape", "fitting episodes": "episode"}  # profile_preset's phases


def build_parser() -> argparse.ArgumentParser:
    """The ``llmsched-calibrate`` argument parser (subcommands ``profile`` and ``fidelity``)."""
    prog = program(*PROG)
    epilog = f"each subcommand has its own options: {prog} profile --help, {prog} fidelity --help"
    p = Parser(prog=prog, description=__doc__, epilog=epilog, formatter_class=DefaultsFormatter)
    sub = p.add_subparsers(dest="command", required=True, title="subcommands")
    for name in ("profile", "fidelity"):
        s = sub.add_parser(name, formatter_class=DefaultsFormatter, help=f"its own options: {name} --help")
        work = s.add_argument_group("what to measure").add_argument
        out = s.add_argument_group("output").add_argument
        if name == "profile":
            out("--out", type=file_output_path, default=None,
                help="preset file (default: results/calibrate/runtime-MODEL-DEVICE.json)")  # fmt: skip
            out("--name", default=None, help="preset name (default: the file stem)")
            work("--repeats", type=int, default=3, help="timed runs per batch shape (median kept; at most 1,000)")
            work("--quick", action="store_true", help="a small grid (tests, smoke runs)")
            fit = ",".join(map(str, FIT_LOADS))
            work("--fit-loads", default=fit, help="loads of the recorded fitting episodes")
        else:
            out("--out", type=output_path, default=None,
                help="report folder (default: results/calibrate/fidelity-MODEL-DEVICE)")  # fmt: skip
            work("--preset", required=True, help="cost-model preset name or JSON path")
            work("--policies", default="fcfs,sjf,slo_aware", help="schedulers, comma list")
            work("--loads", default="0.5,0.8", help="fractions of the simulated saturation throughput")
            work("--seeds", default="1,2", help="workload seeds (not 999, not 1000 and up)")
            work("--no-in-situ", dest="in_situ", action="store_false", help="skip the lockstep in-situ replays")
        work("--num-requests", type=int, default=FIDELITY_REQUESTS, help="requests per workload (at most 10,000)")
        out("--no-progress", action="store_true", help="no status lines and no progress bars on stderr")
        out("--force", action="store_true", help="allow writing inside a shipped folder")
        add_runner_options(s.add_argument_group("model"))
    return p


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Parse and check the arguments (``args.spec``, ``--out`` defaulted); a bad one exits (status 2)."""
    p = build_parser()
    args = p.parse_args(argv)
    from llmsched_env.runtime.fidelity import check_runtime_requests
    from llmsched_env.runtime.profiling import (
        MAX_LIST,
        MAX_REPEATS,
        MAX_REQUESTS,
        check_count,
        check_loads,
        max_threads,
        policy_factory,
    )

    try:  # the counts first: a runner with 100,000 threads is not even built
        check_input_links(calibrate_inputs(args))  # a link loop named by its option before a reader meets it
        check_count("--threads (4 per CPU here, at most 1,024)", args.threads, max_threads())
        check_count("--num-requests", args.num_requests, MAX_REQUESTS)
        check_count("--seed", args.seed, 2**63 - 1, minimum=0)  # torch's generator takes a 64-bit seed
        if args.command == "profile":
            check_count("--repeats", args.repeats, MAX_REPEATS)
            if args.name is not None and not args.name.strip():  # was the file stem, without a word
                raise ValueError(f"--name must name the preset, got {args.name!r} (leave it out for the file stem)")
    except ValueError as exc:
        p.error(str(exc))
    args.spec = runner_spec(p, args)
    try:
        tag = f"{args.model}-{args.device.split(':')[0]}"
        if args.command == "profile":
            args.out = args.out or Path("results/calibrate") / f"runtime-{tag}.json"
            args.fit_loads = check_loads("--fit-loads", _numbers("--fit-loads", args.fit_loads, float))
            check_runtime_requests({"--fit-loads": len(args.fit_loads), "--num-requests": args.num_requests})
        else:
            from llmsched_env.runtime.fidelity_report import check_fidelity_seeds

            args.out = args.out or Path("results/calibrate") / f"fidelity-{tag}"
            args.policies = [x for x in args.policies.split(",") if x]
            check_unique("--policies", args.policies)
            for name in args.policies:
                policy_factory(name)
            args.loads = check_loads("--loads", _numbers("--loads", args.loads, float))
            args.seeds = _numbers("--seeds", args.seeds, int)
            if len(args.seeds) > MAX_LIST or any(x < 0 for x in args.seeds):
                raise ValueError(f"--seeds: expected at most {MAX_LIST} seeds, each >= 0, got {args.seeds[:MAX_LIST]}")
            check_fidelity_seeds(args.seeds)
            counts = {"--policies": len(args.policies), "--loads": len(args.loads), "--seeds": len(args.seeds)}
            check_runtime_requests({**counts, "--num-requests": args.num_requests}, args.in_situ)
        from llmsched_env.runtime.fidelity_report import FIDELITY_FILES
        from llmsched_env.runtime.profiling import profile_outputs

        profile = args.command == "profile"
        check_output(args.out, args.force, file=profile, files=() if profile else FIDELITY_FILES)
        written = ([Written("--out", args.out, path) for path in profile_outputs(args.out)] if profile
                   else written_in("--out", args.out, FIDELITY_FILES))  # fmt: skip
        check_inputs_apart(calibrate_inputs(args), written)  # never writes over what it measures with
    except ValueError as exc:  # what --out holds: one error line; an option's value: a usage line
        reject(p, exc)
    return args


def calibrate_inputs(args: argparse.Namespace) -> Inputs:
    """The files a calibration reads that its options name: ``--weights``, and fidelity's ``--preset`` file."""
    preset = cost_model_path(args.preset) if args.command == "fidelity" else None
    return [("--weights", args.weights), ("--preset", preset)]


def _numbers(option: str, text: str, kind: type) -> list:
    try:
        values = [kind(x) for x in text.split(",") if x]
    except ValueError:
        raise ValueError(f"{option} must be a comma list of {kind.__name__} values, got {text!r}") from None
    check_unique(option, values)
    return values


class _Bars:
    """``on_status`` and ``on_progress`` on stderr: one bar per phase, ended by the next phase or status line."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self._phase = ""
        self._bar: Progress | None = None
        self._shown = 0

    def status(self, line: str) -> None:
        self.close()
        status(line, enabled=self.enabled)

    def __call__(self, phase: str, done: int, total: int) -> None:
        if self._bar is None or phase != self._phase:
            self.close()
            bar = Progress(total, phase, enabled=self.enabled, unit=_UNITS.get(phase, "step"))
            self._phase, self._bar, self._shown = phase, bar, 0
        self._bar.update(done - self._shown)
        self._shown = done

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None


def _profile(args: argparse.Namespace) -> None:
    from llmsched_env.runtime.profiling import profile_preset

    bars = _Bars(not args.no_progress)
    try:
        model, report = profile_preset(
            args.spec, args.out, quick=args.quick, repeats=args.repeats, name=args.name, fit_loads=args.fit_loads,
            num_requests=args.num_requests, force=args.force, on_status=bars.status, on_progress=bars,
        )  # fmt: skip
    finally:
        bars.close()
    print(json.dumps(report, indent=2))
    print(model)


def _fidelity(args: argparse.Namespace) -> None:
    from llmsched_env.runtime.fidelity_report import error_kinds, format_row, run_fidelity

    kinds = error_kinds(args.in_situ)
    total = len(args.policies) * len(args.loads) * len(args.seeds)
    bar: Progress | None = None

    def on_status(line: str) -> None:  # the run's one status line, then its bar over the workloads
        nonlocal bar
        status(line, enabled=not args.no_progress)
        bar = bar or Progress(total, "fidelity", enabled=not args.no_progress, unit="workload")

    def on_row(row: dict) -> None:
        assert bar is not None
        for line in format_row(row, kinds):
            bar.print(line)
        bar.update()

    try:
        report = run_fidelity(
            args.spec, args.preset, args.policies, args.out, loads=args.loads, seeds=args.seeds,
            num_requests=args.num_requests, in_situ=args.in_situ, force=args.force, on_row=on_row,
            on_status=on_status,
        )  # fmt: skip
    finally:
        if bar is not None:
            bar.close()
    print(report.markdown, end="")


@command(*PROG)
def main(argv: Sequence[str] | None = None) -> int:
    """``llmsched-calibrate``: 0 on success, 2 for a bad argument or a file the runtime cannot use; Ctrl-C, a
    signal or a full disk: one line (``entry.command``)."""
    args = parse_args(argv)
    what = "the preset" if args.command == "profile" else "the report"
    keep(f"--out {args.out} is as it was ({what} is written once every measurement has run)", "rerun it")
    try:
        if args.command == "profile":
            _profile(args)
        else:
            _fidelity(args)
    except ValueError as exc:  # e.g. an unreadable --weights or --preset file, named by its loader
        print(f"{program(*PROG)}: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
