"""How much a step-time error grows in the latencies: the fidelity workloads in the simulator, every step
priced ``--scale`` times the preset, against the preset itself.

    python bench/fidelity_sensitivity.py                       # preset runtime-tiny-cpu, scales 1.03, 1.05

Simulator only (no model runs, a few seconds). Prints, per policy and load, the relative change of TTFT,
TPOT and E2E p50 and p99: what a machine running that much slower than its calibration does to the
fidelity report.
"""

from __future__ import annotations

import argparse

import baselines
from llmsched_env.commands.evaluate_args import csv_list
from llmsched_env.costs.loader import load_cost_model
from llmsched_env.engine.batch import Batch
from llmsched_env.runtime.fidelity import RUNTIME_ENGINE, FidelityWorkload, PolicyFactory, drive, saturation_rps
from llmsched_env.sim.simulator import Simulator

METRICS = ("ttft_p50_s", "ttft_p99_s", "tpot_p50_s", "tpot_p99_s", "e2el_p50_s", "e2el_p99_s")


class Scaled(Simulator):
    scale = 1.0

    def execute(self, batch: Batch) -> float:
        return super().execute(batch) * self.scale


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="runtime-tiny-cpu")
    parser.add_argument("--policies", type=csv_list(str), default=["fcfs", "sjf", "slo_aware"])
    parser.add_argument("--loads", type=csv_list(float, 0.0), default=[0.4, 0.7])
    parser.add_argument("--seeds", type=csv_list(int), default=[1, 2])
    parser.add_argument("--scales", type=csv_list(float, 0.0), default=[1.03, 1.05])
    args = parser.parse_args()
    model = load_cost_model(args.preset)
    workload = FidelityWorkload()
    tenants = workload.tenants(model)

    def make(name: str) -> PolicyFactory:
        return lambda ctx: baselines.make(name, ctx, seed=0)

    sat = saturation_rps(model, workload, RUNTIME_ENGINE, make("fcfs"))
    print(f"preset {args.preset}: mean relative change over seeds {','.join(map(str, args.seeds))}")
    print(f"{'scale':>6} {'policy':>10} {'load':>5} " + " ".join(f"{m.removesuffix('_s'):>10}" for m in METRICS))
    for scale in args.scales:
        for name in args.policies:
            for load in args.loads:
                changes = {m: 0.0 for m in METRICS}
                seeds = args.seeds
                for seed in seeds:
                    reqs = workload.requests(model, sat * load, seed)
                    base = drive(Simulator(RUNTIME_ENGINE, tenants, model, reqs), make(name), make("fcfs"))
                    sim = Scaled(RUNTIME_ENGINE, tenants, model, workload.requests(model, sat * load, seed))
                    sim.scale = scale
                    slow = drive(sim, make(name), make("fcfs"))
                    for m in METRICS:
                        changes[m] += (slow[m] / base[m] - 1) / len(seeds)
                cells = " ".join(f"{100 * changes[m]:>+9.1f}%" for m in METRICS)
                print(f"{scale:>6.2f} {name:>10} {load:>5.2f} {cells}")


if __name__ == "__main__":
    main()
