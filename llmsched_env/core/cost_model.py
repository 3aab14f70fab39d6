"""Cost models: how long one engine iteration takes, for the simulator's clock.

One iteration runs a continuous batch: chunked prefills and decodes together. Every cost model answers
``step_time_s(num_prefill_tokens, num_decode_seqs, num_kv_tokens, prefill_attn_pairs)``:

- ``num_prefill_tokens``: prefill tokens computed in the batch, all chunks together;
- ``num_decode_seqs``: decoding sequences, one new token each;
- ``num_kv_tokens``: context tokens whose KV the decodes' attention reads (sum of their context lengths);
- ``prefill_attn_pairs``: (query, key) pairs of prefill attention, summed over chunks of
  ``chunk_len * (num_context_tokens_before_chunk + (chunk_len + 1) / 2)``.

The result is > 0 for every batch, the empty one included (a fixed per-iteration overhead), and monotone
non-decreasing in each argument. ``step_time_s`` runs once per simulated iteration, so it is plain float
arithmetic on constants computed in ``__init__``, and it does not validate its arguments.

Coefficients live in JSON presets under ``presets/`` (``list_presets()``, ``load_cost_model(name_or_path)``),
each with a ``kind`` (``"analytic"`` or ``"linear"``), a ``description`` and the fields of that kind.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, ClassVar, Protocol, runtime_checkable

import numpy as np

__all__ = [
    "AnalyticCostModel",
    "CostModel",
    "LinearCostModel",
    "fit_report",
    "list_presets",
    "load_cost_model",
    "prefill_time_s",
    "unloaded_decode_time_s",
]

PRESET_DIR = Path(__file__).resolve().parent / "presets"


@runtime_checkable
class CostModel(Protocol):
    """Anything that prices one engine iteration (see the module docstring for the arguments)."""

    name: str

    def step_time_s(
        self, num_prefill_tokens: int, num_decode_seqs: int, num_kv_tokens: int, prefill_attn_pairs: float
    ) -> float: ...


def _number(owner: str, field: str, value: Any, *, positive: bool = False, integer: bool = False) -> float:
    """Return ``value`` if it is a finite number >= 0 (> 0 with ``positive``), else raise ``ValueError``."""
    kind = "an integer" if integer else "a number"
    bad_type = isinstance(value, bool) or not isinstance(value, int if integer else (int, float))
    if bad_type or not math.isfinite(value) or value < 0 or (positive and value == 0):
        bound = "> 0" if positive else ">= 0"
        raise ValueError(f"{owner}: field '{field}' must be {kind} {bound}, got {value!r}")
    return value


class AnalyticCostModel:
    """Roofline cost of one iteration of a decoder-only transformer, tensor-parallel over ``tensor_parallel``
    GPUs, each with ``peak_tflops`` and ``mem_bandwidth_gbps`` (GB/s, 1e9) of which the ``*_efficiency``
    fractions are achieved. With p = prefill tokens, d = decode seqs, kv = decode KV tokens, pairs = prefill
    attention pairs and tp = ``tensor_parallel``::

        flops     = 2 * num_params * (p + d) + 4 * num_layers * num_attention_heads * head_dim * (pairs + kv)
        kv_bytes  = 2 * num_layers * num_kv_heads * head_dim * dtype_bytes            # K and V, per token
        bytes     = num_params * dtype_bytes                                          # weights, once
                  + kv_bytes * (kv + p)                          # decode KV reads, prefill KV writes
                  + kv_bytes * pairs / prefill_attn_query_tile   # prefill attention: KV re-read per q tile
        compute_s = flops / tp / (peak_tflops * 1e12 * compute_efficiency)
        memory_s  = bytes / tp / (mem_bandwidth_gbps * 1e9 * bandwidth_efficiency)
        ring_s    = 2 * (tp - 1) / tp * hidden_size * dtype_bytes / (interconnect_bandwidth_gbps * 1e9)
        comm_s    = 2 * num_layers * (allreduce_latency_s + ring_s * (p + d))          # only when tp > 1
        step_time_s = overhead_s + max(compute_s, memory_s) + comm_s                   # when p + d > 0
        step_time_s = overhead_s                                          # when p + d == 0: no kernels run

    KV is split over GPUs by KV head; when ``num_kv_heads < tp`` each GPU holds a replica of one head, which
    the formula prices by using ``ceil(num_kv_heads / tp) * tp`` heads. Compute and memory overlap (the
    roofline max); the two all-reduces per layer (after attention and after the MLP) do not.
    """

    REQUIRED = (
        "num_params",
        "num_layers",
        "hidden_size",
        "num_attention_heads",
        "num_kv_heads",
        "head_dim",
        "dtype_bytes",
        "peak_tflops",
        "mem_bandwidth_gbps",
        "compute_efficiency",
        "bandwidth_efficiency",
        "overhead_s",
    )
    OPTIONAL: ClassVar[dict[str, float]] = {
        "tensor_parallel": 1,
        "allreduce_latency_s": 0.0,
        "interconnect_bandwidth_gbps": 0.0,
        "prefill_attn_query_tile": 128,
    }
    _INTS = ("num_layers", "hidden_size", "num_attention_heads", "num_kv_heads", "head_dim",
             "tensor_parallel")

    def __init__(self, *, name: str = "analytic", description: str = "", **fields: Any) -> None:
        owner = f"AnalyticCostModel {name!r}"
        unknown = sorted(set(fields) - set(self.REQUIRED) - set(self.OPTIONAL))
        if unknown:
            known = [*self.REQUIRED, *self.OPTIONAL]
            raise ValueError(f"{owner}: unknown field(s) {unknown}; known fields: {known}")
        for field in self.REQUIRED:
            if field not in fields:
                raise ValueError(f"{owner}: missing field '{field}'")
        values = {**self.OPTIONAL, **fields}
        for field, value in values.items():
            positive = field not in ("overhead_s", "allreduce_latency_s", "interconnect_bandwidth_gbps")
            _number(owner, field, value, positive=positive, integer=field in self._INTS)
        for field in ("compute_efficiency", "bandwidth_efficiency"):
            if values[field] > 1:
                raise ValueError(
                    f"{owner}: field '{field}' is a fraction of peak, must be <= 1, got {values[field]!r}"
                )
        if values["overhead_s"] <= 0:
            raise ValueError(f"{owner}: field 'overhead_s' must be > 0 so an empty iteration takes time")
        tp = values["tensor_parallel"]
        if tp > 1 and values["interconnect_bandwidth_gbps"] <= 0:
            raise ValueError(
                f"{owner}: field 'interconnect_bandwidth_gbps' must be > 0 when tensor_parallel > 1"
            )
        self.name = name
        self.description = description
        self.fields: dict[str, Any] = values

        v = values
        flops_per_s = v["peak_tflops"] * 1e12 * v["compute_efficiency"] * tp
        bytes_per_s = v["mem_bandwidth_gbps"] * 1e9 * v["bandwidth_efficiency"] * tp
        kv_heads = math.ceil(v["num_kv_heads"] / tp) * tp
        kv_bytes = 2 * v["num_layers"] * kv_heads * v["head_dim"] * v["dtype_bytes"]
        attn_flops = 4 * v["num_layers"] * v["num_attention_heads"] * v["head_dim"]
        # The per-argument slopes of the roofline's two sides, in seconds.
        self._token_compute_s = 2 * v["num_params"] / flops_per_s
        self._attn_compute_s = attn_flops / flops_per_s
        self._weights_s = v["num_params"] * v["dtype_bytes"] / bytes_per_s
        self._kv_token_s = kv_bytes / bytes_per_s
        self._pair_memory_s = kv_bytes / v["prefill_attn_query_tile"] / bytes_per_s
        self._overhead_s = v["overhead_s"]
        self._base_s = v["overhead_s"]
        self._comm_token_s = 0.0
        if tp > 1:
            self._base_s += 2 * v["num_layers"] * v["allreduce_latency_s"]
            ring_bytes = 2 * (tp - 1) / tp * v["hidden_size"] * v["dtype_bytes"]
            self._comm_token_s = 2 * v["num_layers"] * ring_bytes / (v["interconnect_bandwidth_gbps"] * 1e9)

    def step_time_s(
        self, num_prefill_tokens: int, num_decode_seqs: int, num_kv_tokens: int, prefill_attn_pairs: float
    ) -> float:
        tokens = num_prefill_tokens + num_decode_seqs
        if tokens == 0:  # an empty iteration launches no kernels and reads no weights
            return self._overhead_s
        compute_s = (
            self._token_compute_s * tokens + self._attn_compute_s * (prefill_attn_pairs + num_kv_tokens)
        )
        memory_s = (
            self._weights_s
            + self._kv_token_s * (num_kv_tokens + num_prefill_tokens)
            + self._pair_memory_s * prefill_attn_pairs
        )
        return self._base_s + (compute_s if compute_s > memory_s else memory_s) + self._comm_token_s * tokens

    def to_dict(self) -> dict[str, Any]:
        """The JSON preset of this model (kind ``"analytic"``)."""
        return {"kind": "analytic", "name": self.name, "description": self.description, **self.fields}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> AnalyticCostModel:
        fields = {k: v for k, v in data.items() if k not in ("kind", "name", "description")}
        return cls(name=data.get("name", "analytic"), description=data.get("description", ""), **fields)

    def __reduce__(self) -> tuple[Any, ...]:
        return (_from_dict, (self.to_dict(),))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, AnalyticCostModel) and self.to_dict() == other.to_dict()

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        f = self.fields
        return (
            f"AnalyticCostModel(name={self.name!r}, num_params={f['num_params']:.3g}, "
            f"tensor_parallel={f['tensor_parallel']}, peak_tflops={f['peak_tflops']}, "
            f"mem_bandwidth_gbps={f['mem_bandwidth_gbps']}, overhead_s={f['overhead_s']})"
        )


class LinearCostModel:
    """``t = c0 + c1 * p + c2 * d + c3 * kv + c4 * pairs`` with every ``c >= 0`` and ``c0 > 0``.

    Fit it to measured iterations with ``LinearCostModel.fit``; its JSON preset (kind ``"linear"``) names
    the coefficients ``COEF_FIELDS``.
    """

    COEF_FIELDS = (
        "overhead_s",
        "prefill_token_s",
        "decode_seq_s",
        "kv_token_s",
        "prefill_attn_pair_s",
    )
    MIN_OVERHEAD_S = 1e-6  # a fit's intercept is floored here so an empty iteration still takes time

    def __init__(self, coef_s: Sequence[float], name: str = "linear", description: str = "") -> None:
        owner = f"LinearCostModel {name!r}"
        coefs = tuple(coef_s)
        if len(coefs) != len(self.COEF_FIELDS):
            raise ValueError(f"{owner}: coef_s needs {len(self.COEF_FIELDS)} values {self.COEF_FIELDS}")
        for field, c in zip(self.COEF_FIELDS, coefs, strict=True):
            _number(owner, field, c, positive=field == "overhead_s")
        self.name = name
        self.description = description
        self.coef_s: tuple[float, ...] = tuple(float(c) for c in coefs)
        self._c0, self._c1, self._c2, self._c3, self._c4 = self.coef_s

    def step_time_s(
        self, num_prefill_tokens: int, num_decode_seqs: int, num_kv_tokens: int, prefill_attn_pairs: float
    ) -> float:
        return (
            self._c0
            + self._c1 * num_prefill_tokens
            + self._c2 * num_decode_seqs
            + self._c3 * num_kv_tokens
            + self._c4 * prefill_attn_pairs
        )

    @classmethod
    def fit(
        cls,
        samples: Iterable[Sequence[float]],
        name: str = "linear",
        description: str = "",
        relative: bool = True,
    ) -> LinearCostModel:
        """Non-negative least squares over ``(num_prefill_tokens, num_decode_seqs, num_kv_tokens,
        prefill_attn_pairs, seconds)`` samples. ``relative`` weights each sample by 1/seconds, so a 5 ms
        decode step counts as much as a 500 ms prefill (relative errors are minimised)."""
        x, y = _samples_array(samples, min_rows=len(cls.COEF_FIELDS))
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
        return {
            "kind": "linear",
            "name": self.name,
            "description": self.description,
            **dict(zip(self.COEF_FIELDS, self.coef_s, strict=True)),
        }

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write ``to_dict()`` as JSON; ``load_cost_model(path)`` reads it back equal."""
        Path(path).write_text(json.dumps(self.to_dict(), indent=2) + "\n")

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LinearCostModel:
        name = data.get("name", "linear")
        known = {"kind", "name", "description", *cls.COEF_FIELDS}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"LinearCostModel {name!r}: unknown field(s) {unknown}; known: {sorted(known)}")
        for field in cls.COEF_FIELDS:
            if field not in data:
                raise ValueError(f"LinearCostModel {name!r}: missing field '{field}'")
        coefs = [data[field] for field in cls.COEF_FIELDS]
        return cls(coefs, name=name, description=data.get("description", ""))

    def __reduce__(self) -> tuple[Any, ...]:
        return (_from_dict, (self.to_dict(),))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, LinearCostModel) and self.to_dict() == other.to_dict()

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        coefs = ", ".join(f"{f}={c:.4g}" for f, c in zip(self.COEF_FIELDS, self.coef_s, strict=True))
        return f"LinearCostModel(name={self.name!r}, {coefs})"


_KINDS: dict[str, Any] = {"analytic": AnalyticCostModel, "linear": LinearCostModel}


def _from_dict(data: dict[str, Any]) -> CostModel:
    return _KINDS[data["kind"]].from_dict(data)


def _samples_array(samples: Iterable[Sequence[float]], min_rows: int) -> tuple[np.ndarray, np.ndarray]:
    """Validate samples into features ``x: [n, 4]`` and seconds ``y: [n]``."""
    rows = [tuple(s) for s in samples]
    if any(len(r) != 5 for r in rows):
        raise ValueError("samples must be (num_prefill_tokens, num_decode_seqs, num_kv_tokens, "
                         "prefill_attn_pairs, seconds) tuples")
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
    return {
        "num_samples": float(len(y)),
        "mean_rel_error": float(err.mean()),
        "p50_rel_error": float(np.percentile(err, 50)),
        "p90_rel_error": float(np.percentile(err, 90)),
        "max_rel_error": float(err.max()),
    }


def list_presets() -> list[str]:
    """Names of the bundled presets, for ``load_cost_model``."""
    return sorted(p.stem for p in PRESET_DIR.glob("*.json"))


def load_cost_model(name_or_path: str | os.PathLike[str]) -> CostModel:
    """A cost model from a preset name (``list_presets()``) or a path to a JSON preset file.

    Raises ``ValueError`` naming the file and the field for an unreadable or malformed file, and listing
    the presets for an unknown name. A file's model is named by its ``name`` field, else its file stem.
    """
    text = os.fspath(name_or_path)
    if text.endswith(".json") or os.sep in text or "/" in text:
        path = Path(text)
        if not path.is_file():
            raise ValueError(f"cost model file {path} does not exist")
    elif text in list_presets():
        path = PRESET_DIR / f"{text}.json"
    else:
        raise ValueError(
            f"unknown cost model preset {text!r}; available presets: {list_presets()} (or give a .json path)"
        )
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"cost model file {path}: not readable JSON ({err})") from None
    if not isinstance(data, dict):
        raise ValueError(f"cost model file {path}: top level must be a JSON object of fields")
    kind = data.get("kind")
    if kind not in _KINDS:
        kinds = sorted(_KINDS)
        raise ValueError(f"cost model file {path}: field 'kind' must be one of {kinds}, got {kind!r}")
    for field in ("name", "description"):
        if field in data and not isinstance(data[field], str):
            raise ValueError(f"cost model file {path}: field '{field}' must be a string")
    try:
        return _KINDS[kind].from_dict({"name": path.stem, **data})
    except (TypeError, ValueError) as err:
        raise ValueError(f"cost model file {path}: {err}") from None


def unloaded_decode_time_s(model: CostModel, context_tokens: int = 1024) -> float:
    """One decode step of one request with ``context_tokens`` of context, nothing else in the batch."""
    _number("unloaded_decode_time_s", "context_tokens", context_tokens, integer=True)
    return model.step_time_s(0, 1, context_tokens, 0.0)


def prefill_time_s(
    model: CostModel, prompt_tokens: int, chunk_tokens: int | None = None, num_cached_tokens: int = 0
) -> float:
    """Time to prefill one request alone: its ``prompt_tokens - num_cached_tokens`` uncached tokens in one
    iteration (pairs = n * (n + 1) / 2 with no cache), or in iterations of ``chunk_tokens`` each."""
    _number("prefill_time_s", "prompt_tokens", prompt_tokens, integer=True)
    _number("prefill_time_s", "num_cached_tokens", num_cached_tokens, integer=True)
    done = min(num_cached_tokens, prompt_tokens)
    todo = prompt_tokens - done
    if chunk_tokens is not None:
        _number("prefill_time_s", "chunk_tokens", chunk_tokens, positive=True, integer=True)
    step = todo if chunk_tokens is None else chunk_tokens
    total_s = 0.0
    while done < prompt_tokens:
        n = min(step, prompt_tokens - done)
        total_s += model.step_time_s(n, 0, 0, n * (done + (n + 1) / 2))
        done += n
    return total_s
