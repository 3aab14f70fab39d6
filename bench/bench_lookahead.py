"""What the ``lookahead`` bound costs and gains: wall time of one episode and SLO attainment against ``tuned``.
Prints figures; asserts nothing about time.

    OMP_NUM_THREADS=1 python bench/bench_lookahead.py                     # azure-code, mixed-slo, tenants-on-off
    OMP_NUM_THREADS=1 python bench/bench_lookahead.py --policy lookahead:k=32,horizon=32 --scenarios default

For each scenario: one episode of ``--num-requests`` requests (``--split``, seed ``--seed``) at ``tuned``'s val
capacity load (its tuned-table provenance; ``--load`` overrides), played by ``tuned`` and by the lookahead
(``--policy``, a ``lookahead[:options]`` spelling), each timed on this one core. Reports the attainment of
both, the bound's gain in points, its decisions, how many chose another setting than the base, how many of
those were per-request moves (``candidates=requests``), its rollouts,
the wall times, and whether its plan was kept (or the base, playing alone, met more requests and was played).
Target (issue 26): <= 60 s for k=64 on a 1,000-request episode.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import gymnasium as gym

import llmsched_env  # noqa: F401
from llmsched_env.decision.planners.bounds import LookaheadPolicy
from llmsched_env.decision.planners.lookahead import parse_lookahead
from llmsched_env.decision.planners.tuned import load_tuned_table
from llmsched_env.decision.registry import SCHEDULERS, make_scheduler
from llmsched_env.envs.episode import run_episode


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--scenarios", default="azure-code,mixed-slo,tenants-on-off")
    p.add_argument("--policy", default="lookahead", help="lookahead[:k=..,horizon=..,tail=..,candidates=..,base=..]")
    p.add_argument("--num-requests", type=int, default=1000)
    p.add_argument("--split", default="train", help="train holds 1,000-request windows of every trace scenario")
    p.add_argument("--load", type=float, default=None, help="default: tuned's val capacity for the scenario")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    config = parse_lookahead(args.policy)
    if config is None:
        raise SystemExit(f"--policy {args.policy!r} is not a lookahead spelling")
    table: Any = SCHEDULERS.get("tuned").shipped_table  # type: ignore[attr-defined]
    entries = load_tuned_table(table)
    print(f"{config.name}: k={config.k} horizon={config.horizon} tail={config.tail or 'end'} "
          f"candidates={config.candidates} base={config.base}; {args.num_requests} requests, split {args.split}, "
          f"seed {args.seed}, one core")  # fmt: skip
    head = f"{'scenario':16s} {'load':>5s} {'tuned':>7s} {'bound':>7s} {'gain':>6s} {'decisions':>9s} "
    print(head + f"{'switched':>8s} {'moves':>5s} {'rollouts':>8s} {'tuned s':>8s} {'bound s':>8s}  plan")
    for scenario in filter(None, args.scenarios.split(",")):
        entry = entries.entries.get(scenario)
        load = args.load if args.load is not None else float(entry["provenance"]["val_capacity_load"]) if entry else 1.0
        env = gym.make("LLMSched-v1", scenario=scenario, split=args.split, num_requests=args.num_requests, load=load)
        u: Any = env.unwrapped
        t0 = time.perf_counter()
        tuned = run_episode(env, make_scheduler("tuned", u.policy_context()), args.seed)["slo_attainment"]
        tuned_s = time.perf_counter() - t0
        made: list[LookaheadPolicy] = []

        def build(e: gym.Env, made: list[LookaheadPolicy] = made) -> LookaheadPolicy:
            made.append(LookaheadPolicy(e, config, args.seed))
            return made[-1]

        t0 = time.perf_counter()
        bound = run_episode(env, build, args.seed)["slo_attainment"]
        bound_s = time.perf_counter() - t0
        la = made[0]
        counts = f"{la.num_decisions:9d} {la.num_switches:8d} {la.num_moves:5d} {la.num_rollouts:8d}"
        counts += f" {tuned_s:8.2f} {bound_s:8.2f}"
        gain = 100 * (bound - tuned)
        kept = "kept" if la.kept_plan else "base played (it met more)"
        print(f"{scenario:16s} {load:5.2f} {tuned:7.3f} {bound:7.3f} {gain:+6.1f} {counts}  {kept}")
        env.close()


if __name__ == "__main__":
    main()
