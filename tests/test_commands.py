"""The commands: llmsched-evaluate runs baselines and writes results (training: tests/test_train.py)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from agents import SB3Policy
from llmsched_env.commands.evaluate import main, parse
from llmsched_env.evaluation import run_grid


def test_evaluate_writes_one_row_per_policy_scenario_seed(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "res"
    argv = ["--policies", "fcfs,slo_aware", "--seeds", "0,1", "--num-requests", "40", "--out", str(out)]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "attain" in printed and "slo_aware" in printed
    with open(out / "results.csv") as f:
        rows = list(csv.DictReader(f))
    runs = [(r["policy"], r["seed"]) for r in rows]
    assert runs == [("fcfs", "0"), ("fcfs", "1"), ("slo_aware", "0"), ("slo_aware", "1")]
    keys = ("ttft_p99_s", "tpot_p50_s", "itl_p99_s", "e2el_p50_s", "slo_attainment", "goodput_rps", "jain_fairness")
    for key in keys:
        assert key in rows[0]
    assert all(float(r["num_requests"]) == 40 for r in rows)
    assert len(json.loads((out / "results.json").read_text())) == 4


def test_evaluate_is_deterministic_by_seed(tmp_path: Path) -> None:
    args = ["--policies", "random", "--seeds", "3", "--num-requests", "40", "--loads", "2"]
    a = run_grid(parse(args).config).rows
    b = run_grid(parse(args).config).rows
    drop = ("wall_s",)
    assert [{k: v for k, v in r.items() if k not in drop} for r in a] == [
        {k: v for k, v in r.items() if k not in drop} for r in b
    ]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--policies", "nope"], "unknown policy"),
        (["--scenarios", "nope"], "unknown scenario"),
        (["--seeds", "a,b"], "comma-separated list of int"),
        (["--num-requests", "0"], "--num-requests"),
        (["--cost-model", "nope"], "unknown cost model preset 'nope'"),
        (["--cost-model", "{not json"], "unknown cost model preset '{not json'"),
        (["--loads", "nan"], "every value must be > 0, got 'nan'"),
        (["--loads", "inf"], "error: --loads must be finite and > 0, got inf"),
        (["--seeds", "-1"], "argument --seeds: every seed must be an integer in [0, 2**32 - 1 = 4294967295], got -1"),
        (["--backend", "runtime", "--policy-timeout", "0"], "--policy-timeout: must be a finite number > 0"),
        (["--engine", "vllm", "--policy-timeout", "inf"], "--policy-timeout: must be a finite number > 0"),
        (["--engine", "vllm", "--policy-timeout", "1e300"], "--policy-timeout: must be at most 3,600 s"),
    ],
)
def test_evaluate_rejects_bad_arguments(argv: list[str], message: str, capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit):
        parse(argv)
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--trace", "t.csv", "--scenarios", "default"], "--scenarios does nothing with --trace"),
        (["--capacity", "--loads", "1"], "--loads does nothing with --capacity"),
        (["--capacity", "--load", "1,2"], "--loads does nothing with --capacity"),  # an abbreviation counts
        (["--describe", "--out", "x"], "--out does nothing with --describe"),
        (["--describe", "--tensorboard", "x"], "--tensorboard does nothing with --describe"),
        (["--describe", "--policies", "sjf"], "--policies does nothing with --describe"),
        (["--describe", "--capacity"], "--capacity does nothing with --describe"),
        (["--describe", "--check-invariants"], "--check-invariants does nothing with --describe"),
        (["--describe", "--length-prediction", "exact"], "--length-prediction does nothing with --describe"),
        (["--describe", "--workers", "2"], "--workers does nothing with --describe"),
    ],
)
def test_evaluate_refuses_options_that_do_nothing_together(
    argv: list[str], message: str, capsys: pytest.CaptureFixture
) -> None:
    """An option that another makes a no-op is a usage error naming both, not ignored without a word; the
    same options alone (or at their defaults, not given) are fine."""
    with pytest.raises(SystemExit) as exc:
        parse(argv)
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert exc.value.code == 2 and message in err and "leave one of them out" in err
    ev = parse(["--capacity", "--num-requests", "20"])  # --loads left at its default: no refusal
    assert ev.capacity and ev.options["--loads"] == [1.0]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--policy-timeout", "0.001"], "--policy-timeout does nothing without --backend runtime or --engine vllm"),
        (["--engine", "vllm", "--tensorboard", "tb"], "--tensorboard does nothing without --engine sim"),
        (["--model", "llama-1b"], "--model does nothing without --backend runtime"),
        (["--weights", "/nonexistent/w.safetensors"], "--weights does nothing without --backend runtime"),
        (["--realtime"], "--realtime does nothing without --backend runtime"),
        (["--device", "cuda:7"], "--device does nothing without --backend runtime"),
        (["--backend", "sim", "--dtype", "float16"], "--dtype does nothing without --backend runtime"),
        (["--no-speed-check"], "--no-speed-check does nothing without --backend runtime"),
        (["--trace-columns", "arrival=a"], "--trace-columns does nothing without --trace"),
        (["--trace-time-unit", "ms"], "--trace-time-unit does nothing without --trace"),
        (["--trace-format", "azure"], "--trace-format does nothing without --trace"),
        (["--trace-slo", "batch"], "--trace-slo does nothing without --trace"),
        (["--trace-rate", "2"], "--trace-rate does nothing without --trace"),
        (["--tenant-slo", "a=chat"], "--tenant-slo does nothing without --trace"),
        (["--fitted-traffic"], "--fitted-traffic does nothing without --trace"),
        (["--force"], "--force does nothing without --out or --tensorboard"),
    ],
)
def test_evaluate_refuses_options_without_the_one_they_need(
    argv: list[str], message: str, capsys: pytest.CaptureFixture
) -> None:
    """A runtime option on the simulator, a trace option without ``--trace`` and ``--force`` with nothing to
    write are usage errors naming both options, not ignored without a word (docs/reliability.md, "Options
    that do nothing together"); their defaults, not given, are not."""
    with pytest.raises(SystemExit) as exc:
        parse(argv)
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert exc.value.code == 2 and message in err and "leave it out, or give" in err and "Traceback" not in err
    ev = parse(["--num-requests", "20"])  # every one at its default: no refusal
    assert ev.policy_timeout_s == 0.1 and ev.options["--model"] == "tiny" and ev.options["--trace-slo"] == "chat"


def test_runtime_and_trace_options_pass_with_what_they_need(tmp_path: Path) -> None:
    ev = parse(["--backend", "runtime", "--model", "tiny", "--device", "cpu", "--policy-timeout", "0.5",
                "--realtime", "--no-speed-check", "--num-requests", "4"])  # fmt: skip
    assert ev.policy_timeout_s == 0.5 and ev.config.runtime is not None and ev.config.runtime.realtime
    assert not ev.speed_check
    parse(["--out", str(tmp_path / "o"), "--force"])
    parse(["--tensorboard", str(tmp_path / "tb"), "--force"])


def test_a_flag_given_as_text_is_refused_naming_the_field() -> None:
    """``check_invariants="no"`` is truthy: taken for its truth it would turn the checks on without a word."""
    import gymnasium as gym

    from llmsched_env.evaluation import EvalConfig

    for make, field in (
        (lambda: EvalConfig(check_invariants="no"), "EvalConfig.check_invariants"),
        (lambda: EvalConfig(check_invariants=1), "EvalConfig.check_invariants"),
        (lambda: gym.make("LLMSched-v1", check_invariants="no"), "LLMSchedEnv.check_invariants"),
        (lambda: gym.make("LLMSchedCluster-v0", check_invariants="no"), "LLMSchedClusterEnv.check_invariants"),
    ):
        with pytest.raises(ValueError, match=rf"^{field} must be True or False, got"):
            make()
    assert EvalConfig(check_invariants=True).check_invariants is True


def test_loading_a_corrupt_model_is_a_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "model.zip"
    bad.write_bytes(b"not a zip")
    with pytest.raises(ValueError, match=str(bad)):
        SB3Policy.load(bad)


def test_evaluate_refuses_shipped_folders_unless_forced(capsys: pytest.CaptureFixture) -> None:
    root = Path(__file__).resolve().parents[1]
    results, tb = root / "docs" / "results" / "eval", root / "policies" / "tb"
    for argv, option in ((["--out", str(results)], "--out"), (["--tensorboard", str(tb)], "--tensorboard")):
        with pytest.raises(SystemExit) as exc:
            parse(argv)
        err = capsys.readouterr().err
        assert exc.value.code == 2 and f"{option} {argv[1]}: refusing to write inside the shipped folder" in err
        assert "Traceback" not in err and "--force" in err
    ev = parse(["--out", str(results), "--tensorboard", str(tb), "--force"])  # allowed when asked for
    assert ev.out == results and ev.tensorboard == tb


@pytest.mark.parametrize("rate", ["0", "-3", "nan", "inf", "1e-300", "9e-7"])
def test_a_bad_trace_rate_is_one_usage_line_naming_the_file(
    rate: str, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    trace = tmp_path / "timed.csv"
    trace.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:00:00,5,3\n2023-11-16 18:00:01,5,3\n")
    with pytest.raises(SystemExit) as exc:
        parse(["--trace", str(trace), "--trace-format", "azure", "--trace-rate", rate])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    bound = "in [1e-06, 10,000,000] requests/s"
    assert f"{trace}: the rate (--trace-rate) must be a finite number {bound}" in err and "Traceback" not in err


@pytest.mark.parametrize("rate", [[], ["--trace-rate", "2"]])
def test_a_timed_trace_without_a_time_span_is_one_line_naming_the_file(
    rate: list[str], tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    trace = tmp_path / "instant.csv"
    trace.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:00:00,5,3\n2023-11-16 18:00:00,5,3\n")
    with pytest.raises(SystemExit) as exc:
        parse(["--trace", str(trace), "--trace-format", "azure", *rate])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert f"{trace}: all 2 requests arrive at the same time" in err


def test_evaluate_refuses_a_training_run_folder_as_out(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """An evaluation into a training's run folder would replace the training's complete.json with its own."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "args.json").write_text("{}")
    with pytest.raises(SystemExit) as exc:
        parse(["--out", str(run)])
    assert exc.value.code == 2 and "holds a training (args.json)" in capsys.readouterr().err


def test_evaluate_refuses_a_plan_of_more_requests_than_its_bound(
    capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each option within its cap, the product not: 1,000 seeds x 101 loads of 1,000 requests ran for minutes
    before its first run. The planned requests (episode sizes x policies x seeds x loads, or x about 16 loads per
    capacity search) are bounded, and the bound raised by its variable."""
    seeds = ",".join(map(str, range(100)))
    argv = ["--scenarios", "mixed-slo", "--num-requests", "10000", "--seeds", seeds, "--loads", "1,2"]
    monkeypatch.setenv("LLMSCHED_MAX_EVALUATION_REQUESTS", "1000000")
    with pytest.raises(SystemExit):
        parse(argv)
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "plans 2,000,000 requests (episode sizes 10,000 over --scenarios x 1 --policies x 100 --seeds x 2" in err
    assert "LLMSCHED_MAX_EVALUATION_REQUESTS" in err
    with pytest.raises(SystemExit):
        parse(["--capacity", *argv[:6]])
    assert "x about 16 loads a capacity search), more than 1,000,000" in capsys.readouterr().err
    monkeypatch.setenv("LLMSCHED_MAX_EVALUATION_REQUESTS", "3000000")
    parse(argv)  # raised: the plan fits


@pytest.mark.parametrize(
    ("argv", "option"),
    [
        (["--policies", "fcfs,,sjf"], "--policies"),
        (["--policies", "fcfs,"], "--policies"),
        (["--loads", "1,,2"], "--loads"),
        (["--seeds", "0,"], "--seeds"),
    ],
)
def test_an_empty_entry_in_a_list_option_is_refused(
    argv: list[str], option: str, capsys: pytest.CaptureFixture
) -> None:
    """``fcfs,,sjf`` (a typo, or a shell variable that expanded to nothing) was read as ``fcfs,sjf`` without a
    word; every comma list refuses an empty entry."""
    with pytest.raises(SystemExit):
        parse(argv)
    assert f"argument {option}: an empty entry in" in capsys.readouterr().err
