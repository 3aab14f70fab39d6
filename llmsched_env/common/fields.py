"""Dataclass fields as plain data (``check_fields``, ``from_fields``, ``as_dataclass``, ``to_fields``, ``option``,
``derived``) and the one ``KEY=VALUE`` parser (``split_items``, ``coerce``, ``parse_config``) of policy specs,
``--engine-config``, ``--hp``, trace options and the adapter's environment. Standard library only (and
``common.checks``).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Collection, Iterable, Mapping
from dataclasses import MISSING, field, fields, is_dataclass
from pathlib import Path
from typing import Any, TypeVar

from llmsched_env.common.checks import shown

T = TypeVar("T")
TRUE, FALSE = ("true", "1", "yes", "on"), ("false", "0", "no", "off")


def check_fields(owner: str, keys: Iterable[Any], known: Collection[str], required: Iterable[str] = ()) -> None:
    """``ValueError`` (``owner: ...``) for a key that is no string, keys not in ``known`` (listing them) or
    ``required`` ones missing."""
    keys = set(keys)
    odd = next((k for k in keys if not isinstance(k, str)), None)
    if odd is not None:
        raise ValueError(
            f"{owner}: field names are strings, got the {type(odd).__name__} {shown(odd)}; known fields: "
            f"{sorted(known)}"
        )
    unknown = sorted(keys - set(known))
    if unknown:
        raise ValueError(f"{owner}: unknown field(s) {shown(unknown, 200)}; known fields: {sorted(known)}")
    missing = [k for k in required if k not in keys]
    if missing:
        raise ValueError(f"{owner}: missing field(s) {', '.join(map(repr, missing))}")


def from_fields(cls: type[T], owner: str, data: Mapping[str, Any], ignore: Collection[str] = ()) -> T:
    """``cls(**data)`` after ``check_fields`` against its init fields (those without a default required); keys in
    ``ignore`` (e.g. a preset's ``kind``) are dropped first."""
    assert is_dataclass(cls), f"from_fields needs a dataclass, got {cls!r}"
    init = [f for f in fields(cls) if f.init]
    values = {k: v for k, v in data.items() if k not in ignore}
    required = (f.name for f in init if f.default is MISSING and f.default_factory is MISSING)
    check_fields(owner, values, [f.name for f in init], required)
    return cls(**values)


def as_dataclass(cls: type[T], owner: str, value: Any) -> T:
    """``value`` if it is a ``cls``, ``from_fields(cls, owner, value)`` if a mapping; ``ValueError`` otherwise."""
    if isinstance(value, cls):
        return value
    if isinstance(value, Mapping):
        return from_fields(cls, owner, value)
    raise ValueError(f"{owner} must be a {cls.__name__} or a dict of its fields, got {shown(value)}")


def derived() -> Any:
    """A field ``__post_init__`` computes: not an argument, not in ``repr``, equality, hashing or ``to_fields``."""
    return field(init=False, repr=False, compare=False)


def to_fields(obj: Any) -> dict[str, Any]:
    """The init fields of the dataclass instance ``obj`` and their values, in order (``from_fields`` inverts it)."""
    return {f.name: getattr(obj, f.name) for f in fields(obj) if f.init}


def option(
    default: Any,
    *,
    low: float | None = None,
    above: bool = False,
    high: float | None = None,
    choices: Collection[Any] = (),
) -> Any:
    """A dataclass field whose value ``field_problems`` checks against its declared type (``int``, ``float``,
    ``str``; None where the type allows it), at least ``low`` (more than ``low`` with ``above``) and at most
    ``high``, or in ``choices``."""
    return field(default=default, metadata={"low": low, "above": above, "high": high, "choices": tuple(choices)})


def field_problems(obj: Any, where: str) -> list[str]:
    """One line (``where: NAME must be ..., got VALUE``) per ``option`` field of the dataclass ``obj`` whose value
    is not of its type, out of its range or not one of its choices."""
    problems = []
    kinds = field_kinds(type(obj))
    for f in fields(obj):
        if "choices" not in f.metadata:
            continue
        value, (kind, optional), meta = getattr(obj, f.name), kinds[f.name], f.metadata
        if value is None and optional:
            continue
        low, high, choices = meta["low"], meta["high"], meta["choices"]
        if choices:
            ok, expected = value in choices, f"one of {', '.join(map(str, choices))}"
        elif kind == "str":
            ok, expected = isinstance(value, str), "a string"
        else:
            ok = isinstance(value, int if kind == "int" else (int, float)) and not isinstance(value, bool)
            ok = ok and (isinstance(value, int) or math.isfinite(value))  # an int past a float's range is finite
            ok = ok and (low is None or value > low or (value == low and not meta["above"]))
            ok = ok and (high is None or value <= high)
            expected = ("an integer" if kind == "int" else "a number") + _span(low, meta["above"], high)
        if not ok:
            problems.append(f"{where}: {f.name} must be {expected}, got {shown(value)}")
    return problems


def _span(low: float | None, above: bool, high: float | None) -> str:
    """`` > 0``, `` >= 1``, `` <= 3,600``, `` in (0, 3,600]``, `` in [1, 1,000,000]`` ("" for no bound)."""
    if low is None and high is None:
        return ""
    if high is None:
        return f" {'>' if above else '>='} {_figure(low)}"
    if low is None:
        return f" <= {_figure(high)}"
    return f" in {'(' if above else '['}{_figure(low)}, {_figure(high)}]"


def _figure(x: float | None) -> str:
    return f"{x:,}" if isinstance(x, int) else f"{x:,.15g}"


def split_items(
    items: Iterable[str],
    where: str,
    known: Collection[str] | None = None,
    *,
    what: str = "option",
    form: str = "key=value",
    repeat: bool = False,
) -> dict[str, str]:
    """``KEY=VALUE`` items as {key: value}, stripped; one-line ``ValueError`` (``where: ...``) naming an item not of
    ``form``, a key not in ``known`` (None: any), or a key given twice (unless ``repeat``: the last counts)."""
    prefix = f"{where}: " if where else ""
    out: dict[str, str] = {}
    for item in items:
        key, eq, value = (part.strip() for part in item.partition("="))
        if not eq or not key or (known is not None and key not in known):
            keys = f" with key one of {', '.join(known)}" if known is not None else ""
            raise ValueError(f"{prefix}{what} {shown(item)} is not {form}{keys}")
        if key in out and not repeat:
            raise ValueError(f"{prefix}{what} {shown(key)} is given twice")
        out[key] = value
    return out


def field_kinds(cls: type) -> dict[str, tuple[str, bool]]:
    """Each init field of the dataclass ``cls``: its type's name (``int``, ``float``, ``bool``, ``str``,
    ``Path``...; the first of a union) and whether it may be None."""
    out = {}
    for f in fields(cls):
        if f.init:
            names = [t.strip() for t in (f.type if isinstance(f.type, str) else f.type.__name__).split("|")]
            out[f.name] = (next((t for t in names if t != "None"), "None"), "None" in names)
    return out


def coerce(name: str, text: str, kind: str, none: str | None = None, where: str = "") -> Any:
    """``text`` as a value of ``kind`` (``field_kinds``): an ``int``, a ``float``, a ``bool`` (true/false, yes/no,
    on/off, 1/0), a ``Path``, else the text; None where it is ``none``. One-line ``ValueError`` naming ``name``."""
    if none is not None and text == none:
        return None
    if kind == "bool" and text.lower() in TRUE + FALSE:
        return text.lower() in TRUE
    if kind not in ("int", "float", "bool"):
        return Path(text) if kind == "Path" else text
    if kind != "bool":  # a bool's words were read above
        with contextlib.suppress(ValueError):
            return int(text) if kind == "int" else float(text)
    expected = {"int": "an integer", "float": "a number", "bool": "true or false"}[kind]
    or_none = f" or {none}" if none is not None else ""
    raise ValueError(f"{where + ': ' if where else ''}{name} must be {expected}{or_none}, got {shown(text)}")


def parse_config(
    cls: type[T], items: Iterable[str], where: str, owner: str = "", none: Mapping[str, str] | None = None
) -> T:
    """The dataclass ``cls`` from ``KEY=VALUE`` items, each value ``coerce``d to its field's type (``none``: field
    -> the text read as None), the others at their defaults; one-line ``ValueError`` starting with ``where``."""
    kinds = field_kinds(cls)
    given = split_items(items, where, list(kinds), what=f"{owner} option" if owner else "option")
    name = f"{owner}.{{}}" if owner else "{}"
    values = {k: coerce(name.format(k), v, kinds[k][0], (none or {}).get(k), where) for k, v in given.items()}
    try:
        return cls(**values)
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None
