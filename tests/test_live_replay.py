"""The live-replay tool (``llmsched_env.live.replay``) on "live" runs made by llmsched's own simulator
(``tests/live_synthetic.py``): replayed with the cost model that made them, they come back exactly; with the
cost model fitted to their step log, nearly so; a wrong policy or cost model shows. Bad inputs:
``test_live_replay_inputs.py``."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest

from llmsched_env.commands.live_replay import main
from llmsched_env.live.replay import (
    StepRecord,
    compare,
    evaluate_runs,
    fit_live_cost_model,
    frontend_delay_s,
    live_fit_report,
    load_run,
    replay,
    step_breakdown,
    step_samples,
)
from tests.live_synthetic import ENGINE, EPOCH_S, TENANTS, TRUE_MODEL, write_run

FRONTEND_S = 0.004


def _rows(rows: list[dict]) -> dict[str, dict]:
    return {str(r["metric"]): r for r in rows}


@pytest.mark.parametrize("policy", ["fcfs", "slo_aware"])
def test_replay_with_the_true_cost_model_reproduces_the_run(tmp_path: Path, policy: str) -> None:
    made = write_run(tmp_path, policy, frontend_s=FRONTEND_S)
    run = load_run(tmp_path)
    assert made["preemptions"] > 0  # the run exercises preemption and recompute
    assert len(run.server) == 60  # the ready check and the other run's request are filtered out
    assert run.steps[0].t0_s >= run.start_s  # so is the step before the run
    sim = replay(run, policy, ENGINE, TENANTS, TRUE_MODEL)
    np.testing.assert_allclose(sim.ttft_s, made["ttft_s"], atol=1e-6)
    np.testing.assert_allclose(sim.e2e_s, made["e2e_s"], atol=1e-6)
    waits = [r.first_scheduled_s - r.arrival_s for r in run.server if r.first_scheduled_s is not None]
    np.testing.assert_allclose(sim.wait_s, waits, atol=1e-6)  # the engine's wait before its first step too
    rows = _rows(compare(run, sim))
    for metric in ("ttft_p50_s", "ttft_p99_s", "tpot_p50_s", "tpot_p99_s", "e2e_p50_s", "e2e_p99_s", "throughput_rps"):
        assert abs(rows[metric]["err_engine"]) < 1e-4, (metric, rows[metric])
    assert rows["completed"]["sim"] == rows["completed"]["engine"] == 60
    # the client saw every latency FRONTEND_S later: that is the front-end column, and the TTFT error
    assert rows["ttft_p50_s"]["frontend_s"] == pytest.approx(FRONTEND_S, abs=1e-6)
    assert rows["ttft_p50_s"]["err_client"] < -0.01
    assert rows["tpot_p50_s"]["frontend_s"] == pytest.approx(0.0, abs=1e-6)


def test_a_wrong_policy_or_cost_model_shows_as_error(tmp_path: Path) -> None:
    write_run(tmp_path, "slo_aware")
    run = load_run(tmp_path)
    slow = _rows(compare(run, replay(run, "slo_aware", ENGINE, TENANTS, TRUE_MODEL.scaled(1.5))))
    assert slow["e2e_p50_s"]["err_engine"] > 0.3 and slow["throughput_rps"]["err_engine"] < 0
    other = replay(run, "fcfs", ENGINE, TENANTS, TRUE_MODEL)
    exact = replay(run, "slo_aware", ENGINE, TENANTS, TRUE_MODEL)
    assert np.nanmax(np.abs(other.e2e_s - exact.e2e_s)) > 1e-3


def test_the_fitted_cost_model_recovers_the_true_one(tmp_path: Path) -> None:
    write_run(tmp_path, "fcfs", frontend_s=FRONTEND_S)
    run = load_run(tmp_path)
    model = fit_live_cost_model(run.steps)
    report = live_fit_report(model, run.steps)
    assert report["mean_rel_error"] < 1e-3 and report["measured_over_predicted"] == pytest.approx(1.0)
    np.testing.assert_allclose(model.coef_s[:3], TRUE_MODEL.coef_s[:3], rtol=1e-2)
    sim = replay(run, "fcfs", ENGINE, TENANTS, model)
    for metric, row in _rows(compare(run, sim)).items():
        assert abs(row["err_engine"]) < 1e-2, (metric, row)
    for metric, row in _rows(compare(run, sim, frontend_delay_s=frontend_delay_s(run))).items():
        if metric.startswith(("ttft", "e2e")):  # the front-end delay accounts for the client's extra time
            assert abs(row["err_client"]) < 1e-2, (metric, row)
            assert row["sim_delay_s"] == pytest.approx(FRONTEND_S, abs=1e-6)


def _step(t0: float, t3: float, busy: bool, prefill: int = 10, decodes: int = 2, model_s: float = 0.0) -> StepRecord:
    t1 = t0 + 0.001
    return StepRecord(t0, t1, t1 + model_s, t3, prefill, decodes, 100 * decodes, 55.0, 1 if prefill else 0, busy)


def test_step_samples_by_duration() -> None:
    steps = [
        _step(100.0, 100.008, True, model_s=0.005),  # period 0.010
        _step(100.010, 100.015, True, prefill=0, decodes=0),  # empty: skipped
        _step(100.020, 100.026, False, model_s=0.004),  # idle after: no period
        _step(105.0, 105.010, True, model_s=0.006),  # period 0.012
        _step(105.012, 105.020, False, model_s=0.005),  # last
    ]
    assert [s[4] for s in step_samples(steps)] == pytest.approx([0.010, 0.012])
    assert step_samples(steps)[0][:4] == (10, 2, 200, 55.0)
    assert [s[4] for s in step_samples(steps, "step")] == pytest.approx([0.008, 0.006, 0.010, 0.008])
    # model time plus the median over busy steps of period - model time (0.005 and 0.006: 0.0055)
    assert [s[4] for s in step_samples(steps, "model")] == pytest.approx([0.0105, 0.0095, 0.0115, 0.0105])
    # several logs: no period spans two (the first alone in its log has no next step)
    assert [s[4] for s in step_samples([steps[:1], steps[3:]])] == pytest.approx([0.012])
    assert [s[4] for s in step_samples(steps[:1] + steps[3:])] == pytest.approx([5.0, 0.012])
    parts = step_breakdown(steps)
    assert parts["num_busy_steps"] == 2 and parts["period_s"] == pytest.approx(0.011)
    assert parts["between_s"] == pytest.approx(0.002)
    with pytest.raises(ValueError, match="duration must be one of"):
        step_samples(steps, "wall")
    with pytest.raises(ValueError, match="only 2 usable steps"):
        fit_live_cost_model(steps)


def test_command_line_prints_and_writes_the_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # live.server's layout: the runs of one server side by side, its whole log in server-log/ beside them;
    # the server's policy saw a cost model of its own, named in the adapter's config
    logs, seen = tmp_path / "server-log", TRUE_MODEL.scaled(30.0)
    seen.save(tmp_path / "seen.json")
    write_run(tmp_path / "light", "slo_aware", 30, 5.0, seed=1, log_dir=logs, prefix="a-", seen=seen)
    write_run(tmp_path / "heavy", "slo_aware", seed=2, log_dir=logs, epoch_s=EPOCH_S + 100.0, prefix="b-", seen=seen)
    adapter = {"policy": "slo_aware", "tenants": [{"name": "chat", "slo": "chat"}, {"name": "batch", "slo": "batch"}],
               "cost_model": str(tmp_path / "seen.json"), "log_dir": str(logs)}  # fmt: skip
    (tmp_path / "adapter.json").write_text(json.dumps(adapter))
    out, model = tmp_path / "t.csv", tmp_path / "m.json"
    engine = ["num_kv_blocks=96", "max_num_seqs=16", "max_num_batched_tokens=512", "max_model_len=1024"]
    main([str(tmp_path / "heavy"), "--engine-config", *engine, "--adapter-config", str(tmp_path / "adapter.json"),
          "--frontend-from", str(tmp_path / "light"), "--out", str(out), "--save-model", str(model)])  # fmt: skip
    text = capsys.readouterr().out
    assert "policy slo_aware; the simulated TTFT and E2E include a front-end delay of 0.004 s" in text
    rows = list(csv.DictReader(out.open()))
    assert {r["run"] for r in rows} == {"heavy"} and rows[0]["policy"] == "slo_aware"
    assert next(r for r in rows if r["metric"] == "completed")["engine"] == "60.0"
    assert all(abs(float(r["err_client"])) < 0.01 for r in rows if r["metric"].startswith(("ttft", "tpot", "e2e")))
    assert json.loads(model.read_text())["kind"] == "linear"
    # without the adapter's config the policy sees the fitted model, decides otherwise, and the table shows it
    main([str(tmp_path / "heavy"), "--engine-config", *engine, "--policy", "slo_aware", "--tenants",
          "chat=chat,batch=batch", "--frontend-delay-s", "0.004", "--out", str(out)])  # fmt: skip
    assert "fitted to" in capsys.readouterr().out
    assert max(abs(float(r["err_client"])) for r in csv.DictReader(out.open())) > 0.05


def test_the_policy_sees_the_servers_cost_model(tmp_path: Path) -> None:
    seen = TRUE_MODEL.scaled(30.0)  # slo_aware sizes its token budget by it
    made = write_run(tmp_path, "slo_aware", seen=seen)
    run = load_run(tmp_path)
    same = replay(run, "slo_aware", ENGINE, TENANTS, TRUE_MODEL, policy_cost_model=seen)
    np.testing.assert_allclose(same.e2e_s, made["e2e_s"], atol=1e-6)
    other = replay(run, "slo_aware", ENGINE, TENANTS, TRUE_MODEL)
    assert np.nanmax(np.abs(other.e2e_s - made["e2e_s"])) > 0.01


def test_evaluate_runs_fits_on_other_runs(tmp_path: Path) -> None:
    for k in range(2):
        write_run(tmp_path / f"r{k}", "fcfs", num_requests=30, seed=k)
    runs = [load_run(tmp_path / f"r{k}") for k in range(2)]
    report = evaluate_runs(runs[:1], "fcfs", ENGINE, TENANTS, fit_runs=runs[1:])
    assert report.fit["num_steps"] == len(runs[1].steps)
    assert abs(_rows(report.rows)["e2e_p50_s"]["err_engine"]) < 1e-2
