"""Validation at public boundaries: one ``ValueError`` naming the owner and the field (numbers, repeats, and
names that go into tables)."""

from __future__ import annotations

import math
import numbers
import unicodedata
from collections.abc import Iterable
from typing import Any

__all__ = [
    "check_int",
    "check_label",
    "check_number",
    "check_positive",
    "check_unique",
    "duplicates",
    "is_finite_number",
    "label_fault",
]

TABLE_SEPARATOR = "|"  # a Markdown table's column separator


def check_positive(owner: str, name: str, value: object, *, allow_zero: bool = False) -> float:
    """``value`` if it is a finite number > 0 (or >= 0 with ``allow_zero``), else ``ValueError``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{owner}.{name} must be a number, got {value!r}")
    if not math.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"{owner}.{name} must be finite and {bound}, got {value!r}")
    return value


def check_int(owner: str, name: str, value: int, minimum: int) -> None:
    """Raise ``ValueError`` unless ``value`` is an integer (Python or numpy) >= ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise ValueError(f"{owner}.{name} must be an integer >= {minimum}, got {value!r}")


def check_number(owner: str, field: str, value: Any, *, positive: bool = False, integer: bool = False) -> float:
    """Return ``value`` if it is a finite number >= 0 (> 0 with ``positive``), else raise ``ValueError``."""
    kind = "an integer" if integer else "a number"
    bad_type = isinstance(value, bool) or not isinstance(value, int if integer else (int, float))
    if bad_type or not math.isfinite(value) or value < 0 or (positive and value == 0):
        bound = "> 0" if positive else ">= 0"
        raise ValueError(f"{owner}: field '{field}' must be {kind} {bound}, got {value!r}")
    return value


def is_finite_number(value: Any) -> bool:
    """Whether ``value`` is a finite int or float (Python or numpy; not a bool, not text)."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)


def duplicates(values: Iterable[Any]) -> list[Any]:
    """The values that ``values`` holds more than once, each once, in the order of their first repeat (equal
    values repeat: ``1`` and ``1.0`` are one load)."""
    seen: list[Any] = []
    out: list[Any] = []
    for value in values:
        if value in seen:
            if value not in out:
                out.append(value)
        else:
            seen.append(value)
    return out


def check_unique(name: str, values: Iterable[Any]) -> None:
    """Raise ``ValueError`` naming ``name`` (a field or an option) and the repeated value(s) when ``values``
    holds one more than once: a repeated seed, load, scenario or policy would count the same runs twice."""
    repeated = duplicates(values)
    if repeated:
        raise ValueError(f"{name}: {', '.join(map(str, repeated))} given more than once; give each value once")


def label_fault(name: str, separator: bool = True) -> str | None:
    """What keeps ``name`` from labelling a row of a text or Markdown table, None when nothing does: a control
    character (a newline, a tab, a carriage return...: Unicode category Cc, and the line and paragraph
    separators) splits or shifts its row; with ``separator``, ``|`` splits a Markdown row into columns."""
    for char in name:
        if separator and char == TABLE_SEPARATOR:
            return f"the table separator {char!r}"
        if unicodedata.category(char) in ("Cc", "Zl", "Zp"):
            return f"the control character {char!r}"
    return None


def check_label(what: str, name: str, separator: bool = True) -> None:
    """Raise ``ValueError`` naming ``what`` (``policy name``, ``policy``...) and ``name`` (as its repr, so the
    message stays one line) when ``name`` holds what ``label_fault`` refuses."""
    fault = label_fault(name, separator)
    if fault is not None:
        raise ValueError(f"{what} {name!r} holds {fault}; names go into tables, which such a character breaks")
