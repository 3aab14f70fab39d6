"""What the command lines share: ``--help`` that shows every option's default, the program's name, and the
config dataclass of the parsed options.

    parser = argparse.ArgumentParser(prog=program("llmsched-train", "train.py"), description=__doc__,
                                     formatter_class=DefaultsFormatter)
    config = from_args(TrainConfig, parser.parse_args(), out=...)   # each option named like a field

Every option's help ends with what holds when it is not given, in one place for the three commands:
``(default: VALUE)`` (a list comma-joined, a yes/no value ``on``/``off``), ``(default: off)`` for a flag,
``(default: none)`` for None and ``(required)`` for a required option. A help that says its default itself
(it contains ``(default``, e.g. ``(default: the scenario's)`` for a None that means something) is left as
it is. Help texts are argparse format strings: ``%(default)s`` works, a literal percent sign is ``%%``.
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

__all__ = ["DefaultsFormatter", "default_text", "from_args", "given_options", "program"]

T = TypeVar("T", bound="DataclassInstance")


def default_text(action: argparse.Action) -> str:
    """What ``--help`` appends to ``action``'s help, without the parentheses: ``required``, or
    ``default: VALUE`` as the module docstring describes it."""
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
    """``RawDescriptionHelpFormatter`` (the description's examples keep their lines) that ends each option's
    help with ``(default_text)`` unless the help already says its default."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if not action.option_strings or action.default is argparse.SUPPRESS or "(default" in text:
            return text
        return f"{text} ({default_text(action).replace('%', '%%')})".lstrip()  # the value is not a format


_NOT_GIVEN = object()


def given_options(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> set[str]:
    """The destinations of the options ``argv`` (default: the process's arguments) gives on the command line,
    whatever their value (``--loads 1`` counts though 1 is the default; abbreviations resolved as argparse
    resolves them). Parses ``argv`` a second time into a namespace holding a marker for every option, which
    argparse leaves where an option is not given: call it once ``argv`` has parsed without an error."""
    accumulating = (argparse._AppendAction, argparse._AppendConstAction, argparse._CountAction)  # add to a value
    dests = {a.dest for a in parser._actions if a.option_strings and not isinstance(a, accumulating)}
    marked = argparse.Namespace(**dict.fromkeys(dests, _NOT_GIVEN))
    args, _ = parser.parse_known_args(None if argv is None else list(argv), namespace=marked)
    return {dest for dest in dests if getattr(args, dest, _NOT_GIVEN) is not _NOT_GIVEN}


def program(console_script: str, script: str) -> str:
    """The name usage and error lines show: ``script`` when run as ``python <script>``, else the console
    script's name (also for ``python -m``, whose module may have the script's file name)."""
    as_module = getattr(sys.modules.get("__main__"), "__spec__", None) is not None
    return script if os.path.basename(sys.argv[0]) == script and not as_module else console_script


def from_args(cls: type[T], args: argparse.Namespace, **values: Any) -> T:
    """The dataclass ``cls`` built from the parsed options named like its init fields (``--num-requests``
    for ``num_requests``), ``values`` taking precedence: the fields a command computes from its options.
    Fields with neither keep their defaults; the dataclass checks the values (``ValueError``)."""
    names = [f.name for f in fields(cls) if f.init]
    assert set(values) <= set(names), f"{cls.__name__} has no field(s) {sorted(set(values) - set(names))}"
    given = {name: getattr(args, name) for name in names if hasattr(args, name)}
    return cls(**{**given, **values})
