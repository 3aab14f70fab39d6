"""The front end's figures of every block of a live experiment, recomputed from its raw folders.

Matched to ``cells/CELL/blocks.jsonl`` by ``t_start``; ``python -m llmsched_env.live.frontend OUT`` writes
``OUT/frontend.json``, which the verdict reads for a record without figures of its own.
"""

from __future__ import annotations

import argparse
import bisect
import json
import math
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from llmsched_env.common.files import RECORD_BYTES, read_bytes
from llmsched_env.common.outputs import write_text_atomically
from llmsched_env.live.blocks import frontend_figures
from llmsched_env.live.logs import LOG_FOLDER, PLAN_FILE, SERVER_FILE, load_run, read_server_logs
from llmsched_env.live.records import jsonl_records, read_plan

__all__ = ["FRONTEND_FILE", "collect", "main", "summary", "write_frontend"]

FRONTEND_FILE = "frontend.json"
_MATCH_S = 1e-6  # a record's t_start and a block's first arrival: the same float, read back from JSON


def _instance_blocks(instance: Path) -> list[tuple[float, dict[str, float]]]:
    """(first server-side arrival, figures) of every block of one server instance that reached the server."""
    log_dir = instance / "blocks" / LOG_FOLDER
    logs = read_server_logs(log_dir)
    labels = {r.label for r in logs.requests}
    out = []
    for folder in sorted(p for p in (instance / "blocks").iterdir() if p.is_dir() and p.name.isdigit()):
        if not (folder / PLAN_FILE).is_file() or not any(p.label in labels for p in read_plan(folder / PLAN_FILE)):
            continue
        run = load_run(folder, log_dir=log_dir, server_logs=logs)
        out.append((run.start_s, frontend_figures(run.plan, run.server, run.client, run.steps)))
    return out


def collect(out: str | Path) -> dict[str, list[dict[str, Any]]]:
    """Per cell, one entry per ``blocks.jsonl`` record a block folder matches: its keys and front-end figures."""
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
        for n, rec in jsonl_records(path, read_bytes(path, RECORD_BYTES).decode("utf-8", errors="replace")):
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


def arm_figures(blocks: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """One arm's front-end figures, summarised over its blocks."""

    def finite(key: str) -> list[float]:
        return [f[key] for f in blocks if math.isfinite(f[key])]

    def mean(key: str) -> float:
        return float(np.mean(finite(key))) if finite(key) else math.nan

    def median(key: str) -> float:
        return float(np.median(finite(key))) if finite(key) else math.nan

    return {
        "blocks": len(blocks), "late_share": mean("late_share"),
        "late_blocks": sum(1 for f in blocks if f["late_share"] > 0.05), "send_lag_max_s": median("send_lag_max_s"),
        "frontend_p90_s": median("frontend_p90_s"), "steps_per_s": mean("steps_per_s"),
    }  # fmt: skip


def summary(data: Mapping[str, Sequence[Mapping[str, Any]]]) -> str:
    """Per cell and arm (compared blocks only), ``arm_figures`` as a text table."""
    header = ("cell", "arm", "blocks", "late", "> 5% late", "largest lag (s)", "front p90 (ms)", "steps/s")
    lines = ["{:<18} {:<11} {:>6} {:>6} {:>9} {:>15} {:>15} {:>8}".format(*header)]
    for cell, rows in data.items():
        for arm in dict.fromkeys(str(r["arm"]) for r in rows if not r["warmup"]):
            mine = [r for r in rows if r["arm"] == arm and not r["warmup"] and r["round"] is not None]
            if not mine:
                continue
            f = arm_figures(mine)
            lag, front = f["send_lag_max_s"], 1e3 * f["frontend_p90_s"]
            lines.append(f"{cell:<18} {arm:<11} {f['blocks']:>6} {f['late_share']:>6.1%} {f['late_blocks']:>9} "
                         f"{lag:>15.3f} {front:>15.1f} {f['steps_per_s']:>8.0f}")  # fmt: skip
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """The command: writes ``OUT/frontend.json`` and prints the summary; 1 after a one-line error."""
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
