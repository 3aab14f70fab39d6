"""The evaluation library from Python (no argparse) and llmsched-evaluate's live output: rows on stdout as
runs finish, progress bars on stderr (off with --no-progress), defaults in --help, a capacity search's bar."""

from __future__ import annotations

import argparse
import ast
import json
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import llmsched_env.evaluation.grid as grid_module
from llmsched_env.commands.evaluate import main, parse
from llmsched_env.commands.evaluate_args import build_parser
from llmsched_env.evaluation import (
    EvalConfig,
    capacity_grid,
    find_capacity,
    mean_ci95,
    run_grid,
    search_capacity,
    summarize,
    summarize_capacity,
    write_results,
)
from llmsched_env.evaluation.progress import Progress
from llmsched_env.workloads.library import get_scenario

ROOT = Path(__file__).resolve().parents[1]
GRID = ["--policies", "fcfs,slo_aware", "--seeds", "0,1", "--num-requests", "40"]


def _without_wall(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if k != "wall_s"} for r in rows]


def test_the_library_gives_the_rows_and_files_of_the_command(tmp_path: Path) -> None:
    assert main([*GRID, "--out", str(tmp_path / "cmd"), "--no-plots", "--no-progress"]) == 0
    config = EvalConfig(scenarios=["default"], policies=["fcfs", "slo_aware"], seeds=[0, 1], num_requests=40)
    rows = run_grid(config).rows
    assert _without_wall(json.loads((tmp_path / "cmd" / "results.json").read_text())) == _without_wall(rows)
    written = write_results(tmp_path / "lib", rows, summary=summarize(rows))
    assert [p.name for p in written] == ["results.csv", "results.json", "summary.csv"]
    cmd_summary = (tmp_path / "cmd" / "summary.csv").read_text()
    assert (tmp_path / "lib" / "summary.csv").read_text() == cmd_summary


def test_the_library_takes_no_argparse_and_imports_no_baselines() -> None:
    for path in sorted((ROOT / "llmsched_env" / "evaluation").glob("*.py")):
        tree = ast.parse(path.read_text())
        names = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        names |= {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        assert not {m.split(".")[0] for m in names} & {"argparse", "baselines"}, path.name


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"loads": [0.0]}, "EvalConfig.loads"),
        ({"seeds": []}, "EvalConfig.seeds needs at least one entry"),
        ({"num_requests": 0}, "EvalConfig.num_requests"),
        ({"split": "eval"}, "EvalConfig.split: split 'eval' was divided in two"),
        ({"scenarios": ["nope"]}, "unknown scenario 'nope'"),
        ({"policies": ["round_robin"]}, "routers (cluster scenarios only)"),
        ({"policies": ["fcfs", "a=fcfs", "a=sjf"]}, "EvalConfig.policies: a given more than once"),
        ({"scenarios": ["cluster-azure-conv-4"], "policies": ["fcfs"]}, "single-node schedulers"),
        ({"cost_model": "nope"}, "unknown cost model preset 'nope'"),
        ({"cost_model": "/no/such/model.json"}, "cost model file /no/such/model.json does not exist"),
    ],
)
def test_a_bad_config_is_one_value_error_naming_the_field(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError) as exc:
        EvalConfig(**kwargs)
    assert message in str(exc.value) and "\n" not in str(exc.value)


def test_a_config_with_a_policy_file_pickles_as_its_path() -> None:
    pytest.importorskip("torch")
    cloudpickle = pytest.importorskip("cloudpickle")  # Ray's pickler (scenarios hold closures)
    config = EvalConfig(scenarios=["mixed-slo"], policies=["agent=tests/data/policies/mixed-slo"], num_requests=30)
    again = pickle.loads(cloudpickle.dumps(config))
    spec = again.policies[0]
    assert spec._exported is None and spec.path == Path("tests/data/policies/mixed-slo")
    assert spec.exported.meta == config.policies[0].exported.meta  # loaded again from the path
    assert _without_wall(run_grid(again).rows) == _without_wall(run_grid(config).rows)


def test_rows_reach_stdout_as_runs_finish_and_the_bar_goes_to_stderr(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    seen = []
    real = grid_module.start_episode

    def spy(*args, **kwargs):  # what the command had printed when each run began
        seen.append(capsys.readouterr())
        return real(*args, **kwargs)

    monkeypatch.setattr(grid_module, "start_episode", spy)
    assert main(["--policies", "fcfs,slo_aware", "--num-requests", "30"]) == 0
    seen.append(capsys.readouterr())
    before_first, before_second, after = (s.out.splitlines() for s in seen)
    assert before_first[0] == "llmsched evaluation (times in seconds)" and before_first[1].startswith("policy")
    assert len(before_first) == 3  # title, header, rule: no row yet
    assert len(before_second) == 1 and before_second[0].startswith("fcfs ")  # the first run's row, alone
    assert after[0].startswith("slo_aware ")
    header = before_first[1]  # the rows line up under the header
    assert before_second[0].index(" default ") == after[0].index(" default ") == header.index(" scenario ")
    err = "".join(s.err for s in seen)
    assert "grid:" in err and "/2 [" in err  # tqdm's bar over the two runs, with its ETA, on stderr
    assert not any("grid:" in s.out for s in seen)


def test_no_progress_leaves_stderr_empty(capsys: pytest.CaptureFixture[str]) -> None:
    # 60 sharegpt-poisson requests arrive over 39 s, a sustained window for its 1 s TTFT target: nothing to flag
    assert main(["--policies", "fcfs", "--scenarios", "sharegpt-poisson", "--num-requests", "60", "--no-progress"]) == 0
    out, err = capsys.readouterr()
    assert err == "" and "fcfs" in out


def test_help_shows_every_default_and_runs_as_a_module() -> None:
    parser = build_parser("")
    options = [a for a in parser._actions if a.option_strings and a.dest != "help" and a.help != argparse.SUPPRESS]
    text = parser.format_help()
    assert text.count("(default") == len(options), text
    for expected in ("(default: fcfs)", "(default: default)", "(default: 1.0)", "(default: test)", "(default: off)"):
        assert expected in text
    done = subprocess.run(
        [sys.executable, "-m", "llmsched_env.commands.evaluate", "--help"], cwd=ROOT, capture_output=True, text=True
    )
    assert done.returncode == 0 and "--no-progress" in done.stdout and "(default: fcfs)" in done.stdout


def test_capacity_search_reports_what_it_still_expects() -> None:
    reports: list[int] = []
    loads: list[float] = []

    def attainment(load: float) -> float:
        loads.append(load)
        return 1.0 if load <= 3.3 else 0.0

    capacity = search_capacity(attainment, on_evaluation=reports.append)
    assert 3.3 / 1.02 <= capacity <= 3.3
    assert len(reports) == len(loads) == 9 and reports[-1] == 0  # 1, 2, 4, then six bisections
    expected = [done + remaining for done, remaining in enumerate(reports, start=1)]
    assert expected[1:] == [9] * 8  # exact from the second evaluation on (the first is a guess)


def test_capacity_grid_bar_ends_at_the_evaluations_it_made() -> None:
    # 200-request windows: sustained up to load 2.6 (40 would stop every search at its first load, 0.5)
    config = EvalConfig(scenarios=["bursty"], policies=["fcfs", "sjf"], num_requests=200)
    rows: list[dict] = []
    with Progress(total=0, desc="capacity", enabled=False) as bar:
        result = capacity_grid(config, on_row=rows.append, progress=bar)
    assert rows == result and [r["policy"] for r in rows] == ["fcfs", "sjf"]
    assert bar.total == bar.done >= 2 * 3


def test_per_seed_capacity_is_one_search_per_window_and_summarizes() -> None:
    config = EvalConfig(scenarios=["bursty"], policies=["fcfs"], seeds=[0, 1], num_requests=40)
    rows = capacity_grid(config, per_seed=True)
    assert [(r["policy"], r["seed"]) for r in rows] == [("fcfs", 0), ("fcfs", 1)]
    for row in rows:  # each is the search on that seed's window alone
        alone = find_capacity(EvalConfig(scenarios=["bursty"], policies=["fcfs"], seeds=[row["seed"]],
                                         num_requests=40), get_scenario("bursty"), "fcfs")  # fmt: skip
        assert alone["capacity_load"] == row["capacity_load"]
    (agg,) = summarize_capacity(rows)
    values = [r["capacity_load"] for r in rows]
    assert agg["num_seeds"] == 2 and agg["capacity_load_mean"] == pytest.approx(np.mean(values))
    assert agg["capacity_load_ci95"] == pytest.approx(mean_ci95(values)[1])
    with pytest.raises(SystemExit):
        parse(["--per-seed"])  # only with --capacity
