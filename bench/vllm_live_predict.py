"""How well the simulator predicts the live server: the replay tables of ``bench/vllm_live.sh`` summarised.

    python bench/vllm_live_predict.py runs/vllm-live/random/replay-fcfs.csv runs/vllm-live/trace/replay-fcfs.csv ...

Each CSV is ``python -m llmsched_env.commands.live_replay ... --out`` (one row per run and metric: the client's
and the engine's measurement, the simulator's, and the relative errors ``(sim - live) / live``). Per (workload,
policy, load) cell, over its repeats: the mean signed and absolute relative error of TTFT, TPOT and E2E at p50 and
at p99 and of throughput, against the client's measurement and the engine's. Then, per policy, the mean absolute
error over every cell: the targets are <= 10% at p50 and <= 15% at p99 (client-side).
"""

from __future__ import annotations

import argparse
import csv
import re
from collections import defaultdict
from pathlib import Path

import numpy as np

P50 = ("ttft_p50_s", "tpot_p50_s", "e2e_p50_s")
P99 = ("ttft_p99_s", "tpot_p99_s", "e2e_p99_s")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("csvs", nargs="+", type=Path)
    args = p.parse_args()
    cells: dict[tuple[str, str, float], dict[str, dict[str, list[float]]]] = defaultdict(
        lambda: defaultdict(lambda: defaultdict(list))
    )
    seen: dict[tuple[str, str, str], Path] = {}
    for path in args.csvs:
        with open(path) as f:
            for row in csv.DictReader(f):
                m = re.match(r"(\w+)-rate([\d.]+)-rep\d+", row["run"])
                if not m or row["metric"] == "completed":
                    continue
                run = (row["run"], row["policy"], row["metric"])
                if run in seen:  # the same run twice (e.g. with and without a front-end delay) would count twice
                    p.error(f"{path}: run {row['run']} ({row['policy']}, {row['metric']}) is also in {seen[run]}")
                seen[run] = path
                key = (m.group(1), row["policy"], float(m.group(2)))
                for side in ("client", "engine"):
                    cells[key][row["metric"]][side].append(float(row[f"err_{side}"]))
    lines = []
    head = ["workload", "policy", "load (req/s)", "repeats"]
    head += [f"{m.removesuffix('_s')} err" for m in (*P50, *P99, "throughput_rps")]
    head += ["mean abs p50 (client / engine)", "mean abs p99 (client / engine)"]
    lines.append("| " + " | ".join(head) + " |")
    lines.append("|" + "---|" * len(head))
    per_policy: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for (workload, policy, load), metrics in sorted(cells.items()):
        cell = [workload, policy, f"{load:g}", str(len(metrics["ttft_p50_s"]["client"]))]
        for m in (*P50, *P99, "throughput_rps"):
            c, e = np.mean(metrics[m]["client"]), np.mean(metrics[m]["engine"])
            cell.append(f"{c:+.0%} / {e:+.0%}")
        for name, group in (("p50", P50), ("p99", P99)):
            c = float(np.mean([abs(x) for m in group for x in metrics[m]["client"]]))
            e = float(np.mean([abs(x) for m in group for x in metrics[m]["engine"]]))
            per_policy[policy][f"{name}_client"].append(c)
            per_policy[policy][f"{name}_engine"].append(e)
            cell.append(f"{c:.0%} / {e:.0%}")
        lines.append("| " + " | ".join(cell) + " |")
    print("\n".join(lines))
    print()
    for policy, v in per_policy.items():
        print(f"{policy}: mean absolute relative error over {len(v['p50_client'])} cells: "
              f"p50 {np.mean(v['p50_client']):.2%} (client) / {np.mean(v['p50_engine']):.2%} (engine), "
              f"p99 {np.mean(v['p99_client']):.2%} (client) / {np.mean(v['p99_engine']):.2%} (engine)")  # fmt: skip


if __name__ == "__main__":
    main()
