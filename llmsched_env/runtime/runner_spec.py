"""Which model runs where (``RunnerSpec``, checked when made) and the one place a ``ModelRunner`` is built.

    runner = RunnerSpec(model="tiny", device="cpu").build(num_blocks=2048, block_size=16)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from llmsched_env.runtime.model import DTYPES, MODEL_PRESETS
from llmsched_env.runtime.runner import ModelRunner


def default_device() -> str:
    """``cuda`` when torch sees a CUDA device, else ``cpu``."""
    return "cuda" if torch.cuda.is_available() else "cpu"


def default_dtype(device: str) -> str:
    """``float32`` on ``cpu``, ``bfloat16`` on any other device."""
    return "float32" if device == "cpu" else "bfloat16"


@dataclass(frozen=True)
class RunnerSpec:
    """Which model runs where; ``ValueError`` naming the field at fault (a CUDA device where there is none too)."""

    model: str = "tiny"  # a preset
    device: str = "cpu"
    dtype: str = "float32"  # a ``DTYPES`` name
    weights: Path | None = None  # local safetensors weights (None: random ones drawn from ``seed``)
    seed: int = 0
    threads: int = 1  # torch's CPU threads

    def __post_init__(self) -> None:
        if self.model not in MODEL_PRESETS:
            raise ValueError(f"model: unknown preset {self.model!r}; presets: {', '.join(sorted(MODEL_PRESETS))}")
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype: unknown dtype {self.dtype!r}; dtypes: {', '.join(sorted(DTYPES))}")
        if isinstance(self.threads, bool) or not isinstance(self.threads, int) or self.threads < 1:
            raise ValueError(f"threads: expected an integer >= 1, got {self.threads!r}")
        if self.device.startswith("cuda") and not torch.cuda.is_available():
            raise ValueError(f"device {self.device}: no CUDA device here")
        if self.weights is not None:
            object.__setattr__(self, "weights", Path(self.weights))

    @classmethod
    def for_here(cls, model: str = "tiny", device: str | None = None, dtype: str | None = None,
                 **fields: Any) -> RunnerSpec:
        """A spec whose ``device`` (None: ``default_device()``) and ``dtype`` (None: ``default_dtype`` of the
        device) suit this machine; ``fields`` are the other fields."""
        device = device or default_device()
        return cls(model, device, dtype or default_dtype(device), **fields)

    def build(self, num_blocks: int, block_size: int) -> ModelRunner:
        """A ``ModelRunner`` with a KV pool of ``num_blocks`` blocks of ``block_size`` tokens; sets torch's CPU
        threads first. A weights file that does not fit raises ``ValueError`` naming it."""
        torch.set_num_threads(self.threads)
        return ModelRunner(self.model, num_blocks=num_blocks, block_size=block_size, device=self.device,
                           dtype=DTYPES[self.dtype], seed=self.seed, weights_path=self.weights)

    def describe(self) -> str:
        """``MODEL DTYPE on DEVICE``, for status lines."""
        return f"{self.model} {self.dtype} on {self.device}"
