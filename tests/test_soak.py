"""The soak (``llmsched_env.evaluation.soak``, ``bench/soak.py``): random masked actions over small pools,
preemption, remote KV, a cluster and a disaggregated cluster, invariants checked every step, nothing lost. The
fast tier soaks every case for a few steps (through the bench); the 1,000- and 200,000-step soaks are ``slow``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from llmsched_env.cluster import invariants as cluster_invariants
from llmsched_env.evaluation.soak import SOAK_CASES, soak
from llmsched_env.sim import simulator

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_a_short_soak_of_every_case_finds_no_violation() -> None:
    result = soak(1000, seed=0, num_requests=20)
    assert result.violations == []
    assert result.steps == 1000 and result.steps_by_case == dict.fromkeys(SOAK_CASES, 200)
    assert result.episodes > 0


def test_a_broken_invariant_is_recorded_with_its_case_and_seed(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: object) -> None:
        raise AssertionError("request 7 is in waiting and running\nmore detail")

    monkeypatch.setattr(simulator, "check_engine", broken)
    monkeypatch.setattr(cluster_invariants, "check_engine", broken)
    result = soak(20, seed=5, num_requests=10, cases=("small-pool", "cluster"))
    cases = {case for case, _, _ in result.violations}
    assert cases == {"small-pool", "cluster"}
    assert all(message == "request 7 is in waiting and running" for _, _, message in result.violations)
    assert result.violations[0][1] == 5


def test_bad_soak_arguments() -> None:
    with pytest.raises(ValueError, match="steps must be an integer >= 1"):
        soak(0)
    with pytest.raises(ValueError, match="unknown soak case"):
        soak(10, cases=("nope",))


@pytest.mark.slow
def test_a_long_soak_finds_no_violation() -> None:
    result = soak(200_000, seed=1)
    assert result.violations == [] and result.steps == 200_000


def test_the_bench_prints_steps_episodes_and_violations() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "soak.py"), "--steps", "50", "--num-requests", "10"],
        capture_output=True, text=True, check=True, cwd=ROOT,
    )  # fmt: skip
    out = done.stdout
    assert "steps 50" in out and "episodes" in out and "violations 0" in out
