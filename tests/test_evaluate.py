"""llmsched-evaluate beyond one table: policies by path, seeds -> mean and 95% CI (summary.csv), plots, TensorBoard
scalars, per-run details (latencies, KV usage series), determinism and clean errors."""

from __future__ import annotations

import ast
import csv
import subprocess
import sys
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import baselines
import llmsched_env  # noqa: F401
from llmsched_env import evaluation
from llmsched_env.commands.evaluate import main, parse
from llmsched_env.envs.episode import run_episode

ROOT = Path(__file__).resolve().parents[1]
PNGS = ("ttft_cdf.png", "tpot_cdf.png", "attainment_vs_load.png", "tenant_service.png", "kv_usage.png")
BASE = ["--scenarios", "mixed-slo", "--num-requests", "60"]


def _csv(path: Path) -> list[dict[str, str]]:
    with open(path) as f:
        return list(csv.DictReader(f))


def _without_wall(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in r.items() if k != "wall_s"} for r in rows]


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """fcfs and slo_aware on mixed-slo, 2 loads x 2 seeds, with plots (default with --out) and TensorBoard."""
    out = tmp_path_factory.mktemp("test")
    argv = [*BASE, "--policies", "fcfs,slo_aware", "--loads", "0.8,1.5", "--seeds", "0,1"]
    assert main([*argv, "--out", str(out), "--tensorboard", str(out / "tb")]) == 0
    return out


def test_results_keep_one_row_per_run_and_no_arrays(run: Path) -> None:
    rows = _csv(run / "results.csv")
    keys = [(r["policy"], r["load"], r["seed"]) for r in rows]
    assert keys == [(p, load, s) for load in ("0.8", "1.5") for p in ("fcfs", "slo_aware") for s in ("0", "1")]
    assert all(not v.startswith("[") for r in rows for v in r.values())
    assert "tenant/interactive/service" in rows[0]


def test_plots_are_valid_images(run: Path) -> None:
    import matplotlib.image

    for name in PNGS:
        path = run / name
        assert path.stat().st_size > 10_000, name
        img = matplotlib.image.imread(path)
        assert img.ndim == 3 and img.shape[0] > 200 and img.shape[1] > 300, name
        assert float(img[..., :3].std()) > 0.01, f"{name} is blank"


def test_summary_holds_mean_and_t_interval_per_policy_scenario_load(run: Path) -> None:
    rows = _csv(run / "results.csv")
    summary = _csv(run / "summary.csv")
    assert [(s["policy"], s["load"]) for s in summary] == [
        ("fcfs", "0.8"), ("slo_aware", "0.8"), ("fcfs", "1.5"), ("slo_aware", "1.5")
    ]  # fmt: skip
    for key in evaluation.SUMMARY_METRICS:
        assert f"{key}_mean" in summary[0] and f"{key}_ci95" in summary[0]
    differing = 0
    for s in summary:
        assert s["num_seeds"] == "2"
        for key in evaluation.SUMMARY_METRICS:
            a, b = (float(r[key]) for r in rows if (r["policy"], r["load"]) == (s["policy"], s["load"]))
            assert float(s[f"{key}_mean"]) == pytest.approx((a + b) / 2)
            # two seeds: s = |a - b| / sqrt(2), half-width = t(1) * s / sqrt(2)
            assert float(s[f"{key}_ci95"]) == pytest.approx(12.7062 * abs(a - b) / 2)
            differing += a != b
    assert differing > 0  # the seeds differ, so some intervals are > 0


def test_one_seed_gives_zero_width_and_no_plots_skips_plots(tmp_path: Path) -> None:
    argv = [*BASE, "--policies", "fcfs", "--seeds", "3", "--out", str(tmp_path), "--no-plots"]
    assert main(argv) == 0
    (s,) = _csv(tmp_path / "summary.csv")
    assert s["num_seeds"] == "1"
    assert all(float(s[f"{key}_ci95"]) == 0.0 for key in evaluation.SUMMARY_METRICS)
    assert not list(tmp_path.glob("*.png"))


def test_t_quantiles() -> None:
    assert evaluation.t_quantile_975(1) == pytest.approx(12.706, abs=1e-3)
    assert evaluation.t_quantile_975(10) == pytest.approx(2.228, abs=1e-3)
    assert evaluation.t_quantile_975(31) == pytest.approx(2.0395, abs=2e-4)  # the expansion joins the table
    assert evaluation.t_quantile_975(120) == pytest.approx(1.9799, abs=2e-4)
    assert evaluation.t_quantile_975(10**6) == pytest.approx(1.95996, abs=1e-4)
    assert evaluation.mean_ci95([0.5]) == (0.5, 0.0)
    mean, hw = evaluation.mean_ci95([1.0, 2.0, 3.0])
    assert mean == 2.0 and hw == pytest.approx(4.3027 * 1.0 / 3**0.5)
    with pytest.raises(ValueError):
        evaluation.t_quantile_975(0)


def test_tensorboard_scalars_per_run_with_seed_as_step(run: Path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    folders = sorted(p.parent for p in (run / "tb").rglob("events.out.tfevents.*"))
    assert len(folders) == 4  # one per (policy, scenario, load)
    acc = EventAccumulator(str(run / "tb" / "slo_aware" / "mixed-slo" / "load_1.5"))
    acc.Reload()
    tags = acc.Tags()["scalars"]
    for tag in ("eval/slo_attainment", "eval/goodput_rps", "eval/ttft_p99_s", "eval/tpot_p99_s", "eval/jain_fairness"):
        assert tag in tags
    assert "eval/tenant/interactive/slo_attainment" in tags
    rows = [r for r in _csv(run / "results.csv") if (r["policy"], r["load"]) == ("slo_aware", "1.5")]
    events = acc.Scalars("eval/slo_attainment")
    assert [e.step for e in events] == [0, 1]
    assert [e.value for e in events] == pytest.approx([float(r["slo_attainment"]) for r in rows])


def test_kv_usage_series_is_ordered_in_time_and_a_share_of_the_pool() -> None:
    env = gym.make("LLMSched-v1", scenario="mixed-slo", split="test", num_requests=60, load=1.5)
    run_episode(env, baselines.make("fcfs", env.unwrapped.policy_context()), seed=0)
    sim = env.unwrapped.sim
    t, u = sim.kv_usage_series()
    assert t.shape == u.shape == (sim.num_steps,)
    assert np.all(np.diff(t) >= 0) and t[0] >= sim.start_s and t[-1] == sim.now_s
    assert np.all((u >= 0) & (u <= 1)) and u.max() > 0


def test_details_match_the_metrics_and_evaluation_is_deterministic() -> None:
    config = parse([*BASE, "--policies", "random,slo_aware", "--seeds", "0,1", "--loads", "1,2"]).config
    result = evaluation.run_grid(config, details=True)
    rows, details = result.rows, result.details
    assert len(details) == len(rows) == 8
    for row, d in zip(rows, details, strict=True):
        assert [d[k] for k in evaluation.KEY_COLUMNS] == [row[k] for k in evaluation.KEY_COLUMNS]
        # TPOT is over the finished requests of more than one output token (vLLM's benchmark)
        assert d["ttft_s"].size == row["num_finished"] >= d["tpot_s"].size
        assert np.percentile(d["ttft_s"], 99) == pytest.approx(row["ttft_p99_s"])
        assert np.percentile(d["tpot_s"], 99) == pytest.approx(row["tpot_p99_s"])
        assert ("kv_usage" in d) == (row["seed"] == 0 and row["load"] == 1.0)
    again = evaluation.run_grid(config, details=True)
    assert _without_wall(again.rows) == _without_wall(rows)
    for a, b in zip(details, again.details, strict=True):
        np.testing.assert_array_equal(a["ttft_s"], b["ttft_s"])


def test_capacity_writes_its_plot(tmp_path: Path) -> None:
    argv = ["--capacity", "--scenarios", "bursty", "--num-requests", "40", "--policies", "fcfs", "--out", str(tmp_path)]
    assert main(argv) == 0
    assert (tmp_path / "capacity.png").stat().st_size > 5_000


@pytest.mark.parametrize("kind", ["missing", "junk_json", "not_json", "empty_dir"])
def test_a_bad_policy_path_is_a_clean_error_naming_it(kind: str, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    path = tmp_path / "nothing"
    if kind == "junk_json":
        path.mkdir()
        (path / "policy.json").write_text('{"format": "something else"}')
    elif kind == "not_json":
        path = tmp_path / "results.csv"
        path.write_text("a,b\n1,2\n")
    elif kind == "empty_dir":
        path.mkdir()
    with pytest.raises(SystemExit) as exc:
        parse(["--policies", f"fcfs,{path}"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert str(path) in err and "Traceback" not in err


def test_plots_module_needs_no_pyplot_gymnasium_or_torch() -> None:
    tree = ast.parse((ROOT / "llmsched_env" / "evaluation" / "plots.py").read_text())
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert {m.split(".")[0] for m in imported} <= {"__future__", "collections", "math", "os", "pathlib", "typing",
                                                   "numpy", "matplotlib"}  # fmt: skip
    # drawing leaves pyplot's global state alone (the package itself registers the env, hence gymnasium)
    code = "import sys, llmsched_env.evaluation.plots; assert 'matplotlib.pyplot' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


def test_an_exported_policy_runs_by_path(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    export = pytest.importorskip("agents.export")
    import torch
    from sb3_contrib import MaskablePPO

    torch.set_num_threads(1)
    env = gym.make("LLMSched-v0", scenario="mixed-slo", num_requests=60, schema=1)  # per-tenant features
    model = MaskablePPO("MlpPolicy", env, n_steps=64, seed=0)  # untrained: the format matters, not the skill
    folder = tmp_path / "ppo_mixed"
    export.export_policy(model, env, folder)
    out = tmp_path / "res"
    argv = [*BASE, "--policies", f"fcfs,mine={folder},{folder / 'policy.json'}", "--out", str(out), "--no-plots"]
    assert main(argv) == 0
    rows = _csv(out / "results.csv")
    assert [r["policy"] for r in rows] == ["fcfs", "mine", "ppo_mixed"]
    assert rows[1]["slo_attainment"] == rows[2]["slo_attainment"] and float(rows[1]["num_requests"]) == 60
    capsys.readouterr()
    with pytest.raises(SystemExit):  # the default scenario has other tenants, so other observation features
        parse(["--policies", str(folder), "--scenarios", "default"])
    err = capsys.readouterr().err
    assert str(folder) in err and "does not fit" in err and "Traceback" not in err
