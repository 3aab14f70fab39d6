"""The ``tuned`` baseline and its search: the search sees only ``val`` and is deterministic, ``tuned`` plays
exactly the knobs its table stores, and every bad table gets a one-line error naming what is wrong."""

from __future__ import annotations

import json
import pickle
import re
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import gymnasium
import numpy as np
import pytest

import baselines
import llmsched_env  # noqa: F401  (registers LLMSched-v0)
from baselines.tuned import SHIPPED_TABLE, TunedPolicy
from llmsched_env.commands import evaluate, tune
from llmsched_env.decision.actions import UNLIMITED
from llmsched_env.decision.planners.space import neighbours, random_candidates
from llmsched_env.decision.planners.tuned import (
    SETTING_NAMES,
    TUNED_FORMAT,
    decision_of,
    load_tuned_table,
    settings_of,
    shipped_table,
    write_tuned_entries,
)
from llmsched_env.engine.batch import Decision, QueueOrder
from llmsched_env.evaluation import EvalConfig, resolve_policy, run_cell

if sys.version_info >= (3, 11):
    import tomllib
else:  # pytest itself depends on tomli below Python 3.11
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
SETTINGS = {"queue_order": "edf", "token_budget": 1024, "chunk_cap": 256, "prefill_first": False,
            "max_admit": "unlimited", "kv_reserve": 0.1, "shed": True}  # fmt: skip
# the smallest search that still runs every step: one reference, two seeds, two random settings, one round
TINY = ["--reference", "sjf", "--seeds", "0,1", "--candidates", "2", "--rounds", "1", "--num-requests", "60"]


def table_file(path: Path, scenarios: dict[str, Any]) -> Path:
    entries = {name: {"settings": s, "provenance": {"split": "val"}} for name, s in scenarios.items()}
    path.write_text(json.dumps({"format": TUNED_FORMAT, "version": 1, "scenarios": entries}))
    return path


def ctx_of(scenario: str, **engine: int) -> Any:
    env = gymnasium.make("LLMSched-v1", scenario=scenario, split="val", engine=engine or None)
    return env.unwrapped.policy_context()


# ------------------------------------------------------------------------------------------ the search
@pytest.mark.slow
def test_the_search_runs_on_val_only_and_is_deterministic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    splits: list[str] = []
    make = gymnasium.make

    def spy(*args: Any, **kwargs: Any) -> Any:
        splits.append(kwargs.get("split", "train"))  # the env's own default when none is given
        return make(*args, **kwargs)

    monkeypatch.setattr(gymnasium, "make", spy)
    tables = []
    for name in ("a.json", "b.json"):
        assert tune.main(["--scenarios", "default", *TINY, "--out", str(tmp_path / name)]) == 0
        tables.append(json.loads((tmp_path / name).read_text()))
    assert splits and set(splits) == {"val"}
    entries = [t["scenarios"]["default"] for t in tables]
    for entry in entries:
        prov = entry["provenance"]
        assert prov["split"] == "val" and prov["seeds"] == [0, 1] and prov["num_requests"] == 60
        assert prov["search"]["num_episodes"] > 0 and prov["probe_load"] > 0
        assert prov["confirm"]["seeds"] == [2, 3] and prov["confirm"]["fresh"]  # fresh val windows, never test
        assert prov["command"].startswith("python -m llmsched_env.commands.tune --scenarios default")
        del prov["date"], prov["wall_s"]  # the only fields that may differ between two runs
    assert entries[0] == entries[1]
    decision_of(entries[0]["settings"], "the tuned entry")  # a well-formed setting


def test_neighbours_move_one_knob_and_random_settings_follow_their_seed() -> None:
    spec = ctx_of("default").action_spec
    d = Decision(order=QueueOrder.EDF, token_budget=1024, chunk_cap=128, max_admit=UNLIMITED, kv_reserve=0.0)
    moves = neighbours(d, spec)
    assert d not in moves and len(moves) == len(set(moves))
    for m in moves:
        assert sum(a != b for a, b in zip(settings_of(m).values(), settings_of(d).values(), strict=True)) == 1
    assert {m.token_budget for m in moves} == {512, 1024, 2048} and {m.chunk_cap for m in moves} == {128, 256}
    assert {m.max_admit for m in moves} == {32, UNLIMITED} and {m.order for m in moves} == set(QueueOrder)
    draws = random_candidates(spec, 20, 3)
    assert draws == random_candidates(spec, 20, 3) != random_candidates(spec, 20, 4)
    assert all(c.max_admit > 0 for c in draws)  # a static hold is left out of the search


# ------------------------------------------------------------------------------------------ the table
def test_tuned_plays_every_shipped_entry_exactly() -> None:
    table = load_tuned_table(SHIPPED_TABLE)
    assert table.entries, f"{SHIPPED_TABLE} has no scenario"
    assert shipped_table() == SHIPPED_TABLE
    for name, entry in table.entries.items():
        assert entry["provenance"]["split"] == "val"
        ctx = ctx_of(name)
        policy = baselines.make("tuned", ctx, seed=0)
        assert isinstance(policy, TunedPolicy)
        spec = ctx.action_spec
        action = policy.act(np.zeros(len(ctx.obs_names), np.float32), np.ones(spec.mask_size, dtype=bool))
        assert settings_of(spec.decode(action)) == entry["settings"], name


def test_pyproject_ships_the_table() -> None:
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "tuned.json" in data["tool"]["setuptools"]["package-data"]["baselines"]
    assert "llmsched-tune" in data["project"]["scripts"]


def test_missing_scenario_and_empty_context_say_what_to_do(tmp_path: Path) -> None:
    path = table_file(tmp_path / "t.json", {"default": SETTINGS})
    with pytest.raises(ValueError) as info:
        TunedPolicy(ctx_of("mixed-slo"), table=path)
    expected = (f"no tuned settings for scenario 'mixed-slo' in {path}; tune it with: "
                f"python -m llmsched_env.commands.tune --scenarios mixed-slo --out {path} (a library scenario), or "
                "python -m llmsched_env.commands.tune --trace FILE [trace options] and then --policies tuned with "
                "the same --trace options (a trace of your own)")  # fmt: skip
    assert str(info.value) == expected and "\n" not in expected
    with pytest.raises(ValueError, match="no tuned settings for scenario 'nope' in .*tuned.json; tune it with: "
                       r"python -m llmsched_env.commands.tune --scenarios nope \(a library scenario\)"):  # fmt: skip
        TunedPolicy(replace(ctx_of("default"), scenario="nope"))
    with pytest.raises(ValueError, match="names none"):
        baselines.make("tuned", replace(ctx_of("default"), scenario=""))


@pytest.mark.parametrize(
    ("knob", "value"), [("token_budget", 3000), ("chunk_cap", 8192), ("max_admit", 3), ("kv_reserve", 0.3)]
)
def test_a_stored_value_outside_the_options_is_refused_by_name(tmp_path: Path, knob: str, value: Any) -> None:
    path = table_file(tmp_path / "t.json", {"default": {**SETTINGS, knob: value}})
    with pytest.raises(ValueError, match=f"scenario 'default': {knob} {value!r} is not an option") as info:
        TunedPolicy(ctx_of("default"), table=path)
    assert "\n" not in str(info.value)
    table_file(path, {"default": {**SETTINGS, "token_budget": 4096}})  # an option of the default engine only
    TunedPolicy(ctx_of("default"), table=path)
    with pytest.raises(ValueError, match="token_budget 4096 is not an option"):
        TunedPolicy(ctx_of("default", max_num_batched_tokens=2048), table=path)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{not json", "not a readable JSON"),
        ('{"scenarios": {}}', 'it needs "format": "llmsched-tuned"'),
        ('{"format": "llmsched-tuned", "version": 9, "scenarios": {}}', "version 9"),
        ('{"format": "llmsched-tuned", "version": 1, "scenarios": []}', '"scenarios" must be an object'),
        ('{"format": "llmsched-tuned", "version": 1, "scenarios": {"x": {"settings": {}}}}', "provenance"),
    ],
)
def test_a_malformed_table_names_its_file(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(ValueError, match=message) as info:
        load_tuned_table(path)
    assert str(info.value).startswith(str(path)) and "\n" not in str(info.value)
    with pytest.raises(ValueError, match=re.escape(str(path))):
        resolve_policy(f"tuned={path}")


@pytest.mark.parametrize(
    ("knob", "value"),
    [("queue_order", "lifo"), ("token_budget", 0), ("max_admit", "all"), ("shed", 1), ("kv_reserve", 1.0)],
)
def test_a_bad_knob_names_the_file_scenario_and_knob(tmp_path: Path, knob: str, value: Any) -> None:
    path = table_file(tmp_path / "t.json", {"default": {**SETTINGS, knob: value}})
    with pytest.raises(ValueError, match=f"{re.escape(str(path))}: scenario 'default': {knob}"):
        load_tuned_table(path)
    missing = {k: v for k, v in SETTINGS.items() if k != knob}
    with pytest.raises(ValueError, match=f"lack \\['{knob}'\\]"):
        decision_of(missing, "here")


def test_writing_merges_into_the_table_and_round_trips(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    write_tuned_entries(path, {"default": {"settings": SETTINGS, "provenance": {}}})
    other = {**SETTINGS, "queue_order": "sjf", "max_admit": 8}
    table = write_tuned_entries(path, {"bursty": {"settings": other, "provenance": {}}})
    assert sorted(load_tuned_table(path).entries) == sorted(table.entries) == ["bursty", "default"]
    assert settings_of(load_tuned_table(path).settings("bursty")) == other
    assert tuple(SETTINGS) == SETTING_NAMES


def test_a_table_is_read_once_until_its_file_changes(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    write_tuned_entries(path, {"default": {"settings": SETTINGS, "provenance": {}}})
    first = load_tuned_table(path)
    assert load_tuned_table(path) is first  # unchanged file: the table already read
    other = {**SETTINGS, "max_admit": 8}
    write_tuned_entries(path, {"default": {"settings": other, "provenance": {}}})  # same size, new file
    again = load_tuned_table(path)
    assert again is not first and settings_of(again.settings("default")) == other
    path.write_text("{")  # broken in place: read again, and refused by name
    with pytest.raises(ValueError, match=r"t\.json: not a readable JSON"):
        load_tuned_table(path)


# ------------------------------------------------------------------------------------------ evaluation
def test_evaluate_runs_the_shipped_tuned_policy(capsys: pytest.CaptureFixture[str]) -> None:
    name = sorted(load_tuned_table(SHIPPED_TABLE).entries)[0]
    config = evaluate.parse(["--policies", "tuned,fcfs", "--scenarios", name, "--num-requests", "60"]).config
    assert [p.name for p in config.policies] == ["tuned", "fcfs"] and config.policies[0].table is None
    assert evaluate.main(["--policies", "tuned", "--scenarios", name, "--num-requests", "60", "--no-progress"]) == 0
    assert "tuned" in capsys.readouterr().out


def test_a_user_table_loads_by_path_and_pickles(tmp_path: Path) -> None:
    path = table_file(tmp_path / "mine.json", {"default": SETTINGS})
    for entry, name in ((f"tuned={path}", "tuned"), (str(path), "mine"), (f"other={path}", "other")):
        spec = resolve_policy(entry)
        assert (spec.name, spec.baseline, spec.table) == (name, "tuned", path)
    config = EvalConfig(scenarios=["default"], policies=[f"tuned={path}"], split="val", num_requests=60)
    spec = pickle.loads(pickle.dumps(config.policies[0]))  # Ray ships the spec: the path travels, not a file
    env = config.make_env(config.scenarios[0], 1.0)
    assert settings_of(spec.make(env, 0).decision) == SETTINGS
    row = run_cell(config, config.scenarios[0], 1.0, spec).rows[0]
    assert row["policy"] == "tuned" and 0.0 <= row["slo_attainment"] <= 1.0
    with pytest.raises(ValueError, match="policy 'tuned' cannot run on scenario 'bursty': no tuned settings"):
        EvalConfig(scenarios=["bursty"], policies=[f"tuned={path}"], split="val")


def test_contexts_name_their_scenario() -> None:
    assert ctx_of("mixed-slo").scenario == "mixed-slo"
    env = gymnasium.make("LLMSchedCluster-v0", scenario="cluster-azure-conv-4", split="val")
    assert env.unwrapped.local_policy_context(0).scenario == env.unwrapped.base_scenario.name == "azure-conv"


def test_the_tune_command_refuses_bad_options(capsys: pytest.CaptureFixture[str]) -> None:
    for argv, message in (
        ([], "give --scenarios"),
        (["--scenarios", "nope"], "unknown scenario 'nope'"),
        (["--scenarios", "default", "--seeds", "0,0"], "argument --seeds: 0 given more than once in '0,0'"),
        (["--scenarios", "default", "--reference", "sjf,sjf"], "argument --reference: sjf given more than once"),
        (["--scenarios", "default,default"], "argument --scenarios: default given more than once"),
        (["--scenarios", "default", "--reference", "nope"], "unknown policy 'nope'"),
        (["--scenarios", "cluster-azure-conv-4"], "are cluster scenarios"),
        # every candidate is built up front: an absurd count is refused before any is
        (["--scenarios", "default", "--candidates", "100000000"], "--candidates: must be at most 10,000"),
        (["--scenarios", "default", "--rounds", "1000000"], "--rounds: must be at most 100"),
    ):
        with pytest.raises(SystemExit) as info:
            tune.main(argv)
        assert info.value.code == 2 and message in capsys.readouterr().err, argv


def test_a_user_trace_is_tuned_and_then_evaluated_with_its_table(tmp_path: Path) -> None:
    trace = tmp_path / "mytrace.csv"
    rows = [f"{i * 0.05:.2f},{40 + i % 50},{5 + i % 9},{'ab'[i % 2]}" for i in range(600)]
    trace.write_text("t,in,out,who\n" + "\n".join(rows) + "\n")
    options = ["--trace", str(trace), "--trace-format", "generic", "--trace-columns",
               "arrival=t,prompt_len=in,output_len=out,tenant=who"]  # fmt: skip
    out = tmp_path / "mine.json"
    search = [*TINY, "--candidates", "0", "--rounds", "0", "--num-requests", "45"]  # 2 disjoint val windows of 45
    assert tune.main([*options, *search, "--out", str(out)]) == 0
    (key,) = load_tuned_table(out).entries  # a trace's entry: its file's stem and a hash of content and options
    assert re.fullmatch(r"mytrace@[0-9a-f]{12}", key)
    entry = load_tuned_table(out).entries[key]
    prov = entry["provenance"]
    assert prov["command"].startswith(f"llmsched-tune --trace {trace}")
    # the val part holds the search's two windows only: confirmed on those, and the entry says so
    confirm = prov["confirm"]
    assert confirm["seeds"] == [0, 1] and confirm["fresh"] is False and 1 <= confirm["num_settings"] <= 3
    if confirm["num_settings"] > 1:
        margin = confirm["margin"]
        assert margin["num_windows"] == 2 and margin["attainment_diff"] >= 0 and margin["half_width"] >= 0
    assert prov["probe_seeds"] == [0, 1] and prov["reference_capacity_load"] == prov["probe_capacity_load"]
    assert set(prov["reference_capacity_load"]) == {"sjf"}  # the probe's, on its seeds
    config = evaluate.parse([*options, "--policies", f"tuned={out}", "--num-requests", "60"]).config
    env = config.make_env(config.scenarios[0], 1.0)
    assert settings_of(config.policies[0].make(env, 0).decision) == entry["settings"]


@pytest.mark.slow
def test_library_scenarios_go_to_results_and_the_shipped_table_needs_force(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    before = SHIPPED_TABLE.read_bytes()
    with pytest.raises(SystemExit):
        tune.main(["--scenarios", "default", *TINY, "--out", str(SHIPPED_TABLE)])
    err = capsys.readouterr().err
    assert "refusing to write inside the shipped folder" in err and "--force" in err and "Traceback" not in err
    monkeypatch.chdir(tmp_path)
    assert tune.main(["--scenarios", "default", *TINY]) == 0
    assert "default" in load_tuned_table(tmp_path / "results" / "tuned.json").entries
    assert SHIPPED_TABLE.read_bytes() == before


def test_a_library_trace_scenario_is_tuned_on_a_disjoint_val_window_per_seed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    seen: dict[str, Any] = {}

    def fake(config: Any, scenario: Any, **kwargs: Any) -> Any:
        seen[scenario.name] = config.num_requests
        raise SystemExit(0)  # the search itself is not what this checks

    monkeypatch.setattr(tune, "tune_scenario", fake)
    with pytest.raises(SystemExit):
        tune.main(["--scenarios", "azure-code", "--seeds", "0,1,2,3,4", "--out", str(tmp_path / "t.json")])
    assert seen == {"azure-code": 121}  # 609 val requests: five windows of 121 (the scenario's own 500 fit one)
    assert "azure-code: val episodes of 121 requests" in capsys.readouterr().out
