"""What the command lines share: ``--help`` that ends every option's help with its default (``(default: VALUE)``,
``on``/``off``, ``none`` or ``(required)``, unless the help says its own), the program's name, and the config
dataclass of the parsed options (``from_args``). Help texts are format strings: a literal percent sign is ``%%``.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from dataclasses import fields
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

T = TypeVar("T", bound="DataclassInstance")


def default_text(action: argparse.Action) -> str:
    """What ``--help`` appends to ``action``'s help, without the parentheses: ``required`` or ``default: VALUE``."""
    if action.required:
        return "required"
    value: Any = action.default
    if action.nargs == 0 and not isinstance(action, argparse.BooleanOptionalAction):
        value = False  # a flag (store_true, store_false, store_const): off unless given
    if value is None:
        shown = "none"
    elif isinstance(value, bool):
        shown = "on" if value else "off"
    elif isinstance(value, (list, tuple)):
        shown = ",".join(str(v) for v in value)
    else:
        shown = str(value)
    return f"default: {shown}"


class DefaultsFormatter(argparse.RawDescriptionHelpFormatter):
    """Ends each option's help with its ``default_text`` unless it says its default."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if not action.option_strings or action.default is argparse.SUPPRESS or "(default" in text:
            return text
        return f"{text} ({default_text(action).replace('%', '%%')})".lstrip()  # the value is not a format


_NOT_GIVEN = object()


def given_options(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> set[str]:
    """The destinations of the options ``argv`` gives, whatever their value; call it once ``argv`` parsed."""
    accumulating = (argparse._AppendAction, argparse._AppendConstAction, argparse._CountAction)  # add to a value
    dests = {a.dest for a in parser._actions if a.option_strings and not isinstance(a, accumulating)}
    marked = argparse.Namespace(**dict.fromkeys(dests, _NOT_GIVEN))
    args, _ = parser.parse_known_args(None if argv is None else list(argv), namespace=marked)
    return {dest for dest in dests if getattr(args, dest, _NOT_GIVEN) is not _NOT_GIVEN}


def program(console_script: str, script: str) -> str:
    """The name usage and error lines show: ``script`` when run as ``python <script>``, else ``console_script``."""
    as_module = getattr(sys.modules.get("__main__"), "__spec__", None) is not None
    return script if os.path.basename(sys.argv[0]) == script and not as_module else console_script


def from_args(cls: type[T], args: argparse.Namespace, **values: Any) -> T:
    """The dataclass ``cls`` built from the parsed options named like its init fields, ``values`` taking precedence."""
    names = [f.name for f in fields(cls) if f.init]
    assert set(values) <= set(names), f"{cls.__name__} has no field(s) {sorted(set(values) - set(names))}"
    given = {name: getattr(args, name) for name in names if hasattr(args, name)}
    return cls(**{**given, **values})
