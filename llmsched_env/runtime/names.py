"""The runtime's names and calibration defaults, importable without torch (``runtime.model`` holds what they
name; tests/test_calibrate.py checks that they agree)."""

from __future__ import annotations

MODEL_NAMES = ("llama-1b", "llama3-8b", "tiny")  # runtime.model.MODEL_PRESETS' names
DTYPE_NAMES = ("bfloat16", "float16", "float32")  # runtime.model.DTYPES' names
FIT_LOADS = (0.3, 0.6, 0.9)  # calibration's fitting episodes' loads, fractions of the saturation rate
FIDELITY_REQUESTS = 150  # requests per fidelity (and fitting) workload
