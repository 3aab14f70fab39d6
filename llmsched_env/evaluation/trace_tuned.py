"""The user's tuned rival on a trace of their own: the key of its entry, the user's table, and the lookup.

    key = trace_key(options, scenario)                      # "azure_code@3f0c9e1a2b4d" and what it hashes
    spec = trace_tuned_policy(resolve_policy("tuned"), [(scenario, key)], command="llmsched-tune --trace ...")

``llmsched-tune --trace FILE [trace options]`` stores its entry under ``trace_key``: the trace's stem, ``@``, and
12 hex digits of a SHA-256 over the file's content and every option that shapes the workload or the engine
(format, columns and time unit, rate, SLO classes, the engine after its limits, the cost model). The same file
with the same options gives the same key on any machine; another file content, rate, tenant SLO, engine limit
or cost model gives another, so settings tuned for one workload are never played on another under the same
name. The episode size is not part of it: tuning's windows must fit the trace's val part and an evaluation's
its test part (``val_episode_size``), and the size a search used is in its entry's provenance. Library
scenarios keep their names as keys; a ``@`` never appears in one.

Where such entries go: ``user_table()``, the file ``$LLMSCHED_TUNED_TABLE`` names, else
``${XDG_DATA_HOME:-~/.local/share}/llmsched/tuned.json``, never the package's shipped table.
``llmsched-evaluate --trace FILE [same options] --policies tuned`` looks the key up in the user table, then the
shipped one; ``tuned=TABLE.json`` in that table only. No gymnasium.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from llmsched_env.common.files import TRACE_BYTES, open_regular
from llmsched_env.decision.policy_spec import PolicySpec
from llmsched_env.decision.tuned_table import TunedTable, load_tuned_table
from llmsched_env.evaluation.tuning import shipped_table
from llmsched_env.workloads.scenarios import Scenario, TraceSource

__all__ = [
    "KEY_DIGITS",
    "USER_TABLE_ENV",
    "TraceKey",
    "find_trace_entry",
    "trace_key",
    "trace_keys",
    "trace_tables",
    "trace_tuned_policy",
    "user_table",
    "val_episode_size",
]

USER_TABLE_ENV = "LLMSCHED_TUNED_TABLE"  # the user's table of trace entries, overriding the XDG default
KEY_DIGITS = 12  # hex digits of the hash in a key: 48 bits, no collision among a user's traces in practice
TUNED = "tuned"


def user_table() -> Path:
    """The user's tuned-settings table for traces: ``$LLMSCHED_TUNED_TABLE`` if set, else
    ``$XDG_DATA_HOME/llmsched/tuned.json`` (``~/.local/share`` when ``XDG_DATA_HOME`` is unset or empty)."""
    named = os.environ.get(USER_TABLE_ENV)
    if named:
        return Path(named).expanduser()
    base = os.environ.get("XDG_DATA_HOME") or "~/.local/share"
    return Path(base).expanduser() / "llmsched" / "tuned.json"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    try:
        with open_regular(path, TRACE_BYTES) as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
    except OSError as exc:
        raise ValueError(f"{path}: cannot read the trace to key its tuned entry: {exc}") from None
    return digest.hexdigest()


def _pairs(text: Any) -> list[str] | None:
    """``A=x,B=y`` as sorted, stripped pairs (their order on a command line is not part of the workload)."""
    if text is None:
        return None
    return sorted(item.strip() for item in str(text).split(",") if item.strip())


@dataclass(frozen=True)
class TraceKey:
    """A trace's entry name in a tuned table (``key``) and everything it hashes (``identity``, stored in the
    entry's provenance so that a reader sees which workload the settings were tuned for)."""

    key: str
    identity: Mapping[str, Any]

    @property
    def trace(self) -> str:
        """The trace file, as given."""
        return str(self.identity["trace"])


def trace_key(options: Mapping[str, Any], scenario: Scenario, *, cost_model: str | None = None) -> TraceKey:
    """The key of ``scenario``, the trace built from ``options`` (the ``--trace`` options by name: ``trace``,
    ``trace_format``, ``trace_rate``, ``trace_slo``, ``tenant_slo``, ``trace_columns``, ``trace_time_unit``) with
    its engine limits applied, under ``cost_model`` (a preset name or JSON path; default: the scenario's).
    ``ValueError`` naming the file if it cannot be read."""
    (key,) = trace_keys(options, [scenario], cost_model=cost_model)
    return key


def trace_keys(
    options: Mapping[str, Any], scenarios: Sequence[Scenario], *, cost_model: str | None = None
) -> list[TraceKey]:
    """``trace_key`` of each of ``scenarios`` built from the same trace (its replay and its fitted traffic),
    the file read and hashed once."""
    digest = _sha256(Path(options["trace"]))
    return [_trace_key(options, scenario, cost_model, digest) for scenario in scenarios]


def _trace_key(options: Mapping[str, Any], scenario: Scenario, cost_model: str | None, digest: str) -> TraceKey:
    path = Path(options["trace"])
    fmt = options.get("trace_format")
    rate = options.get("trace_rate")
    identity: dict[str, Any] = {
        "trace": str(path),
        "sha256": digest,
        "trace_format": fmt,
        "trace_rate": float(rate) if rate is not None else None,  # None: the trace's own mean rate
        "trace_slo": str(options.get("trace_slo") or "chat"),
        "tenant_slo": _pairs(options.get("tenant_slo")),
    }
    if fmt == "generic":
        identity["trace_columns"] = _pairs(options.get("trace_columns"))
        identity["trace_time_unit"] = str(options.get("trace_time_unit") or "s")
    model = cost_model if cost_model is not None else scenario.cost_model
    identity["cost_model"] = model
    model_path = Path(model).expanduser()
    if model_path.suffix == ".json" and model_path.is_file():  # a fitted model's file: its content counts
        identity["cost_model_sha256"] = _sha256(model_path)
    identity["engine"] = asdict(scenario.engine)
    if scenario.traffic:  # traffic fitted to the trace (workloads.fitted): settings of its own
        identity["traffic"] = "fitted"
    where = {"trace", "cost_model"} if "cost_model_sha256" in identity else {"trace"}
    hashed = {k: v for k, v in identity.items() if k not in where}  # the files' content counts, not where they lie
    text = json.dumps(hashed, sort_keys=True, separators=(",", ":"))
    digest = hashlib.sha256(text.encode()).hexdigest()[:KEY_DIGITS]
    return TraceKey(f"{scenario.name}@{digest}", identity)


def val_episode_size(scenario: Scenario, seeds: Sequence[int]) -> int | None:
    """The episode size a search on ``scenario``'s val part uses by default: the scenario's own, cut down until
    the part holds a disjoint window for each of ``seeds`` (seed ``s`` replays the ``s``-th window); None for a
    generated source (length-only, or fitted to the trace), whose episodes share no request at any size.
    ``ValueError`` naming the file when the part holds fewer requests than ``max(seeds) + 1``."""
    source = scenario.make_source("val", 1.0)  # the SLO scale does not change the part's size
    if not isinstance(source, TraceSource):
        return None
    trace = source.trace
    fit = len(trace) // (max(seeds) + 1)
    if fit < 1:
        raise ValueError(
            f"{scenario.description}: the val part holds {len(trace)} requests, too few for a window per seed of "
            f"{list(seeds)}; give fewer --seeds"
        )
    return min(scenario.num_requests, fit)


def trace_tables(table: str | Path | TunedTable | None) -> list[Path]:
    """The tables a trace's ``tuned`` looks in: ``table`` alone when given (``tuned=TABLE.json``), else the
    user table and then the shipped one."""
    if isinstance(table, TunedTable):
        return [Path(table.path)]
    if table is not None:
        return [Path(table)]
    return [user_table(), shipped_table()]


def find_trace_entry(key: str, tables: Sequence[Path]) -> tuple[Path, Mapping[str, Any]] | None:
    """The first of ``tables`` (those that exist) holding ``key``, and its entry; None when none does. A
    malformed table is a ``ValueError`` naming its file."""
    for path in tables:
        if path.is_file() and key in (entries := load_tuned_table(path).entries):
            return path, entries[key]
    return None


def trace_tuned_policy(spec: PolicySpec, keyed: Sequence[tuple[Scenario, TraceKey]], command: str) -> PolicySpec:
    """``spec`` (a ``tuned`` policy: plain ``tuned`` or ``NAME=TABLE.json``) playing, on each scenario of
    ``keyed``, the entry of its key: a table of those entries under the scenarios' names, so ``tuned`` finds
    each by ``PolicyContext.scenario`` as it finds a library scenario's. ``ValueError`` in one line when no
    table holds a key, giving ``command``, the one that makes the entries."""
    tables = trace_tables(spec.table)
    entries: dict[str, Mapping[str, Any]] = {}
    where: list[str] = []
    for scenario, key in keyed:
        found = find_trace_entry(key.key, tables)
        if found is None:
            places = " or ".join(str(t) for t in tables)
            raise ValueError(
                f"policy {spec.name!r}: no tuned settings for trace {key.trace} with these options (key {key.key}) "
                f"in {places}; make them (on the trace's val part) with: {command}"
            )
        path, entries[scenario.name] = found
        where.append(str(path))
    table = TunedTable(" and ".join(dict.fromkeys(where)), entries, tune_command=command)
    return PolicySpec(spec.name, baseline=TUNED, table=table)
