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
``LinearCostModel`` and its fit (``fit_report``) live in ``cost_fit`` and are re-exported here. Run
``python -m llmsched_env.core.cost_model`` to print the presets' headline step times.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any, ClassVar, Protocol, runtime_checkable

from llmsched_env.core.cost_fit import LinearCostModel, _number, fit_report

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


_KINDS: dict[str, Any] = {"analytic": AnalyticCostModel, "linear": LinearCostModel}


def _from_dict(data: dict[str, Any]) -> CostModel:
    return _KINDS[data["kind"]].from_dict(data)


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


def main() -> None:
    """Print one line per bundled preset: one decode at 1k context alone, a 1024-token prefill alone, and one
    iteration of 64 decodes at 1k context each, in ms."""
    for name in list_presets():
        model = load_cost_model(name)
        decode_ms = unloaded_decode_time_s(model, 1024) * 1e3
        prefill_ms = prefill_time_s(model, 1024) * 1e3
        batch_ms = model.step_time_s(0, 64, 64 * 1024, 0.0) * 1e3
        print(
            f"{name:<20} decode@1k {decode_ms:6.2f} ms   prefill 1024 tok {prefill_ms:7.2f} ms   "
            f"64 decodes@1k {batch_ms:6.2f} ms"
        )

if __name__ == "__main__":
    main()
