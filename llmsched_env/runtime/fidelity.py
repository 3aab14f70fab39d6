"""Fidelity: the same requests served on a ``Runtime`` and in a ``Simulator`` under one policy; ``compare``
reports TTFT, TPOT, E2E (p50, p99) and throughput of both and their relative error. With ``in_situ=True`` each
row also fits a cost model to lockstep episodes (``drive_lockstep``) and prices the replay with it
(``insitu_*``).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from llmsched_env.costs.base import CostModel
from llmsched_env.decision.actions import ActionSpec
from llmsched_env.decision.observation import ObservationEncoder, make_encoder
from llmsched_env.decision.policy import Policy, PolicyContext
from llmsched_env.decision.schema import SCHEMA_VERSION
from llmsched_env.decision.serve import ServeOptions, decision_loop, serve, serving
from llmsched_env.engine.config import SLO_CLASSES, EngineConfig, TenantConfig
from llmsched_env.engine.request import Request
from llmsched_env.runtime.calibrate import fit, iteration_samples
from llmsched_env.runtime.executor import Runtime
from llmsched_env.runtime.names import FIDELITY_REQUESTS, FIT_LOADS
from llmsched_env.runtime.runner import ModelRunner
from llmsched_env.sim.simulator import Simulator
from llmsched_env.workloads.lengths import LengthDist
from llmsched_env.workloads.scenarios import slo_scale
from llmsched_env.workloads.workload import TenantWorkload, WorkloadConfig, generate

FIDELITY_METRICS = (
    "ttft_p50_s", "ttft_p99_s", "tpot_p50_s", "tpot_p99_s", "e2el_p50_s", "e2el_p99_s", "request_throughput_rps",
)
# An engine sized for the CPU ``tiny`` preset: 16k KV tokens, up to 32 sequences, 1024-token iterations.
RUNTIME_ENGINE = EngineConfig(num_kv_blocks=1024, block_size=16, max_num_seqs=32, max_num_batched_tokens=1024,
                              max_model_len=2048)
PolicyFactory = Callable[[PolicyContext], Policy]
WARMUP_SEED = 999  # the workload served once, unmeasured, before a fidelity run
FIT_SEED = 1000  # fitting workloads are seeds FIT_SEED, FIT_SEED + 1, ...: none is a fidelity workload
LOCKSTEP_EPISODE_REQUESTS = 40  # short fitting episodes in lockstep, so every load recurs during one replay
# The most requests one calibration serves on the runtime (policies x loads x seeds x num_requests, x IN_SITU_FACTOR
# in situ): about an hour at the tiny model's 36 ms per request on a 2-core CPU (an in-situ replay costs 3 times).
MAX_RUNTIME_REQUESTS = 100_000
IN_SITU_FACTOR = 3


@dataclass(frozen=True)
class FidelityWorkload:
    """Chat-like traffic small enough for a CPU model, the ``chat`` SLO scaled to the cost model."""

    num_requests: int = FIDELITY_REQUESTS
    prompt_median: float = 160.0  # lognormal lengths (sigma 0.8), clipped
    output_median: float = 40.0
    max_prompt_len: int = 1536
    max_output_len: int = 384
    prefix_share: float = 0.25  # of the prompts starting with one of four system prompts
    shared_prefix_tokens: int = 256
    prefix_id_tokens: int = 64
    slo_class: str = "chat"

    def tenants(self, cost_model: CostModel) -> tuple[TenantConfig, ...]:
        slo = SLO_CLASSES[self.slo_class].scaled(slo_scale(cost_model))
        return (TenantConfig(self.slo_class, slo=slo),)

    def requests(self, cost_model: CostModel, rate_rps: float, seed: int) -> list[Request]:
        lengths = LengthDist.lognormal(self.prompt_median, self.output_median, 0.8, 0.8,
                                       max_prompt_len=self.max_prompt_len, max_output_len=self.max_output_len)
        tenant = TenantWorkload(self.tenants(cost_model)[0], rate_rps, lengths, prefix_share=self.prefix_share,
                                num_shared_prefixes=4, shared_prefix_tokens=self.shared_prefix_tokens)
        wl = WorkloadConfig((tenant,), self.num_requests, prefix_id_tokens=self.prefix_id_tokens)
        return generate(wl, np.random.default_rng(seed))


def _loop_parts(sim: Simulator, make: PolicyFactory,
                fallback: PolicyFactory) -> tuple[Policy, ObservationEncoder, ActionSpec, Policy]:
    """The policy, encoder, action spec and fallback ``serve`` needs for ``sim``, as the env builds them."""
    engine, tenants, cost_model = sim.engine.config, sim.engine.tenants, sim.cost_model
    spec = ActionSpec.for_engine(engine)
    rate = len(sim.requests) / max(sim.requests[-1].arrival_s, 1e-9)
    encoder = make_encoder(SCHEMA_VERSION, engine, tenants, rate)
    ctx = PolicyContext(engine, tenants, cost_model, spec, encoder.names)
    return make(ctx), encoder, spec, fallback(ctx)


def drive(sim: Simulator, make: PolicyFactory, fallback: PolicyFactory) -> dict[str, float]:
    """Serve ``sim`` (a Simulator or a Runtime) to the end under the policy ``make`` builds; its metrics."""
    metrics, _ = serve(sim, *_loop_parts(sim, make, fallback))
    return metrics


def drive_lockstep(runtime: Runtime, make: PolicyFactory, fallback: PolicyFactory,
                   partners: Iterator[Runtime]) -> dict[str, float]:
    """``runtime``'s metrics served under ``make``'s policy, each decision alternating with one of a partner from
    ``partners`` (own KV blocks) served by ``fallback``, each clock paused while the other runs."""
    partner: Runtime | None = None
    partner_loop: Iterator[None] | None = None
    for _ in serving(runtime, decision_loop(*_loop_parts(runtime, make, fallback), ServeOptions())):
        runtime.pause()
        if partner_loop is None:
            partner = next(partners)
            partner_loop = serving(partner, decision_loop(*_loop_parts(partner, fallback, fallback), ServeOptions()))
        else:
            assert partner is not None
            partner.resume()
        if next(partner_loop, StopIteration) is StopIteration:
            partner_loop = None  # it ended: the next turn starts the next partner
        else:
            assert partner is not None
            partner.pause()
        runtime.resume()
    return runtime.metrics()


def saturation_rps(cost_model: CostModel, workload: FidelityWorkload, engine: EngineConfig, policy: PolicyFactory,
                   seed: int = 0) -> float:
    """Requests/s the simulator finishes when the whole workload arrives at once (the engine saturated)."""
    reqs = workload.requests(cost_model, 1e6, seed)
    sim = Simulator(engine, workload.tenants(cost_model), cost_model, reqs)
    return drive(sim, policy, policy)["request_throughput_rps"]


def check_runtime_requests(factors: Mapping[str, int], in_situ: bool = False) -> int:
    """The requests served on the runtime (the product of ``factors``) if at most ``MAX_RUNTIME_REQUESTS``."""
    total = math.prod(factors.values()) * (IN_SITU_FACTOR if in_situ else 1)
    if total <= MAX_RUNTIME_REQUESTS:
        return total
    names = " x ".join(factors)
    values = " x ".join(f"{v:,}" for v in factors.values())
    if in_situ:
        names, values = f"{names} x {IN_SITU_FACTOR} (the in-situ replays)", f"{values} x {IN_SITU_FACTOR}"
    raise ValueError(f"{names} = {values} = {total:,} requests served on the runtime, more than "
                     f"{MAX_RUNTIME_REQUESTS:,} (about an hour at the 36 ms per request of the tiny model on a 2-core "
                     f"CPU); give fewer of them")


def compare(runner: ModelRunner, cost_model: CostModel, policies: Mapping[str, PolicyFactory], fallback: PolicyFactory,
            loads: Sequence[float], seeds: Sequence[int], workload: FidelityWorkload | None = None,
            engine: EngineConfig = RUNTIME_ENGINE, progress: Callable[[dict[str, float | str]], None] | None = None,
            in_situ: bool = False) -> list[dict[str, float | str]]:
    """One row per (policy, load, seed): each ``FIDELITY_METRICS`` entry on the runtime (``real_*``), in the
    simulator (``sim_*``), their relative error (``err_*``) and in situ (``insitu_*``, on twice the KV blocks)."""
    workload = workload or FidelityWorkload()
    counts = {"policies": len(policies), "loads": len(loads), "seeds": len(seeds)}
    check_runtime_requests({**counts, "num_requests": workload.num_requests}, in_situ)
    tenants = workload.tenants(cost_model)
    if in_situ and runner.num_blocks < 2 * engine.num_kv_blocks:
        raise ValueError(f"in-situ calibration needs a runner with 2 x {engine.num_kv_blocks} KV blocks (the fitting "
                         f"episodes use the second half), it has {runner.num_blocks}")
    sat = saturation_rps(cost_model, workload, engine, fallback)
    # Warm the runtime up first: a cold first run was 10-20% slower (start-up cost, not what a cost model predicts).
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
                row.update(_errors(real, pred))
                row["real_slo_attainment"] = real["slo_attainment"]
                row["sim_slo_attainment"] = pred["slo_attainment"]
                row["loop_overhead_s"] = real["loop_overhead_s"]
                if in_situ:
                    row.update(_in_situ(runner, cost_model, make, fallback, workload, engine, sat, rate, seed))
                rows.append(row)
                if progress is not None:
                    progress(row)
    return rows


def _in_situ(runner: ModelRunner, cost_model: CostModel, make: PolicyFactory, fallback: PolicyFactory,
             workload: FidelityWorkload, engine: EngineConfig, sat: float, rate: float,
             seed: int) -> dict[str, float]:  # fmt: skip
    """The lockstep replay of one fidelity workload and its prediction by a model fitted beside it."""
    tenants = workload.tenants(cost_model)
    fitting = replace(workload, num_requests=LOCKSTEP_EPISODE_REQUESTS)
    partners: list[Runtime] = []

    def episodes() -> Iterator[Runtime]:
        for k in itertools.count():
            reqs = fitting.requests(cost_model, sat * FIT_LOADS[k % len(FIT_LOADS)], FIT_SEED + k)
            partners.append(
                Runtime(runner, engine, tenants, cost_model, reqs, record=True, block_offset=engine.num_kv_blocks)
            )
            yield partners[-1]

    test = Runtime(runner, engine, tenants, cost_model, workload.requests(cost_model, rate, seed))
    real = drive_lockstep(test, make, fallback, episodes())
    samples = [s for rt in partners for s in iteration_samples(rt)]
    model = fit([], 0.0, name="in-situ", iterations=samples)
    sim = Simulator(engine, tenants, cost_model, workload.requests(cost_model, rate, seed), clock=model)
    pred = drive(sim, make, fallback)
    return {"insitu_fit_iterations": float(len(samples)), **_errors(real, pred, "insitu_")}


def _errors(real: Mapping[str, float], pred: Mapping[str, float], tag: str = "") -> dict[str, float]:
    """``{tag}real_m``, ``{tag}sim_m`` and ``err_{tag}m`` (``|sim - real| / real``, NaN at 0) of each metric."""
    out: dict[str, float] = {}
    for m in FIDELITY_METRICS:
        out[f"{tag}real_{m}"] = real[m]
        out[f"{tag}sim_{m}"] = pred[m]
        out[f"err_{tag}{m}"] = abs(pred[m] - real[m]) / real[m] if real[m] > 0 else float("nan")
    return out
