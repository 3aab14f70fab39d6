"""The env's share of a training step: how much of ``model.learn`` is spent inside the environments.

    python bench/bench_train_share.py                                  # the generalist's recipe, 8,192 steps
    python bench/bench_train_share.py --scenario default --timesteps 16384
    python bench/bench_train_share.py --algo ppo --scenario azure-conv

It builds the training's envs as ``llmsched-train`` does (``agents.training.make_env_fn``, the hyperparameter
file's entry for the algorithm and scenario, a ``DummyVecEnv`` of ``n_envs`` envs in this process), wraps each
env in a timer (``reset``, ``step`` and ``action_masks``, the three calls a maskable algorithm makes into it),
and learns ``--timesteps`` steps from a fresh model (no cloning, no evaluation, no checkpoints: the learning
loop alone). It prints the seconds in the envs, in the whole ``learn`` call, and their ratio: the env's share of
a training step. Both clocks run in the same process over the same steps, so the ratio holds on a busy machine
better than either figure. One torch thread, as the training uses.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import gymnasium as gym  # noqa: E402
import torch  # noqa: E402
from stable_baselines3.common.env_util import make_vec_env  # noqa: E402
from stable_baselines3.common.vec_env import DummyVecEnv  # noqa: E402

from agents.sb3 import make_model  # noqa: E402
from agents.train_config import RUN_KEYS, TrainConfig, resolve_hyperparams  # noqa: E402
from agents.training import make_env_fn  # noqa: E402


class EnvTimer(gym.Wrapper):
    """Adds the seconds spent in the wrapped env's ``reset``, ``step`` and ``action_masks`` to ``clock[0]``,
    ``clock[1]`` and ``clock[2]``."""

    def __init__(self, env: gym.Env, clock: list[float]) -> None:
        super().__init__(env)
        self.clock = clock

    def reset(self, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        out = self.env.reset(**kwargs)
        self.clock[0] += time.perf_counter() - t0
        return out

    def step(self, action: Any) -> Any:
        t0 = time.perf_counter()
        out = self.env.step(action)
        self.clock[1] += time.perf_counter() - t0
        return out

    def action_masks(self) -> Any:
        t0 = time.perf_counter()
        out = self.env.unwrapped.action_masks()  # type: ignore[attr-defined]
        self.clock[2] += time.perf_counter() - t0
        return out


def measure(scenario: str, algo: str, timesteps: int, seed: int) -> tuple[list[float], float, int]:
    """([seconds in the envs' reset, step, action_masks], seconds in ``learn``, steps learnt) for ``timesteps``
    steps of a fresh model."""
    config = TrainConfig(scenario=scenario, algo=algo, seed=seed, progress=False)
    hp = resolve_hyperparams(config)
    run = {k: hp.pop(k) for k in RUN_KEYS if k in hp}
    clock = [0.0, 0.0, 0.0]
    make = make_env_fn(config.env_scenario, algo, dict(run["env_kwargs"]))
    n_envs = int(run["n_envs"])
    vec_env = make_vec_env(lambda: EnvTimer(make(), clock), n_envs=n_envs, seed=seed, vec_env_cls=DummyVecEnv)
    try:
        model = make_model(algo, vec_env, seed=seed, **hp)
        clock[:] = [0.0, 0.0, 0.0]  # the resets while building the model are not part of learning
        t0 = time.perf_counter()
        model.learn(total_timesteps=timesteps, progress_bar=False)
        total = time.perf_counter() - t0
        return clock, total, int(model.num_timesteps)
    finally:
        vec_env.close()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--scenario", default="generalist", help="as llmsched-train names it (default: generalist)")
    p.add_argument("--algo", default="maskable_ppo", help="as llmsched-train names it (default: maskable_ppo)")
    p.add_argument("--timesteps", type=int, default=8192, help="steps learnt (default: 8,192)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    torch.set_num_threads(1)
    (reset_s, step_s, mask_s), total_s, steps = measure(args.scenario, args.algo, args.timesteps, args.seed)
    env_s = reset_s + step_s + mask_s
    print(f"{args.scenario} with {args.algo}: {steps} steps learnt in {total_s:.2f} s")
    for name, s in (("reset", reset_s), ("step", step_s), ("action_masks", mask_s), ("env, all", env_s)):
        print(f"  {name:<13} {s:>7.2f} s  {s / steps * 1e6:>6.0f} us/step  {s / total_s:>6.1%} of learn")


if __name__ == "__main__":
    main()
