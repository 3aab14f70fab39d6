"""Cost of one decision of a clone during DAgger: SB3's ``predict`` (through ``agents.SB3Policy``) against the
same network as an exported policy (``agents.bc._clone_actor``: numpy), side by side on one observation stream.

    python bench/bench_clone_actor.py [--calls 3000]

Builds an untrained MaskablePPO of the generalist's shape (128x128) on ``LLMSchedMix-v0``, checks that both act
alike on the observations of one episode, then prints the mean microseconds per call of each and their ratio.
A DAgger round of ``bc_steps`` x ``bc_stride`` clone steps pays this per step.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch
from sb3_contrib import MaskablePPO

from agents.bc import _clone_actor
from agents.sb3 import SB3Policy
from llmsched_env.envs.mixture import WorkloadMixEnv


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--calls", type=int, default=3000, help="decisions timed per actor")
    args = p.parse_args()
    torch.set_num_threads(1)
    env = WorkloadMixEnv(num_requests=100, iterations_per_step=4)
    model = MaskablePPO("MlpPolicy", env, seed=0, policy_kwargs={"net_arch": [128, 128]})
    actors = {"sb3_predict": SB3Policy(model).act, "exported_numpy": _clone_actor(model, env)}
    obs, _ = env.reset(seed=0)
    stream = []
    while len(stream) < args.calls:
        mask = env.action_masks()
        stream.append((obs, mask))
        obs, _, terminated, truncated, _ = env.step(actors["exported_numpy"](obs, mask))
        if terminated or truncated:
            obs, _ = env.reset(seed=len(stream))
    same = all(np.array_equal(actors["sb3_predict"](o, m), actors["exported_numpy"](o, m)) for o, m in stream)
    print(f"same actions on {len(stream)} observations: {same}")
    micros = {}
    for name, act in actors.items():
        t0 = time.perf_counter()
        for o, m in stream:
            act(o, m)
        micros[name] = (time.perf_counter() - t0) / len(stream) * 1e6
        print(f"{name:>15}: {micros[name]:8.1f} us per call")
    print(f"ratio sb3_predict / exported_numpy: {micros['sb3_predict'] / micros['exported_numpy']:.1f}x")


if __name__ == "__main__":
    main()
