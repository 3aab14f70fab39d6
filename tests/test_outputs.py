"""The one CSV writer (``common.outputs.write_csv``) that evaluate and calibrate share, and the table cells
and lines (``evaluation.tables.format_cell`` / ``format_line``) that the printed tables share."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest

from llmsched_env.common.outputs import write_csv
from llmsched_env.evaluation.outputs import LiveTable
from llmsched_env.evaluation.tables import format_cell, format_line, format_table


def _read(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        return list(reader.fieldnames or []), list(reader)


def test_write_csv_takes_every_rows_keys_in_first_seen_order(tmp_path: Path) -> None:
    rows = [{"policy": "fcfs", "ttft_s": 0.5}, {"policy": "sjf", "tenant/a/service": 3.0, "ttft_s": 0.25}]
    write_csv(rows, tmp_path / "r.csv")
    header, read = _read(tmp_path / "r.csv")
    assert header == ["policy", "ttft_s", "tenant/a/service"]  # a key only a later row has is kept
    assert read[0]["tenant/a/service"] == "" and read[1]["tenant/a/service"] == "3.0"


def test_write_csv_with_columns_and_its_errors(tmp_path: Path) -> None:
    write_csv([], tmp_path / "empty.csv", columns=["a", "b"])
    assert _read(tmp_path / "empty.csv") == (["a", "b"], [])
    write_csv([{"b": 1}], tmp_path / "b.csv", columns=["a", "b"])
    assert _read(tmp_path / "b.csv")[1] == [{"a": "", "b": "1"}]
    with pytest.raises(ValueError, match="no rows to write and no columns given"):
        write_csv([], tmp_path / "none.csv")
    with pytest.raises(ValueError, match=r"x\.csv: .*'c'"):
        write_csv([{"a": 1, "c": 2}], tmp_path / "x.csv", columns=["a"])


def test_cells_and_lines_read_the_same_in_every_table() -> None:
    assert [format_cell(v) for v in (None, "fcfs", True, 3, np.int64(4), 2.0, 0.123456, 1e16)] == [
        "", "fcfs", "True", "3", "4", "2", "0.1235", "1e+16"
    ]  # fmt: skip
    assert format_line(["fcfs", "0.5"], [6, 5], [False, True]) == "fcfs      0.5"
    rows = [{"policy": "fcfs", "attain": 0.5}, {"policy": "slo_aware", "attain": 1.0}]
    table = format_table(rows, ["policy", "attain"]).splitlines()
    live = LiveTable(["policy", "attain"], {"policy": ["fcfs", "slo_aware"]})
    assert live.head() == table[:2] and [live.format(r) for r in rows] == table[2:]  # one format, two tables
