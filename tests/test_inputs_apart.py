"""Inputs are never outputs (docs/reliability.md): before any work every command compares each file it reads (a
trace, a cost model, a tuned table, a policy, hyperparameters, weights) with every file it writes (same path, the
same file through a symbolic or a hard link, a file in a folder it owns, a file where it must make a folder) and
refuses a clash in one usage line naming both options and paths, the input left byte for byte and nothing
written; an input that is a symbolic link loop (or a link to nothing) is one line naming the option."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TRACE = ROOT / "tests" / "data" / "heldout" / "conv_code_2tenants.csv"
PRESET = ROOT / "llmsched_env" / "costs" / "presets" / "llama3-8b-h100.json"
GENERALIST = ROOT / "agents" / "policies" / "generalist"
TRACE_OPTIONS = ["--trace-format", "generic", "--trace-columns",
                 "arrival=arrival,prompt_len=prompt_len,output_len=output_len,tenant=tenant"]  # fmt: skip
EVALUATE = ["--num-requests", "20", "--no-progress"]
TUNE = ["--candidates", "0", "--rounds", "0", "--seeds", "0", "--num-requests", "30", "--reference", "sjf"]
LOOP = "a symbolic link loop"


def _tree(folder: Path) -> dict[str, bytes | None]:
    """Every entry under ``folder``: a file's bytes, None for a folder or a link."""
    return {
        str(p.relative_to(folder)): p.read_bytes() if p.is_file() and not p.is_symlink() else None
        for p in sorted(folder.rglob("*"))
    }


def _refused(run: Callable[[], object], capsys: pytest.CaptureFixture[str], prog: str, *names: str) -> str:
    """``run`` exits with status 2 and a last stderr line of ``prog``'s usage error naming each of ``names``."""
    with pytest.raises(SystemExit) as exc:
        run()
    assert exc.value.code == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line.startswith(f"{prog}: error: "), line
    for name in names:
        assert name in line, (name, line)
    return line


def _untouched(
    tmp_path: Path, run: Callable[[], object], capsys: pytest.CaptureFixture[str], prog: str, *names: str
) -> str:
    """``_refused``, with every file under ``tmp_path`` as it was (the inputs byte for byte, nothing made)."""
    before = _tree(tmp_path)
    line = _refused(run, capsys, prog, *names)
    assert _tree(tmp_path) == before
    return line


def _trace_linked_as(tmp_path: Path, output: Path) -> list[str]:
    """``--trace`` and its options reading a copy of the trace that has a hard link at ``output``."""
    output.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(TRACE, tmp_path / "trace.csv")
    os.link(tmp_path / "trace.csv", output)
    return ["--trace", str(tmp_path / "trace.csv"), *TRACE_OPTIONS]


def _loop(tmp_path: Path, name: str) -> Path:
    path = tmp_path / name
    path.symlink_to(name)
    return path


# ----------------------------------------------------------------------------------------------- the function


def test_the_check_names_each_way_an_input_meets_an_output(tmp_path: Path) -> None:
    from llmsched_env.common.outputs import Written, check_inputs_apart, written_in

    out = tmp_path / "out"
    out.mkdir()
    (out / "results.csv").write_text("a\n")
    (tmp_path / "link.csv").symlink_to(out / "results.csv")
    os.link(out / "results.csv", tmp_path / "hard.csv")
    (tmp_path / "own.csv").write_text("b\n")
    (out / "runs").mkdir()
    (out / "runs" / "x.csv").write_text("c\n")
    (out / "made").write_text("d\n")
    written = [
        *written_in("--out", out, ["results.csv"], ["runs"]),
        Written("--tb", out, out / "made" / "a", True, False),
    ]
    cases = {"results.csv": "is ", "link.csv": "through a symbolic link", "hard.csv": "hard link",
             "runs/x.csv": "lies in", "made": "sits where a folder must be made"}  # fmt: skip
    for name, how in cases.items():
        path = (out / name) if (out / name).exists() else tmp_path / name
        with pytest.raises(ValueError, match=how) as exc:
            check_inputs_apart([("--trace", path)], written)
        message = str(exc.value)
        assert message.startswith(f"--trace {path}: ") and ("--out" in message or "--tb" in message), message
        assert "\n" not in message
    check_inputs_apart([("--trace", tmp_path / "own.csv"), ("--cost-model", None), ("--x", tmp_path / "none")], written)
    # a folder it only adds files of new names to: an input inside it is left alone
    check_inputs_apart([("--trace", out / "runs" / "x.csv")], [Written("--tb", out, out / "runs", True, False)])


def test_a_loop_or_a_link_to_nothing_is_named_with_its_option(tmp_path: Path) -> None:
    from llmsched_env.common.outputs import check_input_links, check_inputs_apart, written_file

    loop = _loop(tmp_path, "loop.csv")
    with pytest.raises(ValueError, match=f"^--trace {loop}: is {LOOP}"):
        check_input_links([("--trace", loop)])
    with pytest.raises(ValueError, match=f"^--trace {loop / 'x.csv'}: {LOOP} .* lies on the way"):
        check_input_links([("--trace", loop / "x.csv")])
    (tmp_path / "dangling.csv").symlink_to("gone.csv")
    with pytest.raises(
        ValueError, match=r"^--init .*dangling\.csv: is a symbolic link to gone\.csv, which does not exist"
    ):
        check_input_links([("--init", tmp_path / "dangling.csv")])
    check_inputs_apart([("--trace", tmp_path / "missing.csv")], [written_file("--out", tmp_path / "o.json")])


# --------------------------------------------------------------------------------------------- llmsched-evaluate


def _evaluate(argv: list[str]) -> Callable[[], object]:
    from llmsched_env.commands.evaluate import main

    return lambda: main([*argv, *EVALUATE])


def test_evaluate_refuses_a_trace_that_is_a_file_of_its_out(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "out"
    out.mkdir()
    shutil.copy(TRACE, out / "results.csv")
    argv = ["--trace", str(out / "results.csv"), *TRACE_OPTIONS, "--out", str(out)]
    line = _untouched(tmp_path, _evaluate(argv), capsys, "llmsched-evaluate", "--trace", "--out")
    assert f"{out / 'results.csv'}, which --out {out} writes" in line


def test_evaluate_refuses_a_hard_link_and_a_symbolic_link_into_its_out(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    out = tmp_path / "out"
    argv = [*_trace_linked_as(tmp_path, out / "summary.csv"), "--out", str(out)]
    line = _untouched(tmp_path, _evaluate(argv), capsys, "llmsched-evaluate", "--trace", "--out")
    assert "hard link" in line and "summary.csv" in line
    (out / "summary.csv").unlink()
    shutil.copy(PRESET, out / "results.json")
    (tmp_path / "model.json").symlink_to(out / "results.json")  # the input a link to a file the run writes
    argv = ["--cost-model", str(tmp_path / "model.json"), "--out", str(out)]
    line = _untouched(tmp_path, _evaluate(argv), capsys, "llmsched-evaluate", "--cost-model")
    assert "through a symbolic link" in line and "results.json" in line


def test_evaluate_refuses_a_cost_model_named_like_its_record(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "out"
    out.mkdir()
    shutil.copy(PRESET, out / "evaluation.json")
    argv = ["--cost-model", str(out / "evaluation.json"), "--out", str(out)]
    _untouched(tmp_path, _evaluate(argv), capsys, "llmsched-evaluate", "--cost-model", "--out")


def test_evaluate_refuses_a_tuned_table_in_its_out(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "out"
    out.mkdir()
    shutil.copy(ROOT / "baselines" / "tuned.json", out / "results.json")
    argv = ["--policies", f"tuned={out / 'results.json'}", "--out", str(out)]
    _untouched(tmp_path, _evaluate(argv), capsys, "llmsched-evaluate", "--policies", "--out")


def test_evaluate_refuses_an_input_where_tensorboard_makes_a_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    board = tmp_path / "tb"
    (board / "fcfs").mkdir(parents=True)
    shutil.copy(PRESET, board / "fcfs" / "default")  # where the run's folder tb/fcfs/default/load_1 goes
    argv = ["--cost-model", str(board / "fcfs" / "default"), "--tensorboard", str(board)]
    line = _untouched(tmp_path, _evaluate(argv), capsys, "llmsched-evaluate", "--tensorboard")
    assert "sits where a folder must be made" in line


def test_evaluate_with_vllm_refuses_before_any_run(
    tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    from llmsched_env.evaluation import vllm_engine

    monkeypatch.setattr(vllm_engine, "check_vllm", lambda: None)  # as where vLLM is installed
    monkeypatch.setattr(vllm_engine, "compare_engines", lambda *a, **k: pytest.fail("a run started"))
    out = tmp_path / "out"
    out.mkdir()
    shutil.copy(TRACE, out / "results.csv")
    argv = ["--engine", "vllm", "--trace", str(out / "results.csv"), *TRACE_OPTIONS, "--out", str(out)]
    _untouched(tmp_path, _evaluate(argv), capsys, "llmsched-evaluate", "--trace", "--out")


@pytest.mark.parametrize("option", ["--trace", "--cost-model", "--policies"])
def test_evaluate_names_a_link_loop_by_its_option(
    option: str, tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    loop = _loop(tmp_path, "loop.json")
    value = f"mine={loop.name}" if option == "--policies" else loop.name
    argv = [option, value, *(TRACE_OPTIONS if option == "--trace" else [])]
    line = _refused(_evaluate(argv), capsys, "llmsched-evaluate", f"{option} loop.json", LOOP)
    assert "Traceback" not in line


# ------------------------------------------------------------------------------------------------ llmsched-train


def _train(argv: list[str]) -> Callable[[], object]:
    from agents.cli import parse_args

    return lambda: parse_args(["--quick", "--no-progress", *argv])


@pytest.fixture()
def key_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    return tmp_path / "config"


def test_train_refuses_hyperparameters_its_run_writes(
    tmp_path: Path, capsys: pytest.CaptureFixture, key_home: Path
) -> None:
    out = tmp_path / "run"
    out.mkdir()
    shutil.copy(ROOT / "agents" / "hyperparams" / "maskable_ppo.yml", out / "command.txt")  # YAML by any name
    argv = ["--hyperparams", str(out / "command.txt"), "--out", str(out)]
    _untouched(tmp_path, _train(argv), capsys, "llmsched-train", "--hyperparams", "--out")


def test_train_refuses_an_init_policy_its_export_replaces(
    tmp_path: Path, capsys: pytest.CaptureFixture, key_home: Path
) -> None:
    start = tmp_path / "start"
    start.mkdir()
    for name in ("policy.json", "policy.safetensors"):
        shutil.copy(GENERALIST / name, start / name)
    argv = ["--init", str(start), "--out", str(start)]
    line = _untouched(tmp_path, _train(argv), capsys, "llmsched-train", "--init", "--out")
    assert "policy.json" in line


def test_train_refuses_a_trace_hard_linked_into_its_run(
    tmp_path: Path, capsys: pytest.CaptureFixture, key_home: Path
) -> None:
    out = tmp_path / "run"
    argv = [*_trace_linked_as(tmp_path, out / "command.txt"), "--out", str(out)]
    _untouched(tmp_path, _train(argv), capsys, "llmsched-train", "--trace", "hard link")


def test_a_sweep_refuses_an_input_its_trainings_log_over(
    tmp_path: Path, capsys: pytest.CaptureFixture, key_home: Path
) -> None:
    sweep = tmp_path / "sweep"
    (sweep / "default-seed0").mkdir(parents=True)
    shutil.copy(ROOT / "agents" / "hyperparams" / "maskable_ppo.yml", sweep / "default-seed0" / "train.log")
    argv = ["--scenarios", "default,mixed-slo", "--hyperparams", str(sweep / "default-seed0" / "train.log"),
            "--out", str(sweep)]  # fmt: skip
    line = _untouched(tmp_path, _train(argv), capsys, "llmsched-train", "--hyperparams", "--out")
    assert "train.log" in line


@pytest.mark.parametrize("option", ["--trace", "--init", "--hyperparams"])
def test_train_names_a_link_loop_by_its_option(
    option: str, tmp_path: Path, capsys: pytest.CaptureFixture, key_home: Path
) -> None:
    loop = _loop(tmp_path, "loop.json")
    argv = [option, str(loop), *(TRACE_OPTIONS if option == "--trace" else []), "--out", str(tmp_path / "run")]
    _refused(_train(argv), capsys, "llmsched-train", f"{option} {loop}", LOOP)


# ------------------------------------------------------------------------------------------------- llmsched-tune


def _tune(argv: list[str]) -> Callable[[], object]:
    from llmsched_env.commands.tune import main

    return lambda: main([*argv, *TUNE])


def test_tune_refuses_a_trace_that_is_its_table(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    shutil.copy(TRACE, tmp_path / "trace.csv")
    os.link(tmp_path / "trace.csv", tmp_path / "table.json")
    for out in ("trace.csv", "table.json"):  # the same path, a hard link
        argv = ["--trace", str(tmp_path / "trace.csv"), *TRACE_OPTIONS, "--out", str(tmp_path / out)]
        _untouched(tmp_path, _tune(argv), capsys, "llmsched-tune", "--trace", f"--out {tmp_path / out}")


def test_tune_refuses_a_cost_model_its_deployment_or_table_replaces(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    deployed = tmp_path / "table.vllm" / "default"
    deployed.mkdir(parents=True)
    shutil.copy(PRESET, deployed / "vllm.json")  # written beside the table (the entry's vLLM deployment)
    shutil.copy(PRESET, tmp_path / "model.json")
    (tmp_path / "link.json").symlink_to("model.json")
    cases = [(deployed / "vllm.json", tmp_path / "table.json", "table.vllm/default/vllm.json"),
             (tmp_path / "link.json", tmp_path / "model.json", "through a symbolic link")]  # fmt: skip
    for model, out, said in cases:
        argv = ["--scenarios", "default", "--cost-model", str(model), "--out", str(out)]
        line = _untouched(tmp_path, _tune(argv), capsys, "llmsched-tune", "--cost-model", "--out")
        assert said in line


@pytest.mark.parametrize("option", ["--trace", "--cost-model"])
def test_tune_names_a_link_loop_by_its_option(option: str, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    loop = _loop(tmp_path, "loop.json")
    given = (
        ["--trace", str(loop), *TRACE_OPTIONS] if option == "--trace" else ["--scenarios", "default", option, str(loop)]
    )
    _refused(_tune([*given, "--out", str(tmp_path / "t.json")]), capsys, "llmsched-tune", f"{option} {loop}", LOOP)


# -------------------------------------------------------------------------------------------- llmsched-calibrate


def _calibrate(argv: list[str]) -> Callable[[], object]:
    from llmsched_env.commands.calibrate import parse_args

    return lambda: parse_args(argv)


def test_calibrate_refuses_weights_or_a_preset_it_writes_over(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    shutil.copy(PRESET, tmp_path / "weights.safetensors")
    argv = ["profile", "--quick", "--weights", str(tmp_path / "weights.safetensors"),
            "--out", str(tmp_path / "weights.safetensors")]  # fmt: skip
    _untouched(tmp_path, _calibrate(argv), capsys, "llmsched-calibrate", "--weights", "--out")
    out = tmp_path / "fidelity"
    out.mkdir()
    shutil.copy(PRESET, out / "fidelity.json")
    argv = ["fidelity", "--preset", str(out / "fidelity.json"), "--out", str(out)]
    _untouched(tmp_path, _calibrate(argv), capsys, "llmsched-calibrate", "--preset", "--out")


@pytest.mark.parametrize("option", ["--weights", "--preset"])
def test_calibrate_names_a_link_loop_by_its_option(option: str, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    loop = _loop(tmp_path, "loop.json")
    argv = ["fidelity", "--preset", "runtime-tiny-cpu", option, str(loop), "--out", str(tmp_path / "f")]
    _refused(_calibrate(argv), capsys, "llmsched-calibrate", f"{option} {loop}", LOOP)


# ---------------------------------------------------------------------------- the live experiment and its replay


def _experiment(argv: list[str], monkeypatch: pytest.MonkeyPatch) -> Callable[[], object]:
    from llmsched_env.commands import live_experiment

    monkeypatch.setattr(live_experiment, "run_experiment", lambda config: pytest.fail("the experiment started"))
    return lambda: live_experiment.main(argv)


def test_the_live_experiment_refuses_inputs_in_its_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "run"
    (out / "cells").mkdir(parents=True)
    shutil.copy(TRACE, out / "log.txt")
    shutil.copy(ROOT / "baselines" / "tuned.json", out / "cells" / "tuned.json")
    prog = "python -m llmsched_env.commands.live_experiment"
    argv = ["--out", str(out), "--trace", str(out / "log.txt"), *TRACE_OPTIONS]
    _untouched(tmp_path, _experiment(argv, monkeypatch), capsys, prog, "--trace", "--out")
    argv = ["--out", str(out), "--address", "localhost:1", "--model", "m", "--tuned", str(out / "cells" / "tuned.json")]
    line = _untouched(tmp_path, _experiment(argv, monkeypatch), capsys, prog, "--tuned", "--out")
    assert "lies in" in line
    argv = ["--out", str(tmp_path / "new"), "--trace", str(_loop(tmp_path, "loop.csv")), *TRACE_OPTIONS]
    _refused(_experiment(argv, monkeypatch), capsys, prog, "--trace", LOOP)


def test_the_replay_refuses_an_adapter_config_it_saves_over_and_a_looping_out(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    from llmsched_env.commands.live_replay import PROG, main

    (tmp_path / "adapter.yaml").write_text("policy: fcfs\n")
    argv = [
        str(tmp_path),
        "--adapter-config",
        str(tmp_path / "adapter.yaml"),
        "--save-model",
        str(tmp_path / "adapter.yaml"),
    ]
    _untouched(tmp_path, lambda: main(argv), capsys, PROG, "adapter.yaml", "--save-model")
    adapter, out = str(tmp_path / "adapter.yaml"), str(_loop(tmp_path, "loop.csv"))
    argv = [str(tmp_path), "--adapter-config", adapter, "--out", out, "--save-model", str(tmp_path / "m.json")]
    _refused(lambda: main(argv), capsys, PROG, "--out", LOOP)
