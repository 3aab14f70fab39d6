"""User traces keep what they hold: tenants and their SLO classes, episodes that fit the split, engine limits
from the command line, ``--describe`` on the episode asked for; each bad trace is one line naming the file."""

from __future__ import annotations

import re
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from llmsched_env.commands.evaluate import main, parse
from llmsched_env.commands.evaluate_args import ENGINE_LIMITS, as_flags
from llmsched_env.engine.config import SLO_CLASSES
from llmsched_env.workloads.describe import describe_scenario
from llmsched_env.workloads.library import get_scenario
from llmsched_env.workloads.scenarios import scenario_from_trace
from llmsched_env.workloads.trace_options import ENGINE_LIMIT_FIELDS, build_trace_scenario

COLUMNS = "arrival=t,prompt_len=in,output_len=out,tenant=who"
TENANTS = ["web", "api", "batch"]  # the file below cycles through them


def _tenant_trace(path: Path, n: int = 300) -> Path:
    rows = ["t,in,out,who"] + [f"{i * 0.2:.1f},{40 + i % 50},{5 + i % 9},{TENANTS[i % 3]}" for i in range(n)]
    path.write_text("\n".join(rows) + "\n")
    return path


def _generic(trace: Path, *extra: str) -> list[str]:
    return ["--trace", str(trace), "--trace-format", "generic", "--trace-columns", COLUMNS, *extra]


def _usage_line(capsys: pytest.CaptureFixture, argv: list[str]) -> str:
    with pytest.raises(SystemExit) as exc:
        parse(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("llmsched-evaluate: error: ") and "Traceback" not in "".join(err)
    return err[-1]


def test_a_tenant_column_gives_that_many_tenants_with_their_slo_classes(tmp_path: Path) -> None:
    trace = _tenant_trace(tmp_path / "mix.csv")
    config = parse(_generic(trace, "--tenant-slo", "api=interactive,batch=2:0.5", "--num-requests", "40")).config
    env = config.make_env(config.scenarios[0], 1.0, schema=1).unwrapped  # schema 1 names the tenants
    assert [t.name for t in env.tenants] == TENANTS
    assert [t.slo.name for t in env.tenants] == ["chat", "interactive", "2:0.5"]
    assert (env.tenants[2].slo.ttft_s, env.tenants[2].slo.tpot_s) == (2.0, 0.5)
    requests = env.episode_requests(seed=0)  # the test part holds one window of 40
    assert len(requests) == 40 and {r.tenant for r in requests} == {0, 1, 2}
    obs, _ = env.reset(seed=0)
    assert any(name.startswith("tenant/batch/") for name in env.obs_names) and np.all(np.isfinite(obs))
    env.close()


def test_tenant_codes_follow_the_rows_through_the_replay(tmp_path: Path) -> None:
    trace = _tenant_trace(tmp_path / "mix.csv")
    sc = scenario_from_trace(
        trace,
        "generic",
        tenant_slos={"batch": "batch"},
        columns={"arrival": "t", "prompt_len": "in", "output_len": "out", "tenant": "who"},
    )
    source = sc.source("test")
    assert [t.slo.name for t in source.tenants] == ["chat", "chat", "batch"]
    part = source.trace  # type: ignore[attr-defined]
    requests = source.sample(np.random.default_rng(0), len(part), 1.0)
    assert [r.tenant for r in requests] == part.tenant.tolist()
    assert [r.prompt_len for r in requests] == part.prompt_len.tolist()


def test_the_library_scenarios_keep_one_tenant() -> None:
    env = gym.make("LLMSched-v1", scenario="azure-conv", split="test", num_requests=20).unwrapped
    assert len(env.tenants) == 1 and {r.tenant for r in env.episode_requests(0)} == {0}


@pytest.mark.parametrize(
    ("extra", "expect"),
    [
        (["--tenant-slo", "nobody=chat"], "no tenant 'nobody' in the trace's tenant column; its tenants are 'web'"),
        (["--tenant-slo", "api=fast"], "--tenant-slo: unknown SLO class 'fast'"),
        (["--tenant-slo", "api"], "--tenant-slo: tenant 'api' is not NAME=CLASS"),
        (["--tenant-slo", "api=chat,api=batch"], "--tenant-slo: tenant 'api' is given twice"),
        (["--tenant-slo", "api=0:1"], "--tenant-slo: unknown SLO class '0:1'"),
        (["--trace-slo", "slow"], "--trace-slo: unknown SLO class 'slow'"),
    ],
)
def test_bad_tenant_slos_are_one_usage_line(
    extra: list[str], expect: str, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    assert expect in _usage_line(capsys, _generic(_tenant_trace(tmp_path / "mix.csv"), *extra))


def test_tenant_slos_for_a_trace_without_a_tenant_column_name_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    trace = tmp_path / "plain.csv"
    trace.write_text("t,in,out\n" + "".join(f"{i},{10 + i},3\n" for i in range(20)))
    argv = [
        "--trace",
        str(trace),
        "--trace-format",
        "generic",
        "--trace-columns",
        "arrival=t,prompt_len=in,output_len=out",
    ]
    line = _usage_line(capsys, [*argv, "--tenant-slo", "a=chat"])
    assert f"{trace}: SLO classes given for tenant(s) 'a' but the trace has no tenant column" in line
    config = parse([*argv, "--trace-slo", "batch"]).config
    assert [t.name for t in config.make_env(config.scenarios[0], 1.0).unwrapped.tenants] == ["batch"]


def _bursty_azure(path: Path) -> Path:
    """Most requests in a burst at the start: the val and test parts (the last 30% of the time) hold few rows."""
    stamps = [f"2023-11-16 18:00:{i // 10:02d}.{i % 10}" for i in range(90)]
    stamps += [f"2023-11-16 18:{m:02d}:00.0" for m in range(1, 11)]
    rows = "".join(f"{s},{30 + i},{4 + i % 3}\n" for i, s in enumerate(stamps))
    path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n" + rows)
    return path


def test_the_default_episode_fits_a_bursty_trace_and_a_larger_one_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    trace = _bursty_azure(tmp_path / "bursty.csv")
    argv = ["--trace", str(trace), "--trace-format", "azure"]
    config = parse(argv).config
    sc = config.scenarios[0]
    val_rows, test_rows = (len(sc.source(split).trace) for split in ("val", "test"))  # type: ignore[attr-defined]
    assert sc.num_requests == val_rows == test_rows == 2  # minutes 7-8 (val) and 9-10 (test) of the 10
    assert main([*argv, "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "bursty" in out
    line = _usage_line(capsys, [*argv, "--num-requests", "50"])
    assert f"{trace.resolve()}: an episode of 50 requests does not fit in the test split's 2 requests" in line
    train = parse([*argv, "--num-requests", "50", "--split", "train"]).config  # the training part holds 96
    assert train.num_requests == 50


def test_too_few_rows_or_equal_times_are_one_line_naming_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    short = tmp_path / "short.csv"
    short.write_text("t,in,out\n0,5,5\n1,5,5\n2,5,5\n")
    cols = ["--trace-format", "generic", "--trace-columns", "arrival=t,prompt_len=in,output_len=out"]
    line = _usage_line(capsys, ["--trace", str(short), *cols])
    assert f"{short}: the trace's 3 request(s) leave its val part (the next 15%) 0 request(s)" in line
    same = tmp_path / "same.csv"
    same.write_text("t,in,out\n" + "5,5,5\n" * 40)
    line = _usage_line(capsys, ["--trace", str(same), *cols, "--trace-rate", "3"])
    assert f"{same}: all 40 requests arrive at the same time" in line
    lengths = tmp_path / "lens.csv"
    lengths.write_text("in,out,who\n5,5,a\n6,6,a\n7,7,b\n")
    argv = ["--trace", str(lengths), "--trace-format", "generic", "--trace-rate", "2"]
    line = _usage_line(capsys, [*argv, "--trace-columns", "prompt_len=in,output_len=out,tenant=who"])
    assert f"{lengths}: tenant 'a' has 2 row(s), too few to give each of its train, val and test parts a row" in line


def test_a_length_only_trace_keeps_its_tenants_and_their_shares(tmp_path: Path) -> None:
    lengths = tmp_path / "lens.csv"
    lengths.write_text("in,out,who\n" + "".join(f"{10 + i},{3 + i % 4},{'ab'[i % 4 == 0]}\n" for i in range(40)))
    sc = scenario_from_trace(
        lengths,
        "generic",
        rate_rps=8.0,
        tenant_slos={"b": SLO_CLASSES["batch"]},
        columns={"prompt_len": "in", "output_len": "out", "tenant": "who"},
    )
    source = sc.source("train")
    assert [(t.name, t.slo.name) for t in source.tenants] == [("b", "batch"), ("a", "chat")]
    assert source.nominal_rate_rps() == pytest.approx(8.0)
    requests = source.sample(np.random.default_rng(0), 400, 1.0)
    share_b = np.mean([r.tenant == 0 for r in requests])
    assert 0.15 < share_b < 0.35  # 10 of the 40 rows are b's


def test_engine_limits_reach_trace_and_library_scenarios(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    limits = ["--num-kv-blocks", "512", "--max-num-seqs", "16", "--max-num-batched-tokens", "1024"]
    config = parse(["--scenarios", "default,azure-conv", *limits, "--max-model-len", "2048"]).config
    for sc in config.scenarios:
        env = config.make_env(sc, 1.0).unwrapped
        e = env.engine_config
        assert (e.num_kv_blocks, e.max_num_seqs, e.max_num_batched_tokens, e.max_model_len) == (512, 16, 1024, 2048)
        env.close()
    assert get_scenario("azure-conv").engine.num_kv_blocks != 512  # the library itself is untouched
    trace = _tenant_trace(tmp_path / "mix.csv")
    config = parse(_generic(trace, *limits)).config
    assert config.make_env(config.scenarios[0], 1.0).unwrapped.engine_config.max_num_seqs == 16
    line = _usage_line(capsys, ["--max-num-seqs", "512", "--max-num-batched-tokens", "256"])
    assert "scenario 'default': EngineConfig.max_num_batched_tokens must be >= max_num_seqs" in line
    line = _usage_line(capsys, _generic(trace, "--max-num-seqs", "512", "--max-num-batched-tokens", "256"))
    assert "EngineConfig.max_num_batched_tokens must be >= max_num_seqs" in line
    assert "must be >= 1" in _usage_line(capsys, ["--num-kv-blocks", "0"])


def test_describe_honours_num_requests_and_reports_rejections(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    trace = tmp_path / "long.csv"
    trace.write_text("t,in,out\n" + "".join(f"{i * 0.5},{100 if i % 4 else 3000},10\n" for i in range(400)))
    cols = ["--trace-format", "generic", "--trace-columns", "arrival=t,prompt_len=in,output_len=out"]
    assert main(["--trace", str(trace), *cols, "--describe", "--num-requests", "40", "--max-model-len", "2048"]) == 0
    out = capsys.readouterr().out
    assert "test episode at load 1.0: 40 requests" in out
    assert "rejected on arrival: 25.0% longer than max_model_len 2048, 0.0% more than the KV pool's" in out
    assert main(["--trace", str(trace), *cols, "--describe", "--num-kv-blocks", "100"]) == 0
    out = capsys.readouterr().out
    assert "0.0% longer than max_model_len 16384, 25.0% more than the KV pool's 1600 tokens" in out
    d = describe_scenario(get_scenario("default"), num_requests=30, cost_model="llama3-8b-a100")
    assert d["num_requests"] == 30 and d["cost_model"] == "llama3-8b-a100"


def test_the_env_refuses_an_episode_larger_than_the_trace_part_when_made() -> None:
    message = r"AzureLLMInferenceTrace_conv\.csv\.gz: an episode of 900000 requests does not fit in the test split"
    with pytest.raises(ValueError, match=message):
        gym.make("LLMSched-v1", scenario="azure-conv", split="test", num_requests=900_000)
    with pytest.raises(ValueError, match=r"an episode of 900000 requests does not fit in the train split"):
        gym.make("LLMSchedCluster-v0", scenario="cluster-azure-conv-4", num_replicas=2, num_requests=900_000)


def test_an_episode_too_large_for_memory_is_refused_when_made(capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(ValueError, match=r"LLMSchedEnv\.num_requests must be at most 1000000, got 1000001"):
        gym.make("LLMSched-v1", scenario="bursty", num_requests=1_000_001)
    assert "--num-requests must be at most 1000000" in _usage_line(capsys, ["--num-requests", "10000000"])


def test_the_library_builds_a_trace_scenario_and_names_the_option_at_fault(tmp_path: Path) -> None:
    trace = _tenant_trace(tmp_path / "mix.csv")
    options = {"trace": trace, "trace_format": "generic", "trace_columns": COLUMNS}
    scenario = build_trace_scenario({**options, "tenant_slo": "batch=batch"}, {"max_num_seqs": 16})
    assert scenario.engine.max_num_seqs == 16
    assert {t.name: t.slo.name for t in scenario.source("test").tenants}["batch"] == "batch"
    for bad, expect in [
        ({"trace_format": "nope"}, "trace_format: expected one of"),
        ({"trace_slo": "slow"}, "trace_slo: unknown SLO class 'slow'"),
        ({"trace_columns": ""}, "trace_columns: the generic format needs them"),
        ({"trace_columns": "arrival"}, "trace_columns: pair 'arrival' is not field=column"),
        ({"rate": 2.0}, "unknown trace option(s) ['rate']"),
    ]:
        with pytest.raises(ValueError, match=re.escape(expect)):
            build_trace_scenario({**options, **bad})
    with pytest.raises(ValueError, match=re.escape("unknown engine limit(s) ['kv_blocks']")):
        build_trace_scenario(options, {"kv_blocks": 8})
    assert as_flags("tenant_slo: x; trace_columns: y") == "--tenant-slo: x; --trace-columns: y"
    assert set(ENGINE_LIMITS) == set(ENGINE_LIMIT_FIELDS)  # the command line's limits are the library's
