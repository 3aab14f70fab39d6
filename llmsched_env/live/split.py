"""Where a predicted latency misses the live one: each latency's mean split into the front end (client and API
server), the wait in the engine and the engine's steps (``live.blocks.COMPONENTS``), live (the ``components`` of
``blocks.jsonl``'s records, from vLLM's per-request timestamps) against predicted (a prediction's
``COMPONENT_KEYS``), with each part's share of the total's error: ``split_rows``, as a Markdown table
(``split_table``) and the worst miss in one line (``worst``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from llmsched_env.live.blocks import COMPONENT_KEYS, COMPONENTS, component_key

__all__ = [
    "LATENCY_NAMES", "PART_NAMES", "markdown_table", "predicted_components", "read_components", "split_rows",
    "split_table", "worst",
]  # fmt: skip

LATENCY_NAMES = {"ttft": "TTFT", "tpot": "TPOT", "e2e": "E2E"}
PART_NAMES = {"frontend": "front end", "wait": "engine wait", "steps": "engine steps"}

Components = Mapping[str, Mapping[str, float]]  # latency -> {"total_s", "frontend_s", ...}, as block_record writes


def _number(where: str, name: str, v: Any) -> float:
    """``v`` as a float (null: NaN); ``ValueError`` naming ``where`` and the field unless a number or null."""
    if v is None:
        return math.nan
    if isinstance(v, bool) or not isinstance(v, (int, float)) or math.isinf(v):
        raise ValueError(f"{where}: field '{name}' must be a number or null, got {v!r}")
    return float(v)


def read_components(where: str, value: Any) -> dict[str, dict[str, float]] | None:
    """A block record's ``components`` (None or absent: the block has none, e.g. vLLM's own scheduler) checked: per
    latency of ``COMPONENTS`` its ``total_s`` and parts, numbers or null (NaN); ``ValueError`` starting ``where``."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ValueError(f"{where}: field 'components' must be an object or null, got {value!r}")
    out: dict[str, dict[str, float]] = {}
    for lat, parts in COMPONENTS.items():
        figures = value.get(lat)
        if not isinstance(figures, dict):
            raise ValueError(f"{where}: components: missing field '{lat}' (an object)")
        out[lat] = {}
        for name in ("total_s", *(f"{p}_s" for p in parts)):
            if name not in figures:
                raise ValueError(f"{where}: components.{lat}: missing field '{name}'")
            out[lat][name] = _number(f"{where}: components.{lat}", name, figures[name])
    return out


def predicted_components(where: str, prediction: Mapping[str, Any]) -> dict[str, float]:
    """The ``COMPONENT_KEYS`` a prediction holds (none in one made before them), numbers or null (NaN);
    ``ValueError`` starting ``where``."""
    return {k: _number(where, k, prediction[k]) for k in COMPONENT_KEYS if k in prediction}


def _mean(values: Sequence[float]) -> float:
    return float(np.mean(values)) if values else math.nan


def split_rows(
    cell: str, live_components_by_arm: Mapping[str, Sequence[Components | None]],
    predicted_by_arm: Mapping[str, Mapping[str, float]],
) -> list[dict[str, Any]]:  # fmt: skip
    """Per arm (that has a block with components; None entries are blocks without) and latency: ``blocks``, the
    live and predicted mean (``live_s``, ``predicted_s``; live over the arm's blocks), ``error`` = (predicted -
    live) / live, per part ``<part>_live_s``, ``<part>_predicted_s`` and ``<part>_share`` = (predicted - live) /
    live total (the shares add up to ``error``), and ``misses_most``, the part of the largest |share| ("" when
    none is known). A prediction without the keys (or an arm not in ``predicted_by_arm``) predicts NaN."""
    rows = []
    for arm, records in live_components_by_arm.items():
        blocks = [c for c in records if c is not None]
        if not blocks:
            continue
        prediction = predicted_by_arm.get(arm, {})
        for lat, parts in COMPONENTS.items():
            # the blocks with a mean of this latency (a block of one-token outputs has no TPOT): their parts too
            known = [c[lat] for c in blocks if math.isfinite(c[lat]["total_s"])]
            live = _mean([c["total_s"] for c in known])
            predicted = prediction.get(component_key(lat), math.nan)
            row: dict[str, Any] = {"cell": cell, "arm": arm, "latency": lat, "blocks": len(known), "live_s": live,
                                   "predicted_s": predicted,
                                   "error": (predicted - live) / live if live > 0 else math.nan}  # fmt: skip
            for p in parts:
                part_live = _mean([c[f"{p}_s"] for c in known])
                part_predicted = prediction.get(component_key(lat, p), math.nan)
                row[f"{p}_live_s"], row[f"{p}_predicted_s"] = part_live, part_predicted
                row[f"{p}_share"] = (part_predicted - part_live) / live if live > 0 else math.nan
            shares = {p: abs(row[f"{p}_share"]) for p in parts if math.isfinite(row[f"{p}_share"])}
            row["misses_most"] = max(shares, key=lambda p: shares[p]) if shares else ""
            rows.append(row)
    return rows


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A Markdown table (a ``|`` inside a cell escaped)."""

    def line(cells: Sequence[str]) -> str:
        return "| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |"

    return "\n".join([line(header), "|" + "---|" * len(header), *(line(r) for r in rows)])


def _ms(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "n/a"
    ms = seconds * 1e3
    return f"{ms:.{0 if abs(ms) >= 100 else 1 if abs(ms) >= 10 else 2}f}"


def _share(x: float) -> str:
    return f"{x:+.0%}" if math.isfinite(x) else "n/a"


def split_table(rows: Sequence[Mapping[str, Any]]) -> str:
    """``split_rows`` as a Markdown table: per part "live -> predicted ms (share of the error)"."""
    header = ("cell", "arm", "latency", "blocks", "live ms", "predicted ms", "error", *PART_NAMES.values(),
              "misses most")  # fmt: skip
    lines = []
    for r in rows:
        parts = COMPONENTS[r["latency"]]
        split = [
            f"{_ms(r[f'{p}_live_s'])} → {_ms(r[f'{p}_predicted_s'])} ({_share(r[f'{p}_share'])})" if p in parts else ""
            for p in PART_NAMES
        ]
        lines.append([r["cell"], r["arm"], LATENCY_NAMES[r["latency"]], str(r["blocks"]), _ms(r["live_s"]),
                      _ms(r["predicted_s"]), _share(r["error"]), *split,
                      PART_NAMES.get(r["misses_most"], "")])  # fmt: skip
    return markdown_table(header, lines)


def worst(rows: Sequence[Mapping[str, Any]]) -> str:
    """The row of the largest |error| in one line: "TTFT's -48% error (cell c, arm a): engine wait -40%, engine
    steps -6%, front end -2%" (parts by |share|, largest first)."""
    known = [r for r in rows if math.isfinite(r["error"])]
    if not known:
        return "no latency split: no block with vLLM's per-request timestamps and a prediction of the parts"
    r = max(known, key=lambda row: abs(row["error"]))
    parts = sorted((p for p in COMPONENTS[r["latency"]] if math.isfinite(r[f"{p}_share"])),
                   key=lambda p: -abs(r[f"{p}_share"]))  # fmt: skip
    split = ", ".join(f"{PART_NAMES[p]} {_share(r[f'{p}_share'])}" for p in parts)
    head = f"{LATENCY_NAMES[r['latency']]}'s {_share(r['error'])} error (cell {r['cell']}, arm {r['arm']})"
    return f"{head}: {split}" if split else head
