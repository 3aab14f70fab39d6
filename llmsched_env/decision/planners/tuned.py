"""The tuned-settings table (per scenario, the static knobs ``llmsched-tune`` found best on ``val``) and the keys of
a user's own traces in it (``STEM@`` + 12 hex digits of a SHA-256 over the file and the options shaping the
workload and engine; docs/baselines-and-metrics.md). Trace entries live in the user table (``user_table()``),
never the shipped one. No gymnasium.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from llmsched_env.common.files import (
    CONFIG_BYTES,
    TRACE_BYTES,
    FileRefusedError,
    InputFileError,
    link_problem,
    open_regular,
    parse_json,
    read_text,
)
from llmsched_env.common.outputs import updating, write_text_atomically
from llmsched_env.decision.actions import UNLIMITED, ActionSpec
from llmsched_env.decision.registry import SCHEDULERS
from llmsched_env.engine.batch import Decision, QueueOrder
from llmsched_env.workloads.scenarios import Scenario, TraceSource

__all__ = ["KEY_DIGITS", "SETTING_NAMES", "TUNED_FORMAT", "TUNE_COMMAND", "USER_TABLE_ENV", "TraceKey", "TunedTable",
           "decision_of", "find_trace_entry", "is_tuned_table", "load_tuned_table", "settings_of", "shipped_table",
           "trace_key", "trace_keys", "trace_table", "trace_tables", "trace_tune_command", "user_table",
           "val_episode_size", "write_tuned_entries"]  # fmt: skip

TUNED_FORMAT = "llmsched-tuned"  # the "format" field that tells a tuned table from any other JSON file
TUNED_VERSION = 1
TUNE_COMMAND = "python -m llmsched_env.commands.tune"
TUNE_PROG = "llmsched-tune"
SETTING_NAMES = ("queue_order", "token_budget", "chunk_cap", "prefill_first", "max_admit", "kv_reserve", "shed")
_ORDERS = {o.name.lower(): o for o in QueueOrder}
USER_TABLE_ENV = "LLMSCHED_TUNED_TABLE"  # the user's table of trace entries, overriding the XDG default
KEY_DIGITS = 12  # hex digits of the hash in a key: 48 bits, no collision among a user's traces in practice
# trace option -> its default on the command line (add_trace_options): left out of a command at that value
_TRACE_FLAGS = {
    "trace_format": None,
    "trace_columns": None,
    "trace_time_unit": "s",
    "trace_rate": None,
    "trace_slo": "chat",
    "tenant_slo": None,
}


def settings_of(decision: Decision) -> dict[str, Any]:
    """``decision``'s knobs by value, as a table stores them (queue order by name, "unlimited" admission)."""
    return {
        "queue_order": decision.order.name.lower(),
        "token_budget": decision.token_budget,
        "chunk_cap": decision.chunk_cap,
        "prefill_first": decision.prefill_first,
        "max_admit": "unlimited" if decision.max_admit == UNLIMITED else decision.max_admit,
        "kv_reserve": decision.kv_reserve,
        "shed": decision.shed,
    }


def decision_of(settings: object, where: str) -> Decision:
    """The ``Decision`` of stored ``settings``; ``ValueError`` starting with ``where`` naming the bad knob."""
    if not isinstance(settings, Mapping):
        raise ValueError(f"{where}: settings must be an object of {', '.join(SETTING_NAMES)}, got {settings!r}")
    missing = [k for k in SETTING_NAMES if k not in settings]
    extra = sorted(set(settings) - set(SETTING_NAMES))
    if missing or extra:
        raise ValueError(f"{where}: settings lack {missing} / have unknown {extra}; expected {list(SETTING_NAMES)}")
    s = settings
    if s["queue_order"] not in _ORDERS:
        raise ValueError(f"{where}: queue_order {s['queue_order']!r} is none of {', '.join(_ORDERS)}")
    for name in ("token_budget", "chunk_cap"):
        if type(s[name]) is not int or s[name] < 1:
            raise ValueError(f"{where}: {name} must be an integer >= 1, got {s[name]!r}")
    admit = UNLIMITED if s["max_admit"] == "unlimited" else s["max_admit"]
    if type(admit) is not int or admit < 0:
        raise ValueError(f'{where}: max_admit must be an integer >= 0 or "unlimited", got {s["max_admit"]!r}')
    reserve = s["kv_reserve"]
    if type(reserve) not in (int, float) or not (math.isfinite(reserve) and 0.0 <= reserve < 1.0):
        raise ValueError(f"{where}: kv_reserve must be a number in [0, 1), got {reserve!r}")
    for name in ("prefill_first", "shed"):
        if not isinstance(s[name], bool):
            raise ValueError(f"{where}: {name} must be true or false, got {s[name]!r}")
    return Decision(
        order=_ORDERS[s["queue_order"]],
        token_budget=s["token_budget"],
        chunk_cap=s["chunk_cap"],
        prefill_first=s["prefill_first"],
        max_admit=admit,
        kv_reserve=float(reserve),
        shed=s["shed"],
    )


@dataclass(frozen=True)
class TunedTable:
    """A loaded table: ``entries`` (scenario -> checked ``settings`` and ``provenance``), its ``path``, whether it is
    the ``shipped`` one, and its re-tune hint ``tune_command``. Plain data: it pickles."""

    path: str
    entries: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    shipped: bool = False
    tune_command: str | None = None

    def settings(self, scenario: str) -> Decision:
        """The stored knobs of ``scenario``; ``ValueError`` saying how to tune it when the table lacks it."""
        if not scenario:
            raise ValueError(
                f"tuned looks its settings up by scenario name, and this policy context names none "
                f"(PolicyContext.scenario is empty); the table {self.path} has {sorted(self.entries)}"
            )
        entry = self.entries.get(scenario)
        if entry is None:
            raise ValueError(
                f"no tuned settings for scenario {scenario!r} in {self.path}; tune it with: {self.command(scenario)}"
            )
        return decision_of(entry["settings"], f"{self.path}: scenario {scenario!r}")

    def decision(self, scenario: str, spec: ActionSpec) -> Decision:
        """``settings(scenario)``, each knob checked against ``spec`` (never moved): ``ValueError`` naming what is
        wrong."""
        d = self.settings(scenario)
        for name, value, options in (
            ("token_budget", d.token_budget, spec.token_budget_values),
            ("chunk_cap", d.chunk_cap, spec.chunk_cap_values),
            ("max_admit", d.max_admit, spec.admission_caps),
            ("kv_reserve", d.kv_reserve, spec.kv_reserves),
        ):
            if value not in options:
                raise ValueError(
                    f"{self.path}: scenario {scenario!r}: {name} {value!r} is not an option of this engine's action "
                    f"space {list(options)}; tune the scenario for this engine: {self.command(scenario)}"
                )
        return d

    def command(self, scenario: str) -> str:
        """The command that (re)tunes ``scenario`` into this table."""
        if self.tune_command is not None:
            return self.tune_command
        out = "" if self.shipped else f" --out {self.path}"
        return (
            f"{TUNE_COMMAND} --scenarios {scenario}{out} (a library scenario), or {TUNE_COMMAND} --trace FILE "
            "[trace options] and then --policies tuned with the same --trace options (a trace of your own)"
        )


def _read_json(path: Path) -> Any:
    try:
        return parse_json(read_text(path, CONFIG_BYTES))
    except FileRefusedError:  # a FIFO, a device, a file over the limit: one line naming it already
        raise
    except FileNotFoundError:
        raise ValueError(f"{path}: {link_problem(path) or 'no such tuned-settings table'}") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: not a readable JSON tuned-settings table: {exc}") from None


def is_tuned_table(path: str | Path) -> bool:
    """Whether ``path`` is a JSON file whose ``"format"`` is ``TUNED_FORMAT`` (not checked any further)."""
    p = Path(path)
    if not p.is_file() or p.suffix != ".json":
        return False
    try:
        data = _read_json(p)
    except ValueError:
        return False
    return isinstance(data, dict) and data.get("format") == TUNED_FORMAT


# (path, shipped) -> ((inode, mtime_ns, size), table): a table is read and checked again only when its file changed
_LOADED: dict[tuple[str, bool], tuple[tuple[int, int, int], TunedTable]] = {}


def load_tuned_table(path: str | Path, *, shipped: bool = False) -> TunedTable:
    """The table in ``path``, checked (one-line ``ValueError`` naming the file); read again only when the file
    changed."""
    p = Path(path)
    try:
        st = p.stat()
        stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
    except OSError:
        stamp = None  # _read_json names the problem
    key = (str(p), shipped)
    cached = _LOADED.get(key)
    if stamp is not None and cached is not None and cached[0] == stamp:
        return cached[1]
    try:
        table = _load(p, shipped)
    except InputFileError:
        raise
    except ValueError as exc:  # what a file there holds (not the command line's words): without the usage block
        if stamp is None:
            raise
        raise InputFileError(str(exc)) from None
    if stamp is not None:
        _LOADED[key] = (stamp, table)
    return table


def _load(p: Path, shipped: bool) -> TunedTable:
    data = _read_json(p)
    if not isinstance(data, dict) or data.get("format") != TUNED_FORMAT:
        raise ValueError(f'{p}: not a tuned-settings table (it needs "format": "{TUNED_FORMAT}")')
    if data.get("version") != TUNED_VERSION:
        raise ValueError(f"{p}: tuned-table version {data.get('version')!r}; this llmsched reads {TUNED_VERSION}")
    scenarios = data.get("scenarios")
    if not isinstance(scenarios, dict):
        raise ValueError(f'{p}: "scenarios" must be an object of scenario name -> entry, got {scenarios!r}')
    for name, entry in scenarios.items():
        if not isinstance(entry, dict) or not isinstance(entry.get("provenance"), dict):
            raise ValueError(f'{p}: scenario {name!r} needs an object with "settings" and "provenance"')
        decision_of(entry.get("settings"), f"{p}: scenario {name!r}")
    return TunedTable(str(p), scenarios, shipped)


def write_tuned_entries(path: str | Path, entries: Mapping[str, Mapping[str, Any]]) -> TunedTable:
    """Merge ``entries`` into the table at ``path`` (made if missing), written atomically under a lock held from read to
    write."""
    p = Path(path)
    for name, entry in entries.items():
        decision_of(entry.get("settings"), f"{p}: scenario {name!r}")
    with updating(p):  # two searches writing into one table keep both their entries
        old = load_tuned_table(p).entries if p.exists() else {}
        scenarios = dict(sorted({**old, **entries}.items()))
        data = {"format": TUNED_FORMAT, "version": TUNED_VERSION, "scenarios": scenarios}
        write_text_atomically(p, json.dumps(data, indent=2) + "\n")
    return TunedTable(str(p), scenarios)


def shipped_table() -> Path:
    """The shipped table (``baselines/tuned.json``), found through the registry (no import of ``baselines``)."""
    tuned: Any = SCHEDULERS.get("tuned")  # baselines.TunedPolicy, registered as its own factory
    return Path(tuned.shipped_table)


def user_table() -> Path:
    """The user's table for traces: ``$LLMSCHED_TUNED_TABLE``, else under ``$XDG_DATA_HOME``
    (``llmsched/tuned.json``)."""
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
    """A trace's entry name (``key``) and everything it hashes (``identity``, stored in the entry's provenance)."""

    key: str
    identity: Mapping[str, Any]


def trace_key(options: Mapping[str, Any], scenario: Scenario, *, cost_model: str | None = None) -> TraceKey:
    """The key of ``scenario`` built from ``options`` under ``cost_model``; ``ValueError`` naming an unreadable file."""
    (key,) = trace_keys(options, [scenario], cost_model=cost_model)
    return key


def trace_keys(
    options: Mapping[str, Any], scenarios: Sequence[Scenario], *, cost_model: str | None = None
) -> list[TraceKey]:
    """``trace_key`` of each of ``scenarios`` built from the same trace, the file read and hashed once."""
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
    """A search's default episode size on ``scenario``'s val part (None for a generated source); ``ValueError`` if too
    few."""
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
    """Where a trace's ``tuned`` looks: ``table`` alone when given, else the user table, then the shipped one."""
    if isinstance(table, TunedTable):
        return [Path(table.path)]
    if table is not None:
        return [Path(table)]
    return [user_table(), shipped_table()]


def find_trace_entry(key: str, tables: Sequence[Path]) -> tuple[Path, Mapping[str, Any]] | None:
    """The first of ``tables`` (those that exist) holding ``key``, and its entry; None when none does."""
    for path in tables:
        if path.is_file() and key in (entries := load_tuned_table(path).entries):
            return path, entries[key]
    return None


def trace_table(
    name: str, table: str | Path | TunedTable | None, keyed: Sequence[tuple[Scenario, TraceKey]], command: str
) -> TunedTable:
    """The table policy ``name`` plays on a trace: each of ``keyed``'s scenarios with its key's entry. One-line
    ``ValueError`` when no table holds a key, giving ``command``, the one that makes the entries."""
    tables = trace_tables(table)
    entries: dict[str, Mapping[str, Any]] = {}
    where: list[str] = []
    for scenario, key in keyed:
        found = find_trace_entry(key.key, tables)
        if found is None:
            places = " or ".join(str(t) for t in tables)
            raise ValueError(
                f"policy {name!r}: no tuned settings for trace {key.identity['trace']} with these options (key "
                f"{key.key}) in {places}; make them (on the trace's val part) with: {command}"
            )
        path, entries[scenario.name] = found
        where.append(str(path))
    return TunedTable(" and ".join(dict.fromkeys(where)), entries, tune_command=command)


def trace_tune_command(
    options: Mapping[str, Any],
    limits: Mapping[str, int],
    *,
    cost_model: str | None = None,
    out: Path | None = None,
    fitted: bool = False,
) -> str:
    """The ``llmsched-tune --trace ...`` command whose entry has the key of these ``options``, cost model and
    ``limits``."""
    words = [TUNE_PROG, "--trace", str(options["trace"])]
    for name, default in _TRACE_FLAGS.items():
        value = options.get(name)
        if name == "trace_time_unit" and options.get("trace_format") != "generic":
            continue  # only the generic format reads it, and only there is it part of the key
        if value is not None and value != default:
            words += [f"--{name.replace('_', '-')}", str(value)]
    if cost_model is not None:
        words += ["--cost-model", str(cost_model)]
    for name, value in limits.items():
        words += [f"--{name.replace('_', '-')}", str(value)]
    if fitted:
        words.append("--fitted-traffic")
    if out is not None:
        words += ["--out", str(out)]
    return shlex.join(words)
