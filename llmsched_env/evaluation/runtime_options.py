"""Which model runs where: ``RuntimeOptions`` of the torch runtime backend (``llmsched-evaluate --backend runtime``).
Importing this module imports no torch; building ``RuntimeOptions`` does, and resolves the device and dtype
defaults for this machine (the command-line options of a ``RunnerSpec``: ``commands.evaluate_args``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from llmsched_env.common.checks import check_positive
from llmsched_env.common.fields import derived

if TYPE_CHECKING:  # torch only once the options are built
    from llmsched_env.runtime.runner_spec import RunnerSpec

__all__ = ["RuntimeOptions"]


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
