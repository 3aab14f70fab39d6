"""The size of the house: lines of the package, characters of the reference pages, files under docs/results/ and
lines of each command's ``--help``, for a checkout (default: this one).

    python bench/house.py [--root DIR]

Counts only: it runs each command's ``--help`` with the checkout first on ``PYTHONPATH``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

PACKAGES = ("llmsched_env", "agents", "baselines")
HELP = {
    "llmsched-evaluate": "llmsched_env.commands.evaluate",
    "llmsched-train": "agents.cli",
    "llmsched-tune": "llmsched_env.commands.tune",
    "llmsched-calibrate": "llmsched_env.commands.calibrate",
}


def package_lines(root: Path) -> int:
    return sum(len(p.read_text().splitlines()) for name in PACKAGES for p in (root / name).rglob("*.py"))


def page_chars(root: Path) -> tuple[int, int]:
    """(number of reference pages, their characters): every docs/*.md (the notes and results data excluded)."""
    pages = sorted((root / "docs").glob("*.md"))
    return len(pages), sum(len(p.read_bytes()) for p in pages)


def help_lines(root: Path, module: str) -> int:
    env = {**os.environ, "PYTHONPATH": str(root), "LLMSCHED_PURE": "1"}
    out = subprocess.run([sys.executable, "-m", module, "--help"], cwd=root, env=env, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"house.py: {module} --help failed: {out.stderr.strip().splitlines()[-1:]}")
    return len(out.stdout.splitlines())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parent.parent, help="a checkout")
    root = parser.parse_args().root.resolve()
    n_pages, chars = page_chars(root)
    print(f"package lines ({', '.join(PACKAGES)}): {package_lines(root):,}")
    print(f"reference pages: {n_pages}, {chars:,} characters")
    print(f"files under docs/results/: {sum(1 for p in (root / 'docs' / 'results').rglob('*') if p.is_file()):,}")
    for command, module in HELP.items():
        print(f"{command} --help: {help_lines(root, module)} lines")


if __name__ == "__main__":
    main()
