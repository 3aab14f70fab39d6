"""Sustained windows (issue 26): disjoint val/test windows per seed, refused seeds beyond them, the span rule
and its flag, the capacity search capped at the largest sustained load, and tenants a part leaves out."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from llmsched_env.commands.evaluate import main, parse
from llmsched_env.engine.config import SLOClass
from llmsched_env.envs.mixture import WorkloadMixEnv
from llmsched_env.evaluation import EvalConfig, run_grid
from llmsched_env.evaluation.capacity import capacity_notes, find_capacity, search_capacity, verdict_notes
from llmsched_env.evaluation.sustained import absent_tenant_notes, scenario_windows, unsustained
from llmsched_env.workloads.describe import format_description
from llmsched_env.workloads.library import get_scenario
from llmsched_env.workloads.scenarios import Scenario, TraceSource, scenario_from_trace
from llmsched_env.workloads.windows import SUSTAINED_SPAN_FACTOR, max_sustained_load, window_span

COLUMNS = {"arrival": "t", "prompt_len": "in", "output_len": "out"}


def _uniform_trace(path: Path, n: int = 1000, gap_s: float = 1.0) -> Path:
    """One request every ``gap_s`` seconds, the row number as its prompt length (so a request names its row)."""
    rows = ["t,in,out"] + [f"{i * gap_s:.3f},{i + 1},4" for i in range(n)]
    path.write_text("\n".join(rows) + "\n")
    return path


def _scenario(path: Path, slo: str = "chat") -> Scenario:
    """The scenario of ``path`` with one SLO class: a name, or ``TTFT_S:TPOT_S``."""
    cls = SLOClass(slo, *map(float, slo.split(":"))) if ":" in slo else slo
    return scenario_from_trace(path, "generic", slo_class=cls, columns=COLUMNS)


def _rows(requests: list) -> list[int]:
    return [r.prompt_len - 1 for r in requests]


@pytest.mark.parametrize("split", ["val", "test"])
def test_val_and_test_seeds_replay_disjoint_consecutive_windows(tmp_path: Path, split: str) -> None:
    sc = _scenario(_uniform_trace(tmp_path / "u.csv"))
    part = sc.source(split).trace  # type: ignore[attr-defined]
    first = int(part.prompt_len[0]) - 1  # the part's first row of the file
    env = gym.make("LLMSched-v1", scenario=sc, split=split, num_requests=40).unwrapped
    held = len(part) // 40
    assert held == 3  # 150 requests in each held-out part
    seen: list[list[int]] = [_rows(env.episode_requests(seed)) for seed in range(held)]
    for seed, rows in enumerate(seen):
        assert rows == list(range(first + 40 * seed, first + 40 * (seed + 1)))  # the seed-th window, in order
    assert len(set().union(*map(set, seen))) == 40 * held  # no request shared between seeds
    env.reset(seed=1)
    assert _rows(env.sim.requests) == seen[1]  # reset(seed=s) replays what episode_requests(s) gives
    assert _rows(env.episode_requests(2)) == seen[2]  # reproducible
    with pytest.raises(
        ValueError, match=rf"the {split} part holds 3 windows of 40 requests \(150 requests\); seeds must be < 3"
    ):
        env.reset(seed=3)
    env.close()


def test_train_keeps_random_overlapping_windows(tmp_path: Path) -> None:
    sc = _scenario(_uniform_trace(tmp_path / "u.csv"))
    env = gym.make("LLMSched-v1", scenario=sc, split="train", num_requests=40).unwrapped
    starts = [_rows(env.episode_requests(seed))[0] for seed in range(12)]
    assert len(set(starts)) == 12 and any(s % 40 for s in starts)  # not cut into the fixed windows
    env.close()


def test_a_reset_option_or_the_window_attribute_picks_a_window(tmp_path: Path) -> None:
    sc = _scenario(_uniform_trace(tmp_path / "u.csv"))
    env = gym.make("LLMSched-v1", scenario=sc, split="test", num_requests=40).unwrapped
    by_seed = _rows(env.episode_requests(2))
    env.reset(seed=0, options={"window": 2})
    assert _rows(env.sim.requests) == by_seed
    env.reset(seed=0)
    assert _rows(env.sim.requests) == _rows(env.episode_requests(0)) != by_seed  # the option held one reset
    env.window = 1
    assert _rows(env.episode_requests(0)) == _rows(env.episode_requests(1))  # the attribute wins over the seed
    with pytest.raises(ValueError, match="window must be an integer >= 0"):
        env.reset(seed=0, options={"window": -1})
    env.close()


def test_seeds_beyond_the_windows_are_refused_at_config_time_with_the_count(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = _uniform_trace(tmp_path / "u.csv")
    sc = _scenario(trace)
    EvalConfig(scenarios=[sc], seeds=[0, 1, 2], num_requests=40)  # three windows: fine
    with pytest.raises(ValueError, match=r"u\.csv: the test part holds 3 windows of 40 requests \(150 requests\)"):
        EvalConfig(scenarios=[sc], seeds=[0, 1, 2, 3], num_requests=40)
    with pytest.raises(ValueError, match=r"scenario 'azure-code': .*the test part holds 1 window of 500 requests"):
        EvalConfig(scenarios=["azure-code"], seeds=[0, 1])  # a library scenario is named too
    EvalConfig(scenarios=[sc], split="train", seeds=list(range(20)), num_requests=40)  # train: random windows
    with pytest.raises(SystemExit):
        parse(["--trace", str(trace), "--trace-format", "generic", "--trace-columns", "arrival=t,prompt_len=in,"
               "output_len=out", "--num-requests", "40", "--seeds", "0,1,2,3", "--split", "val"])  # fmt: skip
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].endswith("seeds must be < 3, or episodes of at most 37 requests (--num-requests) fit seeds up to 3")
    assert "the val part holds 3 windows" in err[-1] and "Traceback" not in "".join(err)


def test_span_is_the_window_s_arrival_span_at_the_load_against_twenty_ttft_targets(tmp_path: Path) -> None:
    sc = _scenario(_uniform_trace(tmp_path / "u.csv"), slo="2:0.5")  # one request a second, TTFT target 2 s
    source = sc.source("test")
    for load in (1.0, 0.5, 3.0):
        w = window_span(source, "test", 1, 40, load)
        assert w.span_s == pytest.approx(39.0 / load) and w.ttft_s == 2.0
        assert w.required_s == SUSTAINED_SPAN_FACTOR * 2.0 == 40.0
    assert not window_span(source, "test", 1, 40, 1.0).sustained  # 39 s < 40 s
    assert window_span(source, "test", 1, 40, 0.9).sustained  # 43.3 s
    assert max_sustained_load(source, "test", 1, 40) == pytest.approx(39.0 / 40.0)


def test_the_target_is_the_mean_over_the_window_s_requests_not_the_laxest_tenant_s() -> None:
    source = get_scenario("default").source("test")  # a chat majority and a 60 s batch tenant
    requests = source.sample(np.random.default_rng(3), 300, 1.0, None)
    targets = [source.tenants[r.tenant].slo.ttft_s for r in requests]
    w = window_span(source, "test", 3, 300, 1.0)
    assert w.ttft_s == pytest.approx(sum(targets) / len(targets))
    assert min(targets) < w.ttft_s < max(targets) == 60.0  # both kinds are in it; the mean lies between


def test_max_sustained_load_holds_for_a_process_with_periods_of_its_own() -> None:
    source = get_scenario("tenants-on-off").source("test")  # on/off periods do not scale with the load
    top = max_sustained_load(source, "test", 0, 200)
    assert window_span(source, "test", 0, 200, top).sustained
    assert not window_span(source, "test", 0, 200, top * 1.002).sustained


def test_a_short_window_is_flagged_at_a_high_load_and_not_at_a_lower_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = _uniform_trace(tmp_path / "u.csv")
    sc = _scenario(trace, slo="1:1")  # 40 requests over 39 s at load 1; 20 s needed: sustained up to 1.95
    low = EvalConfig(scenarios=[sc], loads=[1.0], seeds=[0, 1], num_requests=40)
    assert unsustained(low) == []
    high = EvalConfig(scenarios=[sc], loads=[1.0, 4.0], seeds=[0, 1], num_requests=40)
    (line,) = unsustained(high)
    assert line.startswith("scenario 'u' at load 4: 2 of 2 test windows not sustained: seed 0's 40 requests arrive in")
    assert "9.75 s, a sustained rate needs 20 s (20 x its mean TTFT target, 1 s)" in line
    assert line.endswith(
        "sustained up to load 1.95, or at load 4 with about --num-requests 83, more than the test part's 150 requests "
        "hold for 2 window(s)"
    )
    rows = run_grid(high).rows
    assert [(r["load"], r["sustained"]) for r in rows] == [(1.0, True), (1.0, True), (4.0, False), (4.0, False)]
    columns = "arrival=t,prompt_len=in,output_len=out"
    argv = ["--trace", str(trace), "--trace-format", "generic", "--trace-columns", columns, "--trace-slo", "1:1",
            "--num-requests", "40", "--loads", "1,4", "--no-progress"]  # fmt: skip
    assert main(argv) == 0  # seed 0 alone: the same window, one line on stderr
    out, err = capsys.readouterr()
    one_seed = line.replace("2 of 2", "1 of 1").split(", more than")[0]  # 83 requests fit one window
    assert err.strip().splitlines() == [f"llmsched-evaluate: unsustained windows: {one_seed}"]
    header, _, at_one, at_four = out.splitlines()[1:5]
    assert "sustained" in header.split() and " True " in at_one and " False " in at_four  # the table shows it
    with pytest.raises(SystemExit):
        parse([*argv, "--require-sustained"])
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("llmsched-evaluate: error: --require-sustained: scenario 'u' at load 4: 1 of 1")
    assert parse([*argv[:-3], "--loads", "1", "--require-sustained"]).config.loads == (1.0,)  # sustained: it runs


def test_capacity_stops_at_the_largest_sustained_load_and_says_window_limited(tmp_path: Path) -> None:
    loads: list[float] = []

    def always(load: float) -> float:
        loads.append(load)
        return 1.0

    assert search_capacity(always, max_load=3.3) == 3.3 and max(loads) == 3.3  # 1, 2, then the cap
    loads.clear()
    assert search_capacity(always, max_load=0.3) == 0.3 and loads == [0.3]  # a cap below 1.0: start there
    sc = _scenario(_uniform_trace(tmp_path / "u.csv"), slo="5:5")  # short requests meet a lax SLO at any load
    config = EvalConfig(scenarios=[sc], seeds=[0, 1], num_requests=40)
    cap = scenario_windows(config, sc).max_load((0, 1))
    assert cap == pytest.approx(39.0 / 100.0)  # 39 s of arrivals against 20 x 5 s
    row = find_capacity(config, config.scenarios[0], "fcfs")
    assert row["capacity_load"] == row["max_sustained_load"] == cap and row["window_limited"] is True
    per_seed = find_capacity(config, config.scenarios[0], "fcfs", seed=1)
    assert per_seed["window_limited"] is True and per_seed["capacity_load"] == cap


def test_a_part_without_some_tenants_is_reported_with_their_names(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "t.csv"  # t06 and t07 send only in the first half of the trace's time
    rows = ["t,in,out,who"] + [
        f"{i:.1f},{10 + i % 7},4,{f't0{i % 8}' if i < 150 or i % 8 < 6 else 't00'}" for i in range(300)
    ]
    path.write_text("\n".join(rows) + "\n")
    columns = "arrival=t,prompt_len=in,output_len=out,tenant=who"
    sc = scenario_from_trace(path, "generic", columns={**COLUMNS, "tenant": "who"})
    source = sc.source("test")
    assert isinstance(source, TraceSource) and source.absent_tenants == ["t06", "t07"]
    assert sc.source("train").absent_tenants == []  # type: ignore[attr-defined]
    config = EvalConfig(scenarios=[sc], num_requests=20)
    assert absent_tenant_notes(config) == [f"{path}: the test part has no request of tenants t06, t07"]
    assert "   the test part has no request of tenants t06, t07" in format_description(sc, num_requests=20)
    argv = ["--trace", str(path), "--trace-format", "generic", "--trace-columns", columns, "--num-requests", "20",
            "--no-progress"]  # fmt: skip
    assert main(argv) == 0
    assert f"llmsched-evaluate: {path}: the test part has no request of tenants t06, t07" in capsys.readouterr().err


def test_the_mixture_s_val_episodes_take_a_trace_s_windows_in_turn() -> None:
    env = WorkloadMixEnv(scenarios=("azure-code", "default"), split="val", num_requests=40)
    for seed in range(4):
        env.reset(seed=seed)
        assert env.inner is not None and env.inner.window == seed // 2
        replay, again = env.replay()
        assert [r.prompt_len for r in replay.episode_requests(again)] == [
            r.prompt_len for r in env.inner.episode_requests(seed)
        ]
        replay.close()
    env.close()


def test_describe_says_whether_the_window_is_sustained() -> None:
    text = format_description(get_scenario("bursty"), load=14.0, num_requests=200)
    assert "a sustained rate needs 5 s (20 x the mean TTFT target): NOT sustained" in text
    assert "sustained up to load 2.64" in text
    assert ": sustained; sustained up to load 2.64" in format_description(get_scenario("bursty"), num_requests=200)


def test_training_evaluates_on_as_many_val_seeds_as_the_part_holds(capsys: pytest.CaptureFixture[str]) -> None:
    from agents.train_config import TrainConfig
    from agents.training import val_seeds

    config = TrainConfig(scenario="azure-code")
    assert val_seeds(config, {}, [0, 1, 2]) == [0]  # 609 val requests: one window of 500
    assert "the val part holds 1 window(s) of 500 requests" in capsys.readouterr().err
    assert val_seeds(config, {"num_requests": 100}, [0, 1, 2]) == [0, 1, 2]
    assert val_seeds(TrainConfig(scenario="bursty"), {}, list(range(9))) == list(range(9))  # generated: any


def test_eval_num_requests_sizes_the_val_episodes_alone() -> None:
    from agents.train_config import TrainConfig, resolve_hyperparams
    from agents.training import eval_setup

    def setup(**hp: object) -> dict[str, object]:
        config = TrainConfig(scenario="azure-code", hp=dict(hp))
        return eval_setup(config, resolve_hyperparams(config))

    plain = setup()
    assert plain["eval_seeds"] == [0] and plain["eval_env"]["num_requests"] == 600  # type: ignore[index]
    smaller = setup(eval_num_requests=100)  # three windows of 100 in the 609 val requests; training keeps 600
    assert smaller["eval_seeds"] == [0, 1, 2] and smaller["eval_env"]["num_requests"] == 100  # type: ignore[index]
    with pytest.raises(ValueError, match=r"^hyperparameter 'eval_num_requests' \(the val episodes' size\): .*609"):
        setup(eval_num_requests=5000)
    with pytest.raises(ValueError, match=r"'eval_num_requests'.*must be an integer >= 1"):
        setup(eval_num_requests=0)


def test_the_command_line_refuses_val_episodes_past_the_val_part(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from agents.cli import parse_args

    out = tmp_path / "run"
    with pytest.raises(SystemExit):
        parse_args(["--scenario", "azure-code", "--hp", "eval_num_requests=5000", "--out", str(out)])
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "hyperparameter 'eval_num_requests' (the val episodes' size): " in err and "609 requests" in err
    assert not out.exists()  # refused before anything is written


def test_capacity_grows_a_generated_scenarios_windows_past_where_they_stop_being_sustained() -> None:
    """Without --num-requests a generated scenario's search goes on above the load where its windows stop
    being sustained, each load on windows long enough for it: a verdict, not a lower bound. The windows below
    that load are the scenario's own (the same episodes as before), and a size the user chose is kept."""
    sc = replace(get_scenario("bursty"), num_requests=60)
    config = EvalConfig(scenarios=[sc], seeds=[0, 1])
    windows = scenario_windows(config, sc)
    cap = windows.max_load((0, 1))
    kept = find_capacity(EvalConfig(scenarios=[sc], seeds=[0, 1], num_requests=60), sc, "fcfs")
    assert kept["window_limited"] is True and kept["capacity_load"] == cap and kept["window_requests"] == 60
    row = find_capacity(config, sc, "fcfs")
    assert row["window_limited"] is False and row["capacity_load"] > 1.5 * cap
    size = row["window_requests"]
    assert size > 60 and replace(windows, num_requests=size).max_load((0, 1)) >= row["capacity_load"]
    assert replace(windows, num_requests=int(size / 1.03)).max_load((0, 1)) < row["capacity_load"]  # no longer
    assert row["max_sustained_load"] == pytest.approx(replace(windows, num_requests=60 * 64).max_load((0, 1)))
    again = find_capacity(config, sc, "fcfs")
    assert again == row  # same seed, same search
    at_cap = run_grid(EvalConfig(scenarios=[sc], seeds=[0, 1], loads=[int(cap * 1000) / 1000])).rows
    assert all(r["sustained"] for r in at_cap)  # below the cap the windows are the scenario's own
    (note,) = capacity_notes(config)
    head = "capacity on scenario 'bursty': its test windows of 60 requests are sustained up to load"
    assert note.startswith(f"{head} {cap:.3g}")
    assert "above that each load of the search plays windows long enough" in note


def test_a_capacity_that_is_a_lower_bound_says_what_would_give_a_verdict(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sc = _scenario(_uniform_trace(tmp_path / "u.csv"), slo="5:5")  # met at any load: every search ends at the cap
    config = EvalConfig(scenarios=[sc], seeds=[0, 1], num_requests=40)
    rows = [find_capacity(config, sc, "fcfs", seed=s) for s in (0, 1)]
    assert all(r["window_limited"] for r in rows)
    windows = scenario_windows(config, sc)
    held = len(windows.source.trace)  # type: ignore[attr-defined]
    whole = replace(windows, num_requests=held).max_load((0,))
    (line,) = verdict_notes(config, rows)
    assert line.startswith("capacity on scenario 'u': 2 of 2 searches end at a lower bound (>= 0.39, where its test")
    assert f"--seeds 0 --num-requests {held} (one window of the whole part) is sustained up to load {whole:.3g}" in line
    assert (
        whole > 2 * windows.max_load((0, 1)) and "2 windows sustained up to about 0.78 need about 80 requests" in line
    )
    assert verdict_notes(config, [{**rows[0], "window_limited": False}]) == []  # a verdict: nothing to say
    generated = replace(get_scenario("bursty"), num_requests=60)
    fixed = EvalConfig(scenarios=[generated], seeds=[0, 1], num_requests=60)
    (hint,) = verdict_notes(fixed, [find_capacity(fixed, generated, "fcfs")])
    assert hint.endswith("leave out --num-requests (the search then grows the windows with the load)")
    columns = "arrival=t,prompt_len=in,output_len=out"
    argv = ["--trace", str(tmp_path / "u.csv"), "--trace-format", "generic", "--trace-columns", columns,
            "--trace-slo", "5:5", "--num-requests", "40", "--seeds", "0,1", "--capacity", "--no-progress"]  # fmt: skip
    assert main(argv) == 0
    err = capsys.readouterr().err  # one search over both seeds: the same advice
    said = f"llmsched-evaluate: {line.replace('2 of 2 searches', '1 of 1 searches')}"
    assert said in err.splitlines()
