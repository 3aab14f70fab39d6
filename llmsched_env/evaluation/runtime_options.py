"""Options of the torch runtime backend (``llmsched-evaluate --backend runtime``), checked when built.

Building ``RuntimeOptions`` imports torch (to pick the device), so a simulator-only evaluation never does.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from llmsched_env.common.checks import check_positive

__all__ = ["DTYPE_NAMES", "RuntimeOptions"]

DTYPE_NAMES = ("float32", "bfloat16", "float16")


@dataclass(frozen=True)
class RuntimeOptions:
    """A real model serving the episodes: ``model`` preset (``tiny``, ``llama-1b``, ``llama3-8b``) on
    ``device`` (default: cuda when available, else cpu) in ``dtype`` (default: float32 on CPU, bfloat16 on
    a GPU), with ``weights`` from a local safetensors file (default: seeded random). ``realtime`` sleeps
    through idle gaps instead of skipping them; a decision slower than ``policy_timeout_s`` falls back to
    fcfs. ``ValueError`` naming the field when torch is missing or a value is unknown."""

    model: str = "tiny"
    device: str | None = None
    dtype: str | None = None
    weights: Path | None = None
    realtime: bool = False
    policy_timeout_s: float = 0.1

    def __post_init__(self) -> None:
        try:
            import torch

            from llmsched_env.runtime.model import MODEL_PRESETS
        except ImportError as exc:
            raise ValueError(f"the runtime backend needs torch: {exc}") from None
        if self.model not in MODEL_PRESETS:
            raise ValueError(f"unknown runtime model {self.model!r}; presets: {', '.join(MODEL_PRESETS)}")
        device = self.device or ("cuda" if torch.cuda.is_available() else "cpu")
        if device.startswith("cuda") and not torch.cuda.is_available():
            raise ValueError(f"device {device}: no CUDA device here")
        dtype = self.dtype or ("float32" if device == "cpu" else "bfloat16")
        if dtype not in DTYPE_NAMES:
            raise ValueError(f"RuntimeOptions.dtype must be one of {DTYPE_NAMES}, got {dtype!r}")
        check_positive("RuntimeOptions", "policy_timeout_s", self.policy_timeout_s)
        object.__setattr__(self, "device", device)
        object.__setattr__(self, "dtype", dtype)
        if self.weights is not None:
            object.__setattr__(self, "weights", Path(self.weights))

    def cost_model_preset(self) -> str:
        """The calibrated cost model of this model and device kind, whose SLO scale the runtime's SLOs use;
        ``ValueError`` saying how to calibrate one when none ships."""
        from llmsched_env.costs.loader import list_presets

        assert self.device is not None  # set in __post_init__
        preset = f"runtime-{self.model}-{self.device.split(':')[0]}"
        if preset not in list_presets():
            raise ValueError(
                f"no calibrated cost model for {self.model} on {self.device}: run `python calibrate.py profile "
                f"--model {self.model} --device {self.device} --out {preset}.json` and pass --cost-model {preset}.json"
            )
        return preset
