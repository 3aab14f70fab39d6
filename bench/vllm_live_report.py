"""The live comparison's table: each scheduler at each offered load, mean ± 95% interval over the repeats.

    python bench/vllm_live_report.py runs/vllm-live/random [--out table.csv] [--markdown]

Reads what ``python -m llmsched_env.live.server`` (bench/vllm_serve.sh) wrote under the folder: vLLM's
result JSON of every run (``<scheduler>/<workload>-rate<R>-rep<K>/result.json``, per-request timings included)
and ``requests.json`` (each request's tenant), and the tenants' SLO targets in ``experiment.json``. Per run,
from vLLM's client measurements:

- TTFT and TPOT p50 and p99 over completed requests (TPOT = (E2E - TTFT) / (output tokens - 1), over requests
  with more than one output token, as vLLM's benchmark computes it);
- throughput: completed requests / the run's duration (vLLM's ``request_throughput``);
- SLO attainment: requests meeting both their tenant's TTFT and TPOT targets / requests sent (a failed or aborted
  request is a miss; a one-token request's TPOT counts as 0); goodput: those requests / duration.

Then, per (scheduler, load): the mean and the Student-t 95% half-width over repeats. ``--paired REF`` adds each
scheduler's throughput ratio to REF's and its attainment minus REF's, repeat by repeat (the same request stream),
mean ± interval.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np

from llmsched_env.common.outputs import write_csv
from llmsched_env.evaluation.stats import mean_ci95

METRICS = ("ttft_p50_ms", "ttft_p99_ms", "tpot_p50_ms", "tpot_p99_ms", "throughput_rps", "goodput_rps", "attainment")


def run_metrics(run: Path, slos: dict[str, tuple[float, float]]) -> dict[str, float]:
    """The metrics of one run folder (see the module docstring)."""
    result = json.loads((run / "result.json").read_text())
    sent = json.loads((run / "requests.json").read_text())
    ttft = np.asarray(result["ttfts"], dtype=float)
    e2e = np.asarray(result["latencies"], dtype=float)
    out_len = np.asarray(result["output_lens"], dtype=float)
    ok = np.array([not e for e in result["errors"]]) & (out_len > 0)
    if len(sent) != len(ttft):
        raise ValueError(f"{run}: requests.json has {len(sent)} requests, result.json {len(ttft)}")
    multi = ok & (out_len > 1)
    tpot = np.where(multi, (e2e - ttft) / np.maximum(out_len - 1, 1), 0.0)
    met = 0
    for i, r in enumerate(sent):
        ttft_slo, tpot_slo = slos[r["tenant"]]
        met += bool(ok[i] and ttft[i] <= ttft_slo and tpot[i] <= tpot_slo)
    duration = float(result["duration"])
    return {
        "ttft_p50_ms": float(np.percentile(ttft[ok], 50)) * 1e3,
        "ttft_p99_ms": float(np.percentile(ttft[ok], 99)) * 1e3,
        "tpot_p50_ms": float(np.percentile(tpot[multi], 50)) * 1e3,
        "tpot_p99_ms": float(np.percentile(tpot[multi], 99)) * 1e3,
        "throughput_rps": float(result["request_throughput"]),
        "goodput_rps": met / duration,
        "attainment": met / len(sent),
        "completed": float(ok.sum()),
    }


def collect(folder: Path) -> list[dict[str, Any]]:
    """One row per run under ``folder``: scheduler, workload, rate, repeat and ``run_metrics``."""
    exp = json.loads((folder / "experiment.json").read_text())
    slos = {t: (float(v[0]), float(v[1])) for t, v in exp["tenants"].items()}
    rows = []
    for scheduler in exp["schedulers"]:
        sub = folder / scheduler.split("=")[0]
        for run in sorted(sub.glob(f"{exp['workload']}-rate*-rep*")):
            rate, rep = run.name.removeprefix(f"{exp['workload']}-rate").split("-rep")
            rows.append({"scheduler": scheduler.split("=")[0], "workload": exp["workload"], "rate": float(rate),
                         "repeat": int(rep), **run_metrics(run, slos)})  # fmt: skip
    return rows


def summarize(rows: list[dict[str, Any]], paired: str | None) -> list[dict[str, Any]]:
    out = []
    keys = list(dict.fromkeys((r["scheduler"], r["rate"]) for r in rows))
    for sched, rate in sorted(keys, key=lambda k: (k[1], [r["scheduler"] for r in rows].index(k[0]))):
        group = sorted((r for r in rows if r["scheduler"] == sched and r["rate"] == rate), key=lambda r: r["repeat"])
        row: dict[str, Any] = {"scheduler": sched, "rate": rate, "repeats": len(group)}
        for m in METRICS:
            row[m], row[f"{m}_ci95"] = mean_ci95([g[m] for g in group])
        if paired is not None:
            ref = {r["repeat"]: r for r in rows if r["scheduler"] == paired and r["rate"] == rate}
            ratios = [g["throughput_rps"] / ref[g["repeat"]]["throughput_rps"] for g in group if g["repeat"] in ref]
            row["throughput_vs_ref"], row["throughput_vs_ref_ci95"] = mean_ci95(ratios) if ratios else (math.nan, 0.0)
            diffs = [g["attainment"] - ref[g["repeat"]]["attainment"] for g in group if g["repeat"] in ref]
            row["attainment_vs_ref"], row["attainment_vs_ref_ci95"] = mean_ci95(diffs) if diffs else (math.nan, 0.0)
        out.append(row)
    return out


def markdown(summary: list[dict[str, Any]], paired: str | None) -> str:
    head = ["load (req/s)", "scheduler", "TTFT p50 (ms)", "TTFT p99 (ms)", "TPOT p50 (ms)", "TPOT p99 (ms)",
            "throughput (req/s)", "goodput (req/s)", "SLO attainment"]  # fmt: skip
    if paired:
        head += [f"throughput / {paired}", f"attainment - {paired}"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    fmt = {"attainment": "{:.3f} ± {:.3f}", "throughput_rps": "{:.2f} ± {:.2f}", "goodput_rps": "{:.2f} ± {:.2f}"}
    for r in summary:
        cells = [f"{r['rate']:g}", r["scheduler"]]
        for m in METRICS:
            cells.append(fmt.get(m, "{:.0f} ± {:.0f}").format(r[m], r[f"{m}_ci95"]))
        if paired:
            cells.append(f"{r['throughput_vs_ref']:.3f} ± {r['throughput_vs_ref_ci95']:.3f}")
            cells.append(f"{r['attainment_vs_ref']:+.3f} ± {r['attainment_vs_ref_ci95']:.3f}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("folder", type=Path)
    p.add_argument("--paired", default=None, help="reference scheduler for paired throughput ratios (e.g. vllm)")
    p.add_argument("--out", type=Path, default=None, help="CSV of every run")
    p.add_argument("--markdown", action="store_true", help="print the summary as a Markdown table")
    args = p.parse_args()
    try:
        rows = collect(args.folder)
    except (OSError, ValueError, KeyError) as exc:
        sys.exit(f"vllm_live_report: {exc}")
    summary = summarize(rows, args.paired)
    if args.out:
        write_csv(rows, args.out)
    if args.markdown:
        print(markdown(summary, args.paired))
    else:
        for r in summary:
            print(" ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in r.items()))


if __name__ == "__main__":
    main()
