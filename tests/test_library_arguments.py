"""Careless arguments end in one line naming them: a trace option the chosen format does not read (the commands and
``build_trace_scenario``), ``run_grid``'s and ``capacity_grid``'s arguments, ``EvalConfig``'s lists, the trace
loaders' path, format and columns, and a path holding a NUL byte."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest

import llmsched_env  # noqa: F401  (registers LLMSched-v1)
from agents.cli import main as train_main
from llmsched_env.adapters.vllm.config import AdapterConfig
from llmsched_env.commands.evaluate import main as evaluate_main
from llmsched_env.commands.tune import main as tune_main
from llmsched_env.decision.policy_spec import resolve_policy
from llmsched_env.evaluation import EvalConfig, capacity_grid, run_grid
from llmsched_env.workloads.trace_options import build_trace_scenario
from llmsched_env.workloads.traces import load_generic, load_trace

AZURE = Path(__file__).parent / "data" / "heldout" / "azure_code_1tenant.csv"
NUL_PATH = "a\x00b"


def _usage_line(main: Callable[[Sequence[str]], Any], argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """The one error line of ``main(argv)``, which must exit with status 2 (a usage error)."""
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert "Traceback" not in "\n".join(lines)
    return lines[-1]


@pytest.mark.parametrize("main", [evaluate_main, tune_main, train_main], ids=["evaluate", "tune", "train"])
@pytest.mark.parametrize(
    ("fmt", "option", "value"),
    [("azure", "--trace-columns", "prompt_len=a,output_len=b"), ("azure", "--trace-time-unit", "ms"),
     ("mooncake", "--trace-time-unit", "s"), ("lengths", "--trace-columns", "prompt_len=a,output_len=b")],
)  # fmt: skip
def test_a_trace_option_the_format_does_not_read_is_one_usage_line(
    main: Callable[[Sequence[str]], Any], fmt: str, option: str, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    line = _usage_line(main, ["--trace", str(AZURE), "--trace-format", fmt, option, value], capsys)
    assert f"error: {option} does nothing with --trace-format {fmt}: only --trace-format generic reads it" in line


@pytest.mark.parametrize(("name", "value"), [("trace_columns", "prompt_len=a,output_len=b"), ("trace_time_unit", "ms")])
def test_build_trace_scenario_refuses_an_option_the_format_does_not_read(name: str, value: str) -> None:
    with pytest.raises(ValueError, match=rf"^{name}: only the generic format reads it, not azure"):
        build_trace_scenario({"trace": str(AZURE), "trace_format": "azure", name: value})


def _config() -> EvalConfig:
    return EvalConfig(policies=["fcfs"], num_requests=10)


@pytest.mark.parametrize("grid", [run_grid, capacity_grid], ids=["run_grid", "capacity_grid"])
@pytest.mark.parametrize(
    ("config", "kwargs", "error", "named"),
    [("x", {}, TypeError, "config"), (None, {"finished": [5]}, TypeError, r"finished\[0\]"),
     (None, {"finished": 5}, TypeError, "finished"), (None, {"on_row": 5}, TypeError, "on_row"),
     (None, {"ray": 5}, TypeError, "ray"), (None, {"ray_cpus": 0}, ValueError, "ray_cpus"),
     (None, {"ray_cpus": 1.5}, ValueError, "ray_cpus"), (None, {"progress": 5}, TypeError, "progress")],
)  # fmt: skip
def test_a_grid_argument_of_the_wrong_type_or_value_is_named(
    grid: Callable[..., Any], config: Any, kwargs: dict[str, Any], error: type[Exception], named: str
) -> None:
    owner = grid.__name__
    with pytest.raises(error, match=rf"^{owner}: {named} must be"):
        grid(_config() if config is None else config, **kwargs)


def test_the_grids_own_flags_and_target_are_named() -> None:
    with pytest.raises(TypeError, match=r"^run_grid: on_run must be callable"):
        run_grid(_config(), on_run="log")
    with pytest.raises(TypeError, match=r"^run_grid: details must be True or False"):
        run_grid(_config(), details="yes")
    with pytest.raises(ValueError, match=r"^capacity_grid: target must be a number in \(0, 1\]"):
        capacity_grid(_config(), target=float("nan"))


@pytest.mark.parametrize("field", ["scenarios", "policies", "loads", "seeds"])
def test_an_eval_config_list_given_a_number_is_named(field: str) -> None:
    with pytest.raises(TypeError, match=rf"^EvalConfig\.{field} must be a list, got 5$"):
        EvalConfig(**{field: 5})


def test_the_trace_loaders_name_a_path_format_or_columns_of_the_wrong_type() -> None:
    with pytest.raises(TypeError, match=r"^path must be a str or os\.PathLike \(the trace file\), got None$"):
        load_trace(None, "azure")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"^format must be a str, one of .*, got \['azure'\]$"):
        load_trace(AZURE, ["azure"])  # type: ignore[arg-type]
    columns: dict[Any, str] = {5: "x", "prompt_len": "ContextTokens", "output_len": "GeneratedTokens"}
    with pytest.raises(ValueError, match=r"columns mapping has unknown field\(s\) \[5\]"):
        load_generic(AZURE, columns=columns)
    with pytest.raises(TypeError, match=r"^AdapterConfig\.from_file: path must be a str or os\.PathLike, got None$"):
        AdapterConfig.from_file(None)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "call",
    [lambda: resolve_policy(NUL_PATH), lambda: load_trace(NUL_PATH, "azure"),
     lambda: AdapterConfig.from_file(NUL_PATH), lambda: gym.make("LLMSched-v1", cost_model=f"{NUL_PATH}.json")],
    ids=["resolve_policy", "load_trace", "AdapterConfig.from_file", "cost_model"],
)  # fmt: skip
def test_a_path_with_a_nul_byte_is_named(call: Callable[[], Any]) -> None:
    with pytest.raises(ValueError) as exc:
        call()
    message = str(exc.value)
    assert "'a\\x00b" in message and "cannot hold a NUL byte" in message and "\x00" not in message
    assert "\n" not in message


def test_a_bad_length_prediction_names_its_option(capsys: pytest.CaptureFixture[str]) -> None:
    line = _usage_line(evaluate_main, ["--length-prediction", "lognormal:nan", "--num-requests", "10"], capsys)
    assert "error: --length-prediction: length prediction sigma must be a finite number, got nan" in line
