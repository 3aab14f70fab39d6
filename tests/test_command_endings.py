"""How the command lines end (docs/reliability.md): Ctrl-C, SIGTERM and SIGHUP mid-run end in one line and status
130, 143 or 129 after the command's clean-up, the output folder resumable; a full disk (ENOSPC) anywhere, a
background TensorBoard writer included, ends in one line saying what was kept and how to resume; a seed outside
[0, 2**32) or a list of too many is a usage line naming the option; a hyperparameter the model cannot take is a
usage line naming it; a resume whose config.yml is gone is refused; and a refusal of what a file, folder or lock
holds is one error line without the usage block (``llmsched_env.commands.entry``)."""

from __future__ import annotations

import errno
import importlib
import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from agents.cli import main as train_main
from agents.cli import parse_args
from llmsched_env.commands import tune
from llmsched_env.commands.entry import INTERRUPTED, PIPE_CLOSED, command, disk_full
from llmsched_env.commands.evaluate import main as evaluate_main
from llmsched_env.common.checks import MAX_SEEDS, SEED_LIMIT
from llmsched_env.common.outputs import COMPLETE_NAME
from llmsched_env.evaluation import EvalConfig
from llmsched_env.evaluation.resume import ROWS_NAME, read_rows
from llmsched_env.evaluation.tuning import TuneConfig
from tests.trained_run import TINY_TRAIN

if sys.version_info >= (3, 11):
    import tomllib
else:  # pytest itself depends on tomli below Python 3.11
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
# 4 runs of 20 requests
EVAL = ["--scenarios", "mixed-slo", "--num-requests", "20", "--policies", "fcfs,slo_aware", "--seeds", "0,1",
        "--no-progress", "--no-plots"]  # fmt: skip
TUNE = ["--reference", "sjf", "--seeds", "0,1", "--candidates", "2", "--rounds", "1", "--num-requests", "60"]
MARK = "MID-RUN MARK"  # what a child prints on stderr once it is mid-run (and then waits to be stopped)
# the child, with Python's Ctrl-C handler and SIGTERM and SIGHUP at their defaults (a background job inherits SIGINT
# ignored, a job under nohup SIGHUP), then the code it runs
PREAMBLE = (
    "import os, signal, sys, time\nsignal.signal(signal.SIGINT, signal.default_int_handler)\n"
    "for name in ('SIGTERM', 'SIGHUP'):\n    signal.signal(getattr(signal, name), signal.SIG_DFL)\n"
)


def _env(config: Path | None = None) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    if config is not None:
        env["XDG_CONFIG_HOME"] = str(config)
    return env


def _stop_mid_run(code: str, signum: int, env: dict[str, str]) -> tuple[int, list[str]]:
    """Run ``code`` in a child, wait for ``MARK`` on its stderr, send it ``signum``; its status and its stderr lines
    after the mark."""
    proc = subprocess.Popen([sys.executable, "-c", PREAMBLE + code], cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip
    assert proc.stderr is not None
    before: list[str] = []
    try:
        for line in proc.stderr:
            if MARK in line:
                break
            before.append(line)
        else:
            raise AssertionError(f"ended before it was mid-run (status {proc.wait()}): {''.join(before)[-3000:]}")
        os.kill(proc.pid, signum)
        after = proc.stderr.read()
        return proc.wait(timeout=120), after.splitlines()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _leftovers(folder: Path) -> list[str]:
    """Temporary files a write left in ``folder`` (``replaced_atomically``'s ``.NAME.PID.tmpSUFFIX``)."""
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if ".tmp" in p.name)


# ---- every console script ------------------------------------------------------------------------------------


def _entry_points() -> list[str]:
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    modules = [f"llmsched_env.commands.{name}:main" for name in ("live_experiment", "live_replay", "seal_policy")]
    return [*scripts.values(), *modules]


@pytest.mark.parametrize("target", _entry_points())
def test_every_command_goes_through_the_ending_wrapper(target: str) -> None:
    module, _, name = target.partition(":")
    main = getattr(importlib.import_module(module), name)
    assert getattr(main, "__wrapped__", None) is not None, f"{target} does not go through entry.command"


# ---- a signal mid-run ------------------------------------------------------------------------------------------

EVALUATE_PAUSED = """
from llmsched_env.evaluation.resume import RowsLog
append = RowsLog.append
def paused(self, row, details=None):
    append(self, row, details)
    print({mark!r}, file=sys.stderr, flush=True)
    time.sleep(120)  # mid-run, one run on disk: stopped by the test's signal
RowsLog.append = paused
from llmsched_env.commands.evaluate import main
sys.exit(main({argv!r}))
"""


@pytest.mark.parametrize(
    ("signum", "status", "said"),
    [(signal.SIGINT, INTERRUPTED, "interrupted"), (signal.SIGTERM, 143, "terminated (SIGTERM)"),
     (signal.SIGHUP, 129, "ended by SIGHUP (its terminal closed)")],
    ids=["INT", "TERM", "HUP"],
)  # fmt: skip
def test_a_signal_mid_evaluation_ends_in_one_line_and_the_folder_resumes(
    tmp_path: Path, signum: int, status: int, said: str
) -> None:
    out = tmp_path / "out"
    argv = [*EVAL, "--out", str(out)]
    code, lines = _stop_mid_run(EVALUATE_PAUSED.format(mark=MARK, argv=argv), signum, _env())
    assert code == status, lines
    assert len(lines) == 1 and "Traceback" not in lines[0], lines
    assert lines[0] == (
        f"llmsched-evaluate: {said}; the runs finished before it are kept in {out / ROWS_NAME}: rerun with --resume"
    )
    assert len(read_rows(out / ROWS_NAME)[0]) == 1 and not (out / COMPLETE_NAME).exists()
    assert not _leftovers(out)
    assert evaluate_main([*argv, "--resume"]) == 0  # the lock was released, the finished run kept
    assert len(read_rows(out / ROWS_NAME)[0]) == 4 and (out / COMPLETE_NAME).is_file()


TRAIN_PAUSED = """
import glob
from agents.checkpoints import SignedCheckpointCallback
step = SignedCheckpointCallback._on_step
def paused(self):
    going = step(self)
    if glob.glob(os.path.join(self.save_path, "model_*_steps.zip")):
        print({mark!r}, file=sys.stderr, flush=True)
        time.sleep(120)  # mid-run, the first checkpoint written: stopped by the test's signal
    return going
SignedCheckpointCallback._on_step = paused
from agents.cli import main
sys.exit(main({argv!r}))
"""


def test_ctrl_c_mid_training_ends_in_one_line_and_the_run_resumes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = tmp_path / "run"
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    argv = ["--scenario", "mixed-slo", *TINY_TRAIN, "--no-progress", "--out", str(run)]
    code, lines = _stop_mid_run(TRAIN_PAUSED.format(mark=MARK, argv=argv), signal.SIGINT, _env(tmp_path / "config"))
    assert code == INTERRUPTED, lines
    assert lines == [
        f"llmsched-train: interrupted; {run} keeps its checkpoints, the newest model_128_steps.zip: rerun with --resume"
    ]
    assert not (run / COMPLETE_NAME).exists() and not _leftovers(run)
    assert train_main([*argv, "--resume"]) == 0
    assert json.loads((run / COMPLETE_NAME).read_text())["timesteps"] == 256


# ---- a full disk -----------------------------------------------------------------------------------------------


def _no_space(*args: object, **kwargs: object) -> None:
    raise OSError(errno.ENOSPC, "No space left on device")


def _one_line(exc: pytest.ExceptionInfo[SystemExit], capsys: pytest.CaptureFixture[str]) -> str:
    """The message a ``SystemExit`` ends the command with (status 1), checked to be one line and alone."""
    line = exc.value.code
    assert isinstance(line, str) and "\n" not in line, line
    err = capsys.readouterr().err
    assert "Traceback" not in err and "Exception in thread" not in err, err[-3000:]
    return line


def test_a_full_disk_as_a_training_saves_its_first_model_is_one_line_and_resumes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from stable_baselines3.common.base_class import BaseAlgorithm

    run = tmp_path / "run"
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    argv = ["--scenario", "mixed-slo", *TINY_TRAIN, "--no-progress", "--out", str(run)]
    save = BaseAlgorithm.save

    def half_then_full(self: BaseAlgorithm, path: Any, *args: Any, **kwargs: Any) -> None:
        Path(path).write_bytes(b"PK\x03\x04 half a model")
        _no_space()

    with monkeypatch.context() as patch:
        patch.setattr(BaseAlgorithm, "save", half_then_full)
        with pytest.raises(SystemExit) as exc:
            train_main(argv)
    line = _one_line(exc, capsys)
    assert line == (
        f"llmsched-train: error: No space left on device; {run} holds no checkpoint yet (--resume starts afresh "
        "there): free space and rerun with --resume"
    )
    assert not _leftovers(run) and not (run / "best_model.zip").exists()
    assert BaseAlgorithm.save is save
    assert train_main([*argv, "--resume"]) == 0 and (run / COMPLETE_NAME).is_file()


def _full_event_writer(monkeypatch: pytest.MonkeyPatch) -> None:
    """TensorBoard's event files on a full disk: their writer thread fails at its first record."""
    from tensorboard.summary.writer.record_writer import RecordWriter

    monkeypatch.setattr(RecordWriter, "write", _no_space)


def test_a_full_disk_under_the_evaluations_tensorboard_is_one_line_not_a_thread_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    out, board = tmp_path / "out", tmp_path / "tb"
    _full_event_writer(monkeypatch)
    with pytest.raises(SystemExit) as exc:
        evaluate_main([*EVAL, "--out", str(out), "--tensorboard", str(board)])
    line = _one_line(exc, capsys)
    assert line.startswith(f"llmsched-evaluate: error: {board}/") and ": No space left on device; " in line
    assert line.endswith(f"the runs finished before it are kept in {out / ROWS_NAME}: free space and rerun with "
                         "--resume")  # fmt: skip
    assert not (out / COMPLETE_NAME).exists()  # the events were not written: the evaluation did not finish


def test_a_full_disk_under_a_trainings_tensorboard_is_one_line_not_a_thread_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "run"
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    _full_event_writer(monkeypatch)
    with pytest.raises(SystemExit) as exc:
        train_main(["--scenario", "mixed-slo", *TINY_TRAIN, "--no-progress", "--out", str(run)])
    line = _one_line(exc, capsys)
    assert line.startswith("llmsched-train: error: No space left on device; ") and line.endswith("rerun with --resume")
    assert not (run / COMPLETE_NAME).exists()


def test_a_full_disk_as_tune_writes_its_table_names_the_entries_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    table = tmp_path / "tuned.json"
    write = tune.write_tuned_entries

    def second_fails(path: Path, entries: dict[str, Any]) -> None:
        if "bursty" in entries:
            _no_space()
        write(path, entries)

    monkeypatch.setattr(tune, "write_tuned_entries", second_fails)
    with pytest.raises(SystemExit) as exc:
        tune.main(["--scenarios", "default,bursty", *TUNE, "--out", str(table)])
    line = _one_line(exc, capsys)
    assert line == (
        f"llmsched-tune: error: No space left on device; --out {table} holds the entries tuned before it (default): "
        "free space and rerun with --scenarios bursty"
    )
    assert list(json.loads(table.read_text())["scenarios"]) == ["default"]


def test_a_full_disk_as_the_checkpoint_key_is_made_leaves_no_half_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import agents.checkpoints as checkpoints

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setattr(checkpoints.os, "write", _no_space)
    with pytest.raises(checkpoints.CheckpointError, match=r"cannot be created or read \(No space left on device\)"):
        checkpoints.ensure_key()
    assert list((tmp_path / "config" / "llmsched").iterdir()) == []


def test_a_full_disk_in_a_writer_thread_is_one_line_even_when_the_command_ends_well(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The thread's traceback is not printed; the command's status says its writes were lost. Another error in a
    thread goes to the hook that was there before."""
    reported: list[BaseException | None] = []
    monkeypatch.setattr(threading, "excepthook", lambda args: reported.append(args.exc_value))

    def in_thread(target: Any) -> None:
        thread = threading.Thread(target=target)
        thread.start()
        thread.join()

    @command("prog")
    def main(target: Any) -> int:
        in_thread(target)
        return 0

    with pytest.raises(SystemExit) as exc:
        main(_no_space)
    assert _one_line(exc, capsys) == (
        "prog: error: No space left on device in a background writer (TensorBoard's event files), whose last writes "
        "are lost; the command itself ended"
    )

    def other() -> None:
        raise ValueError("not a full disk")

    assert main(other) == 0
    assert [str(e) for e in reported] == ["not a full disk"]


def test_a_full_disk_is_found_under_the_errors_raised_while_handling_it() -> None:
    def chained() -> None:
        try:
            _no_space()
        except OSError:
            raise RuntimeError("unexpected pos 2432 vs 2326") from None  # torch's zip writer after a failed write

    with pytest.raises(RuntimeError) as exc:
        chained()
    found = disk_full(exc.value)
    assert found is not None and found.errno == errno.ENOSPC
    safetensors = RuntimeError("Error while serializing: I/O error: No space left on device (os error 28)")
    assert disk_full(safetensors) is not None and disk_full(ValueError("no space")) is None


# ---- a closed standard output --------------------------------------------------------------------------------


def test_an_evaluation_piped_into_a_reader_that_ends_is_one_line() -> None:
    """``llmsched-evaluate ... | head -1``: the reader goes after one line; the command ends in one line, status
    141, as a shell reports a writer whose pipe closed, not a BrokenPipeError traceback."""
    argv = [*EVAL, "--seeds", ",".join(map(str, range(40)))]
    proc = subprocess.Popen([sys.executable, "evaluate.py", *argv], cwd=ROOT, env=_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.readline()
    proc.stdout.close()  # as head does once it has its line
    err = proc.stderr.read()
    assert proc.wait(timeout=300) == PIPE_CLOSED, err[-3000:]
    assert "Traceback" not in err and "Exception ignored" not in err, err[-3000:]
    assert err.splitlines()[-1].startswith("evaluate.py: its output was closed early"), err[-3000:]


# ---- seeds -----------------------------------------------------------------------------------------------------

HUGE = str(2**64)


@pytest.mark.parametrize(
    ("main", "argv", "option"),
    [
        (evaluate_main, ["--seeds", HUGE, "--num-requests", "20"], "--seeds"),
        (evaluate_main, ["--seeds", str(SEED_LIMIT), "--num-requests", "20"], "--seeds"),
        (evaluate_main, ["--seeds", "-1", "--num-requests", "20"], "--seeds"),
        (evaluate_main, ["--seeds", ",".join(map(str, range(MAX_SEEDS + 1))), "--num-requests", "1"], "--seeds"),
        (train_main, ["--seed", str(SEED_LIMIT)], "--seed"),
        (train_main, ["--seeds", f"0,{HUGE}"], "--seeds"),
        (tune.main, ["--scenarios", "default", "--seed", str(SEED_LIMIT)], "--seed"),
        (tune.main, ["--scenarios", "default", "--seeds", f"0,{SEED_LIMIT}"], "--seeds"),
    ],
    ids=["eval-2**64", "eval-2**32", "eval-negative", "eval-too-many", "train-seed", "train-seeds", "tune-seed",
         "tune-seeds"],
)  # fmt: skip
def test_a_seed_outside_numpys_range_is_a_usage_line_naming_the_option(
    main: Any, argv: list[str], option: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        main([*argv, "--out", str(tmp_path / "out")])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.startswith("usage: ")
    last = err.strip().splitlines()[-1]
    assert f"error: argument {option}: " in last and ("2**32" in last or f"more than {MAX_SEEDS:,}" in last), last


@pytest.mark.parametrize(
    "build",
    [lambda: EvalConfig(seeds=[SEED_LIMIT]), lambda: EvalConfig(seeds=list(range(MAX_SEEDS + 1))),
     lambda: TuneConfig(seed=SEED_LIMIT), lambda: TuneConfig(seeds=[0, 2**64])],
    ids=["EvalConfig.seeds", "EvalConfig.many", "TuneConfig.seed", "TuneConfig.seeds"],
)  # fmt: skip
def test_the_library_refuses_a_seed_outside_numpys_range(build: Any) -> None:
    with pytest.raises(ValueError, match=r"Config\.seeds? (must be an integer in \[0, 2\*\*32|holds 10,001 seeds)"):
        build()


# ---- hyperparameters the model cannot take -------------------------------------------------------------------


UNBUILDABLE = [
    ("policy_kwargs.activation_fn=os.system", "'policy_kwargs.activation_fn'"),
    ("policy_kwargs.optimizer_class=x", "'policy_kwargs.optimizer_class'"),
    ("rollout_buffer_class=x", "'rollout_buffer_class'"),
    ("policy_kwargs.foo=1", "unexpected keyword argument 'foo'"),
    ("policy_kwargs.optimizer_kwargs.eps=x", "hyperparameters (maskable_ppo"),
    ("policy_kwargs.features_extractor_kwargs.a=1", "unexpected keyword argument 'a'"),
    ("rollout_buffer_kwargs.a=1", "unexpected keyword argument 'a'"),
    ("policy=Foo", "Policy Foo unknown"),
    ("policy_kwargs.ortho_init=7", "'policy_kwargs.ortho_init' (maskable_ppo; from the hyperparameter file or --hp): "
     "must be true or false, got 7"),
]  # fmt: skip


@pytest.mark.parametrize(("item", "named"), UNBUILDABLE, ids=[item.split("=")[0] for item, _ in UNBUILDABLE])
def test_a_hyperparameter_the_model_cannot_take_is_a_usage_line(
    item: str, named: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        parse_args(["--scenario", "mixed-slo", *TINY_TRAIN, "--hp", item, "--out", str(tmp_path / "run")])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.startswith("usage: ")
    assert named in err.strip().splitlines()[-1]
    assert not (tmp_path / "run").exists()


def test_activation_fn_is_refused_with_the_names_it_takes_and_one_of_them_builds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from torch import nn

    from agents.sb3 import make_model
    from agents.training import make_env_fn

    with pytest.raises(SystemExit):
        parse_args(["--scenario", "mixed-slo", *TINY_TRAIN, "--hp", "policy_kwargs.activation_fn=os.system"])
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert "must name an activation, one of tanh, relu, elu, leaky_relu, gelu, silu, sigmoid, identity" in last
    args = parse_args(["--scenario", "mixed-slo", *TINY_TRAIN, "--hp", "policy_kwargs.activation_fn=relu",
                       "--out", str(tmp_path / "run")])  # fmt: skip
    env = make_env_fn("mixed-slo", "maskable_ppo", {"num_requests": 30})()
    model = make_model("maskable_ppo", env, seed=0, policy_kwargs=args.config.hp["policy_kwargs"])
    assert model.policy.activation_fn is nn.ReLU
    env.close()


# ---- a resume whose config.yml is gone ---------------------------------------------------------------------------


def test_a_resume_whose_config_yml_is_gone_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without config.yml, a resume cannot tell the run's hyperparameters from new ones (here another gamma): it
    is refused in one line, the folder untouched, rather than trained on with the new ones."""
    run = tmp_path / "run"
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    argv = ["--scenario", "mixed-slo", *TINY_TRAIN, "--no-progress", "--out", str(run)]
    assert train_main(argv) == 0
    (run / "config.yml").unlink()
    (run / COMPLETE_NAME).unlink()
    before = sorted((p.name, p.stat().st_mtime) for p in run.rglob("*"))
    capsys.readouterr()
    with pytest.raises(SystemExit) as exc:
        train_main([*argv, "--resume", "--timesteps", "384", "--hp", "gamma=0.5"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "usage:" not in err, err
    assert err == (
        f"llmsched-train: error: --resume: {run / 'config.yml'} is gone: it holds the hyperparameters {run} was "
        "trained with, which a resume must keep; restore it (a copy of the run folder has one), or choose another "
        "--out\n"
    )
    assert sorted((p.name, p.stat().st_mtime) for p in run.rglob("*")) == before


# ---- refusals of what a file, folder or lock holds: one line, no usage block ------------------------------------


def _refused_in_one_line(main: Any, argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "usage:" not in err and "Traceback" not in err, err
    return err.strip()


def test_a_checkpoint_key_others_can_read_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from agents.checkpoints import ensure_key

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    ensure_key().chmod(0o644)
    line = _refused_in_one_line(train_main, ["--scenario", "mixed-slo", *TINY_TRAIN, "--out", str(tmp_path / "r")],
                                capsys)  # fmt: skip
    assert line.startswith("llmsched-train: error: ") and "readable or writable by others (mode 0644)" in line


def test_an_init_policy_that_fails_its_checks_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    policy = tmp_path / "policy"
    policy.mkdir()
    (policy / "policy.json").write_text("{not json")
    argv = ["--scenario", "mixed-slo", *TINY_TRAIN, "--init", str(policy), "--out", str(tmp_path / "r")]
    line = _refused_in_one_line(train_main, argv, capsys)
    assert line.startswith("llmsched-train: error: init: ") and "policy.json" in line


def test_a_training_into_a_folder_another_holds_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from llmsched_env.common.outputs import locked_output

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    run = tmp_path / "run"
    code = f"from llmsched_env.common.outputs import locked_output\nwith locked_output({str(run)!r}, 'holder'):\n"
    code += f"    print({MARK!r}, file=sys.stderr, flush=True)\n    time.sleep(120)\n"
    holder = subprocess.Popen([sys.executable, "-c", PREAMBLE + code], cwd=ROOT, env=_env(), stderr=subprocess.PIPE,
                              text=True)  # fmt: skip
    try:
        assert holder.stderr is not None and MARK in holder.stderr.readline()
        line = _refused_in_one_line(train_main, ["--scenario", "mixed-slo", *TINY_TRAIN, "--out", str(run)], capsys)
    finally:
        holder.kill()
        holder.wait()
    assert line.startswith(f"llmsched-train: error: --out {run}: holder (pid ") and "is writing there" in line
    with locked_output(run, "check"):  # released with its holder
        pass


def test_an_evaluation_into_a_training_or_a_tune_into_a_non_table_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "args.json").write_text("{}")
    line = _refused_in_one_line(evaluate_main, [*EVAL, "--out", str(run)], capsys)
    assert line.startswith(f"llmsched-evaluate: error: --out {run}: holds a training (args.json)")
    table = tmp_path / "table.json"
    table.write_text("[1, 2]")
    line = _refused_in_one_line(tune.main, ["--scenarios", "default", *TUNE, "--out", str(table)], capsys)
    assert line.startswith(f"llmsched-tune: error: {table}")


@pytest.mark.parametrize(
    ("run", "option"),
    [
        (lambda p: evaluate_main(["--cost-model", p + ".json", "--policies", "fcfs", "--num-requests", "20"]), ".json"),
        (lambda p: train_main(["--hyperparams", p + ".yml", "--timesteps", "64"]), ".yml"),
    ],
)
def test_a_path_the_system_refuses_is_one_error_line_naming_it(
    run: Any, option: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A file name over 255 characters ended in an OSError (ENAMETOOLONG) traceback."""
    path = str(tmp_path / ("x" * 300))
    with pytest.raises(SystemExit) as exc:
        run(path)
    err = capsys.readouterr().err
    last = err.strip().splitlines()[-1]
    assert exc.value.code in (1, 2) and "Traceback" not in err and "too long" in last, err
    assert (path + option in last) or ("x" * 40 in last and "characters)" in last), last


def test_a_line_break_in_a_path_is_written_escaped_on_the_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A missing --cost-model path holding a newline split the refusal over two lines."""
    with pytest.raises(SystemExit) as exc:
        evaluate_main(["--cost-model", str(tmp_path / "a\nb.json"), "--policies", "fcfs"])
    err = capsys.readouterr().err.strip().splitlines()
    assert exc.value.code == 2 and err[-1].startswith("llmsched-evaluate: error: ") and "a\\nb.json" in err[-1], err


@pytest.mark.parametrize(
    "argv",
    [["--scenarios", "q" * 100_000],
     ["--trace", str(ROOT / "tests" / "data" / "heldout" / "conv_code_2tenants.csv"), "--trace-format", "generic",
      "--trace-columns", f"prompt_len={'q' * 100_000},output_len=output_len"]],
)  # fmt: skip
def test_a_huge_value_quoted_by_a_usage_error_is_cut_to_a_bounded_line(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """A 100 KB scenario name or column name was quoted whole, once or twice, in the usage line."""
    with pytest.raises(SystemExit) as exc:
        evaluate_main(argv)
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert exc.value.code == 2 and last.startswith("llmsched-evaluate: error: ") and len(last) < 2_100, len(last)
    assert "characters) …" in last


def test_the_live_experiments_usage_line_is_bounded_too(capsys: pytest.CaptureFixture[str]) -> None:
    """The live experiment's parser (built in the live layer) cuts a huge quoted value as the commands' do."""
    from llmsched_env.commands.live_experiment import main as experiment_main

    with pytest.raises(SystemExit) as exc:
        experiment_main(["--workloads", "q" * 100_000, "--seed", "x" * 100_000])
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert exc.value.code == 2 and "error: " in last and len(last) < 1_100 and "characters) …" in last, last[:300]
