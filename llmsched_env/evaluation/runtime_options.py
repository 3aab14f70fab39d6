"""Which model runs where: ``RuntimeOptions`` of the torch runtime backend (``llmsched-evaluate --backend runtime``).
Importing this module imports no torch; building ``RuntimeOptions`` does.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from llmsched_env.common.checks import MAX_POLICY_TIMEOUT_S, check_positive
from llmsched_env.common.fields import derived

if TYPE_CHECKING:  # torch only once the options are built
    from llmsched_env.runtime.runner_spec import RunnerSpec

__all__ = ["RuntimeOptions"]


@dataclass(frozen=True)
class RuntimeOptions:
    """A real model serving the episodes (defaults: cuda when available, float32 on CPU and bfloat16 on a GPU, seeded
    random weights); a decision slower than ``policy_timeout_s`` falls back to fcfs. ``ValueError`` naming the field."""

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
        check_positive("RuntimeOptions", "policy_timeout_s", self.policy_timeout_s, maximum=MAX_POLICY_TIMEOUT_S)
        spec = RunnerSpec.for_here(self.model, self.device, self.dtype, weights=self.weights)
        object.__setattr__(self, "runner", spec)
        object.__setattr__(self, "device", spec.device)
        object.__setattr__(self, "dtype", spec.dtype)
        object.__setattr__(self, "weights", spec.weights)

    def cost_model_preset(self) -> str:
        """This model and device's calibrated cost model; ``ValueError`` saying how to calibrate one if none ships."""
        from llmsched_env.costs.loader import list_presets

        assert self.device is not None  # set in __post_init__
        preset = f"runtime-{self.model}-{self.device.split(':')[0]}"
        if preset not in list_presets():
            raise ValueError(
                f"no calibrated cost model for {self.model} on {self.device}: run `llmsched-calibrate profile "
                f"--model {self.model} --device {self.device} --out {preset}.json` and pass --cost-model {preset}.json"
            )
        return preset
