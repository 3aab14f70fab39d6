"""Train a Stable-Baselines3 agent on ``LLMSched-v0``.

    python train.py --algo maskable_ppo --timesteps 20000 --seed 0 --out runs/ppo0

Writes the model (``model.zip``), the arguments and the command line into ``--out``, with TensorBoard
events under ``--out/tb``. (Scenario YAML, vector envs, evaluation callbacks and policy export are issue #4.)
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

import gymnasium as gym
import torch

import llmsched_env  # noqa: F401  (registers LLMSched-v0)
from agents import ALGOS, make_model


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--algo", choices=sorted(ALGOS), default="maskable_ppo")
    p.add_argument("--timesteps", type=int, default=20_000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--num-requests", type=int, default=300, help="requests per training episode")
    p.add_argument("--load", type=float, default=1.0)
    p.add_argument("--cost-model", default="llama3-8b-h100")
    p.add_argument("--n-steps", type=int, default=2048, help="rollout length per update (PPO family)")
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args(argv)
    if args.timesteps < 1 or args.n_steps < 2:
        p.error("--timesteps must be >= 1 and --n-steps >= 2")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(1)  # SB3 on 2 cores runs far slower with more threads
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "args.json").write_text(json.dumps({k: str(v) for k, v in vars(args).items()}, indent=1))
    (args.out / "command.txt").write_text(" ".join([sys.executable, *sys.argv]) + "\n")
    env = gym.make("LLMSched-v0", num_requests=args.num_requests, load=args.load, cost_model=args.cost_model)
    model = make_model(
        args.algo, env, seed=args.seed, tensorboard_log=str(args.out / "tb"), n_steps=args.n_steps, batch_size=64
    )
    model.learn(total_timesteps=args.timesteps)
    model.save(str(args.out / "model.zip"))
    print(f"saved {args.out / 'model.zip'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
