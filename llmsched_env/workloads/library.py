"""The named scenarios. Each nominal rate (load 1.0) is ``fcfs``'s capacity (90% SLO attainment) on the scenario's
held-out part, so ``load`` reads as offered load relative to the default scheduler's capacity."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from functools import partial

from llmsched_env.common.registry import Registry
from llmsched_env.engine.config import EngineConfig
from llmsched_env.engine.remote_kv import RemoteKVConfig
from llmsched_env.workloads.arrivals import GammaArrivals, OnOff, Ramp
from llmsched_env.workloads.fitted import fitted_scenario
from llmsched_env.workloads.lengths import LengthDist
from llmsched_env.workloads.public_traces import TRACE_FILES, trace_path
from llmsched_env.workloads.scenarios import (
    RequestSource,
    Scenario,
    SyntheticSource,
    TraceSource,
    length_split,
    scaled_tenant,
    trace_split,
)
from llmsched_env.workloads.traces import load_azure, load_mooncake, load_trace
from llmsched_env.workloads.workload import TenantWorkload, WorkloadConfig, default_workload

# Engines: the default (Llama-3-8B, 64k KV tokens) and a long-context one for Mooncake's 12k-token prompts.
LONG_CONTEXT = EngineConfig(num_kv_blocks=16384, max_num_seqs=64, max_num_batched_tokens=8192, max_model_len=131072)
SMALL_LOCAL = replace(LONG_CONTEXT, num_kv_blocks=8192)
CHAT_LENGTHS = LengthDist.lognormal(250, 200, 1.0, 1.0, max_prompt_len=4096, max_output_len=1024)


def _azure(key: str, slo: str, rate: float, split: str, scale: float) -> RequestSource:
    trace = load_azure(trace_path(key), max_context=16384, overlong="truncate")
    return TraceSource(trace_split(trace, split), (scaled_tenant(slo, slo, scale),), rate, split)


def _mooncake(rate: float, split: str, scale: float) -> RequestSource:
    trace = load_mooncake(trace_path("mooncake-conv"), max_context=131072)
    tenant = scaled_tenant("long_context", "long_context", scale)
    return TraceSource(trace_split(trace, split), (tenant,), rate, split)


def _synthetic(build: Callable[..., WorkloadConfig], *args: float) -> Callable[[str, float], RequestSource]:
    """The source of each split: ``build(*args, split, scale)``'s workload."""
    return lambda split, scale: SyntheticSource(build(*args, split, scale), split)


def _default(split: str, scale: float) -> WorkloadConfig:
    return default_workload().slo_scaled(scale)


def _sharegpt(rate: float, split: str, scale: float) -> WorkloadConfig:
    path = trace_path("sharegpt")
    lengths = length_split(load_trace(path, "lengths"), split, max_prompt_len=8192, max_output_len=2048)
    return WorkloadConfig((TenantWorkload(scaled_tenant("chat", "chat", scale), rate, lengths),), 1000)


def _bursty(rate: float, cv: float, split: str, scale: float) -> WorkloadConfig:
    arrival = GammaArrivals(rate, cv)
    tenant = TenantWorkload.with_arrival(scaled_tenant("chat", "interactive", scale), arrival, CHAT_LENGTHS)
    return WorkloadConfig((tenant,), 1000)


def _overload(rate: float, split: str, scale: float) -> WorkloadConfig:
    """Four equal-weight tenants; ``heavy`` sends four times each other tenant's rate (over its share)."""
    unit = rate / 7.0
    tenants = [TenantWorkload(scaled_tenant("heavy", "chat", scale), 4 * unit, CHAT_LENGTHS)]
    tenants += [TenantWorkload(scaled_tenant(f"t{i}", "chat", scale), unit, CHAT_LENGTHS) for i in (1, 2, 3)]
    return WorkloadConfig(tuple(tenants), 1000)


def _mixed_slo(rate: float, split: str, scale: float) -> WorkloadConfig:
    """Four SLO classes share one engine: interactive, code completion, chat and summarization."""
    spec = [
        ("interactive", "interactive", 0.3, LengthDist.lognormal(120, 80, 0.8, 0.8, max_prompt_len=2048,
                                                                 max_output_len=512)),
        ("code", "code", 0.2, LengthDist.lognormal(1200, 30, 0.7, 1.0, max_prompt_len=8192, max_output_len=512)),
        ("chat", "chat", 0.35, CHAT_LENGTHS),
        ("summarize", "summarization", 0.15, LengthDist.lognormal(3000, 250, 0.5, 0.6, max_prompt_len=8192,
                                                                  max_output_len=1024)),
    ]  # fmt: skip
    tenants = tuple(TenantWorkload(scaled_tenant(n, c, scale), rate * share, ln) for n, c, share, ln in spec)
    return WorkloadConfig(tenants, 1000)


def _on_off(rate: float, split: str, scale: float) -> WorkloadConfig:
    """A steady tenant and an on/off tenant that bursts at four times its mean rate a quarter of the time."""
    steady = TenantWorkload(scaled_tenant("steady", "chat", scale), rate / 2, CHAT_LENGTHS)
    bursty = TenantWorkload.with_arrival(scaled_tenant("on_off", "chat", scale), OnOff(2 * rate, on_s=10.0, off_s=30.0),
                                         CHAT_LENGTHS)
    return WorkloadConfig((steady, bursty), 1000)


def _mix_shift(rate: float, split: str, scale: float) -> WorkloadConfig:
    """Short interactive traffic ramps down while long-prompt batch traffic ramps up, over one episode."""
    span = 1000 / rate
    short = TenantWorkload.with_arrival(scaled_tenant("short", "interactive", scale),
                                        Ramp(rate * 0.9, rate * 0.1, span), CHAT_LENGTHS)
    long_lengths = LengthDist.lognormal(2500, 300, 0.5, 0.6, max_prompt_len=8192, max_output_len=1024)
    longer = TenantWorkload.with_arrival(scaled_tenant("long", "summarization", scale),
                                         Ramp(rate * 0.1, rate * 0.5, span), long_lengths)
    return WorkloadConfig((short, longer), 1000)


def _short_long(rate: float, split: str, scale: float) -> WorkloadConfig:
    short = LengthDist.lognormal(100, 60, 0.7, 0.7, max_prompt_len=2048, max_output_len=512)
    long_lengths = LengthDist.lognormal(4000, 400, 0.4, 0.5, max_prompt_len=12288, max_output_len=1024)
    return WorkloadConfig((TenantWorkload(scaled_tenant("short", "chat", scale), rate * 0.8, short),
                           TenantWorkload(scaled_tenant("long", "chat", scale), rate * 0.2, long_lengths)),
                          1000)  # fmt: skip


SCENARIOS: Registry[Scenario] = Registry("scenario")
for _s in (
    Scenario("default", "two tenants (chat, low-priority batch), lognormal lengths, Poisson", _synthetic(_default)),
    Scenario("azure-conv", "Azure LLM 2023 conversation trace replay (near-Poisson), chat SLO",
             partial(_azure, "azure-conv", "chat", 11.4)),
    Scenario("azure-code", "Azure LLM 2023 code trace replay (very bursty, long prompts), long-prompt code SLO",
             partial(_azure, "azure-code", "code_long", 0.68), num_requests=500),  # val/test parts: 609, 719
    Scenario("mooncake-conv", "Mooncake conversation trace, 12k-token prompts sharing prefixes, long context",
             partial(_mooncake, 0.63), engine=LONG_CONTEXT, num_requests=500),
    Scenario("sharegpt-poisson", "ShareGPT prompt/output lengths, Poisson arrivals, chat SLO",
             _synthetic(_sharegpt, 1.95)),
    Scenario("bursty", "Gamma arrivals with inter-arrival CV 4, interactive SLO", _synthetic(_bursty, 14.9, 4.0)),
    Scenario("multi-tenant-overload", "four equal tenants, one sending 4x its share", _synthetic(_overload, 21.9)),
    Scenario("mixed-slo", "interactive, code, chat and summarization tenants on one engine",
             _synthetic(_mixed_slo, 10.2)),
    Scenario("tenants-on-off", "a steady tenant beside an on/off tenant bursting at 4x its mean",
             _synthetic(_on_off, 12.0)),
    Scenario("mix-shift", "short interactive traffic gives way to long-prompt batch traffic",
             _synthetic(_mix_shift, 5.9)),
    Scenario("short-long", "short-prompt and long-prompt tenants with equal weights", _synthetic(_short_long, 5.7)),
    Scenario("remote-kv", "Mooncake trace with prefixes in a remote KV store over a congested link",
             partial(_mooncake, 0.53), engine=SMALL_LOCAL, num_requests=500,
             remote_kv=RemoteKVConfig(latency_s=0.005, bandwidth_gbps=10.0, slow_prob=0.1, slow_factor=8.0)),
):
    SCENARIOS.register(_s.name, _s)
# Generated traffic fitted to a replayed trace's parts (workloads.fitted), for loads its windows do not sustain.
for _base, _file in (("azure-conv", TRACE_FILES["azure-conv"]), ("mooncake-conv", TRACE_FILES["mooncake-conv"])):
    _s = fitted_scenario(SCENARIOS.get(_base), _file)
    SCENARIOS.register(_s.name, _s)

list_scenarios = SCENARIOS.names
get_scenario = SCENARIOS.get


def mixture_scenarios() -> list[str]:
    """The library scenarios with traffic of their own (not fitted to another's trace): those the generalist
    trains on and is selected on (``LLMSched-Mix-v0``'s default)."""
    return [name for name in list_scenarios() if not get_scenario(name).traffic]
