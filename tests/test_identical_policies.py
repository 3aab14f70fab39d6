"""Lists given twice are refused (``--seeds 0,0`` would report ± 0), and policies that play the same episodes
are one row in the summary tables and the headline (``llmsched_env.evaluation.identity``), while the per-run
rows keep every policy."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from llmsched_env.commands import calibrate
from llmsched_env.commands.evaluate import main
from llmsched_env.evaluation import (
    EvalConfig,
    capacity_grid,
    format_capacity_summary,
    format_summary,
    identical_groups,
    merge_identical,
    policy_label,
    run_grid,
    summarize,
    summarize_capacity,
)
from llmsched_env.workloads.library import get_scenario
from tests.bench_scripts import bench_script

# --- duplicates ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"seeds": [0, 1, 0]}, "EvalConfig.seeds: 0 given more than once"),
        ({"loads": [1, 2.0, 1.0]}, "EvalConfig.loads: 1.0 given more than once"),
        ({"scenarios": ["default", "default"]}, "EvalConfig.scenarios: default given more than once"),
        ({"scenarios": ["default", get_scenario("default")]}, "EvalConfig.scenarios: default given more than once"),
        ({"policies": ["fcfs", "sjf", "fcfs", "sjf"]}, "EvalConfig.policies: fcfs, sjf given more than once"),
        ({"policies": ["fcfs", "a=fcfs", "a=sjf"]}, "EvalConfig.policies: a given more than once"),
    ],
)
def test_a_config_refuses_a_value_given_twice_naming_the_field(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError) as exc:
        EvalConfig(**kwargs)
    assert message in str(exc.value) and "\n" not in str(exc.value)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--seeds", "0,0"], "argument --seeds: 0 given more than once in '0,0'"),
        (["--capacity", "--per-seed", "--seeds", "0,0,0"], "argument --seeds: 0 given more than once"),
        (["--loads", "1,2,1.0"], "argument --loads: 1.0 given more than once"),
        (["--scenarios", "default,default"], "argument --scenarios: default given more than once"),
        (["--policies", "fcfs,sjf,fcfs"], "argument --policies: fcfs given more than once"),
        (["--policies", "fcfs,a=fcfs,a=sjf"], "--policies: a given more than once"),  # two entries, one name
    ],
)
def test_evaluate_refuses_a_value_given_twice_naming_the_option(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        main(argv)
    err = capsys.readouterr().err
    assert info.value.code == 2 and message in err
    assert err.strip().splitlines()[-1].startswith("llmsched-evaluate: error: ")


def test_training_and_calibration_refuse_a_value_given_twice(capsys: pytest.CaptureFixture[str]) -> None:
    from agents.cli import parse_args
    from agents.sweep import sweep_configs
    from agents.train_config import TrainConfig

    for argv, message in (
        (["--seeds", "0,1,0"], "--seeds: 0 given more than once"),
        (["--scenarios", "default,bursty,default"], "--scenarios: default given more than once"),
        (["--hp-grid", "ent_coef=0.1,0.01,0.1"], "--hp-grid ent_coef: 0.1 given more than once"),
        (["--eval-baselines", "fcfs,sjf,fcfs"], "eval_baselines: fcfs given more than once"),
    ):
        with pytest.raises(SystemExit) as info:
            parse_args(argv)
        assert info.value.code == 2 and message in capsys.readouterr().err, argv
    with pytest.raises(ValueError, match="seeds: 3 given more than once"):
        sweep_configs(TrainConfig(), Path("runs/sweep"), seeds=[3, 3])
    with pytest.raises(SystemExit):
        calibrate.parse_args(["fidelity", "--preset", "runtime-tiny-cpu", "--seeds", "1,2,1"])
    assert "--seeds: 1 given more than once" in capsys.readouterr().err


# --- identical policies -------------------------------------------------------------------------------------


def _run(policy: str, seed: int, trajectory: str | None, **metrics: float) -> dict:
    row = {"policy": policy, "scenario": "s", "load": 1.0, "seed": seed, **metrics, "wall_s": 0.1 * seed}
    if trajectory is not None:
        row["trajectory"] = trajectory
    return row


def test_a_tie_on_one_number_is_not_identity() -> None:
    metrics = {"slo_attainment": 0.9, "ttft_p99_s": 1.0}
    rows = [_run("a", 0, "x0", **metrics), _run("a", 1, "x1", **metrics),
            _run("b", 0, "x0", **metrics), _run("b", 1, "y1", **metrics),  # same numbers, one run differs
            _run("c", 0, "x0", **metrics), _run("c", 1, "x1", **metrics)]  # fmt: skip
    assert identical_groups(rows) == {"s": [["a", "c"], ["b"]]}
    # without fingerprints (files written before them), every metric must match, not one
    bare = [_run("a", 0, None, slo_attainment=0.9, ttft_p99_s=1.0), _run("b", 0, None, slo_attainment=0.9,
            ttft_p99_s=1.5), _run("c", 0, None, slo_attainment=0.9, ttft_p99_s=1.0)]  # fmt: skip
    assert identical_groups(bare) == {"s": [["a", "c"], ["b"]]}
    # capacity rows: equal capacities at every seed merge only with equal search fingerprints, never without
    caps = [{"policy": p, "scenario": "s", "seed": k, "capacity_load": 2.0, "capacity_rps": 4.0, "trajectory": t}
            for p, k, t in (("a", 0, "u"), ("a", 1, "v"), ("b", 0, "u"), ("b", 1, "w"), ("c", 0, "u"),
                            ("c", 1, "v"))]  # fmt: skip
    assert [r["policy"] for r in summarize_capacity(caps)] == ["a", "b"]
    assert summarize_capacity(caps)[0]["same_as"] == "c"
    untraced = [{k: v for k, v in r.items() if k != "trajectory"} for r in caps]
    assert [r["policy"] for r in summarize_capacity(untraced)] == ["a", "b", "c"]


def test_identity_is_decided_per_scenario() -> None:
    rows = [_run("a", 0, "x"), _run("b", 0, "x"), {**_run("a", 0, "y"), "scenario": "t"}, {**_run("b", 0, "z"),
            "scenario": "t"}]  # fmt: skip
    summary = [{"policy": p, "scenario": s, "load": 1.0} for s in ("s", "t") for p in ("a", "b")]
    merged = merge_identical(summary, rows)
    assert [(r["policy"], r["scenario"], r["same_as"]) for r in merged] == [("a", "s", "b"), ("a", "t", ""),
                                                                             ("b", "t", "")]  # fmt: skip
    assert policy_label(merged[0]) == "a (= b)" and policy_label(merged[1]) == "a"


@pytest.mark.slow
def test_identical_schedulers_are_one_summary_row_and_every_run_is_kept(tmp_path: Path) -> None:
    config = EvalConfig(scenarios=["azure-conv", "mixed-slo"], policies=["fcfs", "lpm", "vtc", "sjf"], seeds=[0, 1],
                        loads=[1.0, 2.0], num_requests=60)  # fmt: skip
    rows = run_grid(config).rows
    assert len(rows) == 32 and all(len(r["trajectory"]) == 16 for r in rows)
    summary = summarize(rows)
    got = [(r["scenario"], r["load"], r["policy"], r["same_as"]) for r in summary]
    # one tenant: fcfs, lpm and vtc decide alike; sjf does not. Several tenants: vtc differs from fcfs too
    assert got == [(s, load, p, same) for s, groups in (("azure-conv", (("fcfs", "lpm,vtc"), ("sjf", ""))),
                                                         ("mixed-slo", (("fcfs", "lpm"), ("vtc", ""), ("sjf", ""))))
                   for load in (1.0, 2.0) for p, same in groups]  # fmt: skip
    fcfs, sjf = summary[0], summary[1]  # azure-conv at load 1: a tie on attainment, still two rows
    assert fcfs["slo_attainment_mean"] == sjf["slo_attainment_mean"] == 1.0
    assert fcfs["ttft_p99_s_mean"] != sjf["ttft_p99_s_mean"]
    assert len(summarize(rows, merge=False)) == 16
    table = format_summary(summary)
    assert "fcfs (= lpm, vtc)  azure-conv" in table and "fcfs (= lpm)" in table and "\nvtc " in table


def test_the_command_merges_its_summary_and_keeps_every_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--scenarios", "azure-conv", "--policies", "fcfs,lpm,sjf", "--seeds", "0,1", "--loads", "2",
            "--num-requests", "60", "--out", str(tmp_path), "--no-plots", "--no-progress"]  # fmt: skip
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "fcfs (= lpm)" in out
    with open(tmp_path / "results.csv", newline="") as f:
        runs = list(csv.DictReader(f))
    assert [r["policy"] for r in runs] == ["fcfs", "fcfs", "lpm", "lpm", "sjf", "sjf"]
    fingerprints = [r["trajectory"] for r in runs]
    assert fingerprints[:2] == fingerprints[2:4] != fingerprints[4:]
    with open(tmp_path / "summary.csv", newline="") as f:
        summary = list(csv.DictReader(f))
    assert [(r["policy"], r["same_as"]) for r in summary] == [("fcfs", "lpm"), ("sjf", "")]
    assert len(json.loads((tmp_path / "results.json").read_text())) == 6


def test_capacity_searches_merge_only_when_they_played_alike(tmp_path: Path) -> None:
    config = EvalConfig(scenarios=["azure-conv"], policies=["fcfs", "lpm", "random"], seeds=[0, 1], num_requests=40)
    rows = capacity_grid(config, per_seed=True)
    assert len(rows) == 6
    by = {(r["policy"], r["seed"]): r["trajectory"] for r in rows}
    assert by["fcfs", 0] == by["lpm", 0] and by["fcfs", 1] == by["lpm", 1]
    assert by["random", 0] != by["fcfs", 0]
    summary = summarize_capacity(rows)
    assert [(r["policy"], r["same_as"]) for r in summary] == [("fcfs", "lpm"), ("random", "")]
    assert "fcfs (= lpm)" in format_capacity_summary(summary)


def test_the_headline_picks_the_best_named_group_and_lists_it(tmp_path: Path) -> None:
    folder = tmp_path / "s-capacity"
    folder.mkdir()
    caps = {"agent": (3.0, 3.3), "tuned": (2.5, 2.6), "fcfs": (2.0, 2.2), "lpm": (2.0, 2.2), "vtc": (2.0, 2.2),
            "sjf": (2.0, 2.2), "slo_aware": (1.0, 1.1)}  # fmt: skip
    same = {"lpm": "fcfs", "vtc": "fcfs"}  # sjf ties with fcfs at every seed but played otherwise
    with (folder / "results.csv").open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["policy", "scenario", "seed", "capacity_load", "capacity_rps", "trajectory"])
        for policy, values in caps.items():
            for seed, cap in enumerate(values):
                w.writerow([policy, "s", seed, cap, 2 * cap, f"{same.get(policy, policy)}-{seed}"])
    headline = bench_script("headline")
    (row,) = headline.collect(tmp_path)
    assert row["best_named"] == "fcfs" and row["same_as"] == {"fcfs": ["lpm", "vtc"], "sjf": [], "slo_aware": []}
    text = headline.markdown([row])
    assert "`fcfs` (= `lpm`, `vtc`) 2.10" in text and "`sjf` (=" not in text
    # without fingerprints (files written before them) nothing merges, and the table reads as it did
    rows = list(csv.reader((folder / "results.csv").open()))
    with (folder / "results.csv").open("w", newline="") as f:
        csv.writer(f).writerows([r[:-1] for r in rows])
    (row,) = headline.collect(tmp_path)
    assert "(=" not in headline.markdown([row]) and row["best_named"] == "fcfs"
