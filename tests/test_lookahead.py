"""The ``lookahead`` bound: deterministic for a seed; with the base as its only candidate it replays ``tuned``'s
trajectory exactly; it never ends below its base, and with k == horizon and a tail to the end its own plan does
not either (by construction); its rows are marked as a bound; bad options and places it cannot run are refused
in one line."""

from __future__ import annotations

import csv
from dataclasses import replace
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import llmsched_env  # noqa: F401
from llmsched_env.adapters.vllm.config import AdapterConfig
from llmsched_env.decision.planners.bounds import LookaheadPolicy
from llmsched_env.decision.planners.lookahead import BOUND_MARK, LookaheadConfig, is_bound, parse_lookahead
from llmsched_env.decision.planners.tuned import settings_of, write_tuned_entries
from llmsched_env.decision.policy_spec import resolve_policy
from llmsched_env.decision.registry import make_scheduler
from llmsched_env.envs.episode import run_episode
from llmsched_env.evaluation.config import EvalConfig
from llmsched_env.evaluation.grid import run_grid
from llmsched_env.evaluation.identity import identical_groups
from llmsched_env.evaluation.runtime_options import RuntimeOptions
from llmsched_env.evaluation.vllm_engine import compare_engines
from llmsched_env.workloads.library import get_scenario
from tests.bench_scripts import bench_script, write_capacities
from tests.episode_steps import episode_steps

SMALL = "lookahead:k=16,horizon=16,tail=32"


def _env(num_requests: int = 60, scenario: Any = "mixed-slo", load: float = 3.0) -> gym.Env:
    return gym.make("LLMSched-v1", scenario=scenario, num_requests=num_requests, split="train", load=load)


_steps = episode_steps


def test_with_the_base_alone_it_replays_tuned_exactly() -> None:
    env = _env(80)
    tuned = make_scheduler("tuned", env.unwrapped.policy_context())
    made: list[LookaheadPolicy] = []

    def bound(e: gym.Env) -> LookaheadPolicy:
        made.append(LookaheadPolicy(e, LookaheadConfig(k=8, horizon=8, tail=16, candidates="base")))
        return made[-1]

    want = _steps(env, tuned, 2)
    got = _steps(env, bound, 2)
    assert got == want  # every observation, reward and metric, through snapshots and restores at every window
    la = made[0]
    assert la.base_source == "tuned" and la.candidates == [tuned.decision]
    assert la.num_decisions > 10 and la.num_rollouts == la.num_decisions and la.num_switches == 0


@pytest.mark.slow
def test_deterministic_for_a_seed_and_marked_as_a_bound_in_the_rows() -> None:
    config = EvalConfig(scenarios=["mixed-slo"], policies=[SMALL, "tuned"], seeds=[0, 1], num_requests=60, split="val")
    first, again = run_grid(config).rows, run_grid(config).rows
    strip = [{k: v for k, v in row.items() if k != "wall_s"} for row in first]
    assert strip == [{k: v for k, v in row.items() if k != "wall_s"} for row in again]
    names = [row["policy"] for row in first]
    assert names[0] == names[1] == SMALL + BOUND_MARK and is_bound(names[0]) and not is_bound("tuned")
    for bound, tuned in zip(first[:2], first[2:], strict=True):  # never below its base (tuned)
        assert bound["slo_attainment"] >= tuned["slo_attainment"]


@pytest.mark.parametrize(("seed", "tail"), [(0, 0), (1, 8), pytest.param(3, 48, marks=pytest.mark.slow)])
def test_never_below_its_base(seed: int, tail: int) -> None:
    """Whatever its options, the plan is played only when it meets at least the requests the base meets alone."""
    env = _env(60)
    base = _steps(env, make_scheduler("tuned", env.unwrapped.policy_context()), seed)[1]
    _, got = _steps(env, lambda e: LookaheadPolicy(e, LookaheadConfig(k=12, horizon=12, tail=tail)), seed)
    assert got["slo_attainment"] >= base["slo_attainment"]


def test_with_k_equal_horizon_and_a_tail_to_the_end_its_own_plan_is_never_below_the_base() -> None:
    """Each decision's rollout of the base is the base played on from there, and the chosen rollout scores at
    least as much, k == horizon iterations later the plan stands where that rollout did: so by induction the plan
    meets at least what the base meets alone, and the final check never has to replace it."""
    env = _env(40)
    base = _steps(env, make_scheduler("tuned", env.unwrapped.policy_context()), 1)[1]
    made: list[LookaheadPolicy] = []

    def bound(e: gym.Env) -> LookaheadPolicy:
        made.append(LookaheadPolicy(e, LookaheadConfig(k=32, horizon=32, tail=None)))
        return made[-1]

    _, got = _steps(env, bound, 1)
    assert made[0].kept_plan and made[0].num_decisions > 5
    assert got["slo_attainment"] >= base["slo_attainment"]
    assert made[0].num_rollouts == made[0].num_decisions * len(made[0].candidates) > 0


def test_per_request_moves_replay_exactly_and_never_leave_the_plan_below_the_base() -> None:
    """With candidates=requests a decision may send one waiting request first, preempt or shed one; a move picks its
    request from the state, so the env's steps replay the planned trajectory (a move whose pick is gone on replay is
    an AssertionError), and the episode ends at least where the base alone does."""
    env = _env(60)
    base = _steps(env, make_scheduler("tuned", env.unwrapped.policy_context()), 0)[1]
    made: list[LookaheadPolicy] = []

    def bound(e: gym.Env) -> LookaheadPolicy:
        made.append(LookaheadPolicy(e, LookaheadConfig(k=8, horizon=8, tail=32, candidates="requests")))
        return made[-1]

    first = _steps(env, bound, 0)
    la = made[0]
    assert la.num_moves > 0 and la.kept_plan  # some decision chose a per-request move
    assert env.unwrapped.sim.engine.num_good == la.planned_met  # the steps met what the plan met
    assert la.num_rollouts > la.num_decisions * len(la.candidates)  # the moves were played beside the settings
    assert first[1]["slo_attainment"] >= base["slo_attainment"]


def test_without_a_tuned_entry_the_base_is_the_best_static_rule_on_the_episode() -> None:
    scenario = replace(get_scenario("mixed-slo"), name="not-in-the-table")
    env = _env(40, scenario=scenario)
    env.reset(seed=0)
    with pytest.warns(UserWarning, match=r"no tuned settings for scenario 'not-in-the-table'.*its base is \w+ \(no"):
        policy = LookaheadPolicy(env, LookaheadConfig(k=16, horizon=16, tail=16))
    rule = policy.base_source.split()[0]
    scores = {}
    for name in ("fcfs", "sjf", "kv_guard", rule):
        scores[name] = run_episode(env, make_scheduler(name, env.unwrapped.policy_context()), 0)["slo_attainment"]
    assert scores[rule] == max(scores.values())
    fixed = LookaheadPolicy(env, LookaheadConfig(base="sjf"))
    assert fixed.base_source == "sjf" and fixed.base == make_scheduler("sjf", env.unwrapped.policy_context()).decision


def test_spellings_and_defaults() -> None:
    assert parse_lookahead("fcfs") is None and parse_lookahead("lookaheadx") is None
    assert parse_lookahead("lookahead") == LookaheadConfig()
    cfg = parse_lookahead("lookahead:k=32,tail=end,candidates=base,base=sjf")
    assert cfg == LookaheadConfig(k=32, tail=None, candidates="base", base="sjf")
    assert cfg.spelled == "lookahead:k=32,tail=end,candidates=base,base=sjf"
    assert parse_lookahead(cfg.name) == cfg  # a row's name reads back
    spec = resolve_policy("lookahead:horizon=32")
    assert spec.name == "lookahead:horizon=32" + BOUND_MARK and spec.lookahead == LookaheadConfig(horizon=32)
    assert spec.schema >= 1 and spec.iterations_per_step == 1


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ("lookahead:", "give options after"),
        ("lookahead:k", "is not key=value"),
        ("lookahead:depth=3", "is not key=value with key one of k, horizon"),
        ("lookahead:k=0", "lookahead.k must be an integer >= 1"),
        ("lookahead:k=1.5", "lookahead.k must be an integer, got '1.5'"),
        ("lookahead:tail=forever", "lookahead.tail must be an integer or end"),
        ("lookahead:candidates=all", "lookahead.candidates must be one of neighbours, base"),
        ("lookahead:k=2,k=3", "given twice"),
    ],
)
def test_bad_options_are_refused_in_one_line(entry: str, message: str) -> None:
    with pytest.raises(ValueError, match=message) as err:
        resolve_policy(entry)
    assert "\n" not in str(err.value) and entry in str(err.value)


def test_refused_where_it_cannot_run() -> None:
    def refused(match: str, **kwargs: Any) -> None:
        with pytest.raises(ValueError, match=match) as err:
            EvalConfig(**{"policies": ["lookahead"], **kwargs})
        assert "\n" not in str(err.value)

    refused("slo_aware.*not a static heuristic", policies=["lookahead:base=slo_aware"])
    refused("on cluster scenarios: .*candidates=requests", scenarios=["cluster-azure-conv-4"],
            policies=["lookahead:candidates=requests"])  # fmt: skip
    refused("cannot run on the torch runtime backend", runtime=RuntimeOptions())
    with pytest.raises(ValueError, match=r"--engine vllm: policy 'lookahead .* is clairvoyant"):
        compare_engines(EvalConfig(policies=["lookahead"], num_requests=20))
    with pytest.raises(ValueError, match=r"policy: 'lookahead \(bound, not deployable\)' replays .* vLLM") as err:
        AdapterConfig(policy="lookahead").resolve()  # the vLLM adapter, checked at build (no vLLM needed)
    assert "\n" not in str(err.value)
    env = _env(20)
    spec = resolve_policy("lookahead")
    with pytest.raises(ValueError, match=r"clairvoyant bound.*not on the torch runtime, vLLM"):
        spec.make(env, 0)
    with pytest.raises(ValueError, match="reset the env"):
        LookaheadPolicy(env, LookaheadConfig())
    cluster = gym.make("LLMSchedCluster-v0", scenario="azure-conv", num_replicas=2, num_requests=20)
    cluster.reset(seed=0)
    with pytest.raises(ValueError, match="no single-node simulator"):
        LookaheadPolicy(cluster, LookaheadConfig())
    held = gym.make("LLMSched-v1", scenario="mixed-slo", num_requests=20, iterations_per_step=4)
    held.reset(seed=0)
    with pytest.raises(ValueError, match="iterations_per_step=1"):
        LookaheadPolicy(held, LookaheadConfig())
    assert np.all(env.unwrapped.action_space.nvec > 0)


def test_the_headline_never_counts_the_bound_and_says_where_tuned_and_the_agent_stand(tmp_path: Path) -> None:
    folder = tmp_path / "s-capacity"
    bound = "lookahead" + BOUND_MARK
    caps = {"agent": (2.4, 2.6), "tuned": (2.2, 2.4), "fcfs": (1.9, 2.1), bound: (2.9, 3.1)}
    write_capacities(folder, "s", caps)
    headline = bench_script("headline")
    (row,) = headline.collect(tmp_path)
    assert row["rival"] == "tuned" and row["best_named"] == "fcfs" and row["bound"] == bound
    assert row["gap_closed"]["tuned"] == pytest.approx(0.3) and row["gap_closed"]["agent"] == pytest.approx(0.5)
    text = headline.markdown([row])
    assert "bound (capacity)" in text and "3.00 ±" in text and "| 30% | 50% |" in text
    (folder / "results.csv").write_text("\n".join(line for line in (folder / "results.csv").read_text().splitlines()
                                                   if "lookahead" not in line) + "\n")  # fmt: skip
    (row,) = headline.collect(tmp_path)
    assert "gap closed" not in headline.markdown([row]) and row["bound"] is None


def test_a_bound_keeps_its_own_row_where_it_played_a_rules_runs() -> None:
    bound = "lookahead" + BOUND_MARK
    rows = [{"policy": p, "scenario": "s", "load": 1.0, "seed": 0, "trajectory": "abc"} for p in (bound, "tuned")]
    rows.append({"policy": "fcfs", "scenario": "s", "load": 1.0, "seed": 0, "trajectory": "abc"})
    assert identical_groups(rows) == {"s": [[bound], ["tuned", "fcfs"]]}


def test_its_tuned_base_reads_the_table_of_the_evaluations_own_tuned(tmp_path: Path) -> None:
    env = _env(20)
    fcfs = make_scheduler("fcfs", env.unwrapped.policy_context()).decision
    table = tmp_path / "mine.json"
    write_tuned_entries(table, {"mixed-slo": {"settings": settings_of(fcfs), "provenance": {}}})
    config = EvalConfig(
        scenarios=["mixed-slo"], policies=[f"tuned={table}", "lookahead:candidates=base"], num_requests=60, split="val"
    )
    mine, bound = run_grid(config).rows
    assert mine["policy"] == "tuned" and bound["policy"] == "lookahead:candidates=base" + BOUND_MARK
    assert {k: v for k, v in bound.items() if k not in ("policy", "wall_s")} == {
        k: v for k, v in mine.items() if k not in ("policy", "wall_s")
    }
    shipped = run_grid(replace(config, policies=["tuned"])).rows[0]
    assert shipped["trajectory"] != bound["trajectory"]  # the shipped entry plays otherwise


def test_the_headline_marks_a_window_limited_capacity_as_a_lower_bound(tmp_path: Path) -> None:
    folder = tmp_path / "s-capacity"
    folder.mkdir()
    bound = "lookahead" + BOUND_MARK
    rows = [("agent", 0, 2.5, "False"), ("agent", 1, 3.0, "True"), ("fcfs", 0, 2.0, "False"), ("fcfs", 1, 2.0, "")]
    rows += [(bound, 0, 2.6, "False"), (bound, 1, 3.0, "True")]
    with (folder / "results.csv").open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["policy", "scenario", "seed", "capacity_load", "capacity_rps", "window_limited"])
        for policy, seed, cap, limited in rows:
            w.writerow([policy, "s", seed, cap, 2 * cap, limited])
    headline = bench_script("headline")
    (row,) = headline.collect(tmp_path)
    assert row["limited"] == {"agent": [1], bound: [1]}
    assert row["gap_closed"] == {}  # a share of a gap between lower bounds means nothing: none is given
    text = headline.markdown([row])
    cells = text.splitlines()[2].split(" | ")
    assert cells[1] == "≥ 2.75 ± 3.18" and "`fcfs` 2.00 ± 0.00" in text and "≥ 2.80 ± 2.54" in text
    assert "lower bound" in text.splitlines()[-1]
