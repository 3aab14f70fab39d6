"""How long ``llmsched-tune``'s search takes to a pick, and how good the pick is against a much larger search.
Prints figures; asserts nothing about time. Run it on one core (``taskset -c 0``, ``OMP_NUM_THREADS=1``).

    OMP_NUM_THREADS=1 taskset -c 0 python bench/bench_tune.py                      # mixed-slo, azure-code
    OMP_NUM_THREADS=1 taskset -c 0 python bench/bench_tune.py --scenarios none --eight-tenants
    OMP_NUM_THREADS=1 taskset -c 0 python bench/bench_tune.py --scenarios azure-code --reference 10

For each library scenario of ``--scenarios`` and, with ``--eight-tenants``, the fitted traffic of the 24,000-request
eight-tenant trace (``bench/make_heldout_traces.py --eight-tenants``, written to a temporary folder): the default
search (``tuning.pick_setting``: probe, race, local search, confirmation; not the final val capacities
``llmsched-tune`` adds) timed in wall and CPU seconds, its episodes and how many settings the race dropped.

With ``--reference F``: the same search with every setting on F times as many val windows (``--seeds`` 0..5F-1)
and no dropping (``--no-racing``), and the capacity of both picks on each test seed 0-4 (``find_capacity(...,
seed=s)``, ``split='test'``): the paired ratio fast / reference, mean ± 95% half-width (Student t): how far
the fast pick is from the one a search ten times its size makes.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

from make_heldout_traces import eight_tenants, tenant_slo

from llmsched_env.commands.evaluate_args import trace_scenarios
from llmsched_env.commands.tune import build_parser
from llmsched_env.decision.planners.tuned import TunedTable, settings_of
from llmsched_env.decision.policy_spec import PolicySpec
from llmsched_env.engine.batch import Decision
from llmsched_env.evaluation.capacity import find_capacity
from llmsched_env.evaluation.config import EvalConfig
from llmsched_env.evaluation.stats import mean_ci95
from llmsched_env.evaluation.tuning import Pick, TuneConfig, pick_setting
from llmsched_env.workloads.library import get_scenario
from llmsched_env.workloads.scenarios import Scenario

TEST_SEEDS = (0, 1, 2, 3, 4)
COLUMNS = "arrival=arrival,prompt_len=prompt_len,output_len=output_len,tenant=tenant"


def fitted_eight_tenants(folder: Path) -> Scenario:
    """The fitted traffic of the eight-tenant trace, as ``llmsched-tune --trace ... --fitted-traffic`` builds it."""
    path = folder / "eight_tenants.csv"
    eight_tenants(path)
    argv = ["--trace", str(path), "--trace-format", "generic", "--trace-columns", COLUMNS]
    parser = build_parser()
    args = parser.parse_args([*argv, "--tenant-slo", tenant_slo(), "--fitted-traffic"])
    return trace_scenarios(parser, args, {})[1]


def timed_pick(config: TuneConfig, scenario: Scenario) -> tuple[Pick, float, float]:
    """The search's pick, its wall and CPU seconds."""
    wall, cpu = time.perf_counter(), time.process_time()
    pick = pick_setting(config, scenario, log=lambda line: print("   ", line, flush=True))
    return pick, time.perf_counter() - wall, time.process_time() - cpu


def capacities_on_test(scenario: Scenario, setting: Decision) -> list[float]:
    """``setting``'s capacity on each test seed (one search per seed)."""
    table = TunedTable("<bench>", {scenario.name: {"settings": settings_of(setting), "provenance": {}}})
    spec = PolicySpec("tuned", baseline="tuned", table=table)
    caps = []
    for seed in TEST_SEEDS:
        config = EvalConfig(scenarios=[scenario], policies=["fcfs"], seeds=[seed], split="test")
        caps.append(float(find_capacity(config, scenario, spec, seed=seed, latency=False)["capacity_load"]))
    return caps


def report(scenario: Scenario, factor: int) -> None:
    fast, wall, cpu = timed_pick(TuneConfig(), scenario)
    print(f"{scenario.name}: pick {fast.label} in {wall:.0f} s wall, {cpu:.0f} s CPU ({fast.num_settings} candidates; "
          f"{fast.num_dropped} settings dropped by the races, local moves included; margin "
          f"{fast.confirm.get('margin')})", flush=True)  # fmt: skip
    if not factor:
        return
    seeds = tuple(range(factor * len(TuneConfig().seeds)))
    ref, ref_wall, ref_cpu = timed_pick(TuneConfig(seeds=seeds, racing=False), scenario)
    print(f"{scenario.name}: reference ({len(seeds)} seeds, no racing) pick {ref.label} in {ref_wall:.0f} s wall, "
          f"{ref_cpu:.0f} s CPU; same setting: {ref.setting == fast.setting}", flush=True)  # fmt: skip
    mine = capacities_on_test(scenario, fast.setting)
    theirs = mine if ref.setting == fast.setting else capacities_on_test(scenario, ref.setting)
    ratio, half = mean_ci95([a / b for a, b in zip(mine, theirs, strict=True)])
    print(f"{scenario.name}: test capacity fast {[round(c, 3) for c in mine]}, reference "
          f"{[round(c, 3) for c in theirs]}; paired ratio {ratio:.3f} ± {half:.3f}", flush=True)  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--scenarios", default="mixed-slo,azure-code", help="library scenarios, or none")
    p.add_argument("--eight-tenants", action="store_true", help="also the eight-tenant trace's fitted traffic")
    p.add_argument("--reference", type=int, default=0, help="also a search on this many times the val windows")
    args = p.parse_args()
    scenarios: list[Any] = [get_scenario(n) for n in args.scenarios.split(",") if n and n != "none"]
    with tempfile.TemporaryDirectory() as folder:
        if args.eight_tenants:
            scenarios.append(fitted_eight_tenants(Path(folder)))
        for scenario in scenarios:
            report(scenario, args.reference)


if __name__ == "__main__":
    main()
