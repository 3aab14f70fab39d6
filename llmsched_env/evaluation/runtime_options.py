"""Which model runs where: ``RuntimeOptions`` of the torch runtime backend (``llmsched-evaluate --backend runtime``)
and the command-line options of a ``RunnerSpec`` (``llmsched-calibrate``, the runtime benchmarks).

    add_runner_options(parser)                          # --model --device --dtype --weights [--seed --threads]
    spec = runner_spec(parser, parser.parse_args())     # a usage error for a bad value (imports torch)

Adding the options or importing this module imports no torch (``--help`` stays fast); building a spec or
``RuntimeOptions`` does, and resolves the device and dtype defaults for this machine.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from llmsched_env.common.checks import check_positive
from llmsched_env.common.fields import derived
from llmsched_env.runtime.names import DTYPE_NAMES, MODEL_NAMES

if TYPE_CHECKING:  # torch only once the options are built
    from llmsched_env.runtime.runner_spec import RunnerSpec

__all__ = ["RuntimeOptions", "add_runner_options", "runner_spec"]


@dataclass(frozen=True)
class RuntimeOptions:
    """A real model serving the episodes: ``model`` preset on ``device`` (default: cuda when available, else cpu)
    in ``dtype`` (default: float32 on CPU, bfloat16 on a GPU), ``weights`` from a local safetensors file
    (default: seeded random). ``realtime`` sleeps through idle gaps instead of skipping them; a decision slower
    than ``policy_timeout_s`` falls back to fcfs. ``runner``: the resolved ``RunnerSpec`` (seed 0, one thread).
    ``ValueError`` naming the field when torch is missing or a value is unknown."""

    model: str = "tiny"
    device: str | None = None
    dtype: str | None = None
    weights: Path | None = None
    realtime: bool = False
    policy_timeout_s: float = 0.1
    runner: RunnerSpec = derived()  # noqa: RUF009 (a dataclasses.field: set in __post_init__)

    def __post_init__(self) -> None:
        try:
            from llmsched_env.runtime.runner_spec import RunnerSpec
        except ImportError as exc:
            raise ValueError(f"the runtime backend needs torch: {exc}") from None
        check_positive("RuntimeOptions", "policy_timeout_s", self.policy_timeout_s)
        spec = RunnerSpec.for_here(self.model, self.device, self.dtype, weights=self.weights)
        object.__setattr__(self, "runner", spec)
        object.__setattr__(self, "device", spec.device)
        object.__setattr__(self, "dtype", spec.dtype)
        object.__setattr__(self, "weights", spec.weights)

    def cost_model_preset(self) -> str:
        """The calibrated cost model of this model and device kind (the runtime's SLO scale); ``ValueError``
        saying how to calibrate one when none ships."""
        from llmsched_env.costs.loader import list_presets

        assert self.device is not None  # set in __post_init__
        preset = f"runtime-{self.model}-{self.device.split(':')[0]}"
        if preset not in list_presets():
            raise ValueError(
                f"no calibrated cost model for {self.model} on {self.device}: run `llmsched-calibrate profile "
                f"--model {self.model} --device {self.device} --out {preset}.json` and pass --cost-model {preset}.json"
            )
        return preset


def add_runner_options(parser: Any, seed_and_threads: bool = True) -> None:
    """Add ``--model``, ``--device``, ``--dtype``, ``--weights`` (and ``--seed``, ``--threads``) to ``parser`` (a
    parser or an argument group); ``--device`` and ``--dtype`` default to None: this machine's choice."""
    parser.add_argument("--model", default="tiny", choices=MODEL_NAMES, help="model preset")
    parser.add_argument("--device", default=None, help="torch device (default: cuda when available, else cpu)")
    parser.add_argument(
        "--dtype", default=None, choices=DTYPE_NAMES, help="model dtype (default: float32 on cpu, else bfloat16)"
    )
    weights = "local safetensors file or folder (default: random weights drawn from the seed)"
    parser.add_argument("--weights", type=Path, default=None, help=weights)
    if seed_and_threads:
        parser.add_argument("--seed", type=int, default=0, help="weights seed")
        parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")


def runner_spec(parser: argparse.ArgumentParser, args: argparse.Namespace) -> RunnerSpec:
    """The ``RunnerSpec`` of the parsed options, device and dtype defaulted for this machine (and set in
    ``args``); a bad value exits with a one-line usage error (status 2)."""
    from llmsched_env.runtime.runner_spec import RunnerSpec, default_device, default_dtype

    device = args.device or default_device()
    given = {k: getattr(args, k) for k in ("model", "weights", "seed", "threads") if hasattr(args, k)}
    try:
        spec = RunnerSpec(**given, device=device, dtype=args.dtype or default_dtype(device))
    except ValueError as exc:
        parser.error(str(exc))
    args.device, args.dtype = spec.device, spec.dtype
    return spec
