"""Attainment of fixed scheduler knobs (one Decision every iteration) on a scenario's evaluation windows.

    python bench/probe_static_knobs.py --scenario mixed-slo --load 1.4 --seeds 0,1

Shows how much a knob no baseline turns is worth (here: the chunk cap under EDF with shedding), i.e. the
room a learned agent has above the heuristics.
"""

from __future__ import annotations

import argparse
import itertools

import gymnasium as gym
import numpy as np

import llmsched_env  # noqa: F401
from llmsched_env.engine.batch import Decision, QueueOrder


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--scenario", default="mixed-slo")
    p.add_argument("--load", type=float, default=1.4)
    p.add_argument("--seeds", default="0,1")
    args = p.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    env = gym.make("LLMSched-v0", scenario=args.scenario, split="val", load=args.load)
    u = env.unwrapped
    spec = u.action_spec
    print("order  budget  chunk_cap  kv_reserve  shed  attainment")
    for cap, budget, reserve in itertools.product((256, 512, 2048), (1024, 2048), (0.0, 0.1)):
        action = spec.encode(
            Decision(order=QueueOrder.EDF, token_budget=budget, chunk_cap=cap, kv_reserve=reserve, shed=True)
        )
        runs = []
        for seed in seeds:
            env.reset(seed=seed)
            while True:
                _, _, term, trunc, info = env.step(spec.project(action, u.action_masks()))
                if term or trunc:
                    runs.append(info["metrics"]["slo_attainment"])
                    break
        print(f"EDF    {budget:6d}  {cap:9d}  {reserve:10.2f}  on    {np.mean(runs):.3f}")


if __name__ == "__main__":
    main()
