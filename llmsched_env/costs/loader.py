"""Cost-model presets: JSON files (a ``kind``, ``"analytic"`` or ``"linear"``, and its fields) under ``presets/``
or anywhere, loaded by name or path. ``python -m llmsched_env.costs.loader`` prints their headline step times."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from llmsched_env.common.checks import clipped, shown
from llmsched_env.common.files import CONFIG_BYTES, FileRefusedError, link_problem, parse_json, read_text, refuse_nul
from llmsched_env.costs.analytic import AnalyticCostModel
from llmsched_env.costs.base import CostModel, prefill_time_s, unloaded_decode_time_s
from llmsched_env.costs.linear import LinearCostModel

PRESET_DIR = Path(__file__).resolve().parent / "presets"

_KINDS: dict[str, Any] = {"analytic": AnalyticCostModel, "linear": LinearCostModel}


def from_dict(data: dict[str, Any]) -> CostModel:
    """The cost model a ``to_dict()`` output (with ``kind``) describes; ``ValueError`` naming a bad field."""
    if not isinstance(data, Mapping):
        raise ValueError(f"a cost model must be a mapping of fields (with 'kind'), got {type(data).__name__}")
    return _KINDS[_kind(data, "cost model")].from_dict(data)


def _kind(data: Mapping[str, Any], owner: str) -> str:
    """``data``'s ``kind``, or ``ValueError`` naming ``owner`` and the field (missing, or not a known kind)."""
    kind = data.get("kind")
    if not isinstance(kind, str) or kind not in _KINDS:
        got = "it is missing" if "kind" not in data else f"got {kind!r:.80}"
        raise ValueError(f"{owner}: field 'kind' must be one of {sorted(_KINDS)}, {got}")
    return str(kind)


def list_presets() -> list[str]:
    """Names of the bundled presets, for ``load_cost_model``."""
    return sorted(p.stem for p in PRESET_DIR.glob("*.json"))


def cost_model_path(name_or_path: str | os.PathLike[str]) -> Path | None:
    """The file a cost model's name or path names (a ``.json`` name or one with a path separator), or None for a
    preset name."""
    text = os.fspath(name_or_path)
    return Path(text) if text.endswith(".json") or os.sep in text or "/" in text else None


def load_cost_model(name_or_path: str | os.PathLike[str]) -> CostModel:
    """A cost model from a preset name (``list_presets()``) or a JSON file (named by its ``name``, else its stem);
    ``ValueError`` naming the file and field, or listing the presets for an unknown name."""
    text = os.fspath(name_or_path)
    path = cost_model_path(text)
    if path is not None:
        refuse_nul(text, "cost model file ")
        problem = link_problem(path)
        if problem is not None:
            raise ValueError(f"cost model file {path}: {problem}")
        try:
            there = path.exists()  # one that is there but not a regular file is refused as it is read
        except OSError as exc:  # a name too long for any file
            raise ValueError(f"cost model file {clipped(str(path), 120)}: {exc.strerror or exc}") from None
        if not there:
            raise ValueError(f"cost model file {clipped(str(path), 120)} does not exist")
    elif text in list_presets():
        path = PRESET_DIR / f"{text}.json"
    else:
        raise ValueError(
            f"unknown cost model preset {shown(text)}; available presets: {list_presets()} (or give a .json path)"
        )
    try:
        data = parse_json(read_text(path, CONFIG_BYTES))
    except FileRefusedError:  # a FIFO, a device, a file over the limit: one line naming it already
        raise
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"cost model file {path}: not readable JSON ({err})") from None
    if not isinstance(data, dict):
        raise ValueError(f"cost model file {path}: top level must be a JSON object of fields")
    kind = _kind(data, f"cost model file {path}")
    try:
        return _KINDS[kind].from_dict({"name": path.stem, **data})
    except (TypeError, ValueError) as err:
        raise ValueError(f"cost model file {path}: {err}") from None


def cost_model_of(owner: str, value: object) -> CostModel:
    """The cost model ``value`` gives (a preset name or path, or a ``CostModel``); else ``ValueError`` naming
    ``owner``."""
    if isinstance(value, (str, os.PathLike)):
        return load_cost_model(value)
    if isinstance(value, CostModel):
        return value
    raise ValueError(f"{owner} must be a cost-model preset name ({', '.join(list_presets())}), a JSON path or a "
                     f"CostModel, got {value!r}")


def main() -> None:
    """Print one line per bundled preset: one decode at 1k context alone, a 1024-token prefill alone, and one
    iteration of 64 decodes at 1k context each, in ms."""
    for name in list_presets():
        model = load_cost_model(name)
        decode_ms = unloaded_decode_time_s(model, 1024) * 1e3
        prefill_ms = prefill_time_s(model, 1024) * 1e3
        batch_ms = model.step_time_s(0, 64, 64 * 1024, 0.0) * 1e3
        print(f"{name:<20} decode@1k {decode_ms:6.2f} ms   prefill 1024 tok {prefill_ms:7.2f} ms   "
              f"64 decodes@1k {batch_ms:6.2f} ms")


if __name__ == "__main__":
    main()
