"""Plain fixed-width text tables, as the commands print them: ``format_table`` for a whole table, ``format_cell``
and ``format_line`` for tables printed a row at a time (``outputs.LiveTable``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

__all__ = ["format_cell", "format_line", "format_table"]


def format_cell(v: float | str | int | None) -> str:
    """One cell: blank for None, integral numbers without a point, floats to 4 significant digits, else ``str``."""
    if v is None:
        return ""
    if isinstance(v, (bool, str)):
        return str(v)
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    if isinstance(v, (float, np.floating)):
        f = float(v)
        return str(int(f)) if f.is_integer() and abs(f) < 1e15 else f"{f:.4g}"
    return str(v)


def format_line(cells: Sequence[str], widths: Sequence[int], numeric: Sequence[bool]) -> str:
    """One line: cells padded, numbers right- and text left-aligned, two spaces between, no trailing blanks."""
    parts = [v.rjust(w) if num else v.ljust(w) for v, w, num in zip(cells, widths, numeric, strict=True)]
    return "  ".join(parts).rstrip()


def format_table(rows: Sequence[Mapping[str, float | str]], columns: Sequence[str]) -> str:
    """A plain fixed-width table of ``rows`` under ``columns``, a missing value blank."""
    cells = [[format_cell(row.get(c)) for c in columns] for row in rows]
    numeric = [all(not isinstance(row.get(c), str) for row in rows) for c in columns]
    widths = [max([len(c)] + [len(line[j]) for line in cells]) for j, c in enumerate(columns)]
    lines = [format_line(columns, widths, numeric), format_line(["-" * w for w in widths], widths, numeric)]
    lines.extend(format_line(line, widths, numeric) for line in cells)
    return "\n".join(lines)
