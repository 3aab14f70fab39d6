"""What the command lines share: ``--help`` that shows every option's default, and the program's name.

    parser = argparse.ArgumentParser(prog=program("llmsched-train", "train.py"), description=__doc__,
                                     formatter_class=DefaultsFormatter)

An option whose help text does not mention its default gets ``(default: VALUE)``; a flag ``(default: off)``;
a required option ``(required)``; an option whose default is None ``(default: none)`` unless its help says
what None means (it then contains the word "default").
"""

from __future__ import annotations

import argparse
import os
import sys

__all__ = ["DefaultsFormatter", "program"]


class DefaultsFormatter(argparse.RawDescriptionHelpFormatter):
    """``RawDescriptionHelpFormatter`` (the description's examples keep their lines) that appends each
    option's default to its help unless the help already names it."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if not action.option_strings or action.default is argparse.SUPPRESS or "default" in text:
            return text
        if action.required:
            return f"{text} (required)"
        if action.nargs == 0:  # store_true / store_false: given or not
            return f"{text} (default: off)"
        if action.default is None:
            return f"{text} (default: none)"
        return f"{text} (default: %(default)s)"


def program(console_script: str, script: str) -> str:
    """The name usage and error lines show: ``script`` when run as ``python <script>``, else the console
    script's name (also for ``python -m``, whose module may have the script's file name)."""
    as_module = getattr(sys.modules.get("__main__"), "__spec__", None) is not None
    return script if os.path.basename(sys.argv[0]) == script and not as_module else console_script
