"""Tune each scenario's static scheduler knobs on its val split and store them for the ``tuned`` baseline.

    llmsched-tune --scenarios mixed-slo,bursty          # into results/tuned.json (tuned=results/tuned.json)
    llmsched-tune --scenarios all --out my_tuned.json   # every library scenario, into a table of your own
    llmsched-tune --scenarios bursty --out baselines/tuned.json --force   # into the shipped table
    llmsched-tune --trace my.csv --trace-format azure   # your own trace, into your user table (below)
    python -m llmsched_env.commands.tune ...            (the same command, from a checkout)

On the val split only: the probe load is the highest val capacity of the --reference heuristics; the static
heuristics and --candidates random settings race over the val windows of --seeds at that load, each compared
paired, window by window, with the leader and dropped once behind it with 95% confidence; a raced local search
moves one knob at a time (--rounds); the best three play as many fresh val windows, and the best there is the
pick, its margin to the runner-up in the entry; the entry is merged into --out (deterministic for the same
options). A trace's entry is keyed ``STEM@HASH`` (the file's content, its options, the engine and the cost model)
and goes to the user table ($LLMSCHED_TUNED_TABLE, else ${XDG_DATA_HOME:-~/.local/share}/llmsched/tuned.json),
where ``llmsched-evaluate --trace FILE --policies tuned`` finds it. Beside the table, ``NAME.vllm/KEY/`` gets what
runs the entry in vLLM: ``llmsched.yaml`` (the adapter config) and ``README.md`` / ``vllm.json`` (the ``vllm serve``
command lines, and vLLM's own flags with what each knob loses without the adapter). From Python:
``llmsched_env.evaluation.tuning``.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from llmsched_env.adapters.vllm.deploy import deploy_tuned_entry, deployment_files
from llmsched_env.cluster.scenarios import list_cluster_scenarios
from llmsched_env.commands.entry import command, keep, refuse, reject
from llmsched_env.commands.evaluate_args import (
    add_engine_limits,
    add_fitted_option,
    add_trace_options,
    csv_list,
    engine_limits,
    int_at_least,
    positive_int,
    seed_int,
    seed_list,
    stray_trace_options,
    trace_options,
    trace_scenarios,
    unread_trace_option,
)
from llmsched_env.commands.help import DefaultsFormatter, from_args, given_options, program
from llmsched_env.common.checks import Parser
from llmsched_env.common.outputs import (
    Inputs,
    Written,
    check_input_links,
    check_inputs_apart,
    check_output,
    check_update_lock,
    file_output_path,
    update_lock,
    written_file,
)
from llmsched_env.costs.loader import cost_model_path
from llmsched_env.decision.planners.space import STATIC_HEURISTICS
from llmsched_env.decision.planners.tuned import (
    USER_TABLE_ENV,
    TraceKey,
    load_tuned_table,
    trace_keys,
    user_table,
    val_episode_size,
    write_tuned_entries,
)
from llmsched_env.evaluation.config import InputError
from llmsched_env.evaluation.tuning import CONFIRM_TOP, MAX_CANDIDATES, MAX_ROUNDS, TuneConfig, tune_scenario
from llmsched_env.workloads.library import get_scenario, list_scenarios

PROG = ("llmsched-tune", "tune.py")
DEFAULT_OUT = Path("results/tuned.json")  # --scenarios' table by default: a copy of the user's, never the shipped one
# the most simulated requests one scenario's search may plan (the default search of a library scenario: ~10**6)
MAX_PLANNED_REQUESTS = 10**9
MOVES_PER_ROUND = 10  # single-knob moves a local-search round scores (knob_space.neighbours; a few more or fewer)
CAPACITY_LOADS = 8  # loads one capacity search runs on each of its seeds (a bracket and bisection: 8-10)


def planned_episodes(config: TuneConfig) -> int:
    """About how many episodes a search with ``config`` runs at most (a race that drops none)."""
    seeds = len(config.seeds)
    episodes = CAPACITY_LOADS * (len(config.references) * min(2, seeds) + (1 + len(config.references)) * seeds)
    episodes += (config.candidates + len(STATIC_HEURISTICS)) * seeds  # the race: every setting on every seed
    episodes += config.rounds * MOVES_PER_ROUND * seeds  # the local search's moves
    return episodes + CONFIRM_TOP * seeds  # the confirmation: as many fresh windows as the search's


def build_parser() -> argparse.ArgumentParser:
    """The parser of ``llmsched-tune``, its options in groups (the common ones first)."""
    p = Parser(prog=program(*PROG), description=__doc__, formatter_class=DefaultsFormatter)
    what = p.add_argument_group("what to tune").add_argument
    what(
        "--scenarios",
        type=csv_list(str),
        default=None,
        help=f"scenarios to tune, or all: {','.join(list_scenarios())} (default: none; required without --trace)",
    )
    what("--num-requests", type=positive_int, default=None, help="requests per episode (default: the scenario's)")
    what("--cost-model", default=None, help="cost-model preset name or JSON path (default: the scenario's)")
    search = p.add_argument_group("search").add_argument
    reference = "heuristics whose highest val capacity is the load candidates are scored at"
    search("--reference", type=csv_list(str), default=["slo_aware", "sjf"], help=reference)
    seeds = "val seeds (windows) the settings race over; the confirmation plays as many fresh ones"
    search("--seeds", type=seed_list, default=[0, 1, 2, 3, 4], help=seeds)
    candidates = "uniformly random knob settings besides the heuristics'"
    search("--candidates", type=int_at_least(0, MAX_CANDIDATES), default=48, help=candidates)
    search("--seed", type=seed_int, default=0, help="seed of the random knob settings (in [0, 2**32))")
    search("--rounds", type=int_at_least(0, MAX_ROUNDS), default=2, help="local-search rounds (0: none)")
    no_racing = "every setting plays every seed, none dropped (a reference search, slower)"
    search("--no-racing", dest="racing", action="store_false", help=no_racing)
    out = p.add_argument_group("output").add_argument
    out(
        "--out",
        type=file_output_path,
        default=None,
        help=f"tuned-settings table to write into, its other entries kept (default: --scenarios: {DEFAULT_OUT}, "
        "which llmsched-evaluate plays with --policies tuned=FILE; the shipped baselines/tuned.json only with "
        f"--force; --trace: your user table, ${USER_TABLE_ENV} if set, else "
        "${XDG_DATA_HOME:-~/.local/share}/llmsched/tuned.json, where llmsched-evaluate --trace --policies tuned looks)",
    )
    out("--force", action="store_true", help="allow --out to write into the shipped table (or another shipped file)")
    trace = p.add_argument_group("your own trace (instead of --scenarios)")
    add_trace_options(trace)
    add_fitted_option(trace)
    add_engine_limits(p)
    return p


def tune_inputs(args: argparse.Namespace) -> Inputs:
    """The files a tune reads that its options name: ``--trace`` and a ``--cost-model`` file."""
    return [("--trace", args.trace), ("--cost-model", cost_model_path(args.cost_model) if args.cost_model else None)]


def tune_outputs(out: Path, entries: Sequence[str]) -> list[Written]:
    """Every file a tune writes: the table ``out`` (merged under its lock) and each of ``entries``' vLLM
    deployment beside it (``deployment_files``)."""
    files = [update_lock(out), *(path for entry in entries for path in deployment_files(out, entry))]
    return [written_file("--out", out), *(Written("--out", out, path) for path in files)]


@command(*PROG)
def main(argv: Sequence[str] | None = None) -> int:
    """Run ``llmsched-tune`` with ``argv``; 0 on success, a bad option: status 2, one line; Ctrl-C, a signal or a
    full disk: one line naming the entries written (``entry.command``)."""
    p = build_parser()
    args = p.parse_args(argv)
    if (args.scenarios is None) == (args.trace is None):
        p.error("give --scenarios (names, or all) or --trace, one of the two")
    if args.trace is None:  # a trace option without --trace would change nothing: refused, not ignored
        stray = stray_trace_options(given_options(p, argv))  # given: a default (--trace-slo chat) is not
        if stray:
            p.error(f"{', '.join(stray)} appl{'y' if len(stray) > 1 else 'ies'} to --trace only (give --trace FILE)")
    elif unread := unread_trace_option(given_options(p, argv), args.trace_format):  # e.g. columns of an azure trace
        p.error(unread)
    if args.candidates == 0 and "seed" in given_options(p, argv):  # it draws the random candidates only
        p.error("--seed seeds the random candidates, and --candidates 0 draws none: give --candidates N or drop --seed")
    limits = engine_limits(args)
    command = None
    keys: dict[str, TraceKey] = {}  # a trace's scenarios (its replay, its fitted traffic) -> their entries' keys
    try:
        check_input_links(tune_inputs(args))  # a link loop named by its option before a reader meets it
        config = from_args(TuneConfig, args, references=args.reference, engine_limits=limits or None)
        scenarios: list[Any] = args.scenarios or []
        if scenarios == ["all"]:
            scenarios = list_scenarios()
        clusters = [name for name in scenarios if name in list_cluster_scenarios()]
        if clusters:
            p.error(f"{clusters} are cluster scenarios: tune the single-node scenario their replicas run (a tuned "
                    "local policy plays its entry)")  # fmt: skip
        if args.trace is not None:
            scenarios = trace_scenarios(p, args, limits)
            command = shlex.join([PROG[0], *(argv if argv is not None else sys.argv[1:])])
            options = trace_options(args)  # the key: the file's content and these, as llmsched-evaluate sees them
            named = trace_keys(options, scenarios, cost_model=args.cost_model)
            keys = {scenario.name: key for scenario, key in zip(scenarios, named, strict=True)}
        configs = {}  # per scenario: a trace's val part cut into a disjoint window per seed
        for scenario in scenarios:
            scenario = get_scenario(scenario) if isinstance(scenario, str) else scenario
            size = val_episode_size(scenario, config.seeds) if args.num_requests is None else None
            mine = config
            if size is not None and size != scenario.num_requests:
                mine = replace(config, num_requests=size)
                print(f"{scenario.name}: val episodes of {size} requests, a disjoint window of the val part per "
                      "seed (--num-requests sets another size)", flush=True)  # fmt: skip
            mine.eval_config(scenario, config.seeds)  # every name and option checked before the first search
            size = mine.num_requests if mine.num_requests is not None else scenario.num_requests
            episodes = planned_episodes(mine)
            if episodes * size > MAX_PLANNED_REQUESTS:  # each option within its cap, their product need not be
                p.error(f"{scenario.name}: --candidates {mine.candidates}, --rounds {mine.rounds}, "
                        f"{len(mine.seeds)} --seeds and --num-requests {size} plan about {episodes:,} episodes of "
                        f"{size:,} requests, {episodes * size:.1e} requests, more than {MAX_PLANNED_REQUESTS:.0e} "
                        "(half a day or more at ~19,000 requests/s): give fewer candidates, rounds, seeds or "
                        "requests")  # fmt: skip
            configs[scenario.name] = (scenario, mine)
    except ValueError as exc:  # an option's value (a trace file that fails its checks: one error line)
        reject(p, exc)
    out = args.out if args.out is not None else user_table() if keys else DEFAULT_OUT
    try:  # what the table, its folder and its lock hold: one error line, no usage block
        check_output(out, args.force, file=True)  # never into the shipped table (or any shipped folder) unless asked
        check_update_lock(out)  # each entry is merged under .NAME.lock (updating): a folder there fails now
        entries = [keys[name].key if name in keys else name for name in configs]
        check_inputs_apart(tune_inputs(args), tune_outputs(out, entries))  # the search never writes over its input
        if out.exists():
            load_tuned_table(out)  # a file that is no table fails now, not after the search
    except ValueError as exc:
        refuse(p.prog, str(exc))
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        refuse(p.prog, f"--out {out}: cannot create its folder: {exc.strerror or exc}")
    written: list[str] = []  # the entries merged into --out so far: kept whatever ends the command

    def kept() -> str:
        if not written:
            return f"--out {out} is as it was (an entry is merged once its search ends)"
        return f"--out {out} holds the entries tuned before it ({', '.join(written)})"

    def resume() -> str:
        rest = [name for name in configs if name not in written]
        return f"rerun with --scenarios {','.join(rest)}" if args.trace is None and written else "rerun it"

    keep(kept, resume)
    for scenario, config in configs.values():
        try:
            result = tune_scenario(config, scenario, log=lambda line: print(line, flush=True), command=command)
        except InputError as exc:  # found by the search (no load meets the SLOs): one line, no usage block
            print(f"{p.prog}: {exc}", file=sys.stderr, flush=True)
            return 2
        name, entry = result.scenario, result.entry
        key = keys.get(name)
        if key is not None:  # a trace: keyed by its content and options, which the provenance records
            name = key.key
            entry = {**entry, "provenance": {**entry["provenance"], "trace": {"key": key.key, **key.identity}}}
        write_tuned_entries(out, {name: entry})  # after each: a long run keeps what it found
        written.append(name)
        print(f"{name}: wrote {out} ({result.num_episodes} episodes, {result.wall_s:.0f} s)", flush=True)
        # --- deploy hook (adapters/vllm/deploy.py): the vLLM adapter config and native flags beside the table ---
        print(*deploy_tuned_entry(out, name, entry, scenario), sep="\n", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
