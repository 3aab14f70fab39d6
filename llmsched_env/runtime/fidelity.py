"""Fidelity: the same workload replayed on the real model and in the simulator, latency by latency.

``compare`` serves identical request lists (same arrivals, lengths, prefixes) once on a ``Runtime`` and once in
a ``Simulator`` priced by a cost-model preset, under the same policy and the same serving loop (``serve``), and
reports TTFT, TPOT and E2E at p50 and p99 and the request throughput of both, with the simulator's relative
error ``|sim - real| / real``. Loads are fractions of the workload's saturation throughput in the simulator
(``saturation_rps``), so "0.8" means the same pressure whatever the model and device.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from llmsched_env.config import SLO_CLASSES, EngineConfig, TenantConfig
from llmsched_env.core.cost_model import CostModel
from llmsched_env.core.lengths import LengthDist
from llmsched_env.core.request import Request
from llmsched_env.core.scenarios import slo_scale
from llmsched_env.core.simulator import Simulator
from llmsched_env.core.workload import TenantWorkload, WorkloadConfig, generate
from llmsched_env.decision import ActionSpec, ObservationEncoder, Policy, PolicyContext
from llmsched_env.runtime.executor import Runtime
from llmsched_env.runtime.runner import ModelRunner
from llmsched_env.runtime.serve import serve

__all__ = [
    "FIDELITY_METRICS",
    "RUNTIME_ENGINE",
    "WARMUP_SEED",
    "FidelityWorkload",
    "PolicyFactory",
    "compare",
    "drive",
    "saturation_rps",
]

FIDELITY_METRICS = (
    "ttft_p50_s",
    "ttft_p99_s",
    "tpot_p50_s",
    "tpot_p99_s",
    "e2el_p50_s",
    "e2el_p99_s",
    "request_throughput_rps",
)
# An engine sized for the CPU ``tiny`` preset: 16k KV tokens, up to 32 sequences, 1024-token iterations.
RUNTIME_ENGINE = EngineConfig(
    num_kv_blocks=1024, block_size=16, max_num_seqs=32, max_num_batched_tokens=1024, max_model_len=2048
)
PolicyFactory = Callable[[PolicyContext], Policy]
WARMUP_SEED = 999  # the workload served once, unmeasured, before a fidelity run


@dataclass(frozen=True)
class FidelityWorkload:
    """Chat-like traffic small enough for a CPU model: lognormal lengths, a quarter of the prompts starting
    with one of four shared system prompts (prefix-cache hits), the ``chat`` SLO scaled to the cost model."""

    num_requests: int = 150
    prompt_median: float = 160.0
    output_median: float = 40.0
    max_prompt_len: int = 1536
    max_output_len: int = 384
    prefix_share: float = 0.25
    shared_prefix_tokens: int = 256
    prefix_id_tokens: int = 64
    slo_class: str = "chat"

    def tenants(self, cost_model: CostModel) -> tuple[TenantConfig, ...]:
        slo = SLO_CLASSES[self.slo_class].scaled(slo_scale(cost_model))
        return (TenantConfig(self.slo_class, slo=slo),)

    def requests(self, cost_model: CostModel, rate_rps: float, seed: int) -> list[Request]:
        lengths = LengthDist.lognormal(
            self.prompt_median,
            self.output_median,
            0.8,
            0.8,
            max_prompt_len=self.max_prompt_len,
            max_output_len=self.max_output_len,
        )
        tenant = TenantWorkload(
            self.tenants(cost_model)[0],
            rate_rps,
            lengths,
            prefix_share=self.prefix_share,
            num_shared_prefixes=4,
            shared_prefix_tokens=self.shared_prefix_tokens,
        )
        wl = WorkloadConfig((tenant,), self.num_requests, prefix_id_tokens=self.prefix_id_tokens)
        return generate(wl, np.random.default_rng(seed))


def drive(sim: Simulator, make: PolicyFactory, fallback: PolicyFactory) -> dict[str, float]:
    """Serve ``sim`` (a Simulator or a Runtime) to the end under the policy ``make`` builds; its metrics."""
    engine, tenants, cost_model = sim.engine.config, sim.engine.tenants, sim.cost_model
    spec = ActionSpec.for_engine(engine)
    rate = len(sim.requests) / max(sim.requests[-1].arrival_s, 1e-9)
    encoder = ObservationEncoder(engine, tenants, rate)
    ctx = PolicyContext(engine, tenants, cost_model, spec, encoder.names)
    metrics, _ = serve(sim, make(ctx), encoder, spec, fallback(ctx))
    return metrics


def saturation_rps(
    cost_model: CostModel, workload: FidelityWorkload, engine: EngineConfig, policy: PolicyFactory, seed: int = 0
) -> float:
    """Requests/s the simulator finishes when the whole workload arrives at once (the engine saturated)."""
    reqs = workload.requests(cost_model, 1e6, seed)
    sim = Simulator(engine, workload.tenants(cost_model), cost_model, reqs)
    return drive(sim, policy, policy)["request_throughput_rps"]


def compare(
    runner: ModelRunner,
    cost_model: CostModel,
    policies: Mapping[str, PolicyFactory],
    fallback: PolicyFactory,
    loads: Sequence[float],
    seeds: Sequence[int],
    workload: FidelityWorkload | None = None,
    engine: EngineConfig = RUNTIME_ENGINE,
    progress: Callable[[dict[str, float | str]], None] | None = None,
) -> list[dict[str, float | str]]:
    """One row per (policy, load, seed): every ``FIDELITY_METRICS`` entry measured on the runtime
    (``real_*``), predicted by the simulator (``sim_*``) and the relative error (``err_*``)."""
    workload = workload or FidelityWorkload()
    tenants = workload.tenants(cost_model)
    sat = saturation_rps(cost_model, workload, engine, fallback)
    # Warm the runtime up first (allocator, attention buffers grown to size, caches): a cold first run was
    # 10-20% slower than the same run warm, which is start-up cost, not what the cost model should predict.
    warm = workload.requests(cost_model, sat * max(loads), WARMUP_SEED)
    drive(Runtime(runner, engine, tenants, cost_model, warm), fallback, fallback)
    rows: list[dict[str, float | str]] = []
    for name, make in policies.items():
        for load in loads:
            for seed in seeds:
                rate = sat * load
                real_rt = Runtime(runner, engine, tenants, cost_model, workload.requests(cost_model, rate, seed))
                real = drive(real_rt, make, fallback)
                sim = Simulator(engine, tenants, cost_model, workload.requests(cost_model, rate, seed))
                pred = drive(sim, make, fallback)
                row: dict[str, float | str] = {"policy": name, "load": load, "seed": seed, "rate_rps": rate}
                for m in FIDELITY_METRICS:
                    row[f"real_{m}"] = real[m]
                    row[f"sim_{m}"] = pred[m]
                    row[f"err_{m}"] = abs(pred[m] - real[m]) / real[m] if real[m] > 0 else float("nan")
                row["real_slo_attainment"] = real["slo_attainment"]
                row["sim_slo_attainment"] = pred["slo_attainment"]
                row["loop_overhead_s"] = real["loop_overhead_s"]
                rows.append(row)
                if progress is not None:
                    progress(row)
    return rows
