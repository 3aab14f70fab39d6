"""Calibration: llmsched-calibrate profile / fidelity (bars and status on stderr, off with --no-progress;
--help with every default; shipped presets and results refused), and the same work from Python."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from llmsched_env.commands.calibrate import main, parse_args  # noqa: E402
from llmsched_env.costs.linear import LinearCostModel  # noqa: E402
from llmsched_env.costs.loader import load_cost_model  # noqa: E402
from llmsched_env.evaluation.runtime_options import RuntimeOptions  # noqa: E402
from llmsched_env.runtime import fidelity  # noqa: E402
from llmsched_env.runtime.fidelity import FIDELITY_METRICS, FidelityWorkload  # noqa: E402
from llmsched_env.runtime.fidelity_report import (  # noqa: E402
    check_fidelity_seeds,
    error_kinds,
    format_row,
    run_fidelity,
    summarise,
)
from llmsched_env.runtime.model import DTYPES, MODEL_PRESETS  # noqa: E402
from llmsched_env.runtime.names import DTYPE_NAMES, FIDELITY_REQUESTS, FIT_LOADS, MODEL_NAMES  # noqa: E402
from llmsched_env.runtime.profiling import policy_factory, profile_preset  # noqa: E402
from llmsched_env.runtime.runner_spec import RunnerSpec  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
COMMON = ["--model", "tiny", "--num-requests", "12"]
PROFILE = ["profile", *COMMON, "--quick", "--repeats", "1", "--fit-loads", "0.5"]
LOADS_100 = ",".join(f"{(i + 1) / 100:g}" for i in range(100))
SEEDS_100 = ",".join(map(str, range(100)))


@pytest.mark.slow
def test_profile_and_fidelity_commands(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    preset = tmp_path / "tiny.json"
    assert main([*PROFILE, "--out", str(preset)]) == 0
    printed = capsys.readouterr()
    assert "profiling tiny float32 on cpu on 24 batch shapes" in printed.err and "grid:" in printed.err
    assert "recording 1 fcfs fitting episodes at loads [0.5]" in printed.err and "fitting episodes:" in printed.err
    assert json.loads(printed.out[: printed.out.rindex("}") + 1])["preset"] == str(preset)
    model = load_cost_model(preset)
    assert isinstance(model, LinearCostModel) and "fitted by `llmsched-calibrate profile`" in model.description
    assert (tmp_path / "tiny.samples.csv").is_file()
    assert main([*PROFILE, "--out", str(tmp_path / "quiet.json"), "--no-progress"]) == 0
    assert capsys.readouterr().err == ""
    out = tmp_path / "fid"
    args = ["fidelity", *COMMON, "--preset", str(preset), "--policies", "fcfs", "--loads", "0.5", "--seeds", "1"]
    assert main([*args, "--out", str(out)]) == 0
    printed = capsys.readouterr()
    assert "fidelity of" in printed.err and "1 workloads (each also in situ)" in printed.err
    assert "fidelity:" in printed.err and "1/1" in printed.err  # the bar over the workloads
    assert "fcfs load 0.50 seed 1  preset: ttft_p50=" in printed.out and "| metric | preset | in-situ |" in printed.out
    text = (out / "fidelity.csv").read_text()
    assert "err_ttft_p50_s" in text and "real_tpot_p99_s" in text and "err_insitu_tpot_p50_s" in text
    report = (out / "fidelity.md").read_text()
    assert "| ttft_p50_s |" in report and "| metric | preset | in-situ |" in report
    for seed in ("1000", "1003", "999"):  # fitting and warm-up workloads are not fidelity workloads
        with pytest.raises(SystemExit):
            main([*args[:-1], seed, "--out", str(out)])


@pytest.mark.parametrize("command", ["profile", "fidelity"])
def test_help_runs_as_a_module_and_shows_every_default(command: str) -> None:
    argv = [sys.executable, "-m", "llmsched_env.commands.calibrate", command, "--help"]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.startswith(f"usage: llmsched-calibrate {command}")
    text = " ".join(done.stdout.split())  # argparse wraps lines
    assert "(default: results/calibrate/" in text and "(default: tiny)" in text
    assert "(default: float32 on cpu, else bfloat16)" in text and "(default: cuda when available, else cpu)" in text
    # every option's entry in the list below "options:" shows its default (or says it is required)
    entries = text.split("options:", 1)[1].split(" --")[2:]  # after -h, --help
    missing = [e.split()[0] for e in entries if "(default" not in e and "(required)" not in e]
    assert len(entries) >= 12 and not missing, missing


def test_shipped_presets_and_results_are_refused(capsys: pytest.CaptureFixture) -> None:
    shipped = ROOT / "llmsched_env" / "costs" / "presets" / "runtime-tiny-cpu.json"
    for argv in (
        [*PROFILE, "--out", str(shipped)],
        ["fidelity", "--preset", "runtime-tiny-cpu", "--out", str(ROOT / "docs" / "results" / "fidelity-tiny-cpu")],
    ):
        with pytest.raises(SystemExit) as exc:
            main(argv)
        err = capsys.readouterr().err
        assert exc.value.code == 2 and "refusing to write inside the shipped folder" in err and "Traceback" not in err
    assert parse_args([*PROFILE, "--out", str(shipped), "--force"]).out == shipped  # allowed when asked for
    device = "cuda" if torch.cuda.is_available() else "cpu"
    assert parse_args(["profile"]).out == Path(f"results/calibrate/runtime-tiny-{device}.json")
    assert parse_args(["fidelity", "--preset", "x"]).out == Path(f"results/calibrate/fidelity-tiny-{device}")


def test_one_runner_spec_builds_the_runners_of_calibration_and_of_the_runtime_backend() -> None:
    here = "cuda" if torch.cuda.is_available() else "cpu"
    spec = RunnerSpec.for_here("tiny")
    assert (spec.device, spec.dtype) == (here, "float32" if here == "cpu" else "bfloat16")
    assert RunnerSpec.for_here("tiny", "cpu", threads=2) == RunnerSpec("tiny", "cpu", "float32", threads=2)
    options = RuntimeOptions(model="tiny", device="cpu")  # the backend's options hold the spec they resolve to
    assert options.runner == RunnerSpec("tiny", "cpu", "float32") and options.dtype == "float32"
    runner = options.runner.build(num_blocks=12, block_size=8)
    assert runner.kv.num_blocks == 12 and runner.kv.block_size == 8 and torch.get_num_threads() == 1
    with pytest.raises(ValueError, match="model: unknown preset 'nope'"):
        RuntimeOptions(model="nope")
    with pytest.raises(ValueError, match="dtype: unknown dtype 'float8'"):
        RuntimeOptions(dtype="float8")
    # the command lines' choices and calibration defaults, listed without importing torch
    assert set(DTYPE_NAMES) == set(DTYPES) and set(MODEL_NAMES) == set(MODEL_PRESETS)
    assert FIT_LOADS == fidelity.FIT_LOADS and FidelityWorkload().num_requests == FIDELITY_REQUESTS


@pytest.mark.slow
def test_the_library_profiles_and_reports_without_the_command_line(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="dtype: unknown dtype 'float8'"):
        RunnerSpec(dtype="float8")
    with pytest.raises(ValueError, match="threads: expected an integer >= 1"):
        RunnerSpec(threads=0)
    with pytest.raises(ValueError, match="fit_loads"):
        profile_preset(RunnerSpec(), tmp_path / "p.json", fit_loads=())
    phases: list[tuple[str, int, int]] = []
    model, report = profile_preset(
        RunnerSpec(), tmp_path / "p.json", quick=True, repeats=1, fit_loads=(0.5,), num_requests=12,
        on_progress=lambda phase, done, total: phases.append((phase, done, total)),
    )  # fmt: skip
    assert load_cost_model(tmp_path / "p.json") == model and report["iterations"]
    assert ("fitting episodes", 1, 1) in phases and phases[0][0] == "grid"
    rows: list[dict] = []
    fid = run_fidelity(RunnerSpec(), tmp_path / "p.json", ["fcfs"], tmp_path / "fid", loads=(0.5,), seeds=(1,),
                       num_requests=12, in_situ=False, on_row=rows.append)  # fmt: skip
    assert fid.rows == rows and len(rows) == 1 and "err_insitu_ttft_p50_s" not in rows[0]
    assert set(fid.summary) == {"preset"} and fid.markdown == (tmp_path / "fid" / "fidelity.md").read_text()
    with pytest.raises(ValueError, match="unknown scheduler 'nope'"):
        run_fidelity(RunnerSpec(), "runtime-tiny-cpu", ["nope"], tmp_path / "x")


def test_report_pieces() -> None:
    with pytest.raises(ValueError, match=r"seeds \[1000\]"):
        check_fidelity_seeds([1, 1000])
    kinds = error_kinds(True)
    row = {"policy": "fcfs", "load": 0.5, "seed": 1}
    row |= {f"{p}{m}": 0.1 for p in kinds.values() for m in FIDELITY_METRICS}
    nan_row = dict(row, err_ttft_p50_s=float("nan"))
    summary = summarise([row, nan_row], kinds)
    assert summary["preset"]["ttft_p50_s"] == {"mean": 0.1, "max": 0.1}  # NaNs left out
    assert math.isnan(summarise([nan_row], kinds)["preset"]["ttft_p50_s"]["mean"])
    assert format_row(row, kinds)[1].endswith("in-situ: ttft_p50=10.0% ttft_p99=10.0% tpot_p50=10.0% tpot_p99=10.0% "
                                              "e2el_p50=10.0% e2el_p99=10.0% request_throughput_rps=10.0%")  # fmt: skip


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([*PROFILE, "--repeats", "1000000000"], "--repeats must be an integer from 1 to 1,000, got 1000000000"),
        ([*PROFILE, "--repeats", "0"], "--repeats must be an integer from 1 to 1,000, got 0"),
        ([*PROFILE, "--threads", "100000"], "--threads (4 per CPU here, at most 1,024) must be an integer from 1 to "),
        ([*PROFILE, "--num-requests", "1000000"], "--num-requests must be an integer from 1 to 10,000, got 1000000"),
        ([*PROFILE, "--seed", str(2**64)], "--seed must be an integer from 0 to 9,223,372,036,854,775,807"),
        ([*PROFILE, "--fit-loads", "0.5,inf"], "--fit-loads: loads must be finite numbers from 0.001 to 1000, got inf"),
        ([*PROFILE, "--fit-loads", ",".join(f"0.{i:03d}1" for i in range(101))], "--fit-loads: expected 1 to 100 "),
        ([*PROFILE, "--out", "m/"], "'m/' ends with '/', a folder; this option writes a file"),
        (["fidelity", "--preset", "x", "--loads", "1e9"], "--loads: loads must be finite numbers from 0.001 to 1000"),
        (["fidelity", "--preset", "x", "--seeds", "-1"], "--seeds: expected at most 100 seeds, each >= 0, got [-1]"),
        (
            ["fidelity", "--preset", "x", "--policies", "fcfs", "--loads", LOADS_100, "--seeds", SEEDS_100,
             "--num-requests", "10000", "--no-in-situ"],
            "--policies x --loads x --seeds x --num-requests = 1 x 100 x 100 x 10,000 = 100,000,000 requests served "
            "on the runtime, more than 100,000",
        ),
        (
            ["fidelity", "--preset", "x", "--policies", "fcfs,sjf", "--loads", "0.5,0.8", "--num-requests", "10000"],
            "--policies x --loads x --seeds x --num-requests x 3 (the in-situ replays) = 2 x 2 x 2 x 10,000 x 3 = "
            "240,000 requests",
        ),
        (
            [*PROFILE[:-1], LOADS_100, "--num-requests", "10000"],
            "--fit-loads x --num-requests = 100 x 10,000 = 1,000,000 requests served on the runtime",
        ),
    ],
)  # fmt: skip
def test_counts_and_outputs_are_bounded_before_anything_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture, argv: list[str], message: str
) -> None:
    """``--repeats 1000000000`` ran for ever, ``--threads 100000`` failed in torch's allocator, ``--out m/`` wrote a
    file named ``m``: each a usage line before the runner is built, and nothing written."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exc:
        parse_args(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert exc.value.code == 2 and message in err[-1], err
    assert not any(tmp_path.iterdir())


def test_the_library_bounds_the_same_counts(tmp_path: Path) -> None:
    spec = RunnerSpec(model="tiny", device="cpu")
    for kwargs, message in (
        ({"repeats": 10**9}, "repeats must be an integer from 1 to 1,000"),
        ({"num_requests": 0}, "num_requests must be an integer from 1 to 10,000"),
        ({"fit_loads": ()}, "fit_loads: expected 1 to 100 loads, got 0"),
        ({"fit_loads": (float("nan"),)}, "fit_loads: loads must be finite numbers"),
    ):
        with pytest.raises(ValueError, match=message):
            profile_preset(spec, tmp_path / "m.json", quick=True, **kwargs)
    with pytest.raises(ValueError, match="threads must be an integer from 1 to"):
        profile_preset(RunnerSpec(model="tiny", device="cpu", threads=100_000), tmp_path / "m.json", quick=True)
    loads = [(i + 1) / 100 for i in range(100)]
    with pytest.raises(ValueError, match=r"fit_loads x num_requests = 100 x 10,000 = 1,000,000 requests served"):
        profile_preset(spec, tmp_path / "m.json", quick=True, fit_loads=loads, num_requests=10_000)
    assert not any(tmp_path.iterdir())


def test_the_requests_of_a_whole_calibration_are_bounded_before_anything_runs() -> None:
    """100 loads x 100 seeds x 10,000 requests (each option within its bound) would have served 10^8 requests on
    the runtime, weeks: ``compare`` refuses it before it touches the runner (here ``None``)."""
    loads, seeds = [(i + 1) / 100 for i in range(100)], list(range(100))
    factory = policy_factory("fcfs")
    message = r"policies x loads x seeds x num_requests = 1 x 100 x 100 x 10,000 = 100,000,000 requests served"
    with pytest.raises(ValueError, match=message):
        fidelity.compare(None, load_cost_model("runtime-tiny-cpu"), {"fcfs": factory}, factory, loads, seeds,
                         FidelityWorkload(num_requests=10_000))  # fmt: skip
    bound = fidelity.MAX_RUNTIME_REQUESTS
    assert fidelity.check_runtime_requests({"a": bound}) == bound
    assert fidelity.check_runtime_requests({"a": 10, "b": 10}, in_situ=True) == 100 * fidelity.IN_SITU_FACTOR
    with pytest.raises(ValueError, match=r"a x b = 1 x 100,001 = 100,001 requests"):
        fidelity.check_runtime_requests({"a": 1, "b": bound + 1})
    # the largest single workload still runs, in situ too; the default run is far inside the bound
    assert fidelity.check_runtime_requests({"n": 10_000}, in_situ=True) == 30_000
    assert fidelity.check_runtime_requests({"p": 3, "l": 2, "s": 2, "n": FIDELITY_REQUESTS}, in_situ=True) == 5_400


@pytest.mark.parametrize("name", ["", "   "])
def test_an_empty_preset_name_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture, name: str
) -> None:
    """``profile --name ""`` silently named the preset after the file: one usage line, nothing written."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exc:
        parse_args([*PROFILE, "--name", name])
    err = capsys.readouterr().err.strip().splitlines()
    assert exc.value.code == 2 and "--name must name the preset" in err[-1], err
    assert not any(tmp_path.iterdir())
    assert parse_args([*PROFILE, "--name", "mine"]).name == "mine"
