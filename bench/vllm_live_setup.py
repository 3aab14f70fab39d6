"""What the live comparison needs from the calibration: SLO scale, nominal rate, and a trace to tune ``tuned`` on.

    python bench/vllm_live_setup.py --cost-model runs/vllm-live/cost-model.json --engine runs/.../engine.json \\
        --workload random --num-kv-blocks 256 --out runs/vllm-live/setup-random

With the cost model fitted to the live server's own steps (``python -m llmsched_env.commands.live_replay ...
--save-model``), prints (and writes to ``OUT/setup.json``):

- ``slo_scale``: the project's rule for SLOs on other hardware (``workloads.scenarios.slo_scale``): the unloaded
  decode step of the fitted model over that of the reference H100 preset the literature's SLO classes were set
  for. The live tenants' targets are their class (chat; code for the trace's code tenant) times this scale;
- ``nominal_rate_rps``: the knee estimate of this engine on the fitted model for the workload's lengths
  (``workloads.randomized.nominal_rate_rps``), the unit of the generalist's ``arrival/rate`` feature;
- ``tune.csv``: a trace of the workload for ``llmsched-tune --trace`` (its val part is what ``tuned`` is chosen
  on): for ``random``, 3,000 Poisson arrivals at the nominal rate with vLLM's random-dataset lengths (uniform
  within ``--range-ratio`` of ``--input-len`` / ``--output-len``), seed 12345, none of the streams the live runs
  send; for ``trace``, the whole merged Azure conversation + code trace (clipped as the live runs clip it),
  whose val part ``tuned`` is tuned on while the live runs replay its test part.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from llmsched_env.common.outputs import write_csv, write_text_atomically
from llmsched_env.costs.loader import load_cost_model
from llmsched_env.engine.config import EngineConfig
from llmsched_env.workloads.lengths import LengthDist
from llmsched_env.workloads.randomized import nominal_rate_rps
from llmsched_env.workloads.scenarios import slo_scale


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cost-model", required=True)
    p.add_argument("--engine", type=Path, required=True, help="the adapter's engine.json of a calibration run")
    p.add_argument("--workload", choices=("random", "trace"), required=True)
    p.add_argument("--num-kv-blocks", type=int, default=0, help="the live runs' KV pool (0: the engine.json's)")
    p.add_argument("--input-len", type=int, default=256)
    p.add_argument("--output-len", type=int, default=64)
    p.add_argument("--range-ratio", type=float, default=0.5)
    p.add_argument("--max-prompt", type=int, default=1024)
    p.add_argument("--max-output", type=int, default=256)
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args()
    model = load_cost_model(args.cost_model)
    info = json.loads(args.engine.read_text())
    fields = ("num_kv_blocks", "block_size", "max_num_seqs", "max_num_batched_tokens", "max_model_len")
    engine = EngineConfig(**{k: info[k] for k in fields})
    if args.num_kv_blocks:
        engine = EngineConfig(**{**{k: info[k] for k in fields}, "num_kv_blocks": args.num_kv_blocks})
    args.out.mkdir(parents=True, exist_ok=True)
    rows: list[tuple[float, int, int, str]] = []
    if args.workload == "random":
        r = args.range_ratio
        lengths = LengthDist.uniform(
            (int(args.input_len * (1 - r)), int(args.input_len * (1 + r))),
            (int(args.output_len * (1 - r)), int(args.output_len * (1 + r))),
        )
        mix = [(lengths, 1.0)]
        rate = nominal_rate_rps(engine, model, mix)
        rng = np.random.default_rng(12345)
        p_len, o_len = lengths.sample(rng, 3000)
        t = np.cumsum(rng.exponential(1.0 / rate, 3000))
        rows = [(float(a - t[0]), int(pl), int(ol), "chat") for a, pl, ol in zip(t, p_len, o_len, strict=True)]
    else:
        from llmsched_env.workloads.public_traces import trace_path
        from llmsched_env.workloads.traces import load_azure

        for tenant, key in (("conv", "azure-conv"), ("code", "azure-code")):
            tr = load_azure(trace_path(key), sort=True)
            assert tr.arrival_s is not None
            rows += [(float(a), min(int(pl), args.max_prompt), min(int(ol), args.max_output), tenant)
                     for a, pl, ol in zip(tr.arrival_s, tr.prompt_len, tr.output_len, strict=True)]  # fmt: skip
        rows.sort()
        t0 = rows[0][0]
        rows = [(a - t0, pl, ol, tn) for a, pl, ol, tn in rows]
        samples = np.array([(pl, ol) for _, pl, ol, _ in rows])
        mix = [(LengthDist("empirical", prompt_samples=samples[:, 0], output_samples=samples[:, 1]), 1.0)]
        rate = nominal_rate_rps(engine, model, mix)
    columns = ["arrival", "prompt_len", "output_len", "tenant"]
    table = [dict(zip(columns, (f"{a:.6f}", pl, ol, tn), strict=True)) for a, pl, ol, tn in rows]
    write_csv(table, args.out / "tune.csv")
    setup = {
        "slo_scale": slo_scale(model),
        "nominal_rate_rps": rate,
        "engine": {k: getattr(engine, k) for k in fields},
        "tune_trace": str(args.out / "tune.csv"),
    }
    write_text_atomically(args.out / "setup.json", json.dumps(setup, indent=1) + "\n")
    print(json.dumps(setup))


if __name__ == "__main__":
    main()
