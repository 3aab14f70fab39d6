"""How often a trained policy picks ``tuned``'s setting, component by component, in the states it reaches itself
(docs/generalist.md: why the generalist is cloned with DAgger rounds).

    python bench/agreement.py --policy learned --scenarios azure-conv,bursty [--split val] [--load-factor 1.4]

The policy plays one episode per scenario (seed 0) at ``load-factor`` times the scenario's knee
(``agents.generalist.knee_loads``), holding each decision for its training's iterations per step; in every state
``tuned`` is asked what it would do, and the share of steps where each action component matches is printed.
"""

from __future__ import annotations

import argparse

import numpy as np
import torch

import llmsched_env  # noqa: F401
from agents.generalist import knee_loads
from llmsched_env.commands.evaluate_args import csv_list
from llmsched_env.decision.registry import make_scheduler
from llmsched_env.evaluation.config import EvalConfig

COMPONENTS = ("order", "token_budget", "chunk_cap", "prefill_first", "admission", "kv_reserve", "shed")


def agreement(policy: str, scenario: str, split: str, load: float, seed: int = 0) -> tuple[np.ndarray, int]:
    """Per action component, the share of the episode's steps where ``policy`` chose ``tuned``'s option."""
    config = EvalConfig(scenarios=(scenario,), policies=(policy,), split=split)  # the evaluation's own env
    spec = config.policies[0]
    env = config.make_env(config.scenarios[0], load, spec.iterations_per_step, spec.schema)
    obs, _ = env.reset(seed=seed)
    u = env.unwrapped
    mine, teacher = spec.make(env, seed), make_scheduler("tuned", u.policy_context(), seed=seed)
    same = []
    while True:
        mask = u.action_masks()
        action = np.asarray(mine.act(obs, mask))
        same.append(action == np.asarray(teacher.act(obs, mask)))
        obs, _, terminated, truncated, _ = env.step(action)
        if terminated or truncated:
            return np.mean(same, axis=0), len(same)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--policy", default="learned", help="a policy as llmsched-evaluate --policies takes it")
    p.add_argument(
        "--scenarios",
        type=csv_list(str),
        default=["azure-conv", "bursty", "azure-code"],
        help="library scenarios, comma-separated",
    )
    p.add_argument("--split", default="val", help="the split the episode is cut from (default: val)")
    p.add_argument("--load-factor", type=float, default=1.4, help="load, times the scenario's knee (default 1.4)")
    args = p.parse_args()
    torch.set_num_threads(1)
    knees = knee_loads()
    print(f"| scenario | steps | {' | '.join(COMPONENTS)} |")
    print("|---|---|" + "---|" * len(COMPONENTS))
    for scenario in args.scenarios:
        shares, steps = agreement(args.policy, scenario, args.split, knees[scenario] * args.load_factor)
        print(f"| `{scenario}` | {steps} | " + " | ".join(f"{v:.2f}" for v in shares) + " |")


if __name__ == "__main__":
    main()
