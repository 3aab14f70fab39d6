"""Output-length prediction (``LengthPredictor``): ``none``, ``exact`` or ``lognormal:SIGMA`` (the true length
times ``exp(SIGMA * N(0, 1))``), drawn per request from its own stream, so it changes nothing else.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from llmsched_env.engine.request import Request

PREDICTOR_KINDS = ("none", "exact", "lognormal")


@dataclass(frozen=True)
class LengthPredictor:
    """A per-request output-length prediction of a given error (see the module docstring)."""

    kind: str = "none"
    sigma: float = 0.0

    def __post_init__(self) -> None:
        if self.kind not in PREDICTOR_KINDS:
            raise ValueError(f"length prediction kind must be one of {PREDICTOR_KINDS}, got {self.kind!r}")
        if isinstance(self.sigma, bool) or not isinstance(self.sigma, (int, float)) or not math.isfinite(self.sigma):
            raise ValueError(f"length prediction sigma must be a finite number, got {self.sigma!r}")
        if self.sigma < 0 or (self.kind != "lognormal" and self.sigma != 0):
            raise ValueError(f"length prediction sigma must be >= 0, and 0 unless kind is lognormal; got {self.sigma}")

    @classmethod
    def of(cls, spec: str | Mapping[str, Any] | LengthPredictor | None) -> LengthPredictor:
        """A predictor from ``"none"``, ``"exact"``, ``"lognormal:0.5"``, ``{"kind": ..., "sigma": ...}`` or None."""
        if spec is None:
            return cls()
        if isinstance(spec, LengthPredictor):
            return spec
        if isinstance(spec, Mapping):
            unknown = sorted(set(spec) - {"kind", "sigma"})
            if unknown:
                raise ValueError(f"length prediction: unknown field(s) {unknown}; expected kind and sigma")
            return cls(str(spec.get("kind", "none")), spec.get("sigma", 0.0))
        if isinstance(spec, str):
            kind, sep, sigma = spec.strip().partition(":")
            if not sep:
                return cls(kind)
            try:
                value = float(sigma)
            except ValueError:
                raise ValueError(f"length prediction {spec!r}: the spread after ':' must be a number") from None
            return cls(kind, value)
        raise ValueError(f"length prediction must be a string, a mapping or a LengthPredictor, got {spec!r}")

    @property
    def enabled(self) -> bool:
        return self.kind != "none"

    def __str__(self) -> str:
        return f"lognormal:{self.sigma:g}" if self.kind == "lognormal" else self.kind

    def predict(self, output_lens: Sequence[int] | np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Predicted lengths (int64, >= 1) for true ``output_lens``; draws from ``rng`` only for lognormal."""
        true = np.asarray(output_lens, dtype=np.int64)
        if self.kind == "lognormal" and self.sigma > 0:
            noisy = np.rint(true * np.exp(self.sigma * rng.standard_normal(true.size)))
            return np.maximum(noisy, 1).astype(np.int64)
        return true.copy()

    def apply(self, requests: Sequence[Request], rng: np.random.Generator) -> None:
        """Set every request's ``predicted_output_len`` (left None by ``none``)."""
        if not self.enabled:
            return
        preds = self.predict([r.output_len for r in requests], rng).tolist()
        for r, p in zip(requests, preds, strict=True):
            r.predicted_output_len = p
