"""Export a training checkpoint as a policy folder, to judge it on ``val`` like the best model (a generalist
candidate, docs/generalist.md).

    python bench/export_checkpoint.py runs/generalist/checkpoints/model_350000_steps.zip runs/g350

The run folder's ``config.yml`` and ``args.json`` (next to ``checkpoints/``) give the scenario, algorithm, seed
and env arguments; the policy file is what the training's own export writes for that model (same bytes).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
import yaml

from agents.sb3 import ALGOS
from agents.training import export_run_policy, make_env_fn


def export_checkpoint(checkpoint: Path, out: Path) -> int:
    """Write ``out/policy.json`` and ``out/policy.safetensors`` for ``checkpoint``; return its step count."""
    run = checkpoint.parent.parent
    for needed in (checkpoint, run / "config.yml"):
        if not needed.is_file():
            raise SystemExit(f"{needed}: no such file (a checkpoint RUN/checkpoints/model_N_steps.zip of a run folder)")
    config = yaml.safe_load((run / "config.yml").read_text())
    seed = int(json.loads((run / "args.json").read_text()).get("seed", 0)) if (run / "args.json").is_file() else 0
    scenario, algo, env_kwargs = config["scenario"], config["algo"], dict(config["env_kwargs"])
    model = ALGOS[algo].load(str(checkpoint), device="cpu")
    export_run_policy(model, make_env_fn(scenario, algo, env_kwargs, agent=False)(), out, scenario, seed, env_kwargs)
    return int(model.num_timesteps)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("checkpoint", type=Path, help="RUN/checkpoints/model_N_steps.zip")
    p.add_argument("out", type=Path, help="the policy folder to write")
    args = p.parse_args()
    torch.set_num_threads(1)
    steps = export_checkpoint(args.checkpoint, args.out)
    print(f"exported {args.checkpoint} ({steps} steps) to {args.out}")


if __name__ == "__main__":
    main()
