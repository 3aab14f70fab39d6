"""Which static settings would teach the generalist best on randomised workloads (agents/teacher.py's
``DEFAULT_CANDIDATES``, docs/generalist.md): every candidate's SLO attainment on randomised *train* episodes, the
mean per candidate, and a greedy choice of the set whose best-of attainment is highest.

    python bench/teacher_candidates.py [--first 100] [--episodes 60] [--size 6]

Episode ``s`` is ``LLMSchedMix-v0``'s training draw of seed ``s`` with every episode randomised (400 requests,
loads 0.3-2 x the estimated knee, 4 iterations per decision); the candidates are ``slo_aware``, ``sjf`` and each
distinct setting of the shipped tuned table (``tuned:SCENARIO``). About 6.5 s per episode on one core.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np
import torch

from agents.generalist import knee_loads
from agents.teacher import TUNED_PREFIX, candidate_factory, shipped_settings
from llmsched_env.envs.episode import run_episode
from llmsched_env.envs.mixture import WorkloadMixEnv


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--first", type=int, default=100, help="first episode seed")
    p.add_argument("--episodes", type=int, default=60)
    p.add_argument("--size", type=int, default=6, help="candidates in the greedy set")
    a = p.parse_args(argv)
    torch.set_num_threads(1)
    distinct: dict[str, object] = {}
    for name, decision in shipped_settings().items():
        if decision not in distinct.values():
            distinct[name] = decision
    candidates = ["slo_aware", "sjf", *(TUNED_PREFIX + name for name in distinct)]
    mix = WorkloadMixEnv(
        split="train",
        knee_loads=knee_loads(),
        num_requests=400,
        iterations_per_step=4,
        random_share=1.0,
        load_span=[0.5, 2.0],
    )
    runs: list[dict[str, float]] = []
    for seed in range(a.first, a.first + a.episodes):
        env, workload = mix.draw(seed)
        runs.append({c: run_episode(env, candidate_factory(c, 0), seed)["slo_attainment"] for c in candidates})
        env.close()
        best = max(runs[-1], key=runs[-1].__getitem__)
        print(f"episode {seed} {workload['scenario']} load {workload['load']:.2f}: best {best} {runs[-1][best]:.3f}")
    means = sorted(((float(np.mean([r[c] for r in runs])), c) for c in candidates), reverse=True)
    print("mean attainment: " + ", ".join(f"{c} {m:.4f}" for m, c in means))
    chosen: list[str] = []
    for _ in range(min(a.size, len(candidates))):
        pick = max(
            (c for c in candidates if c not in chosen),
            key=lambda c: np.mean([max(r[x] for x in [*chosen, c]) for r in runs]),
        )
        chosen.append(pick)
        print(f"{len(chosen)}: + {pick}, best-of mean {np.mean([max(r[x] for x in chosen) for r in runs]):.4f}")
    print(f"all {len(candidates)}: best-of mean {np.mean([max(r.values()) for r in runs]):.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
