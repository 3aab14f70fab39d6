"""What ``llmsched-tune`` writes to run a tuned entry in vLLM (``adapters.vllm.deploy``): the adapter config resolves
to the tuned policy with the entry's exact settings, the tenants and SLOs of the tune, and vLLM's own flags say
knob by knob what they run and lose. No vLLM here; tests/test_vllm_deploy.py runs the files in vLLM."""

from __future__ import annotations

import json
import math
import shlex
from dataclasses import replace
from pathlib import Path

import pytest

from llmsched_env.adapters.vllm.config import AdapterConfig
from llmsched_env.adapters.vllm.deploy import (
    ADAPTER_CLS,
    DEPLOY_FORMAT,
    adapter_flags,
    deploy_tuned_entry,
    deployment_dir,
    engine_flags,
    native_vllm,
    watermark_of,
)
from llmsched_env.commands import tune
from llmsched_env.common.outputs import shipped_folders
from llmsched_env.costs.loader import load_cost_model
from llmsched_env.decision.actions import UNLIMITED, ActionSpec
from llmsched_env.decision.planners.tuned import decision_of, load_tuned_table
from llmsched_env.engine.batch import Decision, QueueOrder
from llmsched_env.engine.config import SLO_CLASSES, EngineConfig, TenantConfig
from llmsched_env.workloads.library import get_scenario
from llmsched_env.workloads.trace_options import build_trace_scenario

ENGINE = EngineConfig(num_kv_blocks=1024, block_size=16, max_num_seqs=64, max_num_batched_tokens=4096,
                      max_model_len=8192)  # fmt: skip
ONE = (TenantConfig("chat"),)
TWO = (TenantConfig("chat"), TenantConfig("code", SLO_CLASSES["code"], priority=1))
COLUMNS = "arrival=t,prompt_len=in,output_len=out,tenant=who"
TINY = ["--reference", "sjf", "--seeds", "0,1", "--candidates", "0", "--rounds", "0"]


def _flags(flags: tuple[str, ...]) -> dict[str, str | None]:
    """``--name value`` pairs and bare ``--switch``es of a flag list, each named once."""
    out: dict[str, str | None] = {}
    i = 0
    while i < len(flags):
        assert flags[i].startswith("--") and flags[i] not in out, flags
        value = flags[i + 1] if i + 1 < len(flags) and not flags[i + 1].startswith("--") else None
        out[flags[i]] = value
        i += 1 if value is None else 2
    return out


def _targets(t: TenantConfig) -> tuple[str, float, float, float, int]:
    return t.name, t.slo.ttft_s, t.slo.tpot_s, t.weight, t.priority


def _lost(native: object) -> dict[str, str]:
    return {k.knob: k.lost for k in native.knobs if k.lost}  # type: ignore[attr-defined]


def test_a_fcfs_setting_maps_onto_vllms_own_flags_exactly() -> None:
    d = Decision(QueueOrder.FCFS, 2048, 512, max_admit=UNLIMITED, kv_reserve=0.1)
    native = native_vllm(d, ENGINE, ONE)
    flags = _flags(native.flags)
    assert native.exact and not _lost(native)
    assert flags["--scheduling-policy"] == "fcfs" and flags["--max-num-batched-tokens"] == "2048"
    assert flags["--long-prefill-token-threshold"] == "512" and flags["--max-num-seqs"] == "64"
    assert flags["--max-model-len"] == "8192" and flags["--block-size"] == "16"
    assert flags["--num-gpu-blocks-override"] == "1025"  # vLLM's null block besides the 1,024 usable ones
    w = float(flags["--watermark"] or "")
    assert int(w * 1025) == math.ceil(0.1 * 1024)  # vLLM keeps int(w * blocks) free; the engine ceil(r * usable)
    assert native.decision == Decision(QueueOrder.FCFS, 2048, 512, max_admit=UNLIMITED, kv_reserve=0.1)


def test_a_cap_that_cannot_bind_and_no_reserve_set_no_flag() -> None:
    native = native_vllm(Decision(QueueOrder.FCFS, 1024, 4096, max_admit=UNLIMITED), ENGINE, ONE)
    flags = _flags(native.flags)
    assert "--long-prefill-token-threshold" not in flags and "--watermark" not in flags and native.exact
    assert native.decision is not None and native.decision.chunk_cap == 1024  # the whole budget: the same batches
    budget_over_engine = native_vllm(Decision(QueueOrder.FCFS, 8192, 8192, max_admit=UNLIMITED), ENGINE, ONE)
    assert _flags(budget_over_engine.flags)["--max-num-batched-tokens"] == "4096"  # the engine's limit binds


def test_each_knob_without_a_flag_says_what_is_lost() -> None:
    d = Decision(QueueOrder.SJF, 2048, 2048, prefill_first=True, max_admit=4, kv_reserve=0.0, shed=True)
    native = native_vllm(d, ENGINE, TWO)
    lost = _lost(native)
    assert set(lost) == {"queue_order", "prefill_first", "max_admit", "shed"} and not native.exact
    assert "sjf has no vLLM policy" in lost["queue_order"] and "4 a step" in lost["max_admit"]
    assert _flags(native.flags)["--scheduling-policy"] == "fcfs"  # what runs instead
    # the decision the flags run: FCFS, decode-first, no admission cap, no shedding
    assert native.decision == Decision(QueueOrder.FCFS, 2048, 2048, max_admit=UNLIMITED)


@pytest.mark.parametrize(
    ("order", "tenants", "policy", "exact"),
    [
        (QueueOrder.EDF, (TenantConfig("a"), TenantConfig("b")), "fcfs", True),  # one TTFT target: arrival order
        (QueueOrder.EDF, TWO, "fcfs", False),
        (QueueOrder.VTC, ONE, "fcfs", True),
        (QueueOrder.VTC, TWO, "fcfs", False),
        (QueueOrder.PRIORITY_AGING, (TenantConfig("a"), TenantConfig("b")), "fcfs", True),
        (QueueOrder.PRIORITY_AGING, TWO, "priority", False),
        (QueueOrder.LPM, ONE, "fcfs", False),
    ],
)
def test_queue_orders_map_to_fcfs_where_they_order_as_it_does(
    order: QueueOrder, tenants: tuple[TenantConfig, ...], policy: str, exact: bool
) -> None:
    native = native_vllm(Decision(order, 2048, 2048, max_admit=UNLIMITED), ENGINE, tenants)
    assert _flags(native.flags)["--scheduling-policy"] == policy and native.exact == exact
    assert (native.decision is None) == (policy == "priority")  # strict priority: no rule of llmsched's engine


def test_a_budget_below_max_num_seqs_keeps_vllms_batched_tokens_and_caps_the_scheduled_ones() -> None:
    engine = EngineConfig(num_kv_blocks=1024, max_num_seqs=512, max_num_batched_tokens=4096)
    native = native_vllm(Decision(QueueOrder.FCFS, 256, 256, max_admit=UNLIMITED), engine, ONE)
    flags = _flags(native.flags)
    assert flags["--max-num-batched-tokens"] == "4096" and flags["--max-num-scheduled-tokens"] == "256"
    assert "decodes 256 of them" in _lost(native)["token_budget"] and native.decision is None


def test_the_watermark_keeps_the_blocks_the_engine_reserves() -> None:
    for blocks in (2, 63, 1000, 1024, 4096, 123_457):
        for reserve in (*ActionSpec.for_engine(ENGINE).kv_reserves, 0.333, 0.999):
            w = watermark_of(reserve, blocks)
            assert 0.0 <= w < 1.0 and int(w * (blocks + 1)) == math.ceil(reserve * blocks), (blocks, reserve)


def test_adapter_and_engine_flags() -> None:
    flags = _flags(tuple(adapter_flags(replace(ENGINE, reserve_full_prefill=False))))
    assert flags["--scheduler-cls"] == ADAPTER_CLS and flags["--scheduling-policy"] == "fcfs"
    assert "--no-async-scheduling" in flags and flags["--max-num-batched-tokens"] == "4096"
    assert "--no-scheduler-reserve-full-isl" in flags  # the first-chunk admission rule
    assert "--no-scheduler-reserve-full-isl" not in engine_flags(ENGINE)


def write_trace(path: Path, rows: int = 600) -> Path:
    lines = [f"{i * 0.05:.2f},{40 + i % 50},{5 + i % 9},{'ab'[i % 2]}" for i in range(rows)]
    path.write_text("t,in,out,who\n" + "\n".join(lines) + "\n")
    return path


def test_a_trace_tune_writes_an_adapter_config_that_plays_its_entry(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = write_trace(tmp_path / "mytrace.csv")
    table = tmp_path / "tables" / "tuned.json"
    opts = ["--trace", str(trace), "--trace-format", "generic", "--trace-columns", COLUMNS, "--tenant-slo",
            "a=chat,b=code", "--num-kv-blocks", "512", "--max-num-seqs", "32"]  # fmt: skip
    assert tune.main([*opts, *TINY, "--out", str(table)]) == 0
    ((key, entry),) = load_tuned_table(table).entries.items()
    folder = deployment_dir(table, key)
    assert folder == tmp_path / "tables" / "tuned.vllm" / key
    out = capsys.readouterr().out
    assert f"{key}: vLLM: adapter config {folder.absolute() / 'llmsched.yaml'}" in out
    # the config, loaded as the adapter loads it: the tuned policy, this entry, its exact settings
    resolved = AdapterConfig.from_file(folder / "llmsched.yaml").resolve()
    assert resolved.spec.baseline == "tuned" and resolved.scenario == key and not resolved.more
    played = load_tuned_table(resolved.spec.table)  # type: ignore[arg-type]
    assert dict(played.entries) == {key: entry}  # self-contained: a table of this entry alone
    engine = EngineConfig(**entry["provenance"]["engine"])
    assert engine.num_kv_blocks == 512 and engine.max_num_seqs == 32
    spec = ActionSpec.for_engine(engine)  # the adapter's action space on a vLLM with these limits
    assert played.decision(key, spec) == decision_of(entry["settings"], "entry")
    assert resolved.cost_model.name == load_cost_model(entry["provenance"]["cost_model"]).name
    config = AdapterConfig.from_file(folder / "llmsched.yaml")
    scenario = build_trace_scenario({"trace": trace, "trace_format": "generic", "trace_columns": COLUMNS,
                                     "tenant_slo": "a=chat,b=code"})  # fmt: skip
    tuned_for = scenario.source("val", resolved.cost_model).tenants
    assert [_targets(t) for t in config.tenants] == [_targets(t) for t in tuned_for] and len(tuned_for) == 2
    # vllm.json: both command lines, the native mapping as native_vllm gives it
    manifest = json.loads((folder / "vllm.json").read_text())
    assert manifest["format"] == DEPLOY_FORMAT and manifest["key"] == key and manifest["settings"] == entry["settings"]
    native = native_vllm(decision_of(entry["settings"], "entry"), engine, config.tenants)
    assert manifest["native"]["flags"] == list(native.flags) and manifest["native"]["exact"] == native.exact
    assert manifest["adapter"]["flags"] == adapter_flags(engine)
    words = shlex.split(manifest["adapter"]["command"])
    assert words[0] == f"LLMSCHED_VLLM_CONFIG={folder.absolute() / 'llmsched.yaml'}"
    assert words[1:] == ["vllm", "serve", "MODEL", *adapter_flags(engine)]
    assert shlex.split(manifest["native"]["command"]) == ["vllm", "serve", "MODEL", *native.flags]
    readme = (folder / "README.md").read_text()
    assert manifest["adapter"]["command"] in readme and manifest["native"]["command"] in readme
    assert all(f"| {k.knob} |" in readme for k in native.knobs)
    # a second tune of the same key replaces the files, the one-entry table still of one entry
    assert tune.main([*opts, *TINY, "--out", str(table)]) == 0
    assert list(load_tuned_table(folder / "tuned.json").entries) == [key]


def test_a_library_scenario_tune_writes_its_deployment_too(tmp_path: Path) -> None:
    table = tmp_path / "t.json"
    argv = ["--scenarios", "mixed-slo", "--num-requests", "60", "--reference", "sjf", "--seeds", "0", "--candidates",
            "0", "--rounds", "0", "--out", str(table)]  # fmt: skip
    assert tune.main(argv) == 0
    config = AdapterConfig.from_file(deployment_dir(table, "mixed-slo") / "llmsched.yaml")
    resolved = config.resolve()
    assert resolved.scenario == "mixed-slo" and resolved.spec.baseline == "tuned"
    tuned_for = get_scenario("mixed-slo").source("val", resolved.cost_model).tenants
    assert [_targets(t) for t in config.tenants] == [_targets(t) for t in tuned_for] and len(tuned_for) == 4


def test_nothing_is_written_inside_a_shipped_folder(tmp_path: Path) -> None:
    table = shipped_folders()[0] / "no-such-table.json"
    entry = {"settings": {}, "provenance": {}}
    lines = deploy_tuned_entry(table, "mixed-slo", entry, None)  # type: ignore[arg-type]
    assert lines == [f"mixed-slo: no vLLM deployment written inside the shipped folder {table.parent.absolute()}"]
    assert not deployment_dir(table, "mixed-slo").parent.exists()
