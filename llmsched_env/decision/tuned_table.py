"""The tuned-settings table: per scenario, the static knobs that ``llmsched-tune`` found best on ``val``.

    table = load_tuned_table("baselines/tuned.json")
    table.decision("mixed-slo", env.unwrapped.action_spec)   # the stored knobs, each checked against the spec

The file is JSON, ``{"format": "llmsched-tuned", "version": 1, "scenarios": {NAME: ENTRY}}``, and each
``ENTRY`` holds ``"settings"`` (the seven knobs, ``SETTING_NAMES``) and ``"provenance"`` (how they were found:
split, seeds, probe load, scores, capacities, command, date; free-form for readers, not read here). Knobs are
stored by value, not by option index, so that a table reads as what it does and an engine whose action space
lacks a stored value is refused by name instead of being silently moved to another option. No gymnasium.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llmsched_env.common.files import CONFIG_BYTES, FileRefusedError, parse_json, read_text
from llmsched_env.common.outputs import updating, write_text_atomically
from llmsched_env.decision.actions import UNLIMITED, ActionSpec
from llmsched_env.engine.batch import Decision, QueueOrder

__all__ = [
    "SETTING_NAMES",
    "TUNED_FORMAT",
    "TUNE_COMMAND",
    "TunedTable",
    "decision_of",
    "is_tuned_table",
    "load_tuned_table",
    "settings_of",
    "write_tuned_entries",
]

TUNED_FORMAT = "llmsched-tuned"  # the "format" field that tells a tuned table from any other JSON file
TUNED_VERSION = 1
TUNE_COMMAND = "python -m llmsched_env.commands.tune"
SETTING_NAMES = ("queue_order", "token_budget", "chunk_cap", "prefill_first", "max_admit", "kv_reserve", "shed")
_ORDERS = {o.name.lower(): o for o in QueueOrder}


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
    """A loaded table (``load_tuned_table``): ``entries`` maps a scenario name to its ``settings`` and
    ``provenance``, every entry's settings already checked. ``path`` names the table in messages; ``shipped``
    says it is the package's own (its re-tune hint then needs no ``--out``); ``tune_command``, when set, is
    the re-tune hint itself (a trace's entry: the ``llmsched-tune --trace`` command with its options). Plain
    data: it pickles."""

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
        """``settings(scenario)``, each knob checked to be an option of ``spec`` (never moved to the nearest
        one): ``ValueError`` naming the scenario, the knob, the value and the options otherwise."""
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
        raise ValueError(f"{path}: no such tuned-settings table") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: not a readable JSON tuned-settings table: {exc}") from None


def is_tuned_table(path: str | Path) -> bool:
    """Whether ``path`` is a JSON file whose ``"format"`` is ``TUNED_FORMAT`` (not checked any further)."""
    p = Path(path)
    if not p.is_file() or p.suffix != ".json":
        return False
    try:
        data = parse_json(read_text(p, CONFIG_BYTES))
    except (OSError, ValueError):  # FileRefusedError, UnicodeDecodeError and JSONDecodeError are ValueErrors
        return False
    return isinstance(data, dict) and data.get("format") == TUNED_FORMAT


# (path, shipped) -> ((inode, mtime_ns, size), table): a table is read and checked again only when its file changed
_LOADED: dict[tuple[str, bool], tuple[tuple[int, int, int], TunedTable]] = {}


def load_tuned_table(path: str | Path, *, shipped: bool = False) -> TunedTable:
    """The table in ``path``, every entry checked; one-line ``ValueError`` naming the file otherwise. Read once
    per process while the file is unchanged (same inode, modification time and size): ``tuned`` asks for it every
    episode, and a table written again (``llmsched-tune``, ``write_tuned_entries``) is read again."""
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
    table = _load(p, shipped)
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
    """Write ``entries`` (scenario -> {"settings", "provenance"}) into the table at ``path``, keeping its other
    scenarios (a new file when there is none); scenarios sorted, written atomically, the file held (``updating``)
    from the read to the write so that concurrent writers lose nothing. Returns the new table."""
    p = Path(path)
    for name, entry in entries.items():
        decision_of(entry.get("settings"), f"{p}: scenario {name!r}")
    with updating(p):  # two searches writing into one table keep both their entries
        old = load_tuned_table(p).entries if p.exists() else {}
        scenarios = dict(sorted({**old, **entries}.items()))
        data = {"format": TUNED_FORMAT, "version": TUNED_VERSION, "scenarios": scenarios}
        write_text_atomically(p, json.dumps(data, indent=2) + "\n")
    return TunedTable(str(p), scenarios)
