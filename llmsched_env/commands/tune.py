"""Tune each scenario's static scheduler knobs on its val split and store them for the ``tuned`` baseline.

    llmsched-tune --scenarios mixed-slo,bursty          # into the shipped table (baselines/tuned.json)
    llmsched-tune --scenarios all --out my_tuned.json   # every library scenario, into a table of your own
    python -m llmsched_env.commands.tune ...            (the same command, from a checkout)

For each scenario, on the val split only: the probe load is the highest val capacity of the --reference
heuristics (2 seeds); the static decision of every static heuristic and --candidates random knob settings are
narrowed by successive halving over --seeds at that load (1 seed, 3 seeds, all; the best third goes on); a
local search then moves one knob at a time (--rounds); last, the val capacity of the result and of the
references. The entry (knobs and how they were found) is merged into --out, other scenarios kept:
``llmsched-evaluate --policies tuned`` (or ``tuned=FILE.json``) plays it. One progress line per step; the
search is deterministic for the same options. Everything is a library call
(``llmsched_env.evaluation.tuning``: ``TuneConfig``, ``tune_scenario``; ``write_tuned_entries``).
"""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from llmsched_env.cluster.scenarios import list_cluster_scenarios
from llmsched_env.commands.evaluate_args import (
    add_engine_limits,
    add_trace_options,
    csv_list,
    engine_limits,
    int_at_least,
    positive_int,
    trace_scenario,
)
from llmsched_env.commands.help import DefaultsFormatter, program
from llmsched_env.decision.tuned_table import write_tuned_entries
from llmsched_env.evaluation.tuning import TuneConfig, shipped_table, tune_scenario
from llmsched_env.workloads.library import list_scenarios

__all__ = ["build_parser", "main"]

PROG = ("llmsched-tune", "tune.py")


def build_parser() -> argparse.ArgumentParser:
    """The parser of ``llmsched-tune``."""
    p = argparse.ArgumentParser(prog=program(*PROG), description=__doc__, formatter_class=DefaultsFormatter)
    add = p.add_argument
    add(
        "--scenarios",
        type=csv_list(str),
        default=None,
        help=f"scenarios to tune, or all: {','.join(list_scenarios())} (default: none; required without --trace)",
    )
    add(
        "--reference",
        type=csv_list(str),
        default=["slo_aware", "sjf"],
        help="heuristics whose highest val capacity is the load candidates are scored at",
    )
    add("--seeds", type=csv_list(int), default=[0, 1, 2, 3, 4], help="val seeds of the last rung and local search")
    add("--candidates", type=int_at_least(0), default=48, help="uniformly random knob settings besides the heuristics'")
    add("--seed", type=int_at_least(0), default=0, help="seed of the random knob settings")
    add("--rounds", type=int_at_least(0), default=2, help="local-search rounds (0: none)")
    add("--num-requests", type=positive_int, default=None, help="requests per episode (default: the scenario's)")
    add("--cost-model", default=None, help="cost-model preset name or JSON path (default: the scenario's)")
    add(
        "--out",
        type=Path,
        default=None,
        help="tuned-settings table to write into, its other scenarios kept (default: the shipped baselines/tuned.json)",
    )
    add_trace_options(p)
    add_engine_limits(p)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``llmsched-tune`` with ``argv`` (default: the process's arguments); 0 on success. A bad option
    exits with status 2 and one usage line."""
    p = build_parser()
    args = p.parse_args(argv)
    if (args.scenarios is None) == (args.trace is None):
        p.error("give --scenarios (names, or all) or --trace, one of the two")
    if args.trace is None and (args.tenant_slo is not None or args.trace_rate is not None):
        p.error("--tenant-slo and --trace-rate apply to --trace only")
    limits = engine_limits(args)
    command = None
    try:
        config = TuneConfig(
            references=args.reference,
            seeds=args.seeds,
            candidates=args.candidates,
            seed=args.seed,
            rounds=args.rounds,
            num_requests=args.num_requests,
            cost_model=args.cost_model,
            engine_limits=limits or None,
        )
        scenarios: list[Any] = args.scenarios or []
        if scenarios == ["all"]:
            scenarios = list_scenarios()
        clusters = [name for name in scenarios if name in list_cluster_scenarios()]
        if clusters:
            p.error(f"{clusters} are cluster scenarios: tune the single-node scenario their replicas run (a tuned "
                    "local policy plays its entry)")  # fmt: skip
        if args.trace is not None:
            scenarios = [trace_scenario(p, args, limits)]
            command = shlex.join([PROG[0], *(argv if argv is not None else sys.argv[1:])])
        for scenario in scenarios:  # every name and option checked before the first (long) search
            config.eval_config(scenario, config.seeds)
    except ValueError as exc:
        p.error(str(exc))
    out = args.out if args.out is not None else shipped_table()
    for scenario in scenarios:
        result = tune_scenario(config, scenario, log=lambda line: print(line, flush=True), command=command)
        write_tuned_entries(out, {result.scenario: result.entry})  # after each: a long run keeps what it found
        print(f"{result.scenario}: wrote {out} ({result.num_episodes} episodes, {result.wall_s:.0f} s)", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
