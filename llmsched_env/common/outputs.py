"""Where a command may write: never over what this project ships, unless asked to; and one CSV writer.

The commands' defaults write under ``runs/`` and ``results/`` (both ignored by git). What ships is the
installed packages (``llmsched_env``, ``agents``, ``baselines``: cost-model presets, hyperparameters,
traces) and, in a checkout, the repository's ``policies/`` and ``docs/results/`` (the trained policies and
the reported results). ``check_output(path)`` refuses a path equal to or inside one of those unless
``force`` is given, so that a command copied from the docs never overwrites a shipped file by accident.
"""

from __future__ import annotations

import csv
import importlib.util
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["PACKAGES", "REPO_FOLDERS", "check_output", "shipped_folders", "write_csv"]

PACKAGES = ("llmsched_env", "agents", "baselines")
REPO_FOLDERS = ("policies", "docs/results")


def _package_dir(name: str) -> Path | None:
    """The folder of the top-level package ``name`` (found, not imported), or None when it is absent."""
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))).resolve()


def shipped_folders() -> list[Path]:
    """The folders ``check_output`` protects: the installed packages, and ``policies/`` and ``docs/results/``
    of the checkout the package lies in and of the working directory when that is a checkout."""
    packages = [p for p in map(_package_dir, PACKAGES) if p is not None]
    roots = {p.parent for p in packages} | {Path.cwd().resolve()}
    checkouts = sorted(r for r in roots if (r / "pyproject.toml").is_file() and (r / "llmsched_env").is_dir())
    return packages + [root / folder for root in checkouts for folder in REPO_FOLDERS]


def check_output(path: str | Path, force: bool = False, option: str = "--out") -> Path:
    """``path`` unchanged when a command may write there; ``ValueError`` (one line naming the path) when it is
    a shipped folder or inside one and ``force`` is False. ``option`` names the argument in the message."""
    target = Path(path)
    if force:
        return target
    resolved = target.expanduser().resolve()
    for folder in shipped_folders():
        if resolved == folder or folder in resolved.parents:
            raise ValueError(
                f"{option} {target}: refusing to write inside the shipped folder {folder} "
                "(choose a path under runs/ or results/, or pass --force to overwrite shipped files)"
            )
    return target


def write_csv(rows: Sequence[Mapping[str, Any]], path: Path, columns: Sequence[str] | None = None) -> None:
    """``rows`` as a CSV file with a header: ``columns``, by default every key of every row in first-seen
    order (a row without a column leaves its cell empty). ``ValueError`` naming ``path`` for no rows and no
    columns, or for a row with a key that ``columns`` lacks."""
    if not rows and columns is None:
        raise ValueError(f"{path}: no rows to write and no columns given")
    fields = list(columns) if columns is not None else list(dict.fromkeys(key for row in rows for key in row))
    with Path(path).open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        try:
            writer.writerows(rows)
        except ValueError as exc:  # DictWriter: "dict contains fields not in fieldnames: ..."
            raise ValueError(f"{path}: {exc}") from None
