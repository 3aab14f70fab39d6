"""What ``llmsched-tune`` writes for vLLM, run in vLLM (CPU, fake model outputs): the native flags, parsed by
``vllm serve``'s own parser, make vLLM's real scheduler form the batches llmsched's engine forms under the decision
those flags run (``deploy.native_vllm``), step for step; the adapter config, loaded in ``LLMSchedScheduler`` on a
vLLM built from the adapter's flags, plays the tuned setting. Needs vLLM (bench/vllm_check.sh); skipped without."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from llmsched_env.adapters.vllm.config import AdapterConfig
from llmsched_env.adapters.vllm.deploy import ADAPTER_CLS, deployment_dir, native_vllm
from llmsched_env.commands import tune
from llmsched_env.costs.loader import load_cost_model
from llmsched_env.decision.actions import UNLIMITED
from llmsched_env.decision.planners.tuned import decision_of, load_tuned_table
from llmsched_env.engine.batch import Decision, QueueOrder
from llmsched_env.engine.config import EngineConfig, TenantConfig
from llmsched_env.engine.request import Request
from llmsched_env.workloads.trace_options import build_trace_scenario

pytestmark = pytest.mark.vllm

COLUMNS = "arrival=t,prompt_len=in,output_len=out,tenant=who"
# a pool of 192 blocks (3,072 tokens) for prompts of 100-1,300 tokens: admission waits on memory, requests preempt
LIMITS = ["--num-kv-blocks", "192", "--max-num-seqs", "32", "--max-num-batched-tokens", "1024", "--max-model-len",
          "3072"]  # fmt: skip
TINY = ["--reference", "sjf", "--seeds", "0,1", "--candidates", "0", "--rounds", "0"]


@pytest.fixture(scope="module")
def tuned(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A trace tuned on an engine under KV pressure: its deployment folder, entry, vllm.json and trace options."""
    root = tmp_path_factory.mktemp("deploy")
    trace = root / "pressure.csv"
    rows = [f"{i * 0.02:.2f},{100 + (i * 37) % 1200},{10 + (i * 13) % 120},{'ab'[i % 2]}" for i in range(2000)]
    trace.write_text("t,in,out,who\n" + "\n".join(rows) + "\n")
    table = root / "tuned.json"
    options = ["--trace", str(trace), "--trace-format", "generic", "--trace-columns", COLUMNS]
    assert tune.main([*options, *LIMITS, *TINY, "--out", str(table)]) == 0
    ((key, entry),) = load_tuned_table(table).entries.items()
    folder = deployment_dir(table, key)
    manifest = json.loads((folder / "vllm.json").read_text())
    limits = {flag[2:].replace("-", "_"): int(value) for flag, value in zip(LIMITS[::2], LIMITS[1::2], strict=True)}
    scenario = build_trace_scenario({"trace": trace, "trace_format": "generic", "trace_columns": COLUMNS}, limits)
    return {"key": key, "entry": entry, "folder": folder, "manifest": manifest, "scenario": scenario}


def _serve_args(flags: list[str]) -> Any:
    """``flags`` as ``vllm serve MODEL ...`` parses them."""
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    return make_arg_parser(FlexibleArgumentParser()).parse_args(["MODEL", *flags])


def _vllm_engine(args: Any) -> EngineConfig:
    """The limits of a vLLM started with ``args`` (its pool less the null block)."""
    return EngineConfig(num_kv_blocks=args.num_gpu_blocks_override - 1, block_size=args.block_size,
                        max_num_seqs=args.max_num_seqs, max_num_batched_tokens=args.max_num_batched_tokens,
                        max_model_len=int(args.max_model_len))  # fmt: skip


def _native_case(name: str, requests: tuple[Request, ...], engine: EngineConfig, decision: Decision) -> Any:
    """The parity case of ``decision``'s native flags: llmsched's engine plays the decision they run, vLLM runs
    with the flags as its parser reads them."""
    from llmsched_env.adapters.vllm.parity import ParityCase

    native = native_vllm(decision, engine, (TenantConfig("all"),))
    assert native.decision is not None, native.knobs
    args = _serve_args(list(native.flags))
    assert args.scheduling_policy == "fcfs" and args.enable_prefix_caching and args.enable_chunked_prefill
    return ParityCase(name, requests, engine, chunk_cap=args.long_prefill_token_threshold,
                      reserve_full_prefill=args.scheduler_reserve_full_isl, decision=native.decision,
                      vllm_engine=_vllm_engine(args), watermark=args.watermark)  # fmt: skip


def _test_requests(tuned: dict[str, Any], n: int) -> tuple[Request, ...]:
    prov = tuned["entry"]["provenance"]
    source = tuned["scenario"].source("test", load_cost_model(prov["cost_model"]))
    return tuple(source.sample(np.random.default_rng(0), n, prov["probe_load"], window=0))


def test_the_native_flags_of_a_tuned_setting_schedule_in_vllm_as_in_llmsched(tuned: dict[str, Any]) -> None:
    from llmsched_env.adapters.vllm.parity import compare

    engine = EngineConfig(**tuned["manifest"]["engine"])
    assert engine.num_kv_blocks == 192
    decision = decision_of(tuned["entry"]["settings"], "entry")
    case = _native_case(tuned["key"], _test_requests(tuned, 150), engine, decision)
    assert list(native_vllm(decision, engine, (TenantConfig("all"),)).flags) == tuned["manifest"]["native"]["flags"]
    report = compare(case, load_cost_model(tuned["entry"]["provenance"]["cost_model"]), check=True)
    assert report.steps > 100 and report.agreement == 1.0, report.divergences[:3]


SMALL = EngineConfig(num_kv_blocks=192, block_size=16, max_num_seqs=32, max_num_batched_tokens=1024,
                     max_model_len=3072)  # fmt: skip


@pytest.mark.parametrize(
    "decision",
    [
        Decision(QueueOrder.FCFS, 512, 256, max_admit=UNLIMITED, kv_reserve=0.2),
        Decision(QueueOrder.FCFS, 1024, 128, max_admit=UNLIMITED, kv_reserve=0.05),
        Decision(QueueOrder.EDF, 256, 4096, max_admit=UNLIMITED, kv_reserve=0.4),  # one tenant: EDF is FCFS
    ],
)
def test_every_flag_of_the_native_mapping_schedules_as_llmsched(decision: Decision) -> None:
    """Each flag the mapping writes (budget, chunk threshold, watermark) on azure-conv under KV pressure; and the
    comparison can fail: the same flags without the watermark disagree with the setting's reserve."""
    from llmsched_env.adapters.vllm.parity import compare, scenario_requests

    cost = load_cost_model("llama3-8b-a100")
    requests = tuple(scenario_requests("azure-conv", 120, 1.0, 0, cost))
    case = _native_case("azure-conv", requests, SMALL, decision)
    report = compare(case, cost, check=True)
    assert report.steps > 100 and report.agreement == 1.0, report.divergences[:3]
    no_watermark = compare(replace(case, watermark=0.0), cost)
    assert no_watermark.agreement < 1.0


def test_the_written_adapter_config_plays_the_tuned_setting_in_vllm(tuned: dict[str, Any]) -> None:
    from llmsched_env.adapters.vllm.offline import fake_output, make_scheduler, to_vllm_request
    from llmsched_env.adapters.vllm.scheduler import TENANT_KEY, LLMSchedScheduler, SimClock

    manifest = tuned["manifest"]
    args = _serve_args(manifest["adapter"]["flags"])
    assert args.scheduler_cls == ADAPTER_CLS and args.scheduling_policy == "fcfs" and args.async_scheduling is False
    adapter = AdapterConfig.from_file(manifest["adapter"]["env"]["LLMSCHED_VLLM_CONFIG"])
    clock = SimClock()
    engine = _vllm_engine(args)
    assert engine == EngineConfig(**manifest["engine"])  # the adapter's vLLM has the limits the setting was tuned on
    s = make_scheduler(engine, scheduler_cls=LLMSchedScheduler, adapter=adapter, clock=clock,
                       chunk_cap=args.long_prefill_token_threshold, watermark=args.watermark,
                       reserve_full_prefill=args.scheduler_reserve_full_isl)  # fmt: skip
    assert s.active_policy == "tuned"
    setting = decision_of(tuned["entry"]["settings"], "entry")
    requests = _test_requests(tuned, 80)
    for r in requests:
        v = to_vllm_request(r, engine.block_size)
        v.sampling_params.extra_args = {TENANT_KEY: adapter.tenants[r.tenant].name}
        s.add_request(v)
    applied: set[Any] = set()
    finished: set[str] = set()
    for _ in range(20_000):
        if not s.has_requests():
            break
        out = s.schedule()
        applied.add(s._knobs_key[0])  # the decision whose knobs vLLM ran this step
        clock.now_s += 0.01
        for eco in s.update_from_output(out, fake_output(s, out)).values():
            finished.update(o.request_id for o in eco.outputs if o.finish_reason is not None)
    assert not s.has_requests() and s.num_steps > 50
    # the setting itself, or (nothing waiting: the mask leaves no order or admission to choose) its projection
    idle = replace(setting, order=QueueOrder.FCFS, max_admit=0)
    assert setting in applied and applied <= {setting, idle}
    assert s.llmsched_policy.decision == setting and s.stats.num_fallbacks == 0 and s.stats.num_decisions == s.num_steps
    assert len(finished) + s.num_shed == len(requests)
