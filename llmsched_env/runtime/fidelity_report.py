"""The fidelity report (``llmsched-calibrate fidelity``): ``run_fidelity`` serves each (policy, load, seed)
workload with ``fidelity.compare`` and writes ``fidelity.csv``, ``fidelity.json`` and ``fidelity.md`` (mean and
max relative error per metric), reporting through ``on_status(line)`` and ``on_row(row)``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from llmsched_env.common.outputs import check_output, write_csv, write_text_atomically
from llmsched_env.costs.loader import load_cost_model
from llmsched_env.runtime.fidelity import (
    FIDELITY_METRICS,
    FIT_SEED,
    RUNTIME_ENGINE,
    WARMUP_SEED,
    FidelityWorkload,
    compare,
)
from llmsched_env.runtime.profiling import StatusFn, policy_factory
from llmsched_env.runtime.runner_spec import RunnerSpec

# what run_fidelity writes in its folder: the rows, the rows and summary, the report
FIDELITY_CSV, FIDELITY_JSON, FIDELITY_MD = "fidelity.csv", "fidelity.json", "fidelity.md"
FIDELITY_FILES = (FIDELITY_CSV, FIDELITY_JSON, FIDELITY_MD)

Row = dict[str, Any]


@dataclass(frozen=True)
class FidelityReport:
    """What ``run_fidelity`` wrote: rows, summary (kind -> metric -> mean, max) and the markdown table."""

    rows: list[Row]
    summary: dict[str, dict[str, dict[str, float]]]
    markdown: str


def check_fidelity_seeds(seeds: Sequence[int]) -> None:
    """``ValueError`` unless ``seeds`` is non-empty and holds no fitting or warm-up workload's seed."""
    if not seeds:
        raise ValueError("seeds: at least one fidelity workload seed is needed")
    taken = [x for x in seeds if x >= FIT_SEED or x == WARMUP_SEED]
    if taken:
        raise ValueError(f"seeds {taken}: {FIT_SEED} and up (fitting) and {WARMUP_SEED} (warm-up) are not fidelity "
                         f"workloads; choose others")


def error_kinds(in_situ: bool) -> dict[str, str]:
    """Kind of error -> prefix of its columns: against the preset, and in situ when measured."""
    return {"preset": "err_"} | ({"in-situ": "err_insitu_"} if in_situ else {})


def _pct(x: float) -> str:
    return "nan" if math.isnan(x) else f"{100 * x:.1f}%"


def format_row(row: Mapping[str, Any], kinds: Mapping[str, str]) -> list[str]:
    """One line per kind of error of a run: its policy, load and seed and the relative error per metric."""
    lines = []
    for kind, prefix in kinds.items():
        errs = " ".join(f"{m.removesuffix('_s')}={_pct(row[f'{prefix}{m}'])}" for m in FIDELITY_METRICS)
        lines.append(f"{row['policy']:>10} load {row['load']:.2f} seed {row['seed']} {kind:>7}: {errs}")
    return lines


def summarise(rows: Sequence[Mapping[str, Any]], kinds: Mapping[str, str]) -> dict[str, dict[str, dict[str, float]]]:
    """Mean and max of each metric's relative error over ``rows`` (NaNs left out), by kind of error."""

    def stats(values: list[float]) -> dict[str, float]:
        v = np.asarray([x for x in values if not math.isnan(x)])
        if not len(v):
            return {"mean": float("nan"), "max": float("nan")}
        return {"mean": float(v.mean()), "max": float(v.max())}

    return {
        kind: {m: stats([float(r[f"{prefix}{m}"]) for r in rows]) for m in FIDELITY_METRICS}
        for kind, prefix in kinds.items()
    }


def _markdown(title: str, summary: Mapping[str, Mapping[str, Mapping[str, float]]]) -> str:
    kinds = list(summary)
    lines = [title, "", "| metric | " + " | ".join(kinds) + " |", "|---|" + "---|" * len(kinds)]
    for m in FIDELITY_METRICS:
        cells = [f"{_pct(summary[k][m]['mean'])} ({_pct(summary[k][m]['max'])})" for k in kinds]
        lines.append(f"| {m} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def run_fidelity(spec: RunnerSpec, preset: str | Path, policies: Sequence[str], out: Path, *,
                 loads: Sequence[float] = (0.5, 0.8), seeds: Sequence[int] = (1, 2),
                 num_requests: int = FidelityWorkload.num_requests, in_situ: bool = True, force: bool = False,
                 on_status: StatusFn | None = None, on_row: Callable[[Row], None] | None = None) -> FidelityReport:
    """Measure and write the fidelity of ``preset`` under ``policies`` at ``loads`` and ``seeds`` into ``out``;
    ``ValueError`` before anything runs for a bad preset, policy, seed, load or ``out``."""
    check_output(out, force)
    check_fidelity_seeds(seeds)
    if not loads or any(not x > 0 for x in loads):
        raise ValueError(f"loads: expected fractions > 0, got {list(loads)}")
    factories = {name: policy_factory(name) for name in policies}
    if not factories:
        raise ValueError("policies: at least one policy is needed")
    model = load_cost_model(preset)
    # twice the engine's KV blocks: the in-situ fitting episodes run in the second half
    runner = spec.build(2 * RUNTIME_ENGINE.num_kv_blocks, RUNTIME_ENGINE.block_size)
    workload = FidelityWorkload(num_requests=num_requests)
    kinds = error_kinds(in_situ)
    runs = len(factories) * len(loads) * len(seeds)
    say = on_status or (lambda line: None)
    also = " (each also in situ)" if in_situ else ""
    say(f"fidelity of {preset} on {spec.describe()}: {runs} workloads{also}, after a warm-up run")
    rows = compare(runner, model, factories, policy_factory("fcfs"), loads, seeds, workload, progress=on_row,
                   in_situ=in_situ)
    out.mkdir(parents=True, exist_ok=True)
    write_csv(rows, out / FIDELITY_CSV)
    summary = summarise(rows, kinds)
    data = {"preset": str(preset), "model": spec.model, "rows": rows, "summary": summary}
    write_text_atomically(out / FIDELITY_JSON, json.dumps(data, indent=2))
    title = (f"Fidelity of preset `{preset}` against the runtime ({spec.model}, {spec.dtype}, {spec.device}); "
             f"{num_requests} requests per run, policies {', '.join(factories)}, loads {list(loads)}, "
             f"seeds {list(seeds)}. Relative errors of the simulator, mean (max) over the runs: against the preset, "
             "and in situ (a model fitted to fitting episodes served in lockstep with each replay).")
    markdown = _markdown(title, summary)
    write_text_atomically(out / FIDELITY_MD, markdown)
    return FidelityReport(rows, summary, markdown)
