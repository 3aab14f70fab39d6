"""Validation at public boundaries: one ``ValueError`` naming the owner and the field (numbers, repeats, table
labels)."""

from __future__ import annotations

import argparse
import math
import numbers
import reprlib
import unicodedata
from collections.abc import Iterable
from typing import Any, NoReturn

TABLE_SEPARATOR = "|"  # a Markdown table's column separator

# Physical ranges (docs/reliability.md, "Physical ranges"): far outside anything real, so a mistyped or hostile
# figure (1e308) is refused in one line; ``Bound`` carries the bottom with the top.


class Bound(float):
    """The float ``top`` of a physical range, carrying its ``minimum`` (the least nonzero value) for the checks."""

    minimum: float

    def __new__(cls, top: float, minimum: float) -> Bound:
        bound = super().__new__(cls, top)
        bound.minimum = float(minimum)
        return bound

    def __reduce__(self) -> tuple[type[Bound], tuple[float, float]]:
        return (Bound, (float(self), self.minimum))


MIN_LOAD = 1e-3
MAX_LOAD = 1e3
MIN_RATE_RPS = 1e-6
MAX_RATE_RPS = Bound(1e7, MIN_RATE_RPS)
MAX_SLO_S = 1e6
MAX_REWARD_WEIGHT = 1e6
MAX_POLICY_TIMEOUT_S = 3600.0  # a decision's deadline: threading and setitimer refuse a timeout past about 9e9 s

QUOTE_CHARS = 80  # the most characters of a value an error message quotes (``shown``)


class _Short(reprlib.Repr):
    """``reprlib.Repr`` that never converts a huge integer to text (Python refuses past 4,300 digits)."""

    def repr_int(self, x: int, level: int) -> str:
        return _integer(x, self.maxlong)


def _integer(x: int, limit: int) -> str:
    """``repr(x)``, cut past ``limit`` digits with its length; past 14,000 bits (Python refuses to write an integer
    of over 4,300 digits), its length alone."""
    if x.bit_length() > 14_000:
        return f"an integer of about {int(x.bit_length() * math.log10(2)) + 1:,} digits"
    text = repr(x)
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text.lstrip('-')):,} digits)"


_SHORT = _Short()
_SHORT.maxlevel, _SHORT.maxstring, _SHORT.maxother, _SHORT.maxlong = 3, QUOTE_CHARS, QUOTE_CHARS, 60
for _attr in ("maxlist", "maxtuple", "maxdict", "maxset", "maxfrozenset", "maxdeque", "maxarray"):
    setattr(_SHORT, _attr, 6)


def clipped(text: str, limit: int = QUOTE_CHARS) -> str:
    """``text`` if at most ``limit`` characters, else its first ``limit`` and ``… (2,340,112 characters)``."""
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text):,} characters)"


MAX_MESSAGE = 900  # characters: an error message past it is cut in its middle (``cut_middle``)


def cut_middle(text: str, limit: int = MAX_MESSAGE) -> str:
    """``text`` if at most ``limit`` characters, else its first three quarters and last quarter of ``limit`` with
    ``… (N characters) …`` between: an error message bounded whatever it quotes, its start and end kept."""
    if len(text) <= limit:
        return text
    return f"{text[: limit * 3 // 4]}… ({len(text):,} characters) …{text[-limit // 4 :]}"


def one_line(text: str, limit: int = MAX_MESSAGE) -> str:
    """``text`` as one bounded line: a line break inside it (a path holding one) written ``\\n`` or ``\\r``, and
    past ``limit`` characters its middle cut out, its size said (a value of megabytes quoted by an error)."""
    return cut_middle(text.replace("\r", "\\r").replace("\n", "\\n"), limit)


class Parser(argparse.ArgumentParser):
    """Every command line's ``ArgumentParser``: its usage error is one bounded line (``one_line``)."""

    def error(self, message: str) -> NoReturn:
        super().error(one_line(message))


def shown(value: object, limit: int = QUOTE_CHARS) -> str:
    """``repr(value)`` for an error message, at most about ``limit`` characters: a long string cut with its size
    (``'xxx…' (2,340,112 characters)``), a container shown to 3 levels and 6 items each (``...`` for the rest),
    with its length when it holds more or is cut past ``limit``. Never builds the whole ``repr`` of a long string, a
    huge integer or a large (or alias-shared) container."""
    if isinstance(value, (str, bytes)):
        text = repr(value[: limit + 1])
        if len(value) <= limit and len(text) <= limit:
            return text
        unit = "characters" if isinstance(value, str) else "bytes"
        return f"{text[:limit]}… ({len(value):,} {unit})"
    if isinstance(value, int) and not isinstance(value, bool):
        return _integer(value, limit)
    text = _SHORT.repr(value)  # a container longer or deeper than it shows: "..." in its place
    sized = isinstance(value, (list, tuple, dict, set, frozenset))
    if len(text) <= limit and not (sized and len(value) > _SHORT.maxlist):  # type: ignore[arg-type]
        return text
    cut = f"{text[:limit]}…" if len(text) > limit else text
    return cut + (f" (a {type(value).__name__} of {len(value):,} items)" if sized else "")  # type: ignore[arg-type]


def check_positive(
    owner: str, name: str, value: object, *, allow_zero: bool = False, maximum: float | None = None, unit: str = ""
) -> float:
    """``value`` if a finite number > 0 (>= 0 with ``allow_zero``) and at most ``maximum``; else ``ValueError``
    naming the range (in ``unit``)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{owner}.{name} must be a number, got {shown(value)}")
    if not in_range(value, allow_zero, maximum):
        span = range_text(allow_zero, maximum, unit)
        raise ValueError(f"{owner}.{name} must be finite and {span}, got {shown(value)}")
    return value


def check_bool(owner: str, name: str, value: object) -> bool:
    """``value`` if it is ``True`` or ``False`` (not text or a number), else ``ValueError`` naming the field."""
    if not isinstance(value, bool):
        raise ValueError(f"{owner}.{name} must be True or False, got {shown(value)}")
    return value


def check_int(owner: str, name: str, value: int, minimum: int, maximum: int | None = None) -> None:
    """Raise ``ValueError`` unless ``value`` is an integer (Python or numpy) >= ``minimum`` (and <= ``maximum``)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        span = f">= {minimum}" if maximum is None else f"in [{minimum:,}, {maximum:,}]"
        raise ValueError(f"{owner}.{name} must be an integer {span}, got {shown(value)}")
    if maximum is not None and value > maximum:
        raise ValueError(f"{owner}.{name} must be an integer in [{minimum:,}, {maximum:,}], got {shown(value)}")


SEED_LIMIT = 2**32  # a seed is one of numpy's legacy seeds: an integer in [0, 2**32)
MAX_SEEDS = 10_000  # seeds one list may hold (an episode or a training each; the library's runs use 1 to 20)


def check_seed(owner: str, name: str, value: object) -> None:
    """``ValueError`` naming the field unless ``value`` is an integer (Python or numpy) in [0, ``SEED_LIMIT``)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or not 0 <= int(value) < SEED_LIMIT:
        raise ValueError(f"{owner}.{name} must be an integer in [0, 2**32 - 1 = {SEED_LIMIT - 1}], got {value!r}")


def check_seeds(owner: str, name: str, values: Iterable[object]) -> None:
    """``check_seed`` for each of ``values``; ``ValueError`` for more than ``MAX_SEEDS`` of them."""
    values = list(values)
    if len(values) > MAX_SEEDS:
        raise ValueError(f"{owner}.{name} holds {len(values):,} seeds, more than {MAX_SEEDS:,}")
    for value in values:
        check_seed(owner, name, value)


def check_number(
    owner: str,
    field: str,
    value: Any,
    *,
    positive: bool = False,
    integer: bool = False,
    maximum: float | None = None,
    unit: str = "",
) -> float:
    """``value`` if a finite number >= 0 (> 0 with ``positive``; an int with ``integer``) and at most ``maximum``;
    else ``ValueError`` naming the field and the range."""
    kind = "an integer" if integer else "a number"
    bad_type = isinstance(value, bool) or not isinstance(value, int if integer else (int, float))
    if bad_type or not in_range(value, not positive, maximum):
        raise ValueError(
            f"{owner}: field '{field}' must be {kind} {range_text(not positive, maximum, unit)}, got {shown(value)}"
        )
    return value


def in_range(value: float, allow_zero: bool, maximum: float | None) -> bool:
    """Whether ``value`` is finite, > 0 (>= 0 with ``allow_zero``), <= ``maximum`` and, for a ``Bound``, 0 or at
    least its ``minimum`` (an int too large for a float is over any maximum)."""
    finite = isinstance(value, int) or math.isfinite(value)
    low = maximum.minimum if isinstance(maximum, Bound) else 0.0
    above = value > 0 and value >= low
    return finite and (above or (allow_zero and value == 0)) and (maximum is None or value <= maximum)


def range_text(allow_zero: bool, maximum: float | None, unit: str) -> str:
    """``> 0``, ``>= 0``, ``in (0, 1e+06] s`` (``[0, ...`` with ``allow_zero``), or for a ``Bound`` ``in [1e-06,
    10,000,000] requests/s``."""
    if maximum is None:
        return ">= 0" if allow_zero else "> 0"
    unit = " " + unit if unit else ""
    if isinstance(maximum, Bound):
        return f"{'0 or ' if allow_zero else ''}in [{maximum.minimum:g}, {maximum:,.15g}]{unit}"
    return f"in {'[' if allow_zero else '('}0, {maximum:,.15g}]{unit}"


def is_finite_number(value: Any) -> bool:
    """Whether ``value`` is a finite int or float (Python or numpy; not a bool, not text)."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)


def duplicates(values: Iterable[Any]) -> list[Any]:
    """The values ``values`` holds more than once, each once, in the order of their first repeat (``1`` equals
    ``1.0``)."""
    seen: list[Any] = []
    out: list[Any] = []
    for value in values:
        if value in seen:
            if value not in out:
                out.append(value)
        else:
            seen.append(value)
    return out


def listed(values: list[Any], limit: int = 6) -> str:
    """The first ``limit`` of ``values`` joined by commas (a string as it is, cut past ``QUOTE_CHARS``; anything else
    ``shown``), and how many in all past that (``a, b, ... (1,024 in all)``)."""
    text = ", ".join(clipped(v) if isinstance(v, str) else shown(v) for v in values[:limit])
    return text + (f", ... ({len(values):,} in all)" if len(values) > limit else "")


def check_unique(name: str, values: Iterable[Any]) -> None:
    """``ValueError`` naming ``name`` and the repeated value(s) when ``values`` holds one more than once."""
    repeated = duplicates(values)
    if repeated:
        raise ValueError(f"{name}: {listed(repeated)} given more than once; give each value once")


def label_fault(name: str, separator: bool = True) -> str | None:
    """What keeps ``name`` from labelling a table row (a control or line-separator character; with ``separator``,
    ``|``), None when nothing does."""
    for char in name:
        if separator and char == TABLE_SEPARATOR:
            return f"the table separator {char!r}"
        if unicodedata.category(char) in ("Cc", "Zl", "Zp"):
            return f"the control character {char!r}"
    return None


def check_label(what: str, name: str, separator: bool = True) -> None:
    """``ValueError`` naming ``what`` and ``name`` when ``name`` holds what ``label_fault`` refuses."""
    fault = label_fault(name, separator)
    if fault is not None:
        raise ValueError(f"{what} {shown(name)} holds {fault}; names go into tables, which such a character breaks")
