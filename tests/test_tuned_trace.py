"""The user's tuned rival on a trace of their own: ``llmsched-tune --trace`` writes an entry keyed by the trace's
content and options into the user table (never the shipped one), ``llmsched-evaluate --trace ... --policies
tuned`` plays it, and a missing entry is one line giving the exact command that makes it."""

from __future__ import annotations

import hashlib
import json
import pickle
import re
import shlex
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gymnasium
import pytest

from agents.teacher import check_teacher
from baselines.tuned import SHIPPED_TABLE
from llmsched_env.commands import evaluate, tune
from llmsched_env.decision.planners.tuned import (
    TUNED_FORMAT,
    USER_TABLE_ENV,
    find_trace_entry,
    load_tuned_table,
    settings_of,
    trace_key,
    trace_tables,
    user_table,
)
from llmsched_env.workloads.trace_options import build_trace_scenario

ROOT = Path(__file__).resolve().parents[1]
COLUMNS = "arrival=t,prompt_len=in,output_len=out,tenant=who"
# the smallest search that runs: one reference, one seed, the heuristics' settings only, no local search
TINY = ["--reference", "sjf", "--seeds", "0", "--candidates", "0", "--rounds", "0"]
SETTINGS = {"queue_order": "edf", "token_budget": 1024, "chunk_cap": 256, "prefill_first": False,
            "max_admit": "unlimited", "kv_reserve": 0.1, "shed": True}  # fmt: skip


@pytest.fixture(autouse=True)
def user_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The user table inside ``tmp_path`` (through ``XDG_DATA_HOME``); the shipped table untouched by every test."""
    monkeypatch.delenv(USER_TABLE_ENV, raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    before = (SHIPPED_TABLE.read_bytes(), SHIPPED_TABLE.stat().st_mtime_ns)
    yield tmp_path / "xdg" / "llmsched" / "tuned.json"
    assert (SHIPPED_TABLE.read_bytes(), SHIPPED_TABLE.stat().st_mtime_ns) == before


def write_trace(path: Path, shift: int = 0) -> Path:
    rows = [f"{i * 0.05:.2f},{40 + (i + shift) % 50},{5 + i % 9},{'ab'[i % 2]}" for i in range(600)]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("t,in,out,who\n" + "\n".join(rows) + "\n")
    return path


def key_of(trace: Path, limits: dict[str, int] | None = None, **kwargs: Any) -> str:
    opts = {"trace": trace, "trace_format": "generic", "trace_columns": COLUMNS}
    opts.update({k: v for k, v in kwargs.items() if k.startswith(("trace_", "tenant_"))})
    rest = {k: v for k, v in kwargs.items() if k not in opts}
    return trace_key(opts, build_trace_scenario(opts, limits), **rest).key


def cli_options(trace: Path, *extra: str) -> list[str]:
    return ["--trace", str(trace), "--trace-format", "generic", "--trace-columns", COLUMNS, *extra]


# ------------------------------------------------------------------------------------------ the key
def test_the_key_names_the_trace_and_follows_its_content_and_every_workload_option(tmp_path: Path) -> None:
    trace = write_trace(tmp_path / "mytrace.csv")
    base = key_of(trace, tenant_slo="a=chat,b=code")
    assert re.fullmatch(r"mytrace@[0-9a-f]{12}", base)
    assert key_of(trace, tenant_slo="a=chat,b=code") == base  # stable
    assert key_of(trace, tenant_slo="b=code, a=chat") == base  # the order of the pairs is not the workload
    copy = tmp_path / "elsewhere" / "mytrace.csv"
    copy.parent.mkdir()
    shutil.copy(trace, copy)
    assert key_of(copy, tenant_slo="a=chat,b=code") == base  # the content counts, not where the file lies
    changed = {
        "content": key_of(write_trace(tmp_path / "other" / "mytrace.csv", shift=1), tenant_slo="a=chat,b=code"),
        "rate": key_of(trace, tenant_slo="a=chat,b=code", trace_rate=8.0),
        "another rate": key_of(trace, tenant_slo="a=chat,b=code", trace_rate=9.0),
        "tenant SLO": key_of(trace, tenant_slo="a=chat,b=chat"),
        "default SLO": key_of(trace, tenant_slo="a=chat,b=code", trace_slo="batch"),
        "KV blocks": key_of(trace, {"num_kv_blocks": 2048}, tenant_slo="a=chat,b=code"),
        "batch tokens": key_of(trace, {"max_num_batched_tokens": 2048}, tenant_slo="a=chat,b=code"),
        "cost model": key_of(trace, tenant_slo="a=chat,b=code", cost_model="llama3-8b-a100"),
        "time unit": key_of(trace, tenant_slo="a=chat,b=code", trace_time_unit="ms"),
    }
    assert base not in changed.values() and len(set(changed.values())) == len(changed), changed

    preset = ROOT / "llmsched_env" / "costs" / "presets" / "llama3-8b-a100.json"  # a cost model by file: its content
    files = [tmp_path / "m1" / "model.json", tmp_path / "m2" / "model.json", tmp_path / "m3" / "model.json"]
    for f in files:
        f.parent.mkdir()
        shutil.copy(preset, f)
    files[2].write_text(preset.read_text().replace('"overhead_s": 0.0006', '"overhead_s": 0.0007'))
    by_file = [key_of(trace, tenant_slo="a=chat,b=code", cost_model=str(f)) for f in files]
    assert by_file[0] == by_file[1] != by_file[2]


def test_the_user_table_follows_its_variable_then_xdg_then_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, user_dir: Path
) -> None:
    assert user_table() == user_dir
    monkeypatch.setenv("XDG_DATA_HOME", "")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert user_table() == tmp_path / "home" / ".local" / "share" / "llmsched" / "tuned.json"
    monkeypatch.setenv(USER_TABLE_ENV, str(tmp_path / "mine.json"))
    assert user_table() == tmp_path / "mine.json"
    assert trace_tables(None) == [tmp_path / "mine.json", SHIPPED_TABLE]
    assert trace_tables(tmp_path / "t.json") == [tmp_path / "t.json"]


def test_the_first_table_holding_the_key_wins(tmp_path: Path) -> None:
    tables = []
    for name, order in (("a.json", "edf"), ("b.json", "sjf")):
        entry = {"settings": {**SETTINGS, "queue_order": order}, "provenance": {}}
        (tmp_path / name).write_text(json.dumps({"format": TUNED_FORMAT, "version": 1, "scenarios": {"t@1": entry}}))
        tables.append(tmp_path / name)
    found = find_trace_entry("t@1", [tmp_path / "none.json", *tables])
    assert found is not None and found[0] == tables[0] and found[1]["settings"]["queue_order"] == "edf"
    assert find_trace_entry("t@2", tables) is None


# ------------------------------------------------------------------------------------------ tune, then evaluate
def test_a_trace_is_tuned_on_val_into_the_user_table_and_evaluate_plays_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, user_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = write_trace(tmp_path / "mytrace.csv")
    opts = cli_options(trace, "--tenant-slo", "a=chat,b=code")
    search = [*TINY, "--seeds", "0,1"]
    splits: list[str] = []
    make = gymnasium.make

    def spy(*args: Any, **kwargs: Any) -> Any:
        splits.append(kwargs.get("split", "train"))
        return make(*args, **kwargs)

    monkeypatch.setattr(gymnasium, "make", spy)
    assert tune.main([*opts, *search]) == 0
    monkeypatch.setattr(gymnasium, "make", make)
    assert splits and set(splits) == {"val"}  # every episode of the search on the trace's val part
    table = load_tuned_table(user_dir)
    (key,) = table.entries
    prov = table.entries[key]["provenance"]
    assert re.fullmatch(r"mytrace@[0-9a-f]{12}", key) and prov["split"] == "val"
    assert prov["command"] == shlex.join(["llmsched-tune", *opts, *search])
    trace_prov = prov["trace"]
    assert trace_prov["key"] == key and trace_prov["sha256"] == hashlib.sha256(trace.read_bytes()).hexdigest()
    assert trace_prov["tenant_slo"] == ["a=chat", "b=code"]
    val = build_trace_scenario({"trace": trace, "trace_format": "generic", "trace_columns": COLUMNS}).make_source(
        "val", 1.0
    )
    assert prov["seeds"] == [0, 1] and prov["num_requests"] == len(val.trace) // 2  # a disjoint window per seed
    out = capsys.readouterr().out
    assert f"{key}: wrote {user_dir}" in out
    # 45-request val windows last about 2 s: the probe goes past the sustained cap to rank settings at all, and
    # says so (a reported capacity never does: evaluate's search stops there)
    assert prov["probe_sustained"] is False and "the probe load is past" in out and prov["probe_load"] > 0.5

    opts += ["--num-requests", "50"]  # test windows of another size: the same workload, the same entry
    config = evaluate.parse([*opts, "--policies", "tuned,sjf"]).config
    assert config.split == "test"
    spec = pickle.loads(pickle.dumps(config.policies[0]))  # workers get the entry itself
    env = config.make_env(config.scenarios[0], 1.0)
    assert spec.name == "tuned" and settings_of(spec.make(env, 0).decision) == table.entries[key]["settings"]
    assert evaluate.main([*opts, "--policies", "tuned,sjf", "--capacity", "--seeds", "0", "--no-progress"]) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines()]
    assert any(row[:2] == ["tuned", "mytrace"] and float(row[3]) > 0 for row in rows if len(row) > 3)


def test_a_missing_entry_is_one_line_giving_the_command_that_makes_it(
    tmp_path: Path, user_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = write_trace(tmp_path / "mytrace.csv")
    opts = cli_options(trace, "--trace-rate", "8", "--tenant-slo", "b=code", "--num-requests", "50")
    opts += ["--max-num-seqs", "64", "--cost-model", "llama3-8b-a100"]
    with pytest.raises(SystemExit) as info:
        evaluate.main([*opts, "--policies", "sjf,tuned", "--no-progress"])
    err = capsys.readouterr().err.strip().splitlines()[-1]
    command = shlex.join(["llmsched-tune", *cli_options(trace), "--trace-rate", "8.0", "--tenant-slo", "b=code",
                          "--cost-model", "llama3-8b-a100", "--max-num-seqs", "64"])  # fmt: skip
    assert info.value.code == 2 and ": error: policy 'tuned': no tuned settings for trace " in err
    assert f" in {user_dir} or {SHIPPED_TABLE}; " in err
    assert err.endswith(f"make them (on the trace's val part) with: {command}")
    assert not user_dir.exists()

    assert tune.main([*shlex.split(command)[1:], *TINY]) == 0  # the command given makes the entry asked for
    capsys.readouterr()
    assert evaluate.main([*opts, "--policies", "sjf,tuned", "--no-progress"]) == 0
    assert any(line.startswith("tuned ") for line in capsys.readouterr().out.splitlines())
    with pytest.raises(SystemExit):  # settings tuned for one rate are not played at another
        evaluate.main([*opts, "--trace-rate", "9", "--policies", "tuned", "--no-progress"])
    assert "--trace-rate 9.0" in capsys.readouterr().err

    other = tmp_path / "other.json"  # tuned=TABLE.json looks in that table alone, and says --out
    other.write_text(json.dumps({"format": TUNED_FORMAT, "version": 1, "scenarios": {}}))
    with pytest.raises(SystemExit):
        evaluate.main([*opts, "--policies", f"tuned={other}", "--no-progress"])
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert f" in {other}; " in err and err.endswith(f"{command} --out {other}")


def test_bad_tables_and_teacher_spellings_are_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = write_trace(tmp_path / "mytrace.csv")
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    with pytest.raises(SystemExit) as info:  # refused before the search, not after it
        tune.main([*cli_options(trace), *TINY, "--out", str(bad)])
    assert info.value.code == 2 and "not a tuned-settings table" in capsys.readouterr().err
    with pytest.raises(SystemExit) as info:
        evaluate.main(["--scenarios", "default", "--policies", "tuned:mixed-slo", "--no-progress"])
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert info.value.code == 2 and "training teacher's candidate" in err and "--policies tuned" in err
    check_teacher("tuned,tuned:mixed-slo")  # training keeps tuned:SCENARIO as a teacher


def test_fitted_traffic_is_tuned_beside_the_replay_and_each_plays_its_own_entry(
    tmp_path: Path, user_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--fitted-traffic``: one entry per scenario (the replay's, the fitted traffic's, under keys of their own);
    a missing one is one line giving the tune command with ``--fitted-traffic``; evaluate binds each scenario's."""
    trace = write_trace(tmp_path / "mytrace.csv")
    opts = cli_options(trace)
    assert tune.main([*opts, *TINY]) == 0  # the replay's entry alone
    capsys.readouterr()
    with pytest.raises(SystemExit):
        evaluate.main([*opts, "--fitted-traffic", "--num-requests", "50", "--policies", "tuned", "--no-progress"])
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "(key mytrace-fitted@" in err and err.endswith("--fitted-traffic")
    assert tune.main([*opts, "--fitted-traffic", *TINY]) == 0
    entries = load_tuned_table(user_dir).entries
    assert sorted(k.split("@")[0] for k in entries) == ["mytrace", "mytrace-fitted"]
    fitted_key = next(k for k in entries if k.startswith("mytrace-fitted@"))
    fitted = entries[fitted_key]["provenance"]
    replay = next(e["provenance"] for k, e in entries.items() if k != fitted_key)
    assert fitted["trace"]["traffic"] == "fitted"
    # the replay ranks settings on bursts past where its short val windows stop being sustained; the fitted traffic
    # grows them until the probe load is sustained
    assert not replay["probe_sustained"] and fitted["probe_sustained"]
    assert fitted["num_requests"] > replay["num_requests"]
    config = evaluate.parse([*opts, "--fitted-traffic", "--num-requests", "50", "--policies", "tuned"]).config
    (spec,) = config.policies
    for scenario in config.scenarios:
        env = config.make_env(scenario, 1.0)
        key = next(k for k in entries if k.split("@")[0] == scenario.name)
        assert settings_of(spec.make(env, 0).decision) == entries[key]["settings"]


def test_slos_no_load_can_meet_end_the_tune_in_one_line_without_the_usage_block(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = write_trace(tmp_path / "t.csv")
    # a TTFT of a microsecond: no request meets it at any load, so there is no load to tune at
    assert tune.main([*cli_options(trace, "--tenant-slo", "a=0.000001:1,b=0.000001:1"), *TINY]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "there is no load to tune at" in err[0] and "usage:" not in err[0]
