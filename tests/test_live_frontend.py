"""The front end's figures of a live block (``live.blocks.frontend_figures``): how late the client sent the
requests against the plan, the client-minus-engine TTFT and the engine's steps per second; their recomputation
from a run's raw folders (``live.frontend``) and their table in the verdict (``live.verdict``)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from llmsched_env.live.blocks import FRONTEND_FIGURES, LATE_SEND_S, block_record, frontend_figures
from llmsched_env.live.frontend import FRONTEND_FILE, collect
from llmsched_env.live.frontend import main as frontend_main
from llmsched_env.live.logs import load_run
from llmsched_env.live.records import read_client_result
from llmsched_env.live.verdict import AA_ARM, build_verdict
from llmsched_env.live.verdict import main as verdict_main
from tests.live_synthetic import EPOCH_S, TENANTS, write_run
from tests.test_live_verdict import make_run

SLOS = {t.name: t for t in TENANTS}


def _delay(folder: Path, delays: dict[int, float]) -> None:
    """Make the client send request ``i`` ``delays[i]`` seconds later than it did."""
    path = folder / "bench-result.json"
    result = json.loads(path.read_text())
    for i, d in delays.items():
        result["start_times"][i] += d
    path.write_text(json.dumps(result))


def _figures(folder: Path) -> dict[str, float]:
    run = load_run(folder)
    return frontend_figures(run.plan, run.server, run.client, run.steps)


def test_requests_sent_on_time_have_no_lag_and_the_front_end_is_the_clients_extra_ttft(tmp_path: Path) -> None:
    write_run(tmp_path, num_requests=40, frontend_s=0.004)
    run = load_run(tmp_path)
    f = frontend_figures(run.plan, run.server, run.client, run.steps)
    assert set(f) == set(FRONTEND_FIGURES)
    assert f["late_share"] == 0.0 and f["send_lag_max_s"] == pytest.approx(0.0, abs=1e-9)
    assert f["frontend_p50_s"] == pytest.approx(0.004, abs=1e-6)  # (a time.time() clock: float error)
    assert f["frontend_p90_s"] == pytest.approx(0.004, abs=1e-6)
    busy = sum(1 for s in run.steps if s.busy)
    assert busy > 0 and f["steps_per_s"] == pytest.approx(busy / (run.end_s - run.start_s))


def test_late_sends_are_counted_against_the_plan_and_unplanned_ones_are_not(tmp_path: Path) -> None:
    write_run(tmp_path, num_requests=40)  # the client planned the even requests' times and drew the odd ones'
    _delay(tmp_path, {2: 0.5, 4: LATE_SEND_S / 2, 6: 2 * LATE_SEND_S, 1: 5.0})
    f = _figures(tmp_path)
    assert f["late_share"] == pytest.approx(2 / 20)  # 2 and 6 of the 20 planned; 4 is within; 1 has no plan
    assert f["send_lag_max_s"] == pytest.approx(0.5)


def test_a_first_request_sent_late_moves_the_origin_of_neither_clock(tmp_path: Path) -> None:
    write_run(tmp_path, num_requests=20)
    _delay(tmp_path, {i: 0.3 for i in range(0, 20, 2)})  # every planned send late alike: no request later than
    assert _figures(tmp_path)["late_share"] == 0.0  # its plan relative to the first


def test_the_client_result_without_send_times_gives_no_lag_and_malformed_ones_are_named(tmp_path: Path) -> None:
    write_run(tmp_path, num_requests=10)
    path = tmp_path / "bench-result.json"
    result = json.loads(path.read_text())
    path.write_text(json.dumps({k: v for k, v in result.items() if k != "start_times"}))
    f = _figures(tmp_path)
    assert math.isnan(f["late_share"]) and math.isnan(f["send_lag_max_s"]) and f["frontend_p50_s"] > 0
    path.write_text(json.dumps({**result, "start_times": result["start_times"][:-1]}))
    with pytest.raises(ValueError, match=r"bench-result.json: field 'start_times' must be a list of 10 numbers"):
        read_client_result(path, 10)


def test_a_server_without_the_adapter_gets_the_clients_figures_only(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    write_run(tmp_path / "run", num_requests=30, log_dir=logs)
    meta = {"cell": "c", "round": 0, "arm": "vllm", "warmup": False}
    logged = block_record(tmp_path / "run", logs, SLOS, None, meta)
    alone = block_record(tmp_path / "run", None, SLOS, None, meta, span_s=(10.0, 20.0))
    assert alone["metrics"] == logged["metrics"]
    assert json.dumps(alone["requests"]) == json.dumps(logged["requests"])  # NaN != NaN: compared as written
    assert (alone["t_start"], alone["t_end"], alone["completed"], alone["failed"]) == (10.0, 20.0, 30, 0)
    assert alone["shed"] is None and alone["preemptions"] is None and alone["steps"] is None
    assert alone["frontend"]["late_share"] == 0.0 and math.isnan(alone["frontend"]["frontend_p50_s"])
    assert math.isnan(alone["frontend"]["steps_per_s"]) and math.isnan(alone["step_time_median_s"])
    with pytest.raises(ValueError, match="needs span_s"):
        block_record(tmp_path / "run", None, SLOS, None, meta)


def _experiment(out: Path, blocks: int = 3) -> list[dict[str, Any]]:
    """Blocks on one instance (the driver's layout) and their records in ``cells/c/blocks.jsonl``, the
    second block sent late; the records as ``block_record`` wrote them."""
    instance = out / "workloads" / "w" / "compare"
    logs = instance / "blocks" / "server-log"
    records = []
    for k in range(blocks):
        folder = instance / "blocks" / f"{k:04d}"
        write_run(folder, num_requests=30, seed=k, log_dir=logs, epoch_s=EPOCH_S + 100 * k, prefix=f"compare-{k}-")
        if k == 1:
            _delay(folder, {i: 0.4 for i in range(10, 30, 2)})
    for k in range(blocks):
        folder = instance / "blocks" / f"{k:04d}"
        meta = {"cell": "c", "round": k, "arm": "fcfs", "warmup": False}
        records.append(block_record(folder, logs, SLOS, None, meta))
    (out / "cells" / "c").mkdir(parents=True)
    (out / "cells" / "c" / "blocks.jsonl").write_text(
        "".join(json.dumps({k: v for k, v in r.items() if k != "frontend"}) + "\n" for r in records)
    )  # as a run recorded before the figures were
    return records


def test_the_figures_recomputed_from_the_raw_folders_are_the_records_own(tmp_path: Path) -> None:
    records = _experiment(tmp_path)
    got = collect(tmp_path)["c"]
    assert [g["round"] for g in got] == [0, 1, 2]
    for g, r in zip(got, records, strict=True):
        assert g["t_start"] == r["t_start"]
        np.testing.assert_allclose([g[k] for k in FRONTEND_FIGURES], [r["frontend"][k] for k in FRONTEND_FIGURES])
    assert got[1]["late_share"] == pytest.approx(10 / 15) and got[0]["late_share"] == 0.0


def test_the_command_writes_the_file_and_a_summary(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _experiment(tmp_path)
    assert frontend_main([str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "fcfs" in out and f"wrote {tmp_path / FRONTEND_FILE}" in out
    assert json.loads((tmp_path / FRONTEND_FILE).read_text())["c"][1]["late_share"] == pytest.approx(10 / 15)
    (tmp_path / "cells" / "c" / "blocks.jsonl").write_text("{not json\n")
    assert frontend_main([str(tmp_path)]) == 1
    assert capsys.readouterr().err.startswith(f"llmsched frontend: {tmp_path / 'cells' / 'c' / 'blocks.jsonl'}:1: ")


def _frontend_file(out: Path, late: dict[str, float]) -> None:
    """``frontend.json`` for a ``make_run`` folder: each arm's blocks sent ``late[arm]`` late, busier when later."""
    data: dict[str, list[dict[str, Any]]] = {}
    for path in sorted((out / "cells").glob("*/blocks.jsonl")):
        rows = []
        for line in path.read_text().splitlines():
            b = json.loads(line)
            share = late.get(b["arm"], 0.0)
            figures = {"late_share": share, "send_lag_p90_s": share, "send_lag_max_s": 2 * share,
                       "frontend_p50_s": 0.008, "frontend_p90_s": 0.012, "steps_per_s": 80 + 100 * share}  # fmt: skip
            rows.append({k: b[k] for k in ("round", "arm", "warmup", "t_start")} | figures)
        data[path.parent.name] = rows
    (out / FRONTEND_FILE).write_text(json.dumps(data))


def test_the_verdict_reports_the_front_end_per_arm(tmp_path: Path) -> None:
    make_run(tmp_path, rounds=6)
    verdict = build_verdict(tmp_path)
    assert verdict.cells[0].frontend == [] and "## The front end" not in verdict.markdown  # none recorded
    _frontend_file(tmp_path, {"bad": 0.3, AA_ARM: 0.02})
    verdict = build_verdict(tmp_path)
    rows = {r["arm"]: r for r in verdict.cells[0].frontend}
    assert set(rows) == {"fcfs", AA_ARM, "good", "bad"} and rows["bad"]["blocks"] == 6
    assert rows["bad"]["late_share"] == pytest.approx(0.3) and rows["bad"]["late_blocks"] == 6
    assert rows["fcfs"]["late_share"] == 0.0 and rows[AA_ARM]["late_blocks"] == 0
    assert rows["bad"]["steps_per_s"] == pytest.approx(110.0)
    assert verdict.cells[0].frontend_rho > 0.9  # the busier blocks are the late ones
    assert "## The front end: did the requests reach the engine on time?" in verdict.markdown
    assert "| c1 | bad | 6 | 30.0% | 6 | 0.6 | 12 | 110 |" in verdict.markdown


def test_a_records_own_figures_win_and_a_malformed_file_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    make_run(tmp_path, rounds=4)
    path = tmp_path / "cells" / "c1" / "blocks.jsonl"
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    own = {k: 0.0 for k in FRONTEND_FIGURES} | {"late_share": 0.5}
    for b in lines:
        if b["arm"] == "good":
            b["frontend"] = own
    path.write_text("".join(json.dumps(b) + "\n" for b in lines))
    _frontend_file(tmp_path, {"good": 0.1})
    rows = {r["arm"]: r for r in build_verdict(tmp_path).cells[0].frontend}
    assert rows["good"]["late_share"] == 0.5 and rows["fcfs"]["late_share"] == 0.0
    (tmp_path / FRONTEND_FILE).write_text(json.dumps({"c1": [{"t_start": "x"}]}))
    assert verdict_main([str(tmp_path), "--no-plots"]) == 1
    err = capsys.readouterr().err
    where = f"{tmp_path / FRONTEND_FILE}: cell 'c1' entry 0"
    assert err == f"llmsched verdict: {where}: field 't_start' must be number, got 'x'\n"


def test_a_copy_without_the_raw_logs_keeps_its_figures(tmp_path: Path) -> None:
    make_run(tmp_path, rounds=4)
    _frontend_file(tmp_path, {"bad": 0.3})
    kept = (tmp_path / FRONTEND_FILE).read_text()
    (tmp_path / "workloads" / "w" / "compare").mkdir(parents=True)  # the committed copy: models, no server logs
    (tmp_path / "workloads" / "w" / "compare" / "cost-model.json").write_text("{}")
    assert verdict_main([str(tmp_path), "--no-plots"]) == 0
    assert (tmp_path / FRONTEND_FILE).read_text() == kept
    assert "| c1 | bad | 4 | 30.0% |" in (tmp_path / "report.md").read_text()
