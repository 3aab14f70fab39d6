"""The linear cost model, its non-negative least-squares fit (``LinearCostModel.fit``, Lawson–Hanson in numpy)
and ``fit_report``, any cost model's relative error on measured iterations."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from llmsched_env.common.fields import check_fields
from llmsched_env.common.outputs import write_text_atomically
from llmsched_env.costs.base import CostModel, check_cost_field, check_label, check_step_times


@dataclass(frozen=True, repr=False)
class LinearCostModel:
    """``t = c0 + c1 * p + c2 * d + c3 * kv + c4 * pairs + c5 * log2(1 + d)``, every ``c >= 0`` and ``c0 > 0``.

    The optional last term (0 unless fitted with ``concave_decodes``) lets cost grow sublinearly in decodes, as
    batching makes it on small models. ``coef_s`` (5 or 6 numbers, the sixth 0 when left out) is stored as 6
    checked floats (``ValueError`` naming the coefficient); the JSON preset (kind ``"linear"``) names them
    ``COEF_FIELDS``. A frozen dataclass, equal by coefficients, name and description.
    """

    coef_s: Sequence[float]
    name: str = "linear"
    description: str = ""
    COEF_FIELDS: ClassVar[tuple[str, ...]] = (
        "overhead_s", "prefill_token_s", "decode_seq_s", "kv_token_s", "prefill_attn_pair_s", "decode_log_s",
    )
    OPTIONAL_FIELDS: ClassVar[tuple[str, ...]] = ("decode_log_s",)
    MIN_OVERHEAD_S: ClassVar[float] = 1e-6  # a fit's intercept is floored here so an empty iteration takes time

    def __post_init__(self) -> None:
        owner = f"LinearCostModel {self.name!r}"
        check_label(owner, self.name, self.description)
        coefs = tuple(self.coef_s)
        required = len(self.COEF_FIELDS) - len(self.OPTIONAL_FIELDS)
        if len(coefs) == required:
            coefs += (0.0,) * len(self.OPTIONAL_FIELDS)
        if len(coefs) != len(self.COEF_FIELDS):
            raise ValueError(f"{owner}: coef_s needs {required} or {len(self.COEF_FIELDS)} values {self.COEF_FIELDS}")
        for name, c in zip(self.COEF_FIELDS, coefs, strict=True):
            check_cost_field(owner, name, c, positive=name == "overhead_s")  # seconds, at most MAX_STEP_S each
        object.__setattr__(self, "coef_s", tuple(float(c) for c in coefs))
        check_step_times(owner, self)

    def step_time_s(self, num_prefill_tokens: int, num_decode_seqs: int, num_kv_tokens: int,
                    prefill_attn_pairs: float) -> float:
        c0, c1, c2, c3, c4, c5 = self.coef_s
        t = c0 + c1 * num_prefill_tokens + c2 * num_decode_seqs + c3 * num_kv_tokens + c4 * prefill_attn_pairs
        if c5:
            t += c5 * math.log2(1 + num_decode_seqs)
        return t

    def scaled(self, factor: float) -> LinearCostModel:
        """This model with every coefficient multiplied by ``factor`` (> 0)."""
        if not (math.isfinite(factor) and factor > 0):
            raise ValueError(f"LinearCostModel.scaled: factor must be a finite number > 0, got {factor!r}")
        return replace(self, coef_s=[c * factor for c in self.coef_s])

    @classmethod
    def fit(cls, samples: Iterable[Sequence[float]], name: str = "linear", description: str = "", relative: bool = True,
            concave_decodes: bool = False) -> LinearCostModel:
        """Non-negative least squares over ``(p, d, kv, pairs, seconds)`` samples, weighted by 1/seconds when
        ``relative``; ``concave_decodes`` also fits the ``log2(1 + d)`` term."""
        x, y = _samples_array(samples, min_rows=5 + concave_decodes)  # one per fitted coefficient
        if concave_decodes:
            x = np.column_stack([x, np.log2(1 + x[:, 1])])
        a = np.column_stack([np.ones(len(y)), x])
        b = y.copy()
        if relative:
            a /= y[:, None]
            b = np.ones_like(y)
        # Scale columns to unit norm: the raw columns span ~10 orders of magnitude (ones vs pairs).
        norms = np.linalg.norm(a, axis=0)
        used = norms > 0  # an all-zero column (e.g. no prefill samples) is unidentifiable: coefficient 0
        coef = np.zeros(a.shape[1])
        coef[used] = _nnls(a[:, used] / norms[used], b) / norms[used]
        coef[0] = max(coef[0], cls.MIN_OVERHEAD_S)
        return cls([float(c) for c in coef], name=name, description=description)

    def to_dict(self) -> dict[str, Any]:
        """The JSON preset of this model (kind ``"linear"``)."""
        return {"kind": "linear", "name": self.name, "description": self.description,
                **dict(zip(self.COEF_FIELDS, self.coef_s, strict=True))}

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write ``to_dict()`` as JSON (atomically: a failed write leaves the old file whole);
        ``load_cost_model(path)`` reads it back equal."""
        write_text_atomically(Path(path), json.dumps(self.to_dict(), indent=2) + "\n")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LinearCostModel:
        """The model a ``to_dict()`` output or a preset's fields describe; ValueError naming an unknown or
        missing field."""
        name = data.get("name", "linear")
        required = [f for f in cls.COEF_FIELDS if f not in cls.OPTIONAL_FIELDS]
        check_fields(f"LinearCostModel {name!r}", data, {"kind", "name", "description", *cls.COEF_FIELDS}, required)
        coefs = [data.get(key, 0.0) for key in cls.COEF_FIELDS]
        return cls(coefs, name=name, description=data.get("description", ""))

    def __repr__(self) -> str:
        coefs = ", ".join(f"{f}={c:.4g}" for f, c in zip(self.COEF_FIELDS, self.coef_s, strict=True))
        return f"LinearCostModel(name={self.name!r}, {coefs})"


def _samples_array(samples: Iterable[Sequence[float]], min_rows: int) -> tuple[np.ndarray, np.ndarray]:
    """Validate samples into features ``x: [n, 4]`` and seconds ``y: [n]``."""
    rows = [tuple(s) for s in samples]
    if any(len(r) != 5 for r in rows):
        raise ValueError(
            "samples must be (num_prefill_tokens, num_decode_seqs, num_kv_tokens, prefill_attn_pairs, seconds) tuples"
        )
    if len(rows) < min_rows:
        raise ValueError(f"need at least {min_rows} samples to fit, got {len(rows)}")
    arr = np.asarray(rows, dtype=float)
    if not np.isfinite(arr).all() or (arr < 0).any():
        raise ValueError("samples must be finite and non-negative")
    if (arr[:, 4] <= 0).any():
        raise ValueError("sample seconds must be > 0")
    return arr[:, :4], arr[:, 4]


def _nnls(a: np.ndarray, b: np.ndarray, max_iter: int | None = None) -> np.ndarray:
    """Lawson–Hanson active-set solution of ``min ||a x - b||`` subject to ``x >= 0``."""
    m, n = a.shape
    max_iter = max_iter or 3 * n + 10
    tol = 10 * np.finfo(float).eps * np.abs(a).sum(axis=0).max() * max(m, n)
    x = np.zeros(n)
    passive = np.zeros(n, dtype=bool)
    w = a.T @ (b - a @ x)
    for _ in range(max_iter):
        if passive.all() or w[~passive].max() <= tol:
            break
        passive[np.argmax(np.where(passive, -np.inf, w))] = True
        for _ in range(max_iter):
            s = np.zeros(n)
            s[passive] = np.linalg.lstsq(a[:, passive], b, rcond=None)[0]
            if s[passive].min() > 0:
                break
            # Step back toward x until the first passive coefficient hits zero, and release it.
            hit = passive & (s <= 0)
            alpha = np.min(x[hit] / (x[hit] - s[hit]))
            x = x + alpha * (s - x)
            passive &= x > tol
            x[~passive] = 0.0
        x = s
        w = a.T @ (b - a @ x)
    return np.maximum(x, 0.0)


def fit_report(model: CostModel, samples: Iterable[Sequence[float]]) -> dict[str, float]:
    """Relative errors ``|predicted - measured| / measured`` of ``model`` on samples: mean, p50, p90, max."""
    x, y = _samples_array(samples, min_rows=1)
    pred = np.array([model.step_time_s(int(p), int(d), int(kv), float(q)) for p, d, kv, q in x])
    err = np.abs(pred - y) / y
    return {"num_samples": float(len(y)), "mean_rel_error": float(err.mean()),
            "p50_rel_error": float(np.percentile(err, 50)), "p90_rel_error": float(np.percentile(err, 90)),
            "max_rel_error": float(err.max())}
