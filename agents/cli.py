"""Train a Stable-Baselines3 agent on an llmsched scenario (llmsched-train, or python train.py).

    llmsched-train --scenario mixed-slo --quick --out runs/quick          # the whole pipeline in minutes
    llmsched-train --scenario mixed-slo --algo maskable_ppo --timesteps 300000 --seed 0 --out runs/mixed0
    llmsched-train --scenarios mixed-slo,bursty --seeds 0,1 --workers 2 --out runs/sweep   # 4, two at a time
    llmsched-train --trace my.csv --trace-format azure --init policies/generalist --out runs/mine  # fine-tune

Hyperparameters come from agents/hyperparams/<algo>.yml keyed by scenario, then --quick, then --hp key=value,
then the flags. The run folder keeps the config, the command line, TensorBoard events, checkpoints, the models
and the exported policy. From Python: agents.training.train(TrainConfig(...)).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from agents.config import ALGO_NAMES, parse_overrides, read_hyperparam_file
from agents.train_config import DEFAULT_EVAL_BASELINES, DEFAULT_EVAL_ROUTERS, QUICK, TrainConfig, resolve_hyperparams
from llmsched_env.cluster.scenarios import list_cluster_scenarios
from llmsched_env.commands.entry import command, keep, refuse, reject
from llmsched_env.commands.evaluate_args import (
    ENGINE_LIMITS,
    add_engine_limits,
    add_scaleout_options,
    add_trace_options,
    as_flags,
    engine_limits,
    scaleout,
    seed_int,
    seed_list,
    stray_trace_options,
    trace_options,
    unread_trace_option,
)
from llmsched_env.commands.help import DefaultsFormatter, from_args, given_options, program
from llmsched_env.common.checks import Parser, check_unique
from llmsched_env.common.fields import split_items
from llmsched_env.common.outputs import (
    Inputs,
    OutputBusyError,
    check_input_links,
    check_inputs_apart,
    check_output,
    output_path,
)
from llmsched_env.workloads.library import list_scenarios


def quick_help(algo: str = "maskable_ppo") -> str:
    """What ``--quick`` sets: the common preset, then the scenarios whose ``<algo>.yml`` entry changes it."""
    common = ", ".join(f"{k} {v}" for k, v in QUICK.items())
    try:
        data = read_hyperparam_file(algo)
    except ValueError:  # the help still prints; the run itself reports the file
        data = {}
    own = {
        name: ", ".join(f"{k} {v}" for k, v in entry["quick"].items())
        for name, entry in data.items()
        if isinstance(entry, dict) and isinstance(entry.get("quick"), dict)
    }
    text = f"{common}; for {algo}, these scenarios change it: " if own else common
    return text + "; ".join(f"{name}: {items}" for name, items in own.items())


def build_parser() -> argparse.ArgumentParser:
    """The ``llmsched-train`` argument parser, its options in groups (the common ones first)."""
    p = Parser(
        prog=program("llmsched-train", "train.py"), description=__doc__, formatter_class=DefaultsFormatter
    )
    what = p.add_argument_group("what to train").add_argument
    what(
        "--scenario",
        default="default",
        help=f"one of {', '.join(list_scenarios())}; 'generalist' for one policy over every workload; or, to train "
        f"a router, {', '.join(list_cluster_scenarios())}",
    )
    what("--algo", choices=sorted(ALGO_NAMES), default="maskable_ppo", help="algorithm")
    what("--timesteps", type=int, default=None, help="total environment steps (default: the YAML's)")
    what("--seed", type=seed_int, default=0, help="training seed (in [0, 2**32))")
    what("--quick", action="store_true", help=f"a short run: {quick_help()}")
    what("--bc", default=None, help="baseline to clone before RL, 'none' to skip (default: the YAML's)")
    init = "start from an exported policy's weights (e.g. policies/generalist) instead of cloning: fine-tuning"
    what("--init", type=Path, default=None, help=init)
    what(
        "--eval-baselines",
        default=None,
        help=f"baselines the evaluation compares to (default: {','.join(DEFAULT_EVAL_BASELINES)}; routers for a "
        f"cluster scenario: {','.join(DEFAULT_EVAL_ROUTERS)})",
    )
    out = p.add_argument_group("output").add_argument
    out_help = "run folder (default: runs/<scenario>-seed<seed>; a sweep: runs/sweep)"
    out("--out", type=output_path, default=None, help=out_help)
    out(
        "--resume",
        action="store_true",
        help="continue from the run folder's latest checkpoint, keeping its best evaluation so far (best.json) so that "
        "only a better model replaces best_model.zip; checkpoints are pickles (loading one can run code), "
        "so only one that this user's training signed is loaded (key: ~/.config/llmsched/checkpoint.key)",
    )
    out("--force", action="store_true", help="allow a run folder inside a shipped folder")
    out("--no-progress", action="store_true", help="no status lines and no progress bars on stderr")
    hp = p.add_argument_group("hyperparameters").add_argument
    hp("--hp", action="append", default=[], metavar="KEY=VALUE", help="override a hyperparameter (default: none)")
    hp("--hyperparams", type=Path, default=None, help="a YAML file (default: agents/hyperparams/<algo>.yml)")
    hp("--n-envs", type=int, default=None, help="parallel environments (default: the YAML's)")
    hp("--vec-env", choices=("dummy", "subproc"), default="dummy", help="vectorised env class")
    sweep = p.add_argument_group("many trainings (each in its own run folder OUT/<scenario>-seed<K>[-key=value])")
    sweep.add_argument("--scenarios", default=None, help="comma list: one training per scenario (default: none)")
    sweep.add_argument(
        "--seeds", type=seed_list, default=None, help="comma list: one training per seed (default: --seed)"
    )
    grid = "one training per value (default: none)"
    sweep.add_argument("--hp-grid", action="append", default=[], metavar="KEY=V1,V2", help=grid)
    add_scaleout_options(sweep, "the trainings")
    trace = p.add_argument_group("your own trace instead of --scenario (split in time: train, val, test)")
    add_trace_options(trace, replaces="--scenario")
    add_engine_limits(p, "engine limits of --trace's engine")
    return p


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Parse and check the arguments (``args.config``, ``args.configs``); a bad one exits (status 2)."""
    p = build_parser()
    args = p.parse_args(argv)  # --help exits here, before torch and SB3 are imported (below)
    scaleout(p, args)
    several = bool(args.scenarios or args.seeds or args.hp_grid)
    if args.ray is not None and not several:  # local workers ("local") or a cluster: for a sweep's trainings
        flag = "--workers" if args.workers is not None else "--ray"
        p.error(
            f"{flag} spreads a sweep's trainings over workers, and this command trains once (no --scenarios, --seeds "
            f"or --hp-grid); leave {flag} out, or give the sweep"
        )
    from agents.sweep import sweep_configs, sweep_outputs
    from agents.training import check_model_builds, finished_at_budget, preflight, run_outputs
    from llmsched_env.evaluation.progress import status

    args.sweep = several
    args.scenario_list = [s for s in (args.scenarios or args.scenario).split(",") if s]
    args.seed_list = args.seeds if args.seeds is not None else [args.seed]
    try:
        grid = split_items(args.hp_grid, "--hp-grid", what="item", form="KEY=V1,V2,...")
    except ValueError as exc:
        p.error(str(exc))
    args.grid = {key: values.split(",") if values else [] for key, values in grid.items()}  # none: refused below
    _check_both_given(p, args, argv)
    try:  # two trainings into one run folder: refused, naming the option
        check_unique("--scenarios", args.scenario_list)
        check_unique("--seeds", args.seed_list)
        for key, values in args.grid.items():
            check_unique(f"--hp-grid {key}", values)
    except ValueError as exc:
        p.error(str(exc))
    if args.eval_baselines is not None and not args.eval_baselines.replace(",", "").strip():
        empty = f"an empty list ({args.eval_baselines!r})"
        p.error(f"--eval-baselines: {empty}; name baselines, or leave it out for the default ones")
    try:  # a link loop named by its option before a reader meets it
        check_input_links(training_inputs(args))
    except ValueError as exc:
        p.error(str(exc))
    trace, limits = None, engine_limits(args)
    if args.trace is not None:
        if args.sweep or args.scenario != "default":
            p.error(
                "--trace replaces --scenario and trains once (no --scenarios, --seeds, --hp-grid, --workers or --ray)"
            )
        if unread := unread_trace_option(given_options(p, argv), args.trace_format):  # e.g. columns of azure's
            p.error(unread)
        trace = {**trace_options(args), **({"engine": limits} if limits else {})}
    elif stray := stray_trace_options(given_options(p, argv), ENGINE_LIMITS):
        p.error(f"{', '.join(stray)}: the trace options and the engine limits apply to --trace only")
    try:  # the options' values: a usage line (a file named, such as --init's policy, that fails: one error line)
        args.config = from_args(
            TrainConfig,
            args,
            scenario=args.scenario_list[0] if args.sweep else args.scenario,
            seed=args.seed_list[0] if args.sweep else args.seed,
            out=args.out if args.out is not None or not args.sweep else Path("runs/sweep"),
            hp=parse_overrides(args.hp),
            eval_baselines=args.eval_baselines,  # a comma string; TrainConfig splits it
            progress=not args.no_progress,
            trace=trace,
        )
        args.configs = [args.config]
        if args.sweep:
            args.configs = sweep_configs(
                args.config, args.config.run_folder, args.scenario_list, args.seed_list, args.grid
            )
        for config in args.configs:  # the hyperparameters as the model takes them
            check_model_builds(config, resolve_hyperparams(config))
    except ValueError as exc:  # the trace's options named as their flags
        reject(p, exc, as_flags(str(exc).removeprefix("trace: ")) if trace is not None else None)
    try:  # what the run folders, the checkpoint key and the files read hold: one error line, no usage block
        check_output(args.config.run_folder, args.force)
        args.kept = []
        if args.sweep:  # a resumed sweep: its trainings that finished at their budget are kept as they are
            done = {id(c): finished_at_budget(c) for c in args.configs}
            for config in args.configs:
                if done[id(config)] is not None:
                    status(f"--resume: {config.run_folder} finished at {done[id(config)]} steps; kept as it is")
                    args.kept.append(config)
            args.configs = [c for c in args.configs if done[id(c)] is None]
        written = sweep_outputs(args.config.run_folder, args.configs) if args.sweep else run_outputs(args.config)
        check_inputs_apart(training_inputs(args), written)  # no training writes over what it reads
        for config in args.configs:  # every refusal before anything is written; train() warns, once
            preflight(config, warn=False)
    except ValueError as exc:
        refuse(p.prog, as_flags(str(exc).removeprefix("trace: ")) if trace is not None else str(exc))
    return args


def training_inputs(args: argparse.Namespace) -> Inputs:
    """The files a training reads that its options name: ``--trace``, ``--init``'s policy (its description and
    weights) and ``--hyperparams``."""
    from llmsched_env.decision.policy_file import policy_file_paths

    init = policy_file_paths(args.init) if args.init is not None else None
    return [("--trace", args.trace), *(("--init", path) for path in init or [args.init]),
            ("--hyperparams", args.hyperparams)]  # fmt: skip


def _check_both_given(p: argparse.ArgumentParser, args: argparse.Namespace, argv: Sequence[str] | None) -> None:
    """A usage error for two options given together where one would be ignored: ``--seed`` with ``--seeds``,
    ``--scenario`` with ``--scenarios``, ``--hp KEY`` with ``--hp-grid`` of that key or one inside or around it."""
    given = given_options(p, argv)
    for one, many in (("seed", "seeds"), ("scenario", "scenarios")):
        if one in given and many in given:
            listed = getattr(args, many)  # --seeds: parsed into a list
            listed = ",".join(map(str, listed)) if isinstance(listed, list) else listed
            p.error(
                f"--{one} {getattr(args, one)} and --{many} {listed}: --{many} runs one training per "
                f"{one} and --{one} would be ignored; give the {one} in --{many}"
            )
    keys = [item.partition("=")[0].strip() for item in args.hp]
    for i, key in enumerate(keys):  # a mapping and a key inside it: one would replace what the other sets
        for j in range(i + 1, len(keys)):  # (one key given twice is an override: the last one counts, as documented)
            if keys[j].startswith(f"{key}.") or key.startswith(f"{keys[j]}."):
                p.error(
                    f"--hp {args.hp[i]} and --hp {args.hp[j]}: one sets a key inside the other, so the later "
                    "replaces what the earlier sets there; give the keys one by one (KEY.SUBKEY=VALUE)"
                )
    for item in args.hp:
        key = item.partition("=")[0].strip()
        for grid in (g.strip() for g in args.grid):
            if key == grid or key.startswith(f"{grid}.") or grid.startswith(f"{key}."):
                p.error(
                    f"--hp {item} and --hp-grid {grid}: each of the grid's values replaces "
                    f"the --hp one, which would be ignored; give {grid} in one of them"
                )


@command("llmsched-train", "train.py")
def main(argv: Sequence[str] | None = None) -> int:
    """``llmsched-train``: 0 when every training succeeded, 1 when a sweep had a failing one; Ctrl-C, a signal or a
    full disk: one line saying what the run folder keeps (``entry.command``)."""
    args = parse_args(argv)
    from agents.sweep import finished_result, run_sweep
    from agents.training import train

    config: TrainConfig = args.config
    if args.sweep:
        keep(
            f"each training's run folder under {config.run_folder} keeps its checkpoints",
            "rerun the sweep with --resume",
        )
    else:
        keep(lambda: kept_by(config.run_folder), "rerun with --resume")
    try:
        if args.sweep:
            results = run_sweep(args.configs, config.run_folder, args.ray, args.ray_cpus, config.progress, config.force,
                                kept=[finished_result(c.run_folder) for c in args.kept])  # fmt: skip
            return 0 if all(r["returncode"] == 0 for r in results) else 1
        train(config)
    except OutputBusyError as exc:  # another training writes into --out: one line, nothing written
        refuse(build_parser().prog, str(exc))
    return 0


def kept_by(run_folder: Path) -> str:
    """What a training stopped now leaves in ``run_folder``: its newest checkpoint, or none yet."""
    from agents.checkpoints import latest_checkpoint

    checkpoint = latest_checkpoint(run_folder / "checkpoints")
    if checkpoint is None:
        return f"{run_folder} holds no checkpoint yet (--resume starts afresh there)"
    return f"{run_folder} keeps its checkpoints, the newest {checkpoint.name}"


if __name__ == "__main__":
    sys.exit(main())
