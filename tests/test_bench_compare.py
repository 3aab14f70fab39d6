"""bench/bench_core.py --compare: the figures read back from a run's output and the side-by-side table."""

from __future__ import annotations

import shutil

import pytest

from tests.bench_scripts import BENCH, bench_script


@pytest.fixture(autouse=True)
def _bench_on_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(BENCH))  # as when the script runs: its sibling modules import

OUTPUT = """workload: 300 requests, Azure conv lengths, Poisson 10.0 req/s; EngineConfig(...)
  simulated 30 s, 300 finished, slo_attainment 0.990, kv_usage_mean 0.10, preemptions 0
bare simulator loop (fcfs): 66,512 iterations/s, 7,001 requests/s (1,234 iterations)
env closed loop (obs + mask + fcfs.act + env.step): 27,100 steps/s
env.step with random masked actions: 23,000 steps/s
peak RSS: 112 MB
"""


def test_figures_are_read_from_the_output_and_a_missing_one_is_named() -> None:
    bench = bench_script("bench_core")
    figures = bench.parse_figures(OUTPUT)
    assert figures == {
        "bare simulator loop, iterations/s": 66512.0,
        "env closed loop, steps/s": 27100.0,
        "env.step, random masked actions, steps/s": 23000.0,
        "peak RSS, MB": 112.0,
    }
    with pytest.raises(ValueError, match="no 'peak RSS, MB' figure"):
        bench.parse_figures(OUTPUT.replace("peak RSS", "peak"))


def test_the_table_gives_ranges_and_the_ratio_of_medians() -> None:
    bench = bench_script("bench_core")
    base = bench.parse_figures(OUTPUT)
    theirs = [base, {k: 2 * v for k, v in base.items()}, {k: 3 * v for k, v in base.items()}]
    mine = [{k: 4 * v for k, v in base.items()}] * 3
    table = bench.format_comparison("abc123", theirs, mine)
    assert table.splitlines()[0] == "| figure | abc123 | this tree | this / abc123 (medians) |"
    assert "| env closed loop, steps/s | 27,100-81,300 | 108,400 | 2.00x |" in table


CACHEGRIND = """==123== Command: python -c ...
==123==
==123== I   refs:      1,669,370,258
"""


def test_the_instruction_count_is_read_from_cachegrind_and_its_absence_is_an_error() -> None:
    bench = bench_script("bench_instructions")
    assert bench.parse_refs(CACHEGRIND) == 1_669_370_258
    with pytest.raises(ValueError, match="no instruction count"):
        bench.parse_refs("==123== Command: python\n")


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("valgrind") is None, reason="valgrind is not installed")
def test_instructions_per_step_are_counted_on_this_tree() -> None:
    bench = bench_script("bench_instructions")
    per_step = bench.per_step(bench.ROOT, "sim", 300)
    assert 10_000 < per_step < 1_000_000  # a Simulator.step is tens of thousands of instructions, not none


@pytest.mark.slow
def test_the_env_share_of_a_training_step_is_timed_in_its_parts() -> None:
    bench = bench_script("bench_train_share")
    (reset_s, step_s, mask_s), learn_s, steps = bench.measure("default", "maskable_ppo", 256, seed=0)
    assert steps >= 256  # SB3 learns whole rollouts
    assert step_s > 0 and mask_s > 0  # MaskablePPO asks every env for its mask every step
    assert reset_s >= 0
    assert reset_s + step_s + mask_s < learn_s  # the envs run inside learn, beside the network's work
