"""The scenario library: every scenario builds and runs with invariants checked, splits are disjoint,
episodes are reproducible, ``load`` scales the rate, SLOs follow the hardware, users' traces plug in."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import baselines
import llmsched_env  # noqa: F401
from llmsched_env.commands.evaluate import main, parse
from llmsched_env.envs.episode import run_episode
from llmsched_env.evaluation import find_capacity
from llmsched_env.workloads.describe import describe_scenario
from llmsched_env.workloads.library import get_scenario, list_scenarios
from llmsched_env.workloads.public_traces import trace_path
from llmsched_env.workloads.scenarios import (
    SPLITS,
    TRAIN_FRACTION,
    VAL_FRACTION,
    scenario_from_trace,
    slo_scale,
    split_bounds,
    split_rows,
    trace_split,
)
from llmsched_env.workloads.trace import Trace
from llmsched_env.workloads.traces import load_azure, load_mooncake

REQUIRED = {
    "azure-conv",
    "azure-code",
    "mooncake-conv",
    "sharegpt-poisson",
    "bursty",
    "multi-tenant-overload",
    "mixed-slo",
    "remote-kv",
}


def test_library_holds_the_required_scenarios() -> None:
    assert set(list_scenarios()) >= REQUIRED
    assert get_scenario("remote-kv").remote_kv is not None
    with pytest.raises(ValueError, match="available scenarios: default"):
        get_scenario("nope")


@pytest.mark.parametrize("name", list_scenarios())
def test_every_scenario_runs_with_invariants_checked(name: str) -> None:
    env = gym.make("LLMSched-v1", scenario=name, split="test", load=1.5, check_invariants=True)
    policy = baselines.make("slo_aware", env.unwrapped.policy_context())
    obs, _ = env.reset(seed=0)
    for _ in range(300):
        obs, reward, term, trunc, _info = env.step(policy.act(obs, env.unwrapped.action_masks()))
        assert env.observation_space.contains(obs) and np.isfinite(reward)
        if term or trunc:
            break
    assert env.unwrapped.sim.engine.num_arrived > 0


def _arrival_signature(name: str, split: str, seed: int) -> list[tuple[int, int]]:
    src = get_scenario(name).source(split)
    reqs = src.sample(np.random.default_rng(seed), 200, 1.0)
    return [(r.prompt_len, r.output_len) for r in reqs]


@pytest.mark.parametrize("name", ["azure-conv", "mooncake-conv"])
def test_trace_train_val_and_test_parts_are_disjoint_in_time_and_complete(name: str) -> None:
    sc = get_scenario(name)
    parts = {split: sc.source(split).trace for split in SPLITS}  # type: ignore[attr-defined]
    full = (
        load_azure(trace_path("azure-conv"), max_context=16384, overlong="truncate")
        if name == "azure-conv"
        else load_mooncake(trace_path("mooncake-conv"), max_context=131072)
    )
    fractions = np.array([TRAIN_FRACTION, TRAIN_FRACTION + VAL_FRACTION])
    cuts = np.searchsorted(full.arrival_s, full.duration_s() * fractions)
    bounds = {"train": (0, cuts[0]), "val": (cuts[0], cuts[1]), "test": (cuts[1], len(full))}
    # each part is exactly the requests between its cuts: disjoint, in time order, and together the whole trace
    assert sum(len(p) for p in parts.values()) == len(full)
    for split, (lo, hi) in bounds.items():
        np.testing.assert_array_equal(parts[split].prompt_len, full.prompt_len[lo:hi])
        np.testing.assert_allclose(parts[split].arrival_s, full.arrival_s[lo:hi] - full.arrival_s[lo])
    test = parts["test"]
    for seed in range(5):  # every test episode is a window of the test part
        window = sc.source("test").sample(np.random.default_rng(seed), 300, 1.0)
        lengths = np.array([r.prompt_len for r in window])
        starts = np.flatnonzero(np.lib.stride_tricks.sliding_window_view(test.prompt_len, 300).__eq__(lengths).all(1))
        assert starts.size >= 1


@settings(max_examples=60, deadline=None, derandomize=True)
@given(gaps=st.lists(st.floats(0.0, 50.0, allow_nan=False), min_size=1, max_size=300))
def test_split_parts_of_any_trace_are_disjoint_and_cover_it(gaps: list[float]) -> None:
    """Property: for any arrival times, the train, val and test parts (by time, and by rows) are disjoint,
    ordered train < val < test, and hold every request once."""
    arrival = np.concatenate([[0.0], np.cumsum(gaps)])
    n = len(arrival)
    ids = np.arange(1, n + 1)  # each request named by its row (+1: lengths are >= 1)
    trace = Trace("prop", "prop", arrival, ids, np.ones(n, dtype=np.int64))
    for cut in (trace_split, split_rows):
        rows = [cut(trace, split).prompt_len for split in SPLITS]
        joined = np.concatenate(rows)
        np.testing.assert_array_equal(joined, ids)  # disjoint, in order, complete
    for split in SPLITS:  # by time: a part holds exactly the arrivals inside its share of the duration
        lo, hi = split_bounds(split)
        part = trace_split(trace, split).prompt_len
        inside = (arrival >= arrival[-1] * lo) & ((arrival < arrival[-1] * hi) if hi < 1 else True)
        np.testing.assert_array_equal(part, ids[inside])


def test_synthetic_splits_draw_disjoint_streams() -> None:
    """The three splits' streams differ at every seed tried, and no episode of one split repeats another's."""
    signatures = {split: [_arrival_signature("mixed-slo", split, seed) for seed in range(4)] for split in SPLITS}
    seen = [tuple(sig) for sigs in signatures.values() for sig in sigs]
    assert len(set(seen)) == len(seen)
    with pytest.raises(ValueError, match="split 'eval' was divided in two: use 'val' for choices"):
        get_scenario("mixed-slo").source("eval")


def test_synthetic_splits_use_disjoint_streams_and_are_deterministic() -> None:
    a = _arrival_signature("mixed-slo", "train", 0)
    assert a == _arrival_signature("mixed-slo", "train", 0)
    assert a != _arrival_signature("mixed-slo", "test", 0)
    assert a != _arrival_signature("mixed-slo", "train", 1)


def test_training_episodes_sample_random_windows_by_seed() -> None:
    env = gym.make("LLMSched-v1", scenario="azure-conv", split="train", num_requests=100)
    starts = set()
    for seed in range(4):
        env.reset(seed=seed)
        starts.add(tuple(r.prompt_len for r in env.unwrapped.sim.requests[:5]))
    assert len(starts) == 4
    env.reset(seed=2)
    again = tuple(r.prompt_len for r in env.unwrapped.sim.requests[:5])
    env.reset(seed=2)
    assert tuple(r.prompt_len for r in env.unwrapped.sim.requests[:5]) == again


@pytest.mark.parametrize("name", ["bursty", "tenants-on-off", "azure-conv"])
def test_load_scales_the_arrival_rate(name: str) -> None:
    src = get_scenario(name).source("test")
    one = src.sample(np.random.default_rng(0), 800, 1.0)
    two = src.sample(np.random.default_rng(0), 800, 2.0)
    span1 = one[-1].arrival_s - one[0].arrival_s
    span2 = two[-1].arrival_s - two[0].arrival_s
    assert span2 == pytest.approx(span1 / 2, rel=0.02)


def test_slos_scale_with_the_cost_model() -> None:
    h100 = gym.make("LLMSched-v1", scenario="mixed-slo").unwrapped
    a100 = gym.make("LLMSched-v1", scenario="mixed-slo", cost_model="llama3-8b-a100").unwrapped
    ratio = a100.tenants[0].slo.ttft_s / h100.tenants[0].slo.ttft_s
    assert ratio == pytest.approx(slo_scale(a100.cost_model)) and ratio > 1.4
    assert h100.tenants[0].slo.ttft_s == pytest.approx(0.25)  # the reference preset keeps the literature's SLO


def test_remote_kv_scenario_fetches_and_reports_it() -> None:
    env = gym.make("LLMSched-v1", scenario="remote-kv", split="test", num_requests=300)  # invariants: test_core
    policy = baselines.make("fcfs", env.unwrapped.policy_context())
    m = run_episode(env, policy, seed=1)
    assert m["remote_kv_fetches"] > 0 and m["remote_kv_hit_rate"] > 0
    assert m["num_finished"] + m["num_rejected"] == 300


def test_user_trace_scenarios(tmp_path: Path) -> None:
    csv = tmp_path / "mine.csv"
    rows = ["t,in,out"] + [f"{i * 0.5},{100 + i},{20 + i % 7}" for i in range(400)]
    csv.write_text("\n".join(rows) + "\n")
    sc = scenario_from_trace(csv, "generic", columns={"arrival": "t", "prompt_len": "in", "output_len": "out"})
    env = gym.make("LLMSched-v1", scenario=sc, split="test", check_invariants=True)
    m = run_episode(env, baselines.make("fcfs", env.unwrapped.policy_context()), seed=0)
    assert m["num_requests"] == sc.num_requests and m["num_finished"] == sc.num_requests
    lengths = tmp_path / "lengths.csv"
    lengths.write_text("num_prefill_tokens,num_decode_tokens\n" + "\n".join(f"{50 + i},{10 + i}" for i in range(50)))
    with pytest.raises(ValueError, match="rate"):
        scenario_from_trace(lengths, "lengths")
    assert scenario_from_trace(lengths, "lengths", rate_rps=5.0).source("train").nominal_rate_rps() == 5.0
    bad = tmp_path / "bad.csv"
    bad.write_text("t,in,out\n0,5,5\n1,x,5\n")
    with pytest.raises(ValueError, match=r"bad\.csv:3"):
        scenario_from_trace(bad, "generic", columns={"arrival": "t", "prompt_len": "in", "output_len": "out"})


def test_describe_reports_rates_lengths_tenants_and_offered_load() -> None:
    d = describe_scenario(get_scenario("mixed-slo"), "test", load=1.0, seed=0)
    assert [t["name"] for t in d["tenants"]] == ["interactive", "code", "chat", "summarize"]
    assert sum(t["share"] for t in d["tenants"]) == pytest.approx(1.0)
    assert d["rate_rps"] > 0 and d["prompt"]["p99"] >= d["prompt"]["p50"] > 0
    assert d["offered_load"] > 0 and d["capacity_estimate_rps"] <= d["compute_bound_rps"]
    d2 = describe_scenario(get_scenario("mixed-slo"), "test", load=2.0, seed=0)
    assert d2["offered_load"] == pytest.approx(2 * d["offered_load"], rel=0.1)


@pytest.mark.slow
def test_evaluate_commands_for_scenarios_traces_describe_and_capacity(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    argv = ["--scenarios", "mixed-slo,bursty", "--loads", "0.8,1.2", "--num-requests", "60", "--out", str(tmp_path)]
    assert main(argv) == 0
    rows = (tmp_path / "results.csv").read_text().splitlines()
    assert len(rows) == 1 + 4
    assert main(["--describe", "--scenarios", "bursty"]) == 0
    assert "offered load" in capsys.readouterr().out
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(f'{{"ts": {i * 300}, "p": {40 + i}, "o": 9}}\n' for i in range(400)))
    cols = "arrival=ts,prompt_len=p,output_len=o"
    argv = ["--trace", str(trace), "--trace-format", "generic", "--trace-columns", cols, "--trace-time-unit", "ms"]
    assert main([*argv, "--num-requests", "50"]) == 0
    assert "t " in capsys.readouterr().out
    with pytest.raises(SystemExit):
        parse(["--trace", str(trace)])  # no format
    config = parse(["--scenarios", "bursty", "--num-requests", "80"]).config
    cap = find_capacity(config, get_scenario("bursty"), "fcfs")
    assert cap["capacity_load"] > 0 and cap["capacity_rps"] > 0


def test_two_user_workloads_never_share_a_source() -> None:
    from llmsched_env.engine.config import TenantConfig
    from llmsched_env.workloads.workload import LengthDist, TenantWorkload, WorkloadConfig

    def workload(name: str) -> WorkloadConfig:
        return WorkloadConfig((TenantWorkload(TenantConfig(name), 5.0, LengthDist.fixed(10, 10)),), 50)

    a = gym.make("LLMSched-v1", workload=workload("alpha")).unwrapped
    b = gym.make("LLMSched-v1", workload=workload("beta")).unwrapped
    assert [t.name for t in a.tenants] == ["alpha"] and [t.name for t in b.tenants] == ["beta"]
