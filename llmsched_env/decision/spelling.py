"""How a policy list spells a configured policy (``lookahead:k=32,tail=end``, ``mpc:futures=8``): the options
of a frozen dataclass that differ from its defaults, written after the policy's name and read back."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields
from typing import Any

__all__ = ["spell", "split_options"]


def spell(name: str, config: Any, text: Callable[[Any], str] = str) -> str:
    """``name``, then ``:KEY=VALUE,...`` for every field of ``config`` (a dataclass whose every field has a
    default) that differs from its default, each value written by ``text``; ``name`` alone when none differs."""
    default = type(config)()
    opts = [
        f"{f.name}={text(getattr(config, f.name))}"
        for f in fields(config)
        if getattr(config, f.name) != getattr(default, f.name)
    ]
    return name + (":" + ",".join(opts) if opts else "")


def split_options(entry: str, name: str, config_type: type) -> dict[str, str] | None:
    """The options ``entry`` gives a policy ``name`` (``NAME`` or ``NAME:KEY=VALUE,...``), as text by key, the keys
    those of ``config_type``'s fields; None when ``entry`` names another policy. One-line ``ValueError`` naming
    ``entry`` for a colon with nothing after it, an item that is not ``KEY=VALUE`` with a known key, or a key
    given twice."""
    head, sep, rest = entry.partition(":")
    if head != name:
        return None
    if sep and not rest:
        raise ValueError(f"policy {entry!r}: give options after '{name}:' as key=value,... or drop the colon")
    known = [f.name for f in fields(config_type)]
    out: dict[str, str] = {}
    for item in filter(None, rest.split(",")) if sep else ():
        key, eq, value = item.partition("=")
        if not eq or key not in known:
            raise ValueError(
                f"policy {entry!r}: {name} option {item!r} is not key=value with key one of {', '.join(known)}"
            )
        if key in out:
            raise ValueError(f"policy {entry!r}: {name} option {key!r} is given twice")
        out[key] = value
    return out
