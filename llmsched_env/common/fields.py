"""Frozen dataclasses as plain data: the checked keys of a dict that names a dataclass's fields
(``check_fields``, ``from_fields``; ``as_dataclass`` for an argument that may be either), the fields of one
as a dict (``to_fields``), and the declaration of a field derived from the others (``derived``).

Configs, cost models and arrival processes are read from JSON presets and keyword dicts; one unknown or
missing key is a one-line ``ValueError`` naming it (and the known ones), never a ``TypeError`` from deep
inside a constructor. Standard library only.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import MISSING, field, fields, is_dataclass
from typing import Any, TypeVar

__all__ = ["as_dataclass", "check_fields", "derived", "from_fields", "to_fields"]

T = TypeVar("T")


def check_fields(owner: str, keys: Iterable[str], known: Collection[str], required: Iterable[str] = ()) -> None:
    """Raise ``ValueError`` (``owner: ...``) for keys not in ``known`` (listing the known ones) or for
    ``required`` ones that ``keys`` lacks."""
    keys = set(keys)
    unknown = sorted(keys - set(known))
    if unknown:
        raise ValueError(f"{owner}: unknown field(s) {unknown}; known fields: {sorted(known)}")
    missing = [k for k in required if k not in keys]
    if missing:
        raise ValueError(f"{owner}: missing field(s) {', '.join(map(repr, missing))}")


def from_fields(cls: type[T], owner: str, data: Mapping[str, Any], ignore: Collection[str] = ()) -> T:
    """``cls(**data)`` for the dataclass ``cls``, after ``check_fields`` against its init fields (those without
    a default are required); keys in ``ignore`` (e.g. a preset's ``kind``) are dropped first."""
    assert is_dataclass(cls), f"from_fields needs a dataclass, got {cls!r}"
    init = [f for f in fields(cls) if f.init]
    values = {k: v for k, v in data.items() if k not in ignore}
    required = (f.name for f in init if f.default is MISSING and f.default_factory is MISSING)
    check_fields(owner, values, [f.name for f in init], required)
    return cls(**values)


def as_dataclass(cls: type[T], owner: str, value: Any) -> T:
    """``value`` itself if it is a ``cls``, ``from_fields(cls, owner, value)`` if it is a mapping of its fields;
    ``ValueError`` naming ``owner`` otherwise."""
    if isinstance(value, cls):
        return value
    if isinstance(value, Mapping):
        return from_fields(cls, owner, value)
    raise ValueError(f"{owner} must be a {cls.__name__} or a dict of its fields, got {value!r}")


def derived() -> Any:
    """A dataclass field that ``__post_init__`` computes from the others (``object.__setattr__`` in a frozen
    one): not an argument, not in ``repr``, equality or hashing, and not written by ``to_fields``."""
    return field(init=False, repr=False, compare=False)


def to_fields(obj: Any) -> dict[str, Any]:
    """The init fields of the dataclass instance ``obj`` and their values, in declaration order
    (``from_fields`` inverts it)."""
    return {f.name: getattr(obj, f.name) for f in fields(obj) if f.init}
