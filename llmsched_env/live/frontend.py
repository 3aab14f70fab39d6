"""The front end's figures of every block of a live experiment, recomputed from its raw folders.

    python -m llmsched_env.live.frontend OUT      # writes OUT/frontend.json and prints a summary per cell and arm

Each block's record carries its front-end figures (``live.blocks.frontend_figures``: how late the client sent the
requests against the plan, the client-minus-engine TTFT, the engine steps per second); a run recorded before they
were has none. This reads each server instance's logs once (``OUT/workloads/*/*/blocks/server-log``) and each
block's client files (``blocks/NNNN``), computes the figures, and matches them to the records of
``cells/CELL/blocks.jsonl`` by the block's first server-side arrival (a record's ``t_start``). ``frontend.json``
holds them, so that a copy of the run without its raw folders (they are large) still reports them: the verdict
(``live.verdict``) reads the file when a record has no figures of its own, and writes it first when the raw
folders are there.
"""

from __future__ import annotations

import argparse
import bisect
import json
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from llmsched_env.common.files import RECORD_BYTES, parse_json, read_bytes
from llmsched_env.common.outputs import write_text_atomically
from llmsched_env.live.blocks import frontend_figures
from llmsched_env.live.logs import LOG_FOLDER, PLAN_FILE, SERVER_FILE, STEPS_FILE, find_result_file
from llmsched_env.live.records import read_client_result, read_plan, read_server_requests, read_steps

__all__ = ["FRONTEND_FILE", "collect", "main", "summary", "write_frontend"]

FRONTEND_FILE = "frontend.json"
_MATCH_S = 1e-6  # a record's t_start and a block's first arrival: the same float, read back from JSON


def _instance_blocks(instance: Path) -> list[tuple[float, dict[str, float]]]:
    """(first server-side arrival, figures) of every block folder of one server instance."""
    logs = instance / "blocks" / LOG_FOLDER
    by_label = {r.label: r for r in read_server_requests(logs / SERVER_FILE) if r.label is not None}
    steps = read_steps(logs / STEPS_FILE)
    starts = [s.t0_s for s in steps]
    out = []
    for folder in sorted(p for p in (instance / "blocks").iterdir() if p.is_dir() and p.name.isdigit()):
        if not (folder / PLAN_FILE).is_file():
            continue
        plan = read_plan(folder / PLAN_FILE)
        client = read_client_result(find_result_file(folder), len(plan))
        keep = [i for i, p in enumerate(plan) if p.label in by_label]
        if not keep:
            continue
        server = [by_label[plan[i].label] for i in keep]
        first, last = min(r.arrival_s for r in server), max(r.finish_s for r in server)
        span = steps[bisect.bisect_left(starts, first) : bisect.bisect_right(starts, last)]
        figures = frontend_figures([plan[i] for i in keep], server, client.subset(keep), span)
        out.append((first, figures))
    return out


def collect(out: str | Path) -> dict[str, list[dict[str, Any]]]:
    """Per cell, one entry per record of its ``blocks.jsonl`` that a block folder matches: ``round``, ``arm``,
    ``warmup``, ``t_start`` and the figures (``live.blocks.FRONTEND_FIGURES``). ``ValueError`` naming the file
    for a malformed one."""
    out = Path(out)
    found: list[tuple[float, dict[str, float]]] = []
    for instance in sorted((out / "workloads").glob("*/*")):
        if (instance / "blocks" / LOG_FOLDER / SERVER_FILE).is_file():
            found += _instance_blocks(instance)
    found.sort(key=lambda x: x[0])
    keys = [t for t, _ in found]
    result: dict[str, list[dict[str, Any]]] = {}
    for path in sorted((out / "cells").glob("*/blocks.jsonl")):
        cell = path.parent.name
        rows = []
        for n, line in enumerate(read_bytes(path, RECORD_BYTES).decode("utf-8", errors="replace").splitlines(), 1):
            if not line.strip():
                continue
            try:
                rec = parse_json(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}:{n}: not valid JSON: {exc.msg} (column {exc.colno})") from None
            if not isinstance(rec, dict):
                raise ValueError(f"{path}:{n}: expected a JSON object (a block's record)")
            t = float(rec.get("t_start", math.nan))
            k = bisect.bisect_left(keys, t - _MATCH_S)
            if k < len(keys) and abs(keys[k] - t) <= _MATCH_S:
                rows.append({"round": rec.get("round"), "arm": rec.get("arm"), "warmup": bool(rec.get("warmup")),
                             "t_start": t, **found[k][1]})  # fmt: skip
        result[cell] = rows
    return result


def write_frontend(out: str | Path) -> tuple[Path, dict[str, list[dict[str, Any]]]]:
    """``collect`` written to ``OUT/frontend.json``: its path and what it holds."""
    data = collect(out)
    path = Path(out) / FRONTEND_FILE
    write_text_atomically(path, json.dumps(data, indent=1) + "\n")
    return path, data


def summary(data: dict[str, list[dict[str, Any]]], arms: Sequence[str] | None = None) -> str:
    """Per cell and arm (compared blocks only): the mean late share, the median send-lag p90, the median
    client-minus-engine TTFT p90 and the mean engine steps per second."""
    header = ("cell", "arm", "blocks", "late", "lag p90 (s)", "front p90 (ms)", "steps/s")
    lines = ["{:<18} {:<11} {:>6} {:>6} {:>12} {:>15} {:>8}".format(*header)]
    for cell, rows in data.items():
        names = arms or list(dict.fromkeys(str(r["arm"]) for r in rows if not r["warmup"]))
        for arm in names:
            mine = [r for r in rows if r["arm"] == arm and not r["warmup"] and r["round"] is not None]
            if not mine:
                continue
            late = float(np.nanmean([r["late_share"] for r in mine]))
            lag = float(np.nanmedian([r["send_lag_p90_s"] for r in mine]))
            front = 1e3 * float(np.nanmedian([r["frontend_p90_s"] for r in mine]))
            steps = float(np.nanmean([r["steps_per_s"] for r in mine]))
            lines.append(f"{cell:<18} {arm:<11} {len(mine):>6} {late:>6.1%} {lag:>12.3f} {front:>15.1f} {steps:>8.0f}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m llmsched_env.live.frontend OUT``: writes ``OUT/frontend.json``, prints the summary; 1 after a
    one-line message for a missing or malformed file."""
    p = argparse.ArgumentParser(prog="python -m llmsched_env.live.frontend", description=__doc__.split("\n")[0])
    p.add_argument("out", type=Path, help="the run folder of bench/vllm_verdict.sh (workloads/, cells/)")
    args = p.parse_args(argv)
    try:
        path, data = write_frontend(args.out)
    except (OSError, ValueError) as exc:
        print(f"llmsched frontend: {exc}", file=sys.stderr)
        return 1
    print(summary(data))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
