"""How a policy list spells a configured policy (``lookahead:k=32,tail=end``, ``mpc:futures=8``): the fields of a
frozen dataclass that differ from its defaults, after the policy's name, and read back (``common.fields``)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import fields
from typing import Any, TypeVar

from llmsched_env.common.fields import parse_config

T = TypeVar("T")


def spell(name: str, config: Any, text: Callable[[Any], str] = str) -> str:
    """``name``, then ``:KEY=VALUE,...`` for every field of ``config`` that differs from its default (each value
    written by ``text``); ``name`` alone when none differs."""
    default = type(config)()
    opts = [
        f"{f.name}={text(getattr(config, f.name))}"
        for f in fields(config)
        if getattr(config, f.name) != getattr(default, f.name)
    ]
    return name + (":" + ",".join(opts) if opts else "")


def parse_spelled(
    entry: str, name: str, config_type: type[T], none: Mapping[str, str] | None = None, where: str | None = None
) -> T | None:
    """The ``config_type`` that ``entry`` (``NAME`` or ``NAME:KEY=VALUE,...``) spells, None when it names another
    policy; one-line ``ValueError`` naming the policy ``where`` (default: ``entry``) and the option at fault."""
    head, sep, rest = entry.partition(":")
    if head != name:
        return None
    where = f"policy {where or entry!r}"
    if sep and not rest:
        raise ValueError(f"{where}: give options after '{name}:' as key=value,... or drop the colon")
    return parse_config(config_type, filter(None, rest.split(",")), where, name, none)
