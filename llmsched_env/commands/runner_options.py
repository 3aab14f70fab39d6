"""The options that say which model runs where: ``RunnerSpec``'s fields on a command line, without torch.

    add_runner_options(parser)                          # --model --device --dtype --weights [--seed --threads]
    spec = runner_spec(parser, parser.parse_args())     # a usage error for a bad value (imports torch)

``llmsched-calibrate``, ``llmsched-evaluate --backend runtime`` (without ``--seed``/``--threads``: its
``RuntimeOptions`` runs seed 0 on one thread) and the runtime benchmarks take these options. Adding them
imports no torch, so ``--help`` stays fast; the device and dtype defaults are resolved when the spec is built.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from llmsched_env.commands.help import from_args
from llmsched_env.runtime.names import DTYPE_NAMES, MODEL_NAMES

if TYPE_CHECKING:  # torch only once a spec is built
    from llmsched_env.runtime.runner_spec import RunnerSpec

__all__ = ["add_runner_options", "runner_spec"]

DEVICE_HELP = "torch device (default: cuda when available, else cpu)"
DTYPE_HELP = "model dtype (default: float32 on cpu, else bfloat16)"


def add_runner_options(parser: Any, seed_and_threads: bool = True) -> None:
    """Add ``--model``, ``--device``, ``--dtype`` and ``--weights`` (and, with ``seed_and_threads``, ``--seed``
    and ``--threads``) to ``parser`` (a parser or an argument group). ``--device`` and ``--dtype`` default to
    None: this machine's choice (``RunnerSpec.for_here``)."""
    parser.add_argument("--model", default="tiny", choices=MODEL_NAMES, help="model preset")
    parser.add_argument("--device", default=None, help=DEVICE_HELP)
    parser.add_argument("--dtype", default=None, choices=DTYPE_NAMES, help=DTYPE_HELP)
    weights = "local safetensors file or folder (default: random weights drawn from the seed)"
    parser.add_argument("--weights", type=Path, default=None, help=weights)
    if seed_and_threads:
        parser.add_argument("--seed", type=int, default=0, help="weights seed")
        parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")


def runner_spec(parser: argparse.ArgumentParser, args: argparse.Namespace) -> RunnerSpec:
    """The ``RunnerSpec`` of the parsed options, the device and dtype defaulted for this machine (and
    ``args.device``/``args.dtype`` set to them); a bad value exits with a one-line usage error (status 2)."""
    from llmsched_env.runtime.runner_spec import RunnerSpec, default_device, default_dtype

    device = args.device or default_device()
    try:
        spec = from_args(RunnerSpec, args, device=device, dtype=args.dtype or default_dtype(device))
    except ValueError as exc:
        parser.error(str(exc))
    args.device, args.dtype = spec.device, spec.dtype
    return spec
