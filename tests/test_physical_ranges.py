"""Numbers outside physical ranges are refused (docs/reliability.md, "Physical ranges"): cost-model constants,
arrival rates and loads, reward weights and SLO targets, each in one line naming the file, field or option, on
the commands (a usage line, no traceback) and in the library (a ``ValueError``); every shipped preset and every
committed cost-model file passes."""

from __future__ import annotations

import json
import pickle
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest

import llmsched_env  # noqa: F401  (registers LLMSched-v1)
from llmsched_env.commands.evaluate import parse
from llmsched_env.common.checks import (
    MAX_RATE_RPS,
    MAX_REWARD_WEIGHT,
    MAX_SLO_S,
    MIN_RATE_RPS,
    Bound,
    check_number,
    check_positive,
    in_range,
    range_text,
)
from llmsched_env.costs.base import COST_BOUNDS, MAX_STEP_S
from llmsched_env.costs.loader import PRESET_DIR, from_dict, list_presets, load_cost_model
from llmsched_env.engine.config import SLO_CLASSES, SLOClass, TenantConfig
from llmsched_env.envs.reward import RewardConfig
from llmsched_env.workloads.arrivals import Poisson
from llmsched_env.workloads.lengths import LengthDist
from llmsched_env.workloads.randomized import RandomizedSpace
from llmsched_env.workloads.scenarios import slo_scale
from llmsched_env.workloads.workload import TenantWorkload
from tests.bench_scripts import bench_script

ROOT = Path(__file__).resolve().parent.parent
COMMITTED = ("docs", "tests", "bench", "llmsched_env", "agents", "baselines", "policies")
AZURE = ROOT / "llmsched_env/workloads/data/azure_llm_2023/AzureLLMInferenceTrace_conv.csv.gz"
H100 = json.loads((PRESET_DIR / "llama3-8b-h100.json").read_text())
LINEAR = json.loads((PRESET_DIR / "runtime-tiny-cpu.json").read_text())


def _cost_models(value: Any) -> Iterator[dict[str, Any]]:
    """Every JSON object in ``value`` (at any depth) that describes a cost model."""
    if isinstance(value, dict):
        if value.get("kind") in ("analytic", "linear"):
            yield value
        for item in value.values():
            yield from _cost_models(item)
    elif isinstance(value, list):
        for item in value:
            yield from _cost_models(item)


def _committed_cost_models() -> list[tuple[Path, dict[str, Any]]]:
    """Every cost model in a committed JSON file, the members of the packed results (docs/results) included."""
    archive = bench_script("results_archive")
    texts = []
    for folder in COMMITTED:
        texts += [(path, path.read_text()) for path in sorted((ROOT / folder).rglob("*.json"))]
        for packed in sorted((ROOT / folder).rglob("*" + archive.SUFFIX)):
            members = archive.read_archive(packed).items()
            texts += [(packed / name, data.decode()) for name, data in members if name.endswith(".json")]
    found = []
    for path, text in texts:
        if '"kind"' in text and ('"analytic"' in text or '"linear"' in text):
            found.extend((path, model) for model in _cost_models(json.loads(text)))
    return found


def test_every_shipped_preset_and_committed_cost_model_passes() -> None:
    models = _committed_cost_models()
    assert len(models) >= len(list_presets()) + 12  # the presets and the calibrated files under docs/results
    for path, data in models:
        model = from_dict(data)
        scale = slo_scale(model)
        for cls in SLO_CLASSES.values():  # their SLO classes, scaled to the model, stay in range too
            cls.scaled(scale)
        assert 0 < model.step_time_s(1, 0, 0, 1.0) <= MAX_STEP_S, path
    for name in list_presets():
        load_cost_model(name)


def _cost_file(tmp_path: Path, base: dict[str, Any], **fields: Any) -> Path:
    path = tmp_path / "cost.json"
    path.write_text(json.dumps({**base, **fields}))
    return path


@pytest.mark.parametrize(
    ("base", "fields", "message"),
    [
        (H100, {"overhead_s": 1e308}, "field 'overhead_s' must be a number in (0, 3,600] s, got 1e+308"),
        (H100, {"overhead_s": -1.0}, "field 'overhead_s' must be a number in (0, 3,600] s, got -1.0"),
        (H100, {"peak_tflops": 1e308}, "field 'peak_tflops' must be a number in [0.001, 1,000,000] TFLOP/s"),
        (H100, {"mem_bandwidth_gbps": 2e6}, "field 'mem_bandwidth_gbps' must be a number in [0.001, 1,000,000] GB/s"),
        (H100, {"num_params": 1e308}, "field 'num_params' must be a number in [1000, 1e+15]"),
        (H100, {"num_layers": 10**400}, "field 'num_layers' must be an integer in (0, 1,048,576]"),
        (H100, {"peak_tflops": 1e-300}, "field 'peak_tflops' must be a number in [0.001, 1,000,000] TFLOP/s"),
        (H100, {"dtype_bytes": 1e-12}, "field 'dtype_bytes' must be a number in [0.125, 64], got 1e-12"),
        (H100, {"compute_efficiency": 1.5}, "field 'compute_efficiency' must be a number in [0.001, 1] of peak"),
        (H100, {"peak_tflops": 1e-3, "mem_bandwidth_gbps": 1e-3}, "a 1-token prefill takes 20075.2 s, over the 3600 s"),
        (H100, {"num_kv_heads": 64}, "field 'num_kv_heads' (64) must divide 'num_attention_heads' (32)"),
        (H100, {"num_kv_heads": 5}, "field 'num_kv_heads' (5) must divide 'num_attention_heads' (32)"),
        (H100, {"head_dim": 1048576}, "'num_attention_heads' x 'head_dim' (32 x 1048576 = 33554432) must be within"),
        (H100, {"hidden_size": 1048576}, "(32 x 128 = 4096) must be within 8x of 'hidden_size' (1048576)"),
        (LINEAR, {"prefill_token_s": 1e308}, "field 'prefill_token_s' must be a number in [0, 3,600] s, got 1e+308"),
        (LINEAR, {"kv_token_s": -1e-3}, "field 'kv_token_s' must be a number in [0, 3,600] s, got -0.001"),
        (LINEAR, {"overhead_s": 3000.0, "prefill_token_s": 700.0}, "a 1-token prefill takes 3700 s, over the 3600 s"),
    ],
)
def test_a_cost_model_outside_physical_ranges_is_one_line_naming_the_file_and_field(
    tmp_path: Path, base: dict[str, Any], fields: dict[str, Any], message: str
) -> None:
    path = _cost_file(tmp_path, base, **fields)
    with pytest.raises(ValueError) as info:
        load_cost_model(path)
    text = str(info.value)
    assert text.startswith(f"cost model file {path}: ") and message in text, text
    assert "\n" not in text


def test_every_cost_bound_refuses_just_past_it(tmp_path: Path) -> None:
    for name, bound in COST_BOUNDS.items():
        base = LINEAR if name in LINEAR else H100
        if name not in base:
            continue
        past = int(bound) + 1 if isinstance(base[name], int) and not isinstance(base[name], bool) else bound * 1.01
        with pytest.raises(ValueError, match=f"field '{name}' must be"):
            load_cost_model(_cost_file(tmp_path, base, **{name: past}))
        if isinstance(bound, Bound):  # and just below its bottom: a figure that divides a step's time
            with pytest.raises(ValueError, match=f"field '{name}' must be a number (0 or )?in \\[{bound.minimum:g}, "):
                load_cost_model(_cost_file(tmp_path, base, **{name: bound.minimum * 0.99}))
    for name in ("peak_tflops", "mem_bandwidth_gbps", "num_params", "dtype_bytes", "compute_efficiency"):
        assert isinstance(COST_BOUNDS[name], Bound), name  # each has a bottom far below any real device's


def test_a_tiny_dtype_is_refused_not_priced_at_microseconds(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """dtype_bytes=1e-12 priced an 8B model's decode at 0.6 ms: the bottom is 1-bit weights (0.125 bytes)."""
    cost = _cost_file(tmp_path, H100, dtype_bytes=1e-12)
    line = _usage_error(parse, ["--cost-model", str(cost)], capsys)
    assert line.endswith("field 'dtype_bytes' must be a number in [0.125, 64], got 1e-12"), line
    from_dict({**H100, "dtype_bytes": 0.125})  # 1-bit weights: the bottom itself is in range


def test_requests_longer_than_max_model_len_are_noted() -> None:
    """``--max-model-len 8`` gave attainment 0 and rejection 1 without a word: evaluate notes (on stderr,
    ``overlong_notes``) a scenario where OVERLONG_NOTE_SHARE or more of the requests are longer."""
    from llmsched_env.evaluation import EvalConfig
    from llmsched_env.evaluation.sustained import OVERLONG_NOTE_SHARE, absent_tenant_notes, overlong_notes

    def config(max_model_len: int) -> EvalConfig:
        limits = {"max_model_len": max_model_len}
        return EvalConfig(scenarios=["mixed-slo"], policies=["fcfs"], seeds=[0], num_requests=20, engine_limits=limits)

    (line,) = overlong_notes(config(8))
    assert line.startswith("scenario 'mixed-slo': all 20 requests of its test windows are longer than max_model_len 8")
    assert "--max-model-len" in line and line not in absent_tenant_notes(config(8))
    assert overlong_notes(config(16384)) == []  # the scenario's own limit: none
    (some,) = overlong_notes(config(600))
    assert re.match(r"scenario 'mixed-slo': \d+% \(\d+ of 20\) requests", some), some
    assert 0 < OVERLONG_NOTE_SHARE < 0.5


def _usage_error(main: Callable[[list[str]], Any], argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """The one error line a command exits with (status 2) for ``argv``; no traceback."""
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err.strip().splitlines()[-1]


def test_evaluate_refuses_each_class_in_one_usage_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cost = _cost_file(tmp_path, H100, overhead_s=1e308)
    trace = ["--trace", str(AZURE), "--trace-format", "azure"]
    for argv, message in (
        (["--cost-model", str(cost)], f"error: cost model file {cost}: AnalyticCostModel 'cost': field 'overhead_s'"),
        (["--loads", "1e308"], "error: --loads must be between 0.001 and 1000.0, got 1e+308"),
        (["--loads", "1,inf"], "error: --loads must be finite and > 0, got inf"),
        ([*trace, "--trace-rate", "1e308"], "the rate (--trace-rate) must be a finite number in [1e-06, 10,000,000]"),
        ([*trace, "--trace-rate", "inf"], "the rate (--trace-rate) must be a finite number in [1e-06, 10,000,000]"),
        ([*trace, "--trace-rate", "1e-300"], "the rate (--trace-rate) must be a finite number in [1e-06, 10,000,000]"),
        ([*trace, "--trace-slo", "1e308:0.1"], "--trace-slo: unknown SLO class '1e308:0.1'"),
        ([*trace, "--trace-slo", "0:0.1"], "or TTFT_S:TPOT_S with both in (0, 1,000,000] s"),
    ):
        line = _usage_error(parse, argv, capsys)
        assert line.startswith("llmsched-evaluate: error: ") and message in line, (argv, line)


def test_tune_refuses_a_cost_model_and_a_rate_in_one_usage_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from llmsched_env.commands.tune import main

    cost = _cost_file(tmp_path, LINEAR, prefill_token_s=1e308)
    out = ["--out", str(tmp_path / "tuned.json")]
    line = _usage_error(main, ["--scenarios", "default", "--cost-model", str(cost), *out], capsys)
    assert f"llmsched-tune: error: cost model file {cost}: " in line and "'prefill_token_s'" in line
    argv = ["--trace", str(AZURE), "--trace-format", "azure", "--trace-rate", "1e308", *out]
    assert "the rate (--trace-rate) must be a finite number in [1e-06, 10,000,000]" in _usage_error(main, argv, capsys)
    assert not (tmp_path / "tuned.json").exists()


@pytest.mark.parametrize(
    ("hp", "message"),
    [
        ("env_kwargs.reward.good=1e308", "RewardConfig.good must be finite and in [0, 1,000,000], got 1e+308"),
        ("env_kwargs.reward.miss=-1", "RewardConfig.miss must be finite and in [0, 1,000,000], got -1"),
        ("env_kwargs.load=1e308", "load must be between 0.001 and 1000.0"),
    ],
)
def test_train_refuses_a_reward_weight_and_a_load_before_any_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], hp: str, message: str
) -> None:
    from agents.cli import main

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    run = tmp_path / "run"
    argv = ["--scenario", "default", "--quick", "--out", str(run), "--no-progress", "--hp", hp]
    line = _usage_error(main, argv, capsys)
    assert line.startswith("llmsched-train: error: ") and message in line, line
    assert not run.exists()


def test_the_library_refuses_each_class_with_a_value_error_naming_the_field() -> None:
    cases: list[tuple[Callable[[], Any], str]] = [
        (lambda: RewardConfig(good=1e308), r"^RewardConfig\.good must be finite and in \[0, 1,000,000\]"),
        (lambda: gym.make("LLMSched-v1", reward={"preempt": 1e7}), r"^RewardConfig\.preempt must be"),
        (lambda: SLOClass("x", 1e308, 0.1), r"^SLOClass\('x'\)\.ttft_s must be finite and in \(0, 1,000,000\] s"),
        (lambda: SLOClass("x", 1.0, 0.0), r"^SLOClass\('x'\)\.tpot_s must be finite and in \(0, 1,000,000\] s"),
        (lambda: Poisson(1e308), r"^Poisson\.rate_rps must be finite and in \[1e-06, 10,000,000\] requests/s"),
        (
            lambda: TenantWorkload(TenantConfig("t"), float("inf"), LengthDist.fixed(16, 16)),
            r"^TenantWorkload\('t'\)\.rate_rps must be finite and in \[1e-06, 10,000,000\]",
        ),
        (lambda: Poisson(1e-300), r"^Poisson\.rate_rps must be finite and in \[1e-06, 10,000,000\] requests/s"),
        (
            lambda: TenantWorkload(TenantConfig("t"), MIN_RATE_RPS / 2, LengthDist.fixed(16, 16)),
            r"^TenantWorkload\('t'\)\.rate_rps must be finite and in \[1e-06, 10,000,000\]",
        ),
        (lambda: gym.make("LLMSched-v1", load=float("inf")), r"^LLMSchedEnv\.load must be finite and > 0"),
        (lambda: gym.make("LLMSched-v1", load=(0.5, 1e308)), r"^LLMSchedEnv\.load range must be"),
        (lambda: RandomizedSpace(load_range=(0.5, 1e308)), r"^RandomizedSpace\.load_range must be a pair"),
    ]
    for make, pattern in cases:
        with pytest.raises(ValueError, match=pattern) as info:
            make()
        assert "\n" not in str(info.value)


def test_the_helpers_bound_what_they_are_given() -> None:
    assert check_positive("o", "rate", MAX_RATE_RPS, maximum=MAX_RATE_RPS) == MAX_RATE_RPS
    assert check_positive("o", "rate", MIN_RATE_RPS, maximum=MAX_RATE_RPS) == MIN_RATE_RPS  # both ends in range
    assert check_positive("o", "rate", 0.0, allow_zero=True, maximum=MAX_RATE_RPS) == 0.0  # a ramp from 0
    with pytest.raises(ValueError, match=r"^o\.rate must be finite and 0 or in \[1e-06, 10,000,000\] requests/s"):
        check_positive("o", "rate", 1e-300, allow_zero=True, maximum=MAX_RATE_RPS, unit="requests/s")
    assert not in_range(MIN_RATE_RPS / 2, False, MAX_RATE_RPS) and in_range(MIN_RATE_RPS / 2, False, 1e7)
    assert range_text(False, MAX_RATE_RPS, "requests/s") == "in [1e-06, 10,000,000] requests/s"
    assert pickle.loads(pickle.dumps(MAX_RATE_RPS)).minimum == MIN_RATE_RPS and float(MAX_RATE_RPS) == 1e7
    assert check_number("o", "w", MAX_REWARD_WEIGHT, maximum=MAX_REWARD_WEIGHT) == MAX_REWARD_WEIGHT
    SLOClass("x", MAX_SLO_S, MAX_SLO_S)  # the bound itself is in range
    with pytest.raises(ValueError, match=r"^o: field 'n' must be an integer in \(0, 8\], got 10000"):
        check_number("o", "n", 10**400, positive=True, integer=True, maximum=8)  # no OverflowError
