"""A user's trace as a scenario, from the options the command lines name (``TRACE_OPTIONS``; the engine limits
a trace may set: ``ENGINE_LIMIT_FIELDS``). A bad value raises a ``ValueError`` starting with the option's name.

    scenario = build_trace_scenario({"trace": "mine.csv", "trace_format": "generic"}, {"max_num_seqs": 64})
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from llmsched_env.common.checks import MAX_SLO_S, range_text
from llmsched_env.common.fields import split_items
from llmsched_env.engine.config import SLO_CLASSES, EngineConfig, SLOClass
from llmsched_env.workloads.scenarios import Scenario, scenario_from_trace
from llmsched_env.workloads.traces import TRACE_FORMATS

TRACE_OPTIONS = ("trace", "trace_format", "trace_rate", "trace_slo", "tenant_slo", "trace_columns", "trace_time_unit")
# the trace options only some formats read: option -> those formats (workloads.traces: load_generic alone takes
# columns and a time unit); given with another format they are refused, not ignored
FORMAT_OPTIONS = {"trace_columns": ("generic",), "trace_time_unit": ("generic",)}
ENGINE_LIMIT_FIELDS = ("num_kv_blocks", "max_num_seqs", "max_num_batched_tokens", "max_model_len", "block_size")


def slo_class(text: str) -> SLOClass:
    """An SLO class from its name in ``SLO_CLASSES`` or ``TTFT_S:TPOT_S`` (seconds, each within ``MAX_SLO_S``);
    ``ValueError`` otherwise."""
    if text in SLO_CLASSES:
        return SLO_CLASSES[text]
    ttft, sep, tpot = text.partition(":")
    try:
        return SLOClass(text, float(ttft), float(tpot)) if sep else SLO_CLASSES[text]
    except (KeyError, ValueError):
        raise ValueError(
            f"unknown SLO class {text!r}; available: {', '.join(SLO_CLASSES)}, or TTFT_S:TPOT_S with both "
            f"{range_text(False, MAX_SLO_S, 's')}"
        ) from None


def tenant_slos(text: str) -> dict[str, SLOClass]:
    """``NAME=CLASS[,NAME=CLASS...]`` as {tenant name: SLO class} (``slo_class``); ``ValueError`` otherwise."""
    pairs = split_items(text.split(","), "", what="tenant", form="NAME=CLASS (pairs separated by commas)")
    return {name: slo_class(cls) for name, cls in pairs.items()}


def build_trace_scenario(options: Mapping[str, Any], limits: Mapping[str, Any] | None = None) -> Scenario:
    """The scenario of a trace from its ``options`` (``TRACE_OPTIONS``; ``trace`` and ``trace_format`` required) over an
    engine with ``limits`` (``ENGINE_LIMIT_FIELDS``); ``ValueError`` starting with the option at fault."""
    unknown = sorted(set(options) - set(TRACE_OPTIONS))
    if unknown:
        raise ValueError(f"unknown trace option(s) {unknown}; known: {', '.join(TRACE_OPTIONS)}")
    bad = sorted(set(limits or {}) - set(ENGINE_LIMIT_FIELDS))
    if bad:
        raise ValueError(f"unknown engine limit(s) {bad}; known: {', '.join(ENGINE_LIMIT_FIELDS)}")
    if options.get("trace") is None:
        raise ValueError("trace: no trace file given")
    fmt = options.get("trace_format")
    if fmt not in TRACE_FORMATS:
        raise ValueError(f"trace_format: expected one of {', '.join(TRACE_FORMATS)}, got {fmt!r}")
    try:
        default = slo_class(str(options.get("trace_slo", "chat")))
    except ValueError as exc:
        raise ValueError(f"trace_slo: {exc}") from None
    try:
        text = options.get("tenant_slo")
        per_tenant = tenant_slos(str(text)) if text is not None else None
    except ValueError as exc:
        raise ValueError(f"tenant_slo: {exc}") from None
    for name, formats in FORMAT_OPTIONS.items():  # a time unit of "s" is every format's default: not a choice
        value = options.get(name)
        if fmt not in formats and value is not None and not (name == "trace_time_unit" and value == "s"):
            raise ValueError(f"{name}: only the {' or '.join(formats)} format reads it, not {fmt}; leave it out")
    reader: dict[str, Any] = {}
    if fmt == "generic":
        columns = options.get("trace_columns")
        if not columns:
            raise ValueError("trace_columns: the generic format needs them (e.g. prompt_len=input,output_len=output)")
        reader["columns"] = split_items(str(columns).split(","), "trace_columns", what="pair", form="field=column")
        reader["time_unit"] = options.get("trace_time_unit", "s")
    return scenario_from_trace(
        Path(options["trace"]),
        fmt,
        options.get("trace_rate"),
        default,
        engine=EngineConfig(**(limits or {})),
        tenant_slos=per_tenant,
        **reader,
    )
