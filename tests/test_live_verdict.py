"""The verdict of a paired live experiment (``llmsched_env.live.verdict``) on synthetic runs whose truth is known.

``make_run`` writes a run folder in the driver's formats (``experiment.json``, the predictions with their
SHA-256, ``cells/CELL/blocks.jsonl`` in a Williams order): every round draws a shock shared by its blocks (the
stream, the host's mood), every block its own noise; an arm's attainment is the control's plus a known amount and
its TTFT the control's times a known factor, so the paired differences' truth is known exactly.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import subprocess
import sys
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from llmsched_env.live.design import williams_rounds
from llmsched_env.live.verdict import (
    AA_ARM,
    BLOCK_METRICS,
    Verdict,
    aa_coverage,
    build_verdict,
    kendall_tau_b,
    main,
    paired_interval,
    replication,
    skill_score,
)
from tests.bench_scripts import bench_script

ROOT = Path(__file__).resolve().parents[1]
EPOCH_S = 1.7e9  # blocks start here (a time.time() clock); the predictions are written before
ARMS = ("fcfs", AA_ARM, "good", "bad")
BASE_ATTAINMENT = 0.85
ATTAINMENT = {"fcfs": 0.0, AA_ARM: 0.0, "good": 0.08, "bad": -0.06}  # the true difference from fcfs
TTFT = {"fcfs": 1.0, AA_ARM: 1.0, "good": 0.7, "bad": 1.4}  # the true TTFT ratio to fcfs
PREEMPTIONS = {"fcfs": 3, AA_ARM: 3, "good": 1, "bad": 7}
BLOCK_S, GAP_S = 60.0, 10.0
Predict = Callable[[dict[str, Any]], None]


def _block(cell: str, r: int, arm: str, k: int, rng: np.random.Generator, shock: tuple[float, float],
           requests: int, drift: float) -> dict[str, Any]:  # fmt: skip
    """One block's record: attainment BASE + ATTAINMENT[arm] + the round's shock, TTFT lognormal around 0.2 s x
    TTFT[arm] x the round's factor; 1% of requests fail (no latencies)."""
    p = min(max(BASE_ATTAINMENT + ATTAINMENT.get(arm, -0.1) + shock[0], 0.0), 1.0)
    good = rng.random(requests) < p
    ttft = np.exp(math.log(0.2 * TTFT.get(arm, 1.2)) + shock[1] + 0.6 * rng.standard_normal(requests))
    tpot = np.exp(math.log(0.02) + 0.2 * rng.standard_normal(requests))
    e2e = ttft + 50 * tpot
    failed = rng.random(requests) < 0.01
    for a in (ttft, tpot, e2e):
        a[failed] = np.nan
    good &= ~failed
    t_start = EPOCH_S + k * (BLOCK_S + GAP_S)
    metrics = {"slo_attainment": float(good.mean()), "goodput_rps": float(good.sum() / BLOCK_S)}
    for name, values in (("ttft", ttft), ("tpot", tpot), ("e2e", e2e)):
        for q in (50, 90, 99):
            metrics[f"{name}_p{q}_s"] = float(np.percentile(values[~failed], q))
    unlogged = {"shed": None, "preemptions": None, "steps": None} if arm == "vllm" else {}  # no adapter, no log
    return {
        "cell": cell, "round": r, "arm": arm, "policy": None if arm == "vllm" else arm.split("/")[0],
        "warmup": r < 0, "stream_seed": 1000 + r, "t_start": t_start, "t_end": t_start + BLOCK_S,
        "num_requests": requests, "completed": int((~failed).sum()), "shed": int(arm == "bad"),
        "failed": int(failed.sum()), "preemptions": PREEMPTIONS.get(arm, 0),
        "fallbacks": {"timeout": 2} if arm == "bad" else {}, "steps": 1000,
        "step_time_median_s": 0.02 * (1 + drift * (t_start - EPOCH_S) / 3600),
        "metrics": {m: metrics[m] for m in BLOCK_METRICS},
        "tenants": {"chat": {"requests": requests, "slo_attainment": float(good.mean())}},
        "requests": [{"tenant": "chat", "ttft_s": float(ttft[i]), "tpot_s": float(tpot[i]), "e2e_s": float(e2e[i]),
                      "good": bool(good[i])} for i in range(requests)],
        **unlogged,
    }  # fmt: skip


def _write_predictions(path: Path, doc: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=1))
    path.with_suffix(".sha256").write_text(hashlib.sha256(path.read_bytes()).hexdigest() + "  " + path.name + "\n")
    os.utime(path, (EPOCH_S - 100, EPOCH_S - 100))  # written before the first compared block


def make_run(
    out: Path,
    cells: tuple[str, ...] = ("c1",),
    rounds: int = 16,
    seed: int = 0,
    requests: int = 200,
    predict: Predict | None = None,
    fidelity: float = 1.0,
    drift: float = 0.0,
    reference: bool = False,
    folders: bool = False,
) -> dict[str, Any]:
    """A run folder at ``out`` (module docstring); returns its predictions document. ``fidelity``: the predicted
    latencies are the live means over the arm's blocks times this; ``predict`` edits the predictions before they
    are written; ``folders``: one predictions file per cell in ``predictions/`` (the driver's layout per
    workload) rather than ``predictions.json``."""
    rng = np.random.default_rng(seed)
    order = williams_rounds(ARMS, rounds)
    k = 0
    blocks: dict[str, list[dict[str, Any]]] = {c: [] for c in cells}
    for c in cells:  # the discarded warm-up: far off, so that counting it would show
        blocks[c].append({**_block(c, -1, "fcfs", k, rng, (-0.5, 3.0), requests, drift), "warmup": True})
        k += 1
    for r in range(rounds):
        for c in cells:
            shock = (float(rng.normal(0, 0.04)), float(rng.normal(0, 0.25)))
            for arm in order[r]:
                blocks[c].append(_block(c, r, arm, k, rng, shock, requests, drift))
                k += 1
            if reference and r < 3:
                blocks[c].append(_block(c, r, "vllm", k, rng, shock, requests, drift))
                k += 1
    predictions: dict[str, Any] = {"format": "llmsched-live-predictions", "version": 1,
                                   "metrics": [*BLOCK_METRICS, "preemptions", "shed"], "cells": {}}  # fmt: skip
    for c in cells:
        arms = {}
        for arm in ARMS:
            mine = [b for b in blocks[c] if b["arm"] == arm and not b["warmup"]]
            att = BASE_ATTAINMENT + ATTAINMENT[arm]
            values = {m: fidelity * float(np.mean([b["metrics"][m] for b in mine])) for m in BLOCK_METRICS}
            values |= {"slo_attainment": att, "goodput_rps": att * requests / BLOCK_S}
            arms[arm] = values | {"preemptions": float(PREEMPTIONS[arm]), "shed": float(arm == "bad")}
        arms[AA_ARM] = dict(arms["fcfs"])  # the simulator plays the A/A arm as the control
        predictions["cells"][c] = {"rate_rps": 3.0, "arms": arms}
    if predict is not None:
        predict(predictions)
    out.mkdir(parents=True, exist_ok=True)
    if folders:
        for c in cells:
            one = {**predictions, "cells": {c: predictions["cells"][c]}}
            _write_predictions(out / "predictions" / f"w-{c}.json", one)
    else:
        _write_predictions(out / "predictions.json", predictions)
    experiment = {"workloads": {}, "cells": list(cells), "arms": list(ARMS), "statistics": {},
                  "reference": "vllm" if reference else None}  # fmt: skip
    (out / "experiment.json").write_text(json.dumps(experiment))
    for c in cells:
        (out / "cells" / c).mkdir(parents=True)
        (out / "cells" / c / "blocks.jsonl").write_text("".join(json.dumps(b) + "\n" for b in blocks[c]))
    return predictions


def _rows(verdict: Verdict, arm: str) -> dict[str, dict[str, Any]]:
    return {r["statistic"]: r for c in verdict.cells for r in c.paired if r["arm"] == arm}


def _target(verdict: Verdict, start: str) -> Any:
    return next(t for t in verdict.targets if t.name.startswith(start))


@pytest.fixture(scope="module")
def truthful(tmp_path_factory: pytest.TempPathFactory) -> Verdict:
    """A run whose predictions are the truth (latencies: the live means)."""
    out = tmp_path_factory.mktemp("truthful")
    make_run(out, reference=True)
    return build_verdict(out)


def test_a_known_difference_is_covered_with_its_sign(truthful: Verdict) -> None:
    for arm in ("good", "bad"):
        rows = _rows(truthful, arm)
        truth = {"attainment": ATTAINMENT[arm], "ttft_p90": math.log(TTFT[arm]), "ttft_p99": math.log(TTFT[arm])}
        for stat, value in truth.items():
            r = rows[stat]
            assert r["rounds"] == 16  # the warm-up is not a round
            assert r["low"] <= value <= r["high"], (arm, stat, r)
            assert r["excludes_zero"] and r["sign_agrees"], (arm, stat, r)
            assert r["inside"] is True
        assert rows["attainment"]["predicted"] == pytest.approx(ATTAINMENT[arm])
    good = _rows(truthful, "good")
    assert good["ttft_p99"]["live"] < 0 < good["attainment"]["live"]  # better: faster and more in SLO
    assert _target(truthful, "predicted differences").status == "met"
    assert _target(truthful, "Kendall").status == "met"
    assert all(c.tau["attainment"] == pytest.approx(1.0) for c in truthful.cells)


def test_the_aa_arm_measures_the_noise_floor(truthful: Verdict) -> None:
    rows = _rows(truthful, AA_ARM)
    assert set(rows) == {"attainment", "goodput", "ttft_p90", "ttft_p99"}
    for r in rows.values():
        assert r["low"] <= 0 <= r["high"] and not r["excludes_zero"], r
        assert r["sign_agrees"] is None  # predicted 0: no sign
    aa = _target(truthful, "A/A")
    assert aa.status == "met" and aa.detail.startswith("4 of 4 A/A intervals contain 0"), aa.detail
    assert "0.95^4 = 0.81" in aa.detail


def test_the_report_reads_as_the_figures_say(truthful: Verdict) -> None:
    md = truthful.markdown
    for heading in ("## Targets", "## Paired differences against fcfs", "## Rankings", "## A/A", "## Preemptions",
                    "## Step-time drift", "## Held-out fidelity", "## Reference: `vllm`"):  # fmt: skip
        assert heading in md, heading
    assert "WARNING" not in md
    good = _rows(truthful, "good")["attainment"]
    assert f"| c1 | good | attainment | 16 | {100 * good['live']:+.1f} pp |" in md
    ops = {r["arm"]: r for c in truthful.cells for r in c.operations}
    assert ops["bad"]["preemptions"] == 7 and ops["bad"]["shed"] == 1 and ops["bad"]["fallbacks"] == 2
    assert ops["bad"]["fallback_causes"] == {"timeout": 2.0} and ops["good"]["fallbacks"] == 0
    assert ops["fcfs"]["blocks"] == 16  # the warm-up left out
    assert ops["vllm"]["blocks"] == 3 and ops["vllm"]["predicted_preemptions"] != ops["vllm"]["predicted_preemptions"]
    # the reference: absolute figures, in no paired row
    assert all(r["arm"] != "vllm" for c in truthful.cells for r in c.paired)
    ref = {r["arm"]: r for c in truthful.cells for r in c.reference}
    assert ref["vllm"]["blocks"] == 3 and ref["fcfs"]["blocks"] == 3  # fcfs on the rounds the reference played
    assert ref["vllm"]["slo_attainment"].estimate < ref["fcfs"]["slo_attainment"].estimate  # 10 points lower


def test_against_another_arm_pairs_every_other_arm_with_it(tmp_path: Path) -> None:
    """``--against good``: the paired differences of every other arm (the control among them, the A/A arm left
    out) against ``good``'s block of each round, live and predicted: their truth is the difference of the known
    amounts; an arm that was not compared is refused in one line."""
    make_run(tmp_path)
    verdict = build_verdict(tmp_path, against=["good"])
    rows = {(r["arm"], r["statistic"]): r for c in verdict.cells for r in c.against["good"]}
    assert {arm for arm, _ in rows} == {"fcfs", "bad"}
    for arm in ("fcfs", "bad"):
        r = rows[(arm, "attainment")]
        truth = ATTAINMENT[arm] - ATTAINMENT["good"]
        assert r["low"] <= truth <= r["high"] and r["excludes_zero"] and r["inside"], r
        assert r["predicted"] == pytest.approx(truth)
        assert rows[(arm, "ttft_p90")]["live"] == pytest.approx(math.log(TTFT[arm] / TTFT["good"]), abs=0.1)
    assert "## Paired differences against good" in verdict.markdown and "against good:" in verdict.table
    assert _rows(verdict, "good") == _rows(build_verdict(tmp_path), "good")  # the table against fcfs unchanged
    for bad in ("fcfs", AA_ARM, "nope"):
        with pytest.raises(ValueError, match=rf"^--against '{bad}': not a compared arm of .* \(one of: good, bad\)$"):
            build_verdict(tmp_path, against=[bad])


def test_a_prediction_far_off_is_flagged_outside(tmp_path: Path) -> None:
    def far(doc: dict[str, Any]) -> None:
        doc["cells"]["c1"]["arms"]["good"]["slo_attainment"] = BASE_ATTAINMENT + 0.35

    make_run(tmp_path, predict=far)
    verdict = build_verdict(tmp_path)
    r = _rows(verdict, "good")["attainment"]
    assert r["predicted"] == pytest.approx(0.35) and r["inside"] is False and r["sign_agrees"] is True
    # 2 arms x 4 statistics (no control, no A/A): a figure, not a target
    assert "The prediction inside the live 95% interval: 7 of 8 inside;" in verdict.markdown
    assert not any("inside" in t.name for t in verdict.targets)
    assert "| c1 | good | attainment | 16 |" in verdict.markdown and "| +35.0 pp | yes | **no** |" in verdict.markdown


def test_a_wrong_ranking_fails_kendall_and_the_confirmation(tmp_path: Path) -> None:
    def swapped(doc: dict[str, Any]) -> None:
        arms = doc["cells"]["c1"]["arms"]
        arms["good"], arms["bad"] = arms["bad"], arms["good"]

    make_run(tmp_path, predict=swapped)
    verdict = build_verdict(tmp_path)
    assert verdict.cells[0].tau["attainment"] == pytest.approx(-1.0)
    assert _target(verdict, "Kendall").status == "not met"
    confirmed = _target(verdict, "predicted differences")
    assert confirmed.status == "not met" and confirmed.detail.startswith("0 of 4 confirmed"), confirmed.detail


@pytest.mark.parametrize(("factor", "status"), [(1.1, "met"), (1.2, "not met")])
def test_held_out_fidelity_is_the_mean_relative_error(tmp_path: Path, factor: float, status: str) -> None:
    """Predicted latencies ``factor`` x the live means: every error is factor - 1 (the warm-up, 15x slower, would
    show if it counted); 10% passes both limits, 20% fails the p50 one (15%) and passes the p99 one (25%)."""
    make_run(tmp_path, fidelity=factor)
    verdict = build_verdict(tmp_path)
    for r in verdict.cells[0].fidelity:
        assert r["p50"] == pytest.approx(factor - 1) and r["p99"] == pytest.approx(factor - 1), r
    target = _target(verdict, "held-out fidelity")
    assert target.status == status and f"fcfs p50 {factor - 1:.1%}, p99 {factor - 1:.1%}" in target.detail


def test_the_step_time_drift_of_the_control(tmp_path: Path) -> None:
    make_run(tmp_path, rounds=12, drift=0.3)
    drift = build_verdict(tmp_path).cells[0].drift
    fcfs = [json.loads(line) for line in (tmp_path / "cells/c1/blocks.jsonl").read_text().splitlines()]
    steps = [b["step_time_median_s"] for b in fcfs if b["arm"] == "fcfs" and not b["warmup"]]
    assert drift["blocks"] == 12
    assert drift["first_third_s"] == pytest.approx(float(np.median(steps[:4])))
    assert drift["last_third_s"] == pytest.approx(float(np.median(steps[-4:])))
    assert drift["change"] == pytest.approx(np.median(steps[-4:]) / np.median(steps[:4]) - 1) and drift["change"] > 0.1
    assert drift["slope_per_h"] == pytest.approx(0.02 * 0.3 / float(np.mean(steps)))
    steady = tmp_path / "steady"
    make_run(steady, rounds=12)
    assert build_verdict(steady).cells[0].drift["slope_per_h"] == pytest.approx(0.0, abs=1e-12)


def test_the_paired_t_interval_covers_the_truth_95_percent_of_the_time() -> None:
    rng = np.random.default_rng(7)
    hits = sum(paired_interval(rng.normal(0.03, 0.05, 10).tolist()).contains(0.03) for _ in range(1000))
    assert 920 <= hits <= 980, hits
    iv = paired_interval([0.1, 0.3, math.nan])
    assert iv.n == 2 and iv.estimate == pytest.approx(0.2) and iv.high - iv.low == pytest.approx(2 * 12.7062 * 0.1)
    assert not paired_interval([0.1]).measured


def _blocks(out: Path, cell: str = "c1") -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / "cells" / cell / "blocks.jsonl").read_text().splitlines()]


def _per_round(out: Path, arm: str, metric: str, control: str = "fcfs") -> tuple[list[float], list[float]]:
    """The arm's and the control's per-block ``metric`` over the compared rounds, round by round."""
    blocks = [b for b in _blocks(out) if not b["warmup"]]
    by = {(b["round"], b["arm"]): b["metrics"][metric] for b in blocks}
    rounds = sorted(r for r, a in by if a == arm and (r, control) in by)
    return [by[(r, arm)] for r in rounds], [by[(r, control)] for r in rounds]


def test_ttft_p99_is_a_t_interval_of_the_per_round_log_ratios_of_the_blocks_p99(tmp_path: Path) -> None:
    make_run(tmp_path)
    rows = _rows(build_verdict(tmp_path), "good")
    arm, control = _per_round(tmp_path, "good", "ttft_p99_s")
    d = np.log(np.array(arm) / np.array(control))
    half = 2.131449546 * d.std(ddof=1) / math.sqrt(16)  # t(0.975, 15 degrees of freedom)
    r = rows["ttft_p99"]
    assert r["rounds"] == 16 and r["metric"] == "ttft_p99_s"
    assert r["live"] == pytest.approx(d.mean())
    assert r["live"] - r["low"] == pytest.approx(half, rel=1e-4) and r["high"] - r["live"] == pytest.approx(
        half, rel=1e-4
    )


def test_kendall_tau_b_on_hand_made_rankings() -> None:
    assert kendall_tau_b([1, 2, 3, 4], [10, 20, 30, 40]) == 1.0
    assert kendall_tau_b([1, 2, 3, 4], [4, 3, 2, 1]) == -1.0
    # pairs: 4 concordant, 0 discordant, one tied in x, one tied in y: 4 / sqrt(5 * 5)
    assert kendall_tau_b([1, 2, 2, 3], [1, 2, 3, 3]) == pytest.approx(0.8)
    # 1 concordant, 1 discordant, 1 tied in x: 0
    assert kendall_tau_b([0, 0, 1], [1, 2, 1.5]) == pytest.approx(0.0)
    assert math.isnan(kendall_tau_b([1, 1, 1], [1, 2, 3]))  # no ranking on one side
    assert kendall_tau_b([1, math.nan, 2, 3], [1, 5, 2, 3]) == 1.0  # NaN pairs dropped
    stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(0)
    for _ in range(20):
        x, y = rng.integers(0, 4, 7).tolist(), rng.integers(0, 4, 7).tolist()
        expected = stats.kendalltau(x, y, variant="b").statistic
        assert kendall_tau_b(x, y) == pytest.approx(expected, nan_ok=True), (x, y)


def test_the_command_writes_the_report_and_the_plots(tmp_path: Path) -> None:
    make_run(tmp_path, cells=("c1", "c2"), rounds=6)
    env = {**os.environ, "MPLBACKEND": "Agg", "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-m", "llmsched_env.live.verdict", str(tmp_path)], cwd=ROOT,
                          capture_output=True, text=True, env=env)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("| cell | arm | statistic | rounds | live | 95% interval | predicted |")
    assert "| target | status | numbers |" in done.stdout
    assert (tmp_path / "report.md").read_text().startswith(f"# Live verdict: {tmp_path.name}")
    for c in ("c1", "c2"):
        assert (tmp_path / "plots" / f"{c}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _fails(out: Path, capsys: pytest.CaptureFixture[str]) -> str:
    assert main([str(out), "--no-plots"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err  # one line
    assert not (out / "report.md").exists()
    return err


@pytest.mark.parametrize("name", ["experiment.json", "predictions.json", "cells/c1/blocks.jsonl"])
def test_a_missing_file_is_named_in_one_line(tmp_path: Path, name: str, capsys: pytest.CaptureFixture[str]) -> None:
    make_run(tmp_path, rounds=4)
    (tmp_path / name).unlink()
    assert _fails(tmp_path, capsys) == f"llmsched verdict: {tmp_path / name}: missing\n"


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda b: b.pop("preemptions"), "blocks.jsonl:3: missing field 'preemptions'"),
        (lambda b: b.update(round="1"), "blocks.jsonl:3: field 'round' must be int"),
        (lambda b: b.update(arm="nope"), "blocks.jsonl:3: arm 'nope' is not an arm of experiment.json"),
        (lambda b: b["requests"][0].update(good=1), "blocks.jsonl:3: requests[0]: field 'good' must be bool"),
        (lambda b: b["metrics"].pop("ttft_p90_s"), "blocks.jsonl:3: metrics: missing field 'ttft_p90_s'"),
    ],
)
def test_a_malformed_block_is_named_by_file_and_line(
    tmp_path: Path, edit: Callable[[dict[str, Any]], Any], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    make_run(tmp_path, rounds=4)
    path = tmp_path / "cells/c1/blocks.jsonl"
    lines = path.read_text().splitlines()
    block = json.loads(lines[2])
    edit(block)
    lines[2] = json.dumps(block)
    path.write_text("\n".join(lines) + "\n")
    err = _fails(tmp_path, capsys)
    assert f"{tmp_path}/cells/c1/{message}" in err, err


def test_a_round_played_twice_is_refused_and_a_missing_block_warned(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    make_run(tmp_path, rounds=6)
    path = tmp_path / "cells/c1/blocks.jsonl"
    lines = path.read_text().splitlines()
    path.write_text("\n".join([*lines, lines[1]]) + "\n")
    assert "again (line 2)" in _fails(tmp_path, capsys)
    gone = [line for line in lines if not (json.loads(line)["round"] == 2 and json.loads(line)["arm"] == "good")]
    path.write_text("\n".join(gone) + "\n")
    verdict = build_verdict(tmp_path)
    assert _rows(verdict, "good")["attainment"]["rounds"] == 5 and _rows(verdict, "bad")["attainment"]["rounds"] == 6
    assert verdict.warnings == ["cell c1, round 2: no block of good (the round pairs without it)"]


def test_changed_predictions_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    make_run(tmp_path, rounds=4)
    pred = tmp_path / "predictions.json"
    pred.write_text(pred.read_text().replace('"version": 1', '"version": 1 '))  # one byte more, same content
    err = _fails(tmp_path, capsys)
    assert err.startswith(f"llmsched verdict: {tmp_path / 'predictions.sha256'}: records ")
    assert "the predictions changed after the run began" in err
    (tmp_path / "predictions.sha256").write_text("not a hash\n")
    assert "expected a SHA-256" in _fails(tmp_path, capsys)
    (tmp_path / "predictions.sha256").unlink()  # nothing recorded: accepted, and the report says so
    assert "(no `.sha256`)" in build_verdict(tmp_path).markdown


def test_predictions_written_after_the_first_block_are_warned(tmp_path: Path) -> None:
    make_run(tmp_path, rounds=4)
    os.utime(tmp_path / "predictions.json", (EPOCH_S + 30, EPOCH_S + 30))  # after the warm-up, before the rounds
    assert build_verdict(tmp_path).warnings == []
    os.utime(tmp_path / "predictions.json", (EPOCH_S + BLOCK_S + GAP_S, EPOCH_S + BLOCK_S + GAP_S))
    verdict = build_verdict(tmp_path)
    assert len(verdict.warnings) == 1 and "after the first compared block" in verdict.warnings[0]
    assert "**WARNING: predictions.json was last modified at" in verdict.markdown


def test_predictions_of_a_malformed_kind_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def no_good(doc: dict[str, Any]) -> None:
        del doc["cells"]["c1"]["arms"]["good"]

    make_run(tmp_path, rounds=4, predict=no_good)
    assert "no predictions for arm 'good' of cell 'c1'" in _fails(tmp_path, capsys)

    def text_value(doc: dict[str, Any]) -> None:
        doc["cells"]["c1"]["arms"]["bad"]["shed"] = "1"

    other = tmp_path / "other"
    make_run(other, rounds=4, predict=text_value)
    assert "cells.c1.arms.bad: field 'shed' must be number or null" in _fails(other, capsys)


def test_predictions_per_workload_in_a_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The driver's layout: ``predictions/WORKLOAD.json`` and its ``.sha256``, each for its cells; no A/A prediction
    (the control's is used); values NaN where the simulator had none."""

    def edit(doc: dict[str, Any]) -> None:
        for c in doc["cells"].values():
            del c["arms"][AA_ARM]
        doc["cells"]["c2"]["arms"]["bad"]["tpot_p99_s"] = math.nan

    make_run(tmp_path, cells=("c1", "c2"), rounds=4, predict=edit, folders=True)
    verdict = build_verdict(tmp_path)
    assert "`predictions/w-c1.json` (c1)" in verdict.markdown and "`predictions/w-c2.json` (c2)" in verdict.markdown
    assert _rows(verdict, AA_ARM)["attainment"]["predicted"] == 0.0
    bad_c2 = next(r for r in verdict.cells[1].fidelity if r["arm"] == "bad")
    assert math.isnan(bad_c2["tpot_p99_s"]) and math.isnan(bad_c2["p99"])
    assert _target(verdict, "held-out fidelity").status == "not measurable"
    second = tmp_path / "predictions" / "w-c2.json"
    second.write_text(second.read_text() + " ")
    assert f"{second.with_suffix('.sha256')}: records" in _fails(tmp_path, capsys)


def test_a_block_without_latencies_leaves_its_round_out_of_that_statistic(tmp_path: Path) -> None:
    make_run(tmp_path, rounds=5)
    path = tmp_path / "cells/c1/blocks.jsonl"
    blocks = [json.loads(line) for line in path.read_text().splitlines()]
    target = next(b for b in blocks if b["arm"] == "good" and b["round"] == 3)
    target["metrics"]["ttft_p90_s"] = math.nan  # written as NaN, as json.dumps does
    target["metrics"]["ttft_p99_s"] = None
    path.write_text("".join(json.dumps(b) + "\n" for b in blocks))
    rows = _rows(build_verdict(tmp_path), "good")
    assert rows["ttft_p90"]["rounds"] == 4 and rows["attainment"]["rounds"] == 5


def test_a_run_that_stopped_early_is_judged_on_the_cells_it_reached(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    make_run(tmp_path, cells=("c1", "c2"), rounds=4)
    (tmp_path / "cells" / "c2" / "blocks.jsonl").unlink()
    experiment = json.loads((tmp_path / "experiment.json").read_text())
    (tmp_path / "experiment.json").write_text(json.dumps({**experiment, "started": EPOCH_S - 200}))
    verdict = build_verdict(tmp_path)
    assert [c.name for c in verdict.cells] == ["c1"]
    assert any("stopped before its end" in w and "cell c2 has no blocks" in w for w in verdict.warnings)
    assert "WARNING: the run stopped before its end" in verdict.markdown
    finished = {**experiment, "started": EPOCH_S - 200, "finished": EPOCH_S + 1e4}
    (tmp_path / "experiment.json").write_text(json.dumps(finished))  # a finished run must have every cell
    assert _fails(tmp_path, capsys) == f"llmsched verdict: {tmp_path / 'cells' / 'c2' / 'blocks.jsonl'}: missing\n"


def test_a_written_time_in_the_predictions_wins_over_the_files_time(tmp_path: Path) -> None:
    make_run(tmp_path, rounds=4, predict=lambda doc: doc.update(written=EPOCH_S - 100))
    os.utime(tmp_path / "predictions.json", (EPOCH_S + 1e5, EPOCH_S + 1e5))  # a checkout: the file's time is now
    assert build_verdict(tmp_path).warnings == []
    make_run(tmp_path / "late", rounds=4, predict=lambda doc: doc.update(written=EPOCH_S + 1e4))
    warnings = build_verdict(tmp_path / "late").warnings
    assert len(warnings) == 1 and "predictions.json was written at" in warnings[0] and "written field" in warnings[0]


_COMMITTED = Path(__file__).resolve().parents[1] / "docs" / "results" / "vllm-verdict"


@pytest.mark.slow
@pytest.mark.parametrize("run", sorted(p.parent.name for p in _COMMITTED.glob("*/report.md")) or ["none"])
def test_the_committed_live_reports_are_what_their_data_give(run: str, tmp_path: Path) -> None:
    """Every report in docs/results/vllm-verdict is the verdict of the data packed beside it (``RUN.tar.gz``,
    bench/results_archive.py), byte for byte (the figures docs/results.md quotes come from these reports), with
    the arms its ``--against`` tables name."""
    if run == "none":
        pytest.skip("no committed live verdict")
    bench_script("results_archive").extract(_COMMITTED / f"{run}.tar.gz", tmp_path)
    report = (_COMMITTED / run / "report.md").read_text()
    against = re.findall(r"^## Paired differences against (?!fcfs$)(.+)$", report, flags=re.MULTILINE)
    assert build_verdict(tmp_path / run, against=against).markdown == report


# ------------------------------------------------------------------------------------ skill against simple predictors


def _repredict(out: Path, edit: Callable[[dict[str, Any]], None]) -> None:
    """Rewrite ``out``'s predictions (and their SHA-256) after ``edit``."""
    path = out / "predictions.json"
    doc = json.loads(path.read_text())
    edit(doc)
    _write_predictions(path, doc)


def test_skill_score_on_a_hand_example() -> None:
    assert skill_score([0.01, -0.02], [0.05, 0.03]) == (pytest.approx(1 - 0.0005 / 0.0034), 2)
    assert skill_score([0.01, math.nan, 0.5], [0.05, 0.1, math.nan]) == (pytest.approx(1 - 0.0001 / 0.0025), 1)
    assert skill_score([0.1], [0.1]) == (0.0, 1)  # as good as the simple predictor
    assert math.isnan(skill_score([], [])[0]) and math.isnan(skill_score([0.1], [0.0])[0])  # not measurable


def test_the_skill_against_no_difference_is_exact(tmp_path: Path) -> None:
    """Predicted differences off the live ones by +2 and -1 points: skill 1 - (0.02^2 + 0.01^2) / sum live^2."""
    make_run(tmp_path)
    live = {arm: float(np.mean(np.subtract(*_per_round(tmp_path, arm, "slo_attainment")))) for arm in ("good", "bad")}

    def off(doc: dict[str, Any]) -> None:
        arms = doc["cells"]["c1"]["arms"]
        base = arms["fcfs"]["slo_attainment"]
        arms["good"]["slo_attainment"] = base + live["good"] + 0.02
        arms["bad"]["slo_attainment"] = base + live["bad"] - 0.01

    _repredict(tmp_path, off)
    verdict = build_verdict(tmp_path)
    skill = next(r for r in verdict.skills if r["statistic"] == "attainment")
    assert skill["null_rows"] == 2  # good and bad: neither the control nor the A/A arm
    assert skill["null"] == pytest.approx(1 - 0.0005 / (live["good"] ** 2 + live["bad"] ** 2))
    target = _target(verdict, "skill against 'no difference'")
    assert target.status == "met" and f"attainment {skill['null']:.2f} (2 rows)" in target.detail
    assert (
        "| attainment | 2 |" in verdict.markdown
        and "## Skill: the simulator against simple predictors" in verdict.markdown
    )


def test_the_skill_against_the_calibration_only_predictor(tmp_path: Path) -> None:
    """On levels: 1 - sum (predicted - live)^2 / sum (predicted fcfs - live)^2, live the arm's mean block figure;
    predicting fcfs's figures for every arm scores 0 against both simple predictors."""
    make_run(tmp_path)
    live = {arm: float(np.mean(_per_round(tmp_path, arm, "slo_attainment")[0])) for arm in ("good", "bad")}
    preds = json.loads((tmp_path / "predictions.json").read_text())["cells"]["c1"]["arms"]
    fcfs = preds["fcfs"]["slo_attainment"]
    num = sum((preds[a]["slo_attainment"] - live[a]) ** 2 for a in live)
    den = sum((fcfs - live[a]) ** 2 for a in live)
    verdict = build_verdict(tmp_path)
    skill = next(r for r in verdict.skills if r["statistic"] == "attainment")
    assert skill["calibration_rows"] == 2 and skill["calibration"] == pytest.approx(1 - num / den)
    assert skill["calibration"] > 0.5 and _target(verdict, "skill against the calibration-only").status == "met"
    # latencies on log ratios: predicted TTFT p90 x1.5 the live mean for every arm
    p90 = {a: float(np.mean(_per_round(tmp_path, a, "ttft_p90_s")[0])) for a in live}

    def calibration_only(doc: dict[str, Any]) -> None:
        arms = doc["cells"]["c1"]["arms"]
        for arm in ("good", "bad"):
            arms[arm] = dict(arms["fcfs"])

    _repredict(tmp_path, calibration_only)
    flat = build_verdict(tmp_path)
    for r in flat.skills:
        assert r["calibration"] == pytest.approx(0.0) and r["null"] == pytest.approx(0.0), r
    assert _target(flat, "skill against the calibration-only").status == "not met"
    assert p90["good"] < p90["bad"]  # the arms differ live: the denominators are not 0


def test_a_skill_without_rows_is_not_measurable(tmp_path: Path) -> None:
    def unknown(doc: dict[str, Any]) -> None:
        for arm in ("good", "bad"):
            doc["cells"]["c1"]["arms"][arm]["slo_attainment"] = None

    make_run(tmp_path, rounds=4, predict=unknown)
    verdict = build_verdict(tmp_path)
    skill = next(r for r in verdict.skills if r["statistic"] == "attainment")
    assert skill["null_rows"] == 0 and math.isnan(skill["null"]) and math.isnan(skill["calibration"])
    for name in ("skill against 'no difference'", "skill against the calibration-only"):
        assert _target(verdict, name).status == "not measurable"


# ------------------------------------------------------------------------ what the run can do: the first line


def _edit_experiment(out: Path, **fields: Any) -> None:
    path = out / "experiment.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **fields}))


def _flag(out: Path, picks: dict[tuple[int, str], str | None], cell: str = "c1") -> None:
    """Give every block of ``cell`` a host check; the (round, arm) of ``picks`` get that flag."""
    blocks = _blocks(out, cell)
    for b in blocks:
        b["host"] = {"others_share": 0.05, "steal_share": 0.0, "step_ratio": 1.02,
                     "flag": picks.get((b["round"], b["arm"]))}  # fmt: skip
    (out / "cells" / cell / "blocks.jsonl").write_text("".join(json.dumps(b) + "\n" for b in blocks))


HOST = {"override": True, "threshold": 0.25, "before": {"others_share": 0.4, "steal_share": 0.01,
                                                         "load_average": [3.5, 2.0, 1.0]}}  # fmt: skip


def test_the_first_line_says_what_the_run_can_do(tmp_path: Path) -> None:
    make_run(tmp_path, cells=("c1", "c2"), rounds=4)
    assert build_verdict(tmp_path).markdown.startswith(f"# Live verdict: {tmp_path.name}\n")  # an old run: as before
    _edit_experiment(tmp_path, smoke_test=True)
    verdict = build_verdict(tmp_path)
    assert verdict.first_line == "Smoke test (--quick): confirms nothing."
    assert verdict.markdown.startswith("Smoke test (--quick): confirms nothing.\n\n# Live verdict:")
    assert verdict.table.startswith("Smoke test (--quick): confirms nothing.\n\n| cell |")
    note = "the A/A noise needs 31 rounds to detect 5 points, the budget allows 4."
    workloads = {"w": {"confirmable": False, "power_note": note}, "v": {"confirmable": True}}
    _edit_experiment(tmp_path, smoke_test=False, host=HOST, workloads=workloads)
    _flag(tmp_path, {(1, "good"): "others used 60% of the CPUs", (-1, "fcfs"): "steal 20%"})
    _flag(tmp_path, {(2, AA_ARM): "step time x1.8"}, cell="c2")
    line = build_verdict(tmp_path).markdown.splitlines()[0]
    assert line == (
        f"This run can confirm nothing on w: {note[:-1]}. Host guard overridden (others used 40.0% of the "
        "server's CPUs at start, threshold 25.0%). 3 blocks flagged by the host guard (cells: c1, c2)."
    )


def test_the_flagged_blocks_are_listed(tmp_path: Path) -> None:
    make_run(tmp_path, rounds=4)
    _flag(tmp_path, {})
    verdict = build_verdict(tmp_path)
    assert (
        verdict.first_line == ""
        and "## Host guard\n\nNo block flagged by the host guard (17 checked)." in verdict.markdown
    )
    _flag(tmp_path, {(1, "good"): "others used 60% of the CPUs", (-1, "fcfs"): "steal 20%"})
    _edit_experiment(tmp_path, host={**HOST, "override": False})
    verdict = build_verdict(tmp_path)
    assert verdict.first_line == "2 blocks flagged by the host guard (cells: c1)."
    md = verdict.markdown
    assert ("At the start, other processes used 40.0% of the server's CPUs (steal 1.0%, load average 3.50, 2.00, "
            "1.00); the guard's threshold 25.0%.") in md  # fmt: skip
    assert "The blocks the host guard flagged (2 of 17 checked):" in md
    assert "| c1 | warm-up | fcfs | steal 20% | 5.0% | 0.0% | 1.02 |" in md
    assert "| c1 | 1 | good | others used 60% of the CPUs | 5.0% | 0.0% | 1.02 |" in md


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"smoke_test": "yes"}, "experiment.json: field 'smoke_test' must be bool"),
        ({"workloads": {"w": {"confirmable": False}}}, "experiment.json: workloads.w: missing field 'power_note'"),
        ({"workloads": {"w": {"confirmable": 0, "power_note": "x"}}}, "workloads.w: field 'confirmable' must be bool"),
        ({"host": {**HOST, "override": "yes"}}, "experiment.json: host: field 'override' must be bool"),
        ({"host": {**HOST, "before": {"steal_share": 0}}}, "host.before: missing field 'others_share'"),
    ],
)
def test_malformed_run_notes_are_named(
    tmp_path: Path, fields: dict[str, Any], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    make_run(tmp_path, rounds=4)
    _edit_experiment(tmp_path, **fields)
    assert message in _fails(tmp_path, capsys)


def test_a_malformed_host_check_of_a_block_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    make_run(tmp_path, rounds=4)
    _flag(tmp_path, {(1, "good"): "x"})
    blocks = _blocks(tmp_path)
    blocks[2]["host"]["flag"] = 3
    (tmp_path / "cells/c1/blocks.jsonl").write_text("".join(json.dumps(b) + "\n" for b in blocks))
    assert "cells/c1/blocks.jsonl:3: host: field 'flag' must be str or null" in _fails(tmp_path, capsys)


# -------------------------------------------------------------------------------------- across runs: A/A, replication


def _tar(folder: Path) -> Path:
    """``folder`` packed as ``folder.tar.gz`` (the folder at the top, as the committed runs are)."""
    path = folder.parent / f"{folder.name}.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        tar.add(folder, arcname=folder.name)
    return path


def test_aa_coverage_over_runs_and_archives(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    make_run(tmp_path / "one")  # the truthful fixture's run: its 4 A/A intervals contain 0
    make_run(tmp_path / "two")
    blocks = _blocks(tmp_path / "two")
    for b in blocks:  # the A/A arm 30 points better, with twice the goodput: those two intervals exclude 0
        if b["arm"] == AA_ARM:
            b["metrics"]["slo_attainment"] += 0.3
            b["metrics"]["goodput_rps"] *= 2
    (tmp_path / "two/cells/c1/blocks.jsonl").write_text("".join(json.dumps(b) + "\n" for b in blocks))
    assert aa_coverage(build_verdict(tmp_path / "one")) == (4, 4)
    assert aa_coverage(build_verdict(tmp_path / "two")) == (2, 4)
    archive = _tar(tmp_path / "two")
    assert main(["--aa-coverage", str(tmp_path / "one"), str(archive)]) == 0
    out = capsys.readouterr().out
    assert f"| {tmp_path / 'one'} | 4 of 4 | 100.0% |" in out and f"| {archive} | 2 of 4 | 50.0% |" in out
    assert "| total | 6 of 8 | 75.0% |" in out and "Nominal coverage: 95%" in out
    assert not (tmp_path / "one" / "report.md").exists()  # it writes nothing
    with tarfile.open(tmp_path / "evil.tar.gz", "w:gz") as tar:
        tar.add(tmp_path / "one" / "experiment.json", arcname="../experiment.json")
    assert main(["--aa-coverage", str(tmp_path / "evil.tar.gz")]) == 1
    err = capsys.readouterr().err
    assert (
        err == f"llmsched verdict: {tmp_path / 'evil.tar.gz'}: member '../experiment.json' is not a plain file "
        "inside the archive\n"
    )


def _swap_arms(out: Path, a: str, b: str) -> None:
    """Relabel ``a``'s blocks as ``b``'s and back: the live effects of the two arms trade places."""
    blocks = _blocks(out)
    for blk in blocks:
        blk["arm"] = {a: b, b: a}.get(blk["arm"], blk["arm"])
        blk["policy"] = blk["arm"].split("/")[0]
    (out / "cells/c1/blocks.jsonl").write_text("".join(json.dumps(blk) + "\n" for blk in blocks))


def test_a_replication_agrees_row_by_row(tmp_path: Path) -> None:
    make_run(tmp_path / "old")
    make_run(tmp_path / "new", cells=("c1", "c2"), seed=5)
    old, new = build_verdict(tmp_path / "old"), build_verdict(tmp_path / "new")
    rep = replication(new, old, "old")
    assert {x["new"]["cell"] for x in rep.rows} == {"c1"}  # matched by name: c2 is not in the old run
    assert len(rep.rows) == 3 * 4  # the A/A arm, good and bad x 4 statistics
    assert rep.confirmed_old == 4 and rep.confirmed_again == 4 and rep.target.status == "met"
    assert rep.target.detail == "4 of 4 confirmed again"
    for x in rep.rows:
        if x["new"]["arm"] != AA_ARM:
            assert x["sign_agrees"] is True and x["interval_agrees"] is True, x
    row = next(x for x in rep.rows if x["new"]["arm"] == "good" and x["new"]["statistic"] == "attainment")
    o, n = row["old"], row["new"]
    assert (
        f"| c1 | good | attainment | {100 * o['live']:+.1f} pp | [{100 * o['low']:+.1f} pp, {100 * o['high']:+.1f} pp] "
        f"| {100 * n['live']:+.1f} pp | [{100 * n['low']:+.1f} pp, {100 * n['high']:+.1f} pp] | yes | yes | yes |"
    ) in rep.markdown
    _swap_arms(tmp_path / "new", "good", "bad")  # now good did what bad did: every material difference flips
    rep = replication(build_verdict(tmp_path / "new"), old, "old")
    assert rep.confirmed_again == 0 and rep.target.status == "not met"
    for x in rep.rows:
        if x["new"]["arm"] != AA_ARM and x["new"]["statistic"] in ("attainment", "ttft_p99"):
            assert x["sign_agrees"] is False and x["interval_agrees"] is False, x


def test_the_replicates_option_appends_the_section(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    make_run(tmp_path / "old", rounds=6)
    make_run(tmp_path / "new", rounds=6, seed=5)
    archive = _tar(tmp_path / "old")
    assert main([str(tmp_path / "new"), "--no-plots", "--replicates", str(archive)]) == 0
    out = capsys.readouterr().out
    report = (tmp_path / "new" / "report.md").read_text()
    assert report.startswith(build_verdict(tmp_path / "new").markdown)
    assert "\n## Replication of `old`\n" in report and "## Replication of `old`" in out
    assert "| cell | arm | statistic | then | then 95% interval | now | now 95% interval |" in report
    assert main([str(tmp_path / "new"), "--no-plots", "--replicates", str(tmp_path / "nope")]) == 1
    assert "nope: not a run folder or a .tar.gz of one" in capsys.readouterr().err
