"""The options that say which model runs where: ``RunnerSpec``'s fields on a command line.

    add_runner_options(parser, device=default_device())   # --model --device --dtype --weights --seed --threads
    spec = runner_spec(parser, parser.parse_args())        # a usage error for a bad value

``llmsched-calibrate`` and the runtime benchmarks (``bench/bench_runtime_model.py``,
``bench/bench_speed_drift.py``) take these options. ``llmsched-evaluate`` has its own runtime options
(``RuntimeOptions``: its help must not import torch, and it picks the dtype by device).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from llmsched_env.commands.help import from_args
from llmsched_env.runtime.model import DTYPES, MODEL_PRESETS
from llmsched_env.runtime.runner_spec import RunnerSpec

__all__ = ["add_runner_options", "runner_spec"]


def add_runner_options(parser: Any, device: str) -> None:
    """Add ``--model``, ``--device`` (default ``device``), ``--dtype``, ``--weights``, ``--seed`` and
    ``--threads`` (``RunnerSpec``'s fields and defaults) to ``parser`` (a parser or an argument group)."""
    spec = RunnerSpec()
    parser.add_argument("--model", default=spec.model, choices=sorted(MODEL_PRESETS), help="model preset")
    parser.add_argument("--device", default=device, help="torch device (default here: %(default)s)")
    parser.add_argument("--dtype", default=spec.dtype, choices=sorted(DTYPES), help="model dtype")
    weights = "local safetensors file or folder (default: random)"
    parser.add_argument("--weights", type=Path, default=spec.weights, help=weights)
    parser.add_argument("--seed", type=int, default=spec.seed, help="weights seed")
    parser.add_argument("--threads", type=int, default=spec.threads, help="torch CPU threads")


def runner_spec(parser: argparse.ArgumentParser, args: argparse.Namespace) -> RunnerSpec:
    """The ``RunnerSpec`` of the parsed options; a bad value exits with a one-line usage error (status 2)."""
    try:
        return from_args(RunnerSpec, args)
    except ValueError as exc:
        parser.error(str(exc))
