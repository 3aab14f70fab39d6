"""The options of ``llmsched-evaluate`` and the ``Evaluation`` they make, and the option helpers the commands share.

Every bad value ends in one usage line (``parser.error``), never a traceback: argparse types check each value's
shape, the library (``EvalConfig``, ``RuntimeOptions``, ``check_output``, ...) the rest; what a file, folder or lock
named holds ends in one error line without the usage block (``entry.reject``, ``entry.refuse``).
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from llmsched_env.cluster.scenarios import list_cluster_scenarios
from llmsched_env.commands.entry import refuse, reject
from llmsched_env.commands.help import DefaultsFormatter, from_args, given_options, program
from llmsched_env.common.checks import MAX_POLICY_TIMEOUT_S, MAX_SEEDS, SEED_LIMIT, Parser, check_label, duplicates
from llmsched_env.common.files import CountLimit, retold
from llmsched_env.common.outputs import (
    COMPLETE_NAME,
    LOCK_NAME,
    Inputs,
    Written,
    check_input_links,
    check_inputs_apart,
    check_output,
    output_path,
    written_in,
)
from llmsched_env.costs.loader import cost_model_path
from llmsched_env.decision.planners.lookahead import join_options
from llmsched_env.decision.policy_file import policy_file_paths
from llmsched_env.decision.registry import ROUTERS, SCHEDULERS
from llmsched_env.engine.config import ENGINE_BOUNDS, SLO_CLASSES
from llmsched_env.evaluation import EvalConfig, RuntimeOptions
from llmsched_env.evaluation.outputs import FINISHED_FILES, tensorboard_runs
from llmsched_env.evaluation.resume import RECORD_NAME, ROWS_NAME
from llmsched_env.runtime.names import DTYPE_NAMES, MODEL_NAMES
from llmsched_env.workloads.library import list_scenarios
from llmsched_env.workloads.scenarios import SPLITS, Scenario
from llmsched_env.workloads.trace_options import FORMAT_OPTIONS, TRACE_OPTIONS, build_trace_scenario
from llmsched_env.workloads.traces import TRACE_FORMATS, data_stem

if TYPE_CHECKING:  # torch only once a spec is built
    from llmsched_env.runtime.runner_spec import RunnerSpec

PROG = ("llmsched-evaluate", "evaluate.py")  # the console script, the checkout's script (``help.program``)
# EngineConfig fields settable from the command line, each --NAME-WITH-DASHES (default: the scenario's)
ENGINE_LIMITS = {
    "num_kv_blocks": "KV cache blocks of the engine (default: the scenario's)",
    "max_num_seqs": "most requests running at once (default: the scenario's)",
    "max_num_batched_tokens": "largest token budget of one iteration (default: the scenario's)",
    "max_model_len": "longest request, prompt + output; longer ones are rejected (default: the scenario's)",
    "block_size": "tokens per KV block (default: the scenario's)",
}


def _entries(text: str) -> list[str]:
    """The stripped entries of a comma list; an error for an empty entry (``fcfs,,sjf``: a typo or empty variable)."""
    items = [x.strip() for x in text.split(",")]
    if text.strip() and not all(items):
        raise argparse.ArgumentTypeError(f"an empty entry in {text!r} (a comma too many, or an empty variable?)")
    return [x for x in items if x]


def csv_list(kind: type, minimum: float | None = None, unique: bool = True) -> Callable[[str], list[Any]]:
    """An argparse type: a comma list of ``kind``, each > ``minimum`` when given, with ``unique`` none twice."""

    def parse(text: str) -> list[Any]:
        try:
            values = [kind(x) for x in _entries(text)]
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected a comma-separated list of {kind.__name__}, got {text!r}"
            ) from None
        if minimum is not None and any(not v > minimum for v in values):
            raise argparse.ArgumentTypeError(f"every value must be > {minimum:g}, got {text!r}")
        return _checked(values, text, unique)

    parse.__name__ = f"list of {kind.__name__}"
    return parse


def int_at_least(minimum: int, maximum: int | None = None) -> Callable[[str], int]:
    """An argparse type: an integer >= ``minimum`` (and <= ``maximum`` when given)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {value}")
        if maximum is not None and value > maximum:
            raise argparse.ArgumentTypeError(f"must be at most {maximum:,}, got {value}")
        return value

    parse.__name__ = "int"
    return parse


positive_int = int_at_least(1)
_SEED_RANGE = f"an integer in [0, 2**32 - 1 = {SEED_LIMIT - 1}]"  # numpy's legacy seeds, which the envs take


def seed_int(text: str) -> int:
    """An argparse type: one seed, an integer in [0, 2**32)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {_SEED_RANGE}, got {text[:40]!r}") from None
    if not 0 <= value < SEED_LIMIT:
        raise argparse.ArgumentTypeError(f"must be {_SEED_RANGE}, got {text[:40]}")
    return value


seed_int.__name__ = "seed"


def seed_list(text: str) -> list[int]:
    """An argparse type: a comma list of seeds, each an integer in [0, 2**32), none twice, at most ``MAX_SEEDS``."""
    values: list[int] = csv_list(int)(text)
    if len(values) > MAX_SEEDS:
        raise argparse.ArgumentTypeError(f"{len(values):,} seeds, more than {MAX_SEEDS:,}")
    bad = next((v for v in values if not 0 <= v < SEED_LIMIT), None)
    if bad is not None:
        raise argparse.ArgumentTypeError(f"every seed must be {_SEED_RANGE}, got {str(bad)[:40]}")
    return values


seed_list.__name__ = "list of seeds"


def policy_list(text: str) -> list[str]:
    """The ``--policies`` type: a comma list whose lookahead or mpc entries keep their options."""
    values = _checked(join_options(_entries(text)), text, False)
    for entry in values:
        alias, sep, _ = entry.partition("=")
        try:
            if sep:  # NAME=PATH (a lookahead's options give 'lookahead:k', which passes)
                check_label("policy name", alias)
            check_label("policy", entry, separator=False)  # a path's folder may name it: EvalConfig checks that
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    return _checked(values, text, True)


def _checked(values: list[Any], text: str, unique: bool) -> list[Any]:
    """``values``, refused when empty or (with ``unique``) with an entry given twice."""
    if not values:
        raise argparse.ArgumentTypeError(f"expected at least one entry, got {text!r}")
    repeated = duplicates(values) if unique else []
    if repeated:
        raise argparse.ArgumentTypeError(f"{', '.join(map(str, repeated))} given more than once in {text!r}")
    return values


def positive_float(text: str) -> float:
    """An argparse type: a finite number > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not (value > 0 and value != float("inf")):
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text!r}")
    return value


def policy_timeout(text: str) -> float:
    """An argparse type: a decision's deadline, a finite number of seconds in (0, ``MAX_POLICY_TIMEOUT_S``]."""
    value = positive_float(text)
    if value > MAX_POLICY_TIMEOUT_S:  # the deadline's timers refuse values past about 9e9 s
        raise argparse.ArgumentTypeError(f"must be at most {MAX_POLICY_TIMEOUT_S:,.0f} s, got {text!r}")
    return value


def build_parser(description: str = "") -> argparse.ArgumentParser:
    """The parser of ``llmsched-evaluate``, its options in groups (the common ones first)."""
    p = Parser(prog=program(*PROG), description=description, formatter_class=DefaultsFormatter)
    run = p.add_argument_group("what to run").add_argument
    run(
        "--policies",
        type=policy_list,
        default=["fcfs"],
        help=f"schedulers ({','.join(SCHEDULERS.names())}), routers for cluster scenarios "
        f"({','.join(ROUTERS.names())}), learned (the generalist, policies/generalist), exported policies: a run "
        "folder holding policy.json + policy.safetensors, or the JSON; name=path names one (else the folder's name); "
        "tuned=FILE.json runs tuned with your own tuned-settings table (llmsched-tune --out FILE.json); with --trace, "
        "tuned plays the entry llmsched-tune --trace made for that trace and the same trace options, engine limits "
        "and --cost-model (looked up in $LLMSCHED_TUNED_TABLE or ${XDG_DATA_HOME:-~/.local/share}/llmsched/tuned.json, "
        "then the shipped table; tuned=FILE.json: in FILE.json); lookahead[:k=64,horizon=64,tail=256,"
        "candidates=neighbours,base=tuned] is the clairvoyant bound (not deployable; docs/evaluation.md); "
        "mpc[:k=64,futures=4,horizon=64,tail=64,...] plans on forecast futures (deployable; docs/evaluation.md)",
    )
    scenarios = f"scenario library: {','.join(list_scenarios())}; cluster: {','.join(list_cluster_scenarios())}"
    run("--scenarios", type=csv_list(str), default=["default"], help=scenarios)
    run("--loads", type=csv_list(float, 0.0), default=[1.0], help="arrival rates relative to nominal")
    run("--seeds", type=seed_list, default=[0], help="one episode per seed (each in [0, 2**32))")
    run("--capacity", action="store_true", help="search each policy's capacity (attainment >= 90%%)")
    per_seed = "with --capacity: one search per seed's window, so capacities get a mean and a 95%% interval"
    run("--per-seed", action="store_true", help=per_seed)
    describe = "describe the scenarios (one episode of --num-requests at each load) instead of running policies"
    run("--describe", action="store_true", help=describe)
    work = p.add_argument_group("workload").add_argument
    split = "test: the part reported figures come from; val: the part every choice is made on"
    work("--split", choices=SPLITS, default="test", help=split)
    work("--num-requests", type=positive_int, default=None, help="requests per episode (default: the scenario's)")
    work("--cost-model", default=None, help="cost-model preset name or JSON path (default: the scenario's)")
    work(
        "--length-prediction",
        default=None,
        help="each request's predicted output length, seen by every policy: none, exact or lognormal:SIGMA "
        "(default: none)",
    )
    work(
        "--require-sustained",
        action="store_true",
        help="refuse a load at which some window's arrivals last less than 20x its mean TTFT target (a burst, "
        "not a sustained rate; by default such runs are flagged on stderr and in the sustained column); "
        "--capacity searches stop at the largest sustained load in any case",
    )
    out = p.add_argument_group("output").add_argument
    out_help = "folder for results.csv/.json, summary.csv and plots (default: none)"
    out("--out", type=output_path, default=None, help=out_help)
    plots = "write PNG plots into --out (default: on when --out is given)"
    out("--plots", action=argparse.BooleanOptionalAction, default=None, help=plots)
    out("--tensorboard", type=output_path, default=None, help="write each run's metrics as TensorBoard scalars here")
    out("--force", action="store_true", help="allow --out or --tensorboard inside a shipped folder")
    resume = ("continue the evaluation in --out that was killed: run only what its rows.jsonl lacks (the same options; "
              "another evaluation there is refused), then write every file from all the rows; with nothing there to "
              "resume, start one")  # fmt: skip
    out("--resume", action="store_true", help=resume)
    out("--no-progress", action="store_true", help="no progress bars on stderr")
    trace = p.add_argument_group("your own trace (instead of --scenarios)")
    add_trace_options(trace)
    add_fitted_option(trace)
    add_scaleout_options(p.add_argument_group("scale-out"), "the runs")
    engine = p.add_argument_group("engine").add_argument
    engine(
        "--engine",
        choices=("sim", "vllm"),
        default="sim",
        help="sim: llmsched's simulator; vllm: also run vLLM's real scheduler in the loop on the same requests "
        "and print both attainments (needs the 'vllm' extra)",
    )
    engine(
        "--policy-timeout",
        dest="policy_timeout_s",
        type=policy_timeout,
        default=0.1,
        metavar="POLICY_TIMEOUT",
        help="--backend runtime and --engine vllm: seconds before a decision falls back (to fcfs; to vLLM's own "
        "step in vLLM)",
    )
    engine("--check-invariants", action="store_true", help="verify the core's invariants every step")
    add_engine_limits(p)
    rt = p.add_argument_group("torch runtime (--backend runtime)")
    rt.add_argument("--backend", choices=("sim", "runtime"), default="sim", help="simulator or real model")
    add_runner_options(rt, seed_and_threads=False)
    rt.add_argument("--realtime", action="store_true", help="sleep through idle gaps instead of skipping them")
    speed = "skip the few-second profile that compares this machine with the cost model pricing SLOs and load"
    rt.add_argument("--no-speed-check", action="store_true", help=speed)
    return p


# the files an evaluation writes in --out (a folder at one of these names is refused before any run)
OUT_FILES = (*FINISHED_FILES, ROWS_NAME, RECORD_NAME, COMPLETE_NAME, LOCK_NAME)
_NO_ADDRESS = "<no address>"  # --ray given alone: the spelling of local workers before --workers


def add_scaleout_options(p: argparse.ArgumentParser | argparse._ArgumentGroup, what: str) -> None:
    """``--workers N`` (local worker processes) and ``--ray ADDRESS`` (a Ray cluster) to spread ``what`` over."""
    p.add_argument(
        "--workers",
        type=positive_int,
        default=None,
        metavar="N",
        help=f"spread {what} over N local worker processes (nothing listens on the network) (default: off, run here)",
    )
    p.add_argument(
        "--ray",
        nargs="?",
        const=_NO_ADDRESS,
        default=None,
        metavar="ADDRESS",
        help=f"spread {what} over the Ray cluster at ADDRESS (needs the 'distributed' extra) (default: off)",
    )


def scaleout(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Check ``--workers`` and ``--ray``; set ``args.ray`` and ``args.ray_cpus``, what ``ray_imap`` takes."""
    args.ray_cpus = args.workers
    if args.ray == _NO_ADDRESS:
        p.error("--ray needs the ADDRESS of a Ray cluster; for local worker processes give --workers N")
    if args.workers is not None and args.ray is not None:
        p.error("--workers (local worker processes) or --ray ADDRESS (a Ray cluster), not both")
    if args.workers is not None:
        args.ray = "local"
    elif args.ray is not None:  # a cluster that does not answer: refused now, not a hang at the first run
        from llmsched_env.evaluation.distributed import check_ray_address

        try:
            check_ray_address(args.ray)
        except ValueError as exc:
            p.error(str(exc))


def add_trace_options(p: argparse.ArgumentParser | argparse._ArgumentGroup, replaces: str = "--scenarios") -> None:
    """``--trace`` (a trace file instead of ``replaces``) and the options that say how to read it."""
    add = p.add_argument
    add("--trace", type=Path, default=None, help=f"your own trace file instead of {replaces}")
    add("--trace-format", choices=TRACE_FORMATS, default=None, help="format of --trace (default: none; required)")
    add("--trace-rate", type=float, default=None, help="arrival rate for --trace in req/s (default: the trace's mean)")
    add(
        "--trace-slo",
        default="chat",
        help=f"SLO class of --trace's tenants that --tenant-slo does not name (of its one tenant when it has no "
        f"tenant column): {','.join(SLO_CLASSES)}, or TTFT_S:TPOT_S",
    )
    add(
        "--tenant-slo",
        default=None,
        metavar="NAME=CLASS[,NAME=CLASS...]",
        help="SLO class per tenant of --trace's tenant column (generic format: tenant=COLUMN in --trace-columns; "
        "tenants come in order of first appearance in the file), each a class of --trace-slo's list or "
        "TTFT_S:TPOT_S; unnamed tenants get --trace-slo (default: none, every tenant gets --trace-slo)",
    )
    add(
        "--trace-columns",
        default=None,
        help="generic format: our field=your column, e.g. arrival=ts,prompt_len=input,output_len=output "
        "(default: none; required by --trace-format generic)",
    )
    add("--trace-time-unit", choices=("s", "ms"), default="s", help="generic format: timestamp unit")


def stray_trace_options(given: set[str], extra: Iterable[str] = ()) -> list[str]:
    """The flags of the trace options (and ``extra``) among ``given``: without ``--trace`` they do nothing."""
    return [f"--{d.replace('_', '-')}" for d in (*TRACE_OPTIONS, "fitted_traffic", *extra) if d in given]


def unread_trace_option(given: set[str], trace_format: str | None) -> str | None:
    """The usage line refusing a trace option among ``given`` that ``trace_format`` does not read
    (``FORMAT_OPTIONS``: only the generic format reads columns and a time unit); None when there is none."""
    for name, formats in FORMAT_OPTIONS.items():
        if name in given and trace_format is not None and trace_format not in formats:
            flag, reader = "--" + name.replace("_", "-"), " or ".join(f"--trace-format {f}" for f in formats)
            return (f"{flag} does nothing with --trace-format {trace_format}: only {reader} reads it; leave it out, "
                    f"or give {reader}")  # fmt: skip
    return None


def add_fitted_option(p: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """``--fitted-traffic``: beside ``--trace``'s replay, traffic generated from each of its parts."""
    p.add_argument(
        "--fitted-traffic",
        action="store_true",
        help="with --trace: also run on traffic fitted to each part of the trace (generated: per-tenant Gamma "
        "arrivals at its rate and burstiness, its rows drawn in rounds; windows of any size, so capacities are "
        "sustained where the trace's own windows are too short), as scenario STEM-fitted, every row labelled "
        "'traffic: fitted to FILE', beside the replay's rows (docs/workloads.md, \"Traffic fitted to a trace\")",
    )


def add_engine_limits(
    p: argparse.ArgumentParser, title: str = "engine limits (override every scenario's engine, --trace's included)"
) -> None:
    """``--num-kv-blocks`` and the other ``ENGINE_LIMITS``; ``engine_limits`` reads them back."""
    eng = p.add_argument_group(title)
    for name, what in ENGINE_LIMITS.items():  # each bounded by EngineConfig's ENGINE_BOUNDS (docs/reliability.md)
        kind = int_at_least(1, ENGINE_BOUNDS[name])
        eng.add_argument(f"--{name.replace('_', '-')}", type=kind, default=None, help=what)


def engine_limits(args: argparse.Namespace) -> dict[str, int]:
    """The engine limits given on the command line, by ``EngineConfig`` field name."""
    return {name: getattr(args, name) for name in ENGINE_LIMITS if getattr(args, name) is not None}


# (option, the option that makes it do nothing, why): refused together
_NO_OPS = (
    ("scenarios", "trace", "--trace replaces --scenarios (the trace is the one scenario)"),
    ("loads", "capacity", "--capacity searches the load itself (--loads is not used)"),
    *((o, "describe", "--describe prints the scenarios and writes no files") for o in ("out", "tensorboard", "plots")),
    *((o, "describe", "--describe runs no policy")
      for o in ("policies", "capacity", "check_invariants", "length_prediction", "workers", "ray")),
)  # fmt: skip


# (option, what it needs, whether args give that, why): refused without it
_Needs = tuple[str, str, Callable[[argparse.Namespace], bool], str]
_RUNTIME = "it applies to the torch runtime only, not to the simulator (--backend sim, the default)"
_TRACED = (*(name for name in TRACE_OPTIONS if name != "trace"), "fitted_traffic")  # the options of --trace
_TRACE_ONLY = (
    ", ".join(f"--{n.replace('_', '-')}" for n in _TRACED[:-1]) + " and --fitted-traffic apply to --trace only"
)
_NEEDS: tuple[_Needs, ...] = (
    *((name, "--backend runtime", lambda a: a.backend == "runtime", _RUNTIME)
      for name in ("model", "weights", "device", "dtype", "realtime")),
    ("no_speed_check", "--backend runtime", lambda a: a.backend == "runtime",
     "the speed check profiles the torch runtime's model only"),
    ("policy_timeout_s", "--backend runtime or --engine vllm", lambda a: a.backend == "runtime" or a.engine == "vllm",
     "the simulator's decisions have no deadline"),
    *((name, "--trace", lambda a: a.trace is not None, _TRACE_ONLY) for name in _TRACED),
    ("force", "--out or --tensorboard", lambda a: a.out is not None or a.tensorboard is not None,
     "it only lets those write inside a shipped folder"),
    ("tensorboard", "--engine sim", lambda a: a.engine == "sim", "--engine vllm writes its comparison's rows only"),
)  # fmt: skip


def check_combinations(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """A usage error for a given option that another makes a no-op (``_NO_OPS``, ``_NEEDS``)."""
    given: set[str] = getattr(args, "given", set())
    for option, other, why in _NO_OPS:
        if option in given and getattr(args, other, None):
            flag, by = "--" + option.replace("_", "-"), "--" + other.replace("_", "-")
            p.error(f"{flag} does nothing with {by}: {why}; leave one of them out")
    flags = {a.dest: max(a.option_strings, key=len) for a in p._actions if a.option_strings}
    for option, needs, met, why in _NEEDS:
        if option in given and not met(args):
            p.error(f"{flags[option]} does nothing without {needs}: {why}; leave it out, or give {needs}")
    unread = unread_trace_option(given, getattr(args, "trace_format", None))
    if unread is not None:
        p.error(unread)


# what a training's run folder holds (agents.training): an evaluation there would take its completion marker
_TRAINING_MARKS = ("args.json", "model.zip", "checkpoints", "policy.json")


def _check_not_a_training(p: argparse.ArgumentParser, out: Path) -> None:
    """One error line when ``--out`` is a training's run folder, whose ``complete.json`` an evaluation would take."""
    held = [name for name in _TRAINING_MARKS if (out / name).exists()]
    if held:  # what the folder holds: one error line, no usage block
        refuse(p.prog, f"--out {out}: holds a training ({', '.join(held)}); an evaluation writes its own files and "
                       "marker there: choose another --out (give its policy with --policies NAME=FOLDER)")  # fmt: skip


def given_inputs(args: argparse.Namespace) -> Inputs:
    """The files an evaluation's options name, as given: ``--trace``, a ``--cost-model`` file, ``--weights`` and
    the paths among ``--policies`` (each entry but a baseline's name: ``NAME=PATH``'s ``PATH``, or the entry)."""
    baselines = {*SCHEDULERS.names(), *ROUTERS.names()}
    targets = [entry.partition("=")[2] or entry for entry in args.policies]
    return [*_option_files(args, args.cost_model),
            *(("--policies", target) for target in targets if target not in baselines)]  # fmt: skip


def _option_files(args: argparse.Namespace, cost_model: str | None) -> Inputs:
    """``--trace``, the file of ``cost_model`` (None for a preset) and ``--weights``."""
    model = cost_model_path(cost_model) if cost_model is not None else None
    return [("--trace", args.trace), ("--cost-model", model), ("--weights", getattr(args, "weights", None))]


def evaluation_inputs(args: argparse.Namespace, config: EvalConfig) -> Inputs:
    """Every file the evaluation of ``config`` reads: its trace, cost model and weights, and each exported
    policy's description and weights and each tuned-settings table its ``--policies`` resolved to."""
    policies: list[tuple[str, str | Path]] = []
    for spec in config.policies:
        if spec.path is not None:
            policies += [("--policies", path) for path in policy_file_paths(spec.path) or (spec.path,)]
        if spec.table is not None:
            policies.append(("--policies", spec.table if isinstance(spec.table, (str, Path)) else spec.table.path))
    return [*_option_files(args, config.cost_model), *policies]


def evaluation_outputs(args: argparse.Namespace, config: EvalConfig) -> list[Written]:
    """Every file the evaluation writes: ``OUT_FILES`` in ``--out``, and (simulator runs) the TensorBoard runs'
    folders under ``--tensorboard`` (it adds files of new names to them)."""
    written = written_in("--out", args.out, OUT_FILES) if args.out is not None else []
    if args.tensorboard is not None and args.engine == "sim":
        runs = tensorboard_runs(args.tensorboard, config, args.capacity)
        written += [Written("--tensorboard", args.tensorboard, run, folder=True, owned=False) for run in runs]
    return written


def _check_apart(p: argparse.ArgumentParser, out: Path | None, tensorboard: Path) -> None:
    """A usage error when ``--tensorboard`` is, or lies under, a file the evaluation writes in ``--out``."""
    if out is None:
        return
    board, folder = tensorboard.expanduser().absolute(), out.expanduser().absolute()
    for name in OUT_FILES:
        if board == folder / name or folder / name in board.parents:
            p.error(f"--tensorboard {tensorboard}: is {name} of --out {out}, a file the evaluation writes; choose "
                    "a folder of its own")  # fmt: skip


@dataclass(frozen=True)
class Evaluation:
    """One ``llmsched-evaluate`` command, checked: its runs (``config``) and what the command does around them."""

    config: EvalConfig
    line: tuple[str, ...]  # the command line as typed (recorded in the rows file and complete.json)
    options: Mapping[str, Any]  # flag -> value of the options that decide the rows (what --resume compares)
    files: Mapping[str, Path | str | None]  # flag -> the input file it names (fingerprinted in the record)
    out: Path | None = None
    tensorboard: Path | None = None
    plots: bool = False
    describe: bool = False
    capacity: bool = False
    per_seed: bool = False
    resume: bool = False
    engine: str = "sim"
    ray: str | None = None
    ray_cpus: int | None = None
    progress: bool = True
    speed_check: bool = True
    policy_timeout_s: float = 0.1


# options that do not change an evaluation's rows: --resume may give them otherwise than the run it continues
_NOT_COMPARED = ("out", "plots", "tensorboard", "force", "no_progress", "workers", "ray", "ray_cpus", "resume",
                 "describe", "no_speed_check", "require_sustained", "check_invariants", "given")  # fmt: skip


def evaluation(argv: Sequence[str] | None = None, description: str = "") -> Evaluation:
    """The checked ``Evaluation`` of a command line; a bad one exits (status 2) with one usage line."""
    p = build_parser(description)
    args = p.parse_args(argv)
    args.given = given_options(p, argv)
    if args.resume and (args.out is None or args.describe or args.engine == "vllm"):
        p.error("--resume continues an evaluation in --out: it needs --out, and no --describe or --engine vllm")
    config = config_from_args(p, args)
    flags = {a.dest: max(a.option_strings, key=len) for a in p._actions if a.option_strings}
    return from_args(
        Evaluation,
        args,
        config=config,
        line=(PROG[0], *(sys.argv[1:] if argv is None else argv)),
        options={flags.get(k, k): v for k, v in vars(args).items() if k not in _NOT_COMPARED},
        files={"--trace": args.trace, "--cost-model": args.cost_model, "--weights": getattr(args, "weights", None)},
        plots=args.plots if args.plots is not None else args.out is not None,
        progress=not args.no_progress,
        speed_check=not args.no_speed_check,
    )


def config_from_args(p: argparse.ArgumentParser, args: argparse.Namespace) -> EvalConfig:
    """The ``EvalConfig`` the parsed ``args`` ask for; a usage error (exit 2) for anything wrong."""
    scaleout(p, args)
    check_combinations(p, args)
    if args.plots and args.out is None:
        p.error("--plots needs --out (the folder the PNG files go to)")
    if args.per_seed and not args.capacity:
        p.error("--per-seed goes with --capacity (a grid already reports every seed)")
    if args.engine == "vllm":
        if args.backend != "sim" or args.capacity or args.describe or args.ray:
            p.error(
                "--engine vllm runs on the simulator's cost model alone: no --backend runtime, --capacity, "
                "--describe, --workers or --ray"
            )
        from llmsched_env.evaluation.vllm_engine import check_vllm

        try:
            check_vllm()
        except ValueError as exc:  # this machine's vLLM, not the command line: one error line
            refuse(p.prog, f"--engine vllm: {exc}")
    if args.describe and set(args.scenarios) & set(list_cluster_scenarios()):
        p.error("--describe is single-node only")
    try:
        if args.out is not None:
            check_output(args.out, args.force, files=OUT_FILES)
            _check_not_a_training(p, args.out)
        if args.tensorboard is not None:
            check_output(args.tensorboard, args.force, "--tensorboard")
            _check_apart(p, args.out, args.tensorboard)
        check_input_links(given_inputs(args))  # a link loop named by its option before a reader meets it
        runtime = from_args(RuntimeOptions, args) if args.backend == "runtime" else None
        limits = engine_limits(args)
        scenarios: list[Any] = trace_scenarios(p, args, limits) if args.trace is not None else args.scenarios
        policies: list[Any] = args.policies
        if args.trace is not None:  # tuned plays the entry of this trace and its options (llmsched-tune --trace)
            model = args.cost_model or (runtime.cost_model_preset() if runtime is not None else None)
            from llmsched_env.evaluation.tuning import trace_policies  # the search's modules: after --help

            policies = trace_policies(policies, trace_options(args), scenarios, limits, cost_model=model)
        config = from_args(
            EvalConfig, args, scenarios=scenarios, policies=policies, runtime=runtime, engine_limits=limits or None
        )
        check_inputs_apart(evaluation_inputs(args, config), evaluation_outputs(args, config))
    except ValueError as exc:  # a field's message names its option (two policy files of one name: --policies)
        reject(p, exc, as_option(p, str(exc)))
    if not args.describe:
        check_planned_requests(p, args, config)
    if args.require_sustained and not (args.capacity or args.describe):
        from llmsched_env.evaluation.sustained import unsustained

        short = unsustained(config)
        if short:
            more = f" (and {len(short) - 1} more)" if len(short) > 1 else ""
            p.error(f"--require-sustained: {short[0]}{more}")
    return config


def as_option(p: argparse.ArgumentParser, message: str) -> str:
    """``message`` with its leading ``EvalConfig.FIELD`` written as ``FIELD``'s option of ``p`` when it has one
    (``EvalConfig.length_prediction: ...`` -> ``--length-prediction: ...``)."""
    flags = {a.dest: max(a.option_strings, key=len) for a in p._actions if a.option_strings}
    found = re.match(r"EvalConfig\.(\w+)(?=: | must)", message)
    if found is None or found.group(1) not in flags:
        return message
    return flags[found.group(1)] + message[found.end() :]


# the most requests an evaluation may plan (10^8: hours at ~10,000 requests/s); LLMSCHED_MAX_EVALUATION_REQUESTS
MAX_PLANNED_REQUESTS = CountLimit("the requests an evaluation plans", 100_000_000, "LLMSCHED_MAX_EVALUATION_REQUESTS")
CAPACITY_LOADS = 16  # loads a capacity search plays, about (a bracket and its bisection), for the plan's size


def check_planned_requests(p: argparse.ArgumentParser, args: argparse.Namespace, config: EvalConfig) -> None:
    """A usage error when the evaluation plans more than ``MAX_PLANNED_REQUESTS`` requests."""
    sizes = sum(config.num_requests or int(getattr(s, "num_requests", 1)) for s in config.scenarios)
    plays = CAPACITY_LOADS if args.capacity else len(config.loads)
    total = sizes * len(config.policies) * len(config.seeds) * plays
    try:
        bound = MAX_PLANNED_REQUESTS.value()
    except ValueError as exc:
        p.error(str(exc))
    if total > bound:
        what = f"about {CAPACITY_LOADS} loads a capacity search" if args.capacity else f"{plays} --loads"
        p.error(f"the evaluation plans {total:,} requests (episode sizes {sizes:,} over --scenarios x "
                f"{len(config.policies)} --policies x {len(config.seeds)} --seeds x {what}), more than "
                f"{bound:,} for {MAX_PLANNED_REQUESTS.what}{MAX_PLANNED_REQUESTS.hint()}")  # fmt: skip


def trace_options(args: argparse.Namespace) -> dict[str, Any]:
    """The ``--trace`` options of ``args`` (``add_trace_options``) by name, the unset ones left out."""
    return {k: getattr(args, k) for k in TRACE_OPTIONS if getattr(args, k, None) is not None}


def trace_scenario(p: argparse.ArgumentParser, args: argparse.Namespace, limits: dict[str, int]) -> Scenario:
    """The scenario of ``--trace``; a ``ValueError`` naming the option or the file for a bad one."""
    if args.trace_format is None:
        p.error(f"--trace needs --trace-format ({', '.join(TRACE_FORMATS)})")
    check_label(f"--trace {str(args.trace)!r}: scenario name", data_stem(Path(args.trace)))
    try:
        return build_trace_scenario(trace_options(args), limits)  # EvalConfig puts the limits over it again
    except ValueError as exc:
        raise retold(exc, as_flags(str(exc))) from None


def trace_scenarios(p: argparse.ArgumentParser, args: argparse.Namespace, limits: dict[str, int]) -> list[Scenario]:
    """``--trace``'s scenario and, with ``--fitted-traffic``, its fitted traffic (``STEM-fitted``)."""
    replay = trace_scenario(p, args, limits)
    if not getattr(args, "fitted_traffic", False):
        return [replay]
    from llmsched_env.workloads.fitted import fitted_scenario
    from llmsched_env.workloads.scenarios import TraceSource

    if not isinstance(replay.make_source("test", 1.0), TraceSource):  # the file's content: one error line
        refuse(p.prog, f"--fitted-traffic: {args.trace} has no arrival times; its episodes are generated already")
    return [replay, fitted_scenario(replay, str(args.trace))]


_OPTION_NAME = re.compile(rf"\b({'|'.join(sorted(TRACE_OPTIONS, key=len, reverse=True))})(?=: )")


def as_flags(message: str) -> str:
    """A library message with its trace options' names (``trace_slo: ...``) written as flags (``--trace-slo: ...``)."""
    return _OPTION_NAME.sub(lambda m: "--" + m.group(1).replace("_", "-"), message)


def add_runner_options(parser: Any, seed_and_threads: bool = True) -> None:
    """Add ``--model``, ``--device``, ``--dtype``, ``--weights`` (and ``--seed``, ``--threads``) to ``parser`` (a
    parser or an argument group); ``--device`` and ``--dtype`` default to None: this machine's choice."""
    parser.add_argument("--model", default="tiny", choices=MODEL_NAMES, help="model preset")
    parser.add_argument("--device", default=None, help="torch device (default: cuda when available, else cpu)")
    parser.add_argument(
        "--dtype", default=None, choices=DTYPE_NAMES, help="model dtype (default: float32 on cpu, else bfloat16)"
    )
    weights = "local safetensors file or folder (default: random weights drawn from the seed)"
    parser.add_argument("--weights", type=Path, default=None, help=weights)
    if seed_and_threads:
        parser.add_argument("--seed", type=int, default=0, help="weights seed")
        parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")


def runner_spec(parser: argparse.ArgumentParser, args: argparse.Namespace) -> RunnerSpec:
    """The ``RunnerSpec`` of the parsed options, device and dtype defaulted for this machine (and set in
    ``args``); a bad value exits with a one-line usage error (status 2)."""
    from llmsched_env.runtime.runner_spec import RunnerSpec, default_device, default_dtype

    device = args.device or default_device()
    given = {k: getattr(args, k) for k in ("model", "weights", "seed", "threads") if hasattr(args, k)}
    try:
        spec = RunnerSpec(**given, device=device, dtype=args.dtype or default_dtype(device))
    except ValueError as exc:
        reject(parser, exc)
    args.device, args.dtype = spec.device, spec.dtype
    return spec
