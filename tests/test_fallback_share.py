"""A run whose policy fell back (to fcfs on the torch runtime) on more than ``FALLBACK_LIMIT`` of its decisions is
marked: ``fallback_share`` in its row, ``policy [fallback N%]`` in the tables, ``fallback_over_limit`` in
summary.csv and one warning line on stderr; a run that did not fall back, and the simulator's rows, are not."""

from __future__ import annotations

import csv
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from llmsched_env.decision.policy_file import ExportedPolicy
from llmsched_env.evaluation.fallbacks import (
    FALLBACK_LIMIT,
    fallback_mark,
    fallback_summary,
    fallback_warning,
)
from llmsched_env.evaluation.outputs import format_summary
from llmsched_env.evaluation.stats import summarize
from llmsched_env.evaluation.vllm_engine import format_comparison

POLICY = "tests/data/policies/mixed-slo"


@pytest.fixture(autouse=True)
def _one_thread() -> Iterator[None]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _row(policy: str, seed: int, share: float | None) -> dict:
    row = {"policy": policy, "scenario": "mixed-slo", "load": 1.0, "seed": seed, "slo_attainment": 0.5,
           "goodput_rps": 1.0, "ttft_p99_s": 0.1, "tpot_p99_s": 0.01, "trajectory": f"{policy}{seed}"}  # fmt: skip
    return row if share is None else {**row, "fallback_share": share}


def test_the_mark_the_warning_and_the_summary_follow_the_limit() -> None:
    assert fallback_mark(_row("mine", 0, 1.0)) == " [fallback 100%]"
    assert fallback_mark(_row("mine", 0, 0.0123)) == " [fallback 1.23%]"
    assert (
        fallback_mark(_row("mine", 0, FALLBACK_LIMIT)) == "" and fallback_warning(_row("a", 0, FALLBACK_LIMIT)) is None
    )
    assert fallback_mark(_row("fcfs", 0, None)) == "" and fallback_warning(_row("fcfs", 0, None)) is None
    warning = fallback_warning(_row("mine", 3, 0.5))
    assert warning is not None and "\n" not in warning
    assert "policy mine on scenario mixed-slo at load 1, seed 3: 50% of its decisions fell back" in warning
    assert fallback_summary([_row("m", 0, 1.0), _row("m", 1, 0.0)]) == {
        "fallback_share_mean": 0.5,
        "fallback_over_limit": True,
    }
    assert fallback_summary([_row("m", 0, 0.0)]) == {"fallback_share_mean": 0.0, "fallback_over_limit": False}


def test_the_simulators_rows_keep_their_summary_columns() -> None:
    rows = [_row("fcfs", 0, None), _row("fcfs", 1, None)]
    summary = summarize(rows)
    assert not any(key.startswith("fallback") for key in summary[0])
    assert "[fallback" not in format_summary(summary)


def test_the_summary_table_marks_a_policy_that_fell_back() -> None:
    rows = [_row("fcfs", 0, 0.0), _row("fcfs", 1, 0.0), _row("mine", 0, 1.0), _row("mine", 1, 1.0)]
    text = format_summary(summarize(rows))
    assert "mine [fallback 100%]" in text and "fcfs [fallback" not in text


def test_the_vllm_comparison_marks_a_policy_that_fell_back_on_either_engine() -> None:
    base = {"scenario": "s", "load": 1.0, "seed": 0, "sim_attainment": 1.0, "vllm_attainment": 1.0, "gap": 0.0}
    rows = [
        {"policy": "ok", **base, "sim/fallback_share": 0.0, "vllm/fallback_share": 0.0},
        {"policy": "late", **base, "sim/fallback_share": 0.0, "vllm/fallback_share": 0.25},
    ]
    text = format_comparison(rows)
    assert "late [fallback 25%]" in text and "ok [fallback" not in text


def test_a_runtime_run_whose_policy_always_falls_back_is_marked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from llmsched_env.commands.evaluate import main

    def raising(self: ExportedPolicy, observation: object, action_mask: object) -> None:
        raise RuntimeError("boom")  # a deterministic error at every decision: each one falls back to fcfs

    monkeypatch.setattr(ExportedPolicy, "act", raising)
    out = tmp_path / "ev"
    argv = ["--backend", "runtime", "--model", "tiny", "--scenarios", "mixed-slo", "--num-requests", "4",
            "--seeds", "0", "--policies", f"fcfs,agent={POLICY}", "--no-speed-check", "--no-progress",
            "--out", str(out), "--no-plots"]  # fmt: skip
    assert main(argv) == 0
    stdout, stderr = capsys.readouterr()
    table = [line for line in stdout.splitlines() if line.startswith(("fcfs ", "agent"))]
    assert len(table) == 2 and table[1].startswith("agent [fallback 100%]  mixed-slo")
    assert "[fallback" not in table[0]
    warnings = [line for line in stderr.splitlines() if "fell back" in line]
    assert len(warnings) == 1
    assert warnings[0].startswith(
        "llmsched-evaluate: warning: policy agent on scenario mixed-slo at load 1, seed 0: 100%"
    )
    with (out / "results.csv").open() as f:
        rows = {r["policy"]: r for r in csv.DictReader(f)}
    assert float(rows["agent"]["fallback_share"]) == 1.0 and float(rows["fcfs"]["fallback_share"]) == 0.0
    assert float(rows["agent"]["policy_fallbacks_error"]) == float(rows["agent"]["policy_decisions"]) > 0
    with (out / "summary.csv").open() as f:
        summary = {r["policy"]: r for r in csv.DictReader(f)}
    assert summary["agent"]["fallback_over_limit"] == "True" and summary["fcfs"]["fallback_over_limit"] == "False"


def test_a_runtime_capacity_search_whose_policy_always_falls_back_is_marked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A capacity row carries the share of every decision its search took (``capacity.search_fallbacks``), so a
    policy that never decided is shown ``[fallback 100%]``, not as a capacity of its own."""
    from llmsched_env.commands.evaluate import main

    def raising(self: ExportedPolicy, observation: object, action_mask: object) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(ExportedPolicy, "act", raising)
    monkeypatch.setattr("llmsched_env.evaluation.capacity._MAX_LOAD", 2.0)  # a short search: loads 1, 1/2, 2
    out = tmp_path / "cap"
    argv = ["--backend", "runtime", "--model", "tiny", "--scenarios", "mixed-slo", "--num-requests", "4",
            "--seeds", "0", "--policies", f"fcfs,agent={POLICY}", "--no-speed-check", "--no-progress",
            "--capacity", "--out", str(out), "--no-plots"]  # fmt: skip
    assert main(argv) == 0
    captured = capsys.readouterr()
    table = [line for line in captured.out.splitlines() if line.startswith(("fcfs ", "agent"))]
    assert len(table) == 2 and table[1].startswith("agent [fallback 100%]") and "[fallback" not in table[0]
    warned = [line for line in captured.err.splitlines() if "fell back" in line]
    assert len(warned) == 1 and "warning: policy agent on scenario mixed-slo in its capacity search: 100%" in warned[0]
    with (out / "results.csv").open() as f:
        rows = {r["policy"]: r for r in csv.DictReader(f)}
    assert float(rows["agent"]["fallback_share"]) == 1.0 and float(rows["fcfs"]["fallback_share"]) == 0.0
    warning = fallback_warning(rows["agent"])
    assert warning is not None and "policy agent on scenario mixed-slo in its capacity search: 100%" in warning
    assert fallback_warning(rows["fcfs"]) is None


def test_capacity_rows_carry_the_share_of_every_decision_their_search_took() -> None:
    from llmsched_env.evaluation.capacity import search_fallbacks, summarize_capacity

    runs = [{"fallback_share": 1.0, "policy_decisions": 10.0, "policy_fallbacks": 10.0},
            {"fallback_share": 0.0, "policy_decisions": 30.0, "policy_fallbacks": 0.0}]  # fmt: skip
    assert search_fallbacks(runs) == {"fallback_share": 0.25}  # over the decisions, not a mean of the runs
    assert search_fallbacks([{"slo_attainment": 1.0}]) == {}  # the simulator's: no column
    rows = [{"policy": "m", "scenario": "s", "seed": seed, "capacity_load": 1.0, "capacity_rps": 2.0,
             "fallback_share": share, "trajectory": f"m{seed}"} for seed, share in ((0, 1.0), (1, 0.0))]  # fmt: skip
    summary = summarize_capacity(rows)
    assert summary[0]["fallback_share_mean"] == 0.5 and summary[0]["fallback_over_limit"] is True
    plain = summarize_capacity([{k: v for k, v in r.items() if k != "fallback_share"} for r in rows])
    assert not any(key.startswith("fallback") for key in plain[0])
