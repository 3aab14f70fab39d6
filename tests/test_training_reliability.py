"""What a crash, a kill or a second process does to a training's run folder (docs/reliability.md): a
checkpoint is written under a temporary name and signed before it is renamed; ``--resume`` skips a newer
checkpoint that is not signed and says so; every refusal is one usage line before anything is written; a
second training into a folder that another holds is refused."""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from agents.callbacks import read_history
from agents.checkpoints import (
    MISMATCH,
    NO_SIGNATURE,
    CheckpointError,
    SignedCheckpointCallback,
    latest_checkpoint,
    newest_signed_checkpoint,
    sign_checkpoint,
)
from agents.cli import main, parse_args
from agents.config import finite_json
from agents.train_config import TrainConfig, resolve_hyperparams
from agents.training import fresh_start_note, preflight
from llmsched_env.decision.policy_file import seal_meta
from tests.trained_run import TINY, TINY_TRAIN, TrainedRun


@pytest.fixture()
def key_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "config"
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home))
    return home


def _refused(argv: list[str], capsys: pytest.CaptureFixture) -> str:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("llmsched-train: error: ")
    return err[-1]


def _listing(folder: Path) -> dict[str, float]:
    return {str(p.relative_to(folder)): p.stat().st_mtime for p in sorted(folder.rglob("*"))}


def test_the_newest_signed_checkpoint_is_chosen_and_the_skipped_ones_named(tmp_path: Path, key_home: Path) -> None:
    folder = tmp_path / "checkpoints"
    folder.mkdir()
    for steps in (100, 200):
        sign_checkpoint(_write(folder / f"model_{steps}_steps.zip"))
    torn = _write(folder / "model_300_steps.zip")  # killed before its signature
    changed = _write(folder / "model_400_steps.zip")
    sign_checkpoint(changed)
    changed.write_bytes(b"PK cut short")
    _write(folder / ".model_500_steps.123.tmp.zip")  # a temporary file a kill left: never a checkpoint
    assert latest_checkpoint(folder) == changed
    chosen, skipped = newest_signed_checkpoint(folder)
    assert chosen == folder / "model_200_steps.zip"
    assert skipped == [(changed, MISMATCH), (torn, NO_SIGNATURE)]
    for path in folder.glob("model_*_steps.zip.sig"):
        path.unlink()
    with pytest.raises(CheckpointError, match=r"model_400_steps\.zip \(nor any of the 3 earlier ones\): it has no sig"):
        newest_signed_checkpoint(folder)


def _write(path: Path, data: bytes = b"PK\x03\x04 a checkpoint") -> Path:
    path.write_bytes(data)
    return path


class _Model:
    """What ``SignedCheckpointCallback`` needs of a model: ``save``, here writing half a file and then failing
    as a full disk does (``fail``), or writing it whole."""

    def __init__(self, fail: bool) -> None:
        self.fail = fail
        self.num_timesteps = 0

    def save(self, path: str) -> None:
        with open(path, "wb") as fh:
            fh.write(b"PK\x03\x04 half")
            if self.fail:
                raise OSError(errno.ENOSPC, "No space left on device")
            fh.write(b" and the rest")


def _save_checkpoint(folder: Path, steps: int, fail: bool) -> None:
    callback = SignedCheckpointCallback(1, str(folder), name_prefix="model")
    model: Any = _Model(fail)
    callback.model = model
    callback.num_timesteps = steps
    callback.n_calls = 1
    callback._on_step()


def test_a_full_disk_mid_checkpoint_leaves_the_earlier_ones_and_no_torn_file(tmp_path: Path, key_home: Path) -> None:
    folder = tmp_path / "checkpoints"
    folder.mkdir()
    _save_checkpoint(folder, 100, fail=False)
    before = _listing(folder)
    with pytest.raises(OSError, match="No space left"):
        _save_checkpoint(folder, 200, fail=True)
    assert _listing(folder) == before  # no model_200_steps.zip, no temporary file, no signature
    assert newest_signed_checkpoint(folder) == (folder / "model_100_steps.zip", [])


def test_a_kill_mid_checkpoint_leaves_no_checkpoint_of_that_step(tmp_path: Path, key_home: Path) -> None:
    folder = tmp_path / "checkpoints"
    folder.mkdir()
    _save_checkpoint(folder, 100, fail=False)
    code = (
        "import os, signal, sys\n"
        "from tests.test_training_reliability import _save_checkpoint, _Model\n"
        "def save(self, path):\n"
        "    open(path, 'wb').write(b'PK half')\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"
        "_Model.save = save\n"
        f"_save_checkpoint(__import__('pathlib').Path({str(folder)!r}), 200, fail=False)\n"
    )
    root = Path(__file__).resolve().parents[1]
    proc = subprocess.run([sys.executable, "-c", code], cwd=root, env={**os.environ, "PYTHONPATH": str(root)})
    assert proc.returncode == -signal.SIGKILL
    assert not (folder / "model_200_steps.zip").exists()
    assert newest_signed_checkpoint(folder) == (folder / "model_100_steps.zip", [])


def _copy(trained_run: TrainedRun, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(trained_run.out.parent / "config"))  # the key that signed it
    run = tmp_path / "run"
    shutil.copytree(trained_run.out, run)
    (run / "complete.json").unlink()
    return run


def test_resume_falls_back_past_a_torn_checkpoint_and_says_which(
    trained_run: TrainedRun, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    run = _copy(trained_run, tmp_path, monkeypatch)
    (run / "checkpoints" / "model_384_steps.zip").write_bytes(b"PK\x03\x04 torn by a kill")
    assert main(["--scenario", "mixed-slo", "--out", str(run), "--resume", *TINY, "--timesteps", "256"]) == 0
    err = capsys.readouterr().err
    assert f"--resume: skipping {run / 'checkpoints' / 'model_384_steps.zip'}: {NO_SIGNATURE}; resuming from" in err
    assert "model_256_steps.zip" in err and "refusing" not in err
    summary = json.loads((run / "summary.json").read_text())
    assert summary["timesteps"] == 256  # the budget was reached: nothing more learned
    assert (run / "complete.json").is_file()


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--hp", "env_kwargs.load=inf"], "load must be finite and > 0, got inf"),
        (["--hp", "env_kwargs.max_steps=nan"], "max_steps must be an integer >= 1, got nan"),
        (["--hp", "env_kwargs.num_requests=0"], "num_requests must be an integer >= 1, got 0"),
        (["--hp", "env_kwargs.cost_model=bogus"], "unknown cost model preset 'bogus'"),
    ],
)
def test_bad_env_arguments_are_one_line_and_write_nothing(
    tmp_path: Path, key_home: Path, extra: list[str], message: str, capsys: pytest.CaptureFixture
) -> None:
    run = tmp_path / "run"
    line = _refused(["--scenario", "default", "--quick", "--out", str(run), "--no-progress", *extra], capsys)
    assert message in line
    assert not run.exists()


def test_an_unwritable_key_folder_is_one_line_before_any_work(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", "/dev/null")
    run = tmp_path / "run"
    line = _refused(["--scenario", "mixed-slo", "--out", str(run), *TINY], capsys)
    assert "checkpoint key /dev/null/llmsched/checkpoint.key: cannot be created or read" in line
    assert "XDG_CONFIG_HOME" in line
    assert not run.exists()


def test_an_earlier_training_is_not_mixed_with_a_new_one(
    trained_run: TrainedRun, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    run = _copy(trained_run, tmp_path, monkeypatch)
    before = _listing(run)
    line = _refused(["--scenario", "mixed-slo", "--out", str(run), *TINY], capsys)
    assert f"--out {run}: holds an earlier training (args.json, config.yml, checkpoints" in line
    assert "pass --resume" in line
    line = _refused(["--scenario", "mixed-slo", "--out", str(run), "--resume", *TINY, "--algo", "ppo"], capsys)
    assert "was trained with --algo 'maskable_ppo', this command gives 'ppo'" in line
    line = _refused(["--scenario", "bursty", "--out", str(run), "--resume", *TINY], capsys)
    assert "was trained with --scenario 'mixed-slo', this command gives 'bursty'" in line
    assert _listing(run) == before  # config.yml, args.json and command.txt untouched


def test_init_from_a_normalised_policy_is_one_line(
    trained_run: TrainedRun, tmp_path: Path, key_home: Path, capsys: pytest.CaptureFixture
) -> None:
    policy = tmp_path / "policy"
    policy.mkdir()
    for name in ("policy.json", "policy.safetensors"):
        shutil.copy(trained_run.out / name, policy / name)
    meta = json.loads((policy / "policy.json").read_text())
    n = len(meta["obs_names"])
    meta["normalization"] = {"mean": [0.0] * n, "var": [1.0] * n, "epsilon": 1e-8, "clip": 10.0}
    (policy / "policy.json").write_text(json.dumps(seal_meta(meta)))  # as an export under normalisation writes it
    run = tmp_path / "run"
    line = _refused(["--scenario", "mixed-slo", "--out", str(run), "--init", str(policy), *TINY_TRAIN], capsys)
    assert "trained under observation normalisation cannot start a training" in line
    assert not run.exists()


HOLD = (
    "import sys, time\nfrom llmsched_env.common.outputs import locked_output\n"
    "with locked_output(sys.argv[1], 'llmsched-train'):\n    print('held', flush=True)\n    time.sleep(120)\n"
)


def test_a_second_training_into_a_held_folder_is_refused(
    tmp_path: Path, key_home: Path, capsys: pytest.CaptureFixture
) -> None:
    run = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(run)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
        line = _refused(["--scenario", "mixed-slo", "--out", str(run), *TINY], capsys)
        assert f"--out {run}: llmsched-train (pid {proc.pid}) is writing there" in line
        assert sorted(p.name for p in run.iterdir()) == [".llmsched.lock"]  # nothing written
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize(
    ("place", "kind", "message"),
    [
        ("policy.json", "fifo", "policy.json is a FIFO (named pipe); an output folder may hold only regular files"),
        ("args.json", "fifo", "args.json is a FIFO (named pipe)"),
        (".llmsched.lock", "fifo", ".llmsched.lock is a FIFO (named pipe)"),
        ("checkpoints/model_128_steps.zip", "fifo", "checkpoints/model_128_steps.zip is a FIFO (named pipe)"),
        ("checkpoints", "file", "checkpoints is not a folder, and the run writes into checkpoints/"),
        ("summary.json", "folder", "summary.json is a folder where a file is written"),
    ],
)
def test_a_resumed_folder_holding_something_it_cannot_open_is_refused_before_anything(
    trained_run: TrainedRun, tmp_path: Path, key_home: Path, capsys: pytest.CaptureFixture, place: str, kind: str,
    message: str,
) -> None:  # fmt: skip
    """A FIFO (which would hang the read or the write), a file where the run writes a folder, or a folder where
    it writes a file, anywhere a resumed training reads or writes: one usage line, nothing touched."""
    run = tmp_path / "run"
    shutil.copytree(trained_run.out, run)
    target = run / place
    if target.is_dir():
        shutil.rmtree(target)
    else:
        target.unlink(missing_ok=True)
    {"fifo": os.mkfifo, "file": lambda p: Path(p).write_text("x"), "folder": os.mkdir}[kind](target)
    before = _listing(run)
    signal.alarm(60)  # a FIFO opened would block: fail instead of hanging the suite
    try:
        line = _refused(["--scenario", "mixed-slo", "--out", str(run), "--resume", *TINY, "--timesteps", "384"], capsys)
    finally:
        signal.alarm(0)
    assert message in line
    assert _listing(run) == before


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--n-envs", "1", "--hp", "n_envs=100000"], "n_envs: given twice, as --n-envs 1 and as --hp n_envs=100000"),
        (["--timesteps", "256", "--hp", "n_timesteps=512"], "timesteps: given twice, as --timesteps 256 and as --hp "
         "n_timesteps=512"),
        (["--bc", "fcfs", "--hp", "bc_warmstart=sjf"], "bc: given twice, as --bc fcfs and as --hp bc_warmstart='sjf'"),
        (["--bc", "none", "--hp", "bc_steps=100000000000"], "must be an integer in [1, 10,000,000], got 100000000000"),
        (["--bc", "none", "--hp", "bc_steps=200"], "--hp bc_steps does nothing here: --bc none clones nothing; "
         "drop it"),
        (["--bc", "none", "--hp", "bc_dagger=2", "--hp", "bc_stride=2"], "--hp bc_dagger, bc_stride do nothing here: "
         "--bc none clones nothing; drop them"),
        (["--init", "tests/data/policies/mixed-slo", "--hp", "bc_steps=200"], "--hp bc_steps does nothing here: --init "
         "starts from the policy's weights, with no cloning"),
        (["--init", "tests/data/policies/mixed-slo", "--bc", "fcfs"], "init: give either --init (start from a policy's "
         "weights) or --bc fcfs (clone a baseline)"),
        (["--hp", "anchor_epochs=3"], "--hp anchor_epochs does nothing here: anchor_coef is 0"),
        (["--scenario", "generalist", "--hp", "eval_episodes=5", "--hp", "eval_load=2"], "--hp eval_episodes, "
         "eval_load do nothing here: the generalist is evaluated on one val episode per library scenario"),
        ([x for w in ("good", "miss", "preempt") for x in ("--hp", f"env_kwargs.reward.{w}=0")],
         "RewardConfig: the reward weights good, miss and preempt are all 0"),
        (["--n-envs", "2", "--hp", "n_steps=64", "--hp", "batch_size=100000"], "'batch_size' (maskable_ppo; from the "
         "hyperparameter file or --hp): 100,000 is over the rollout its mini-batches are cut from (n_steps 64 x n_envs "
         "2 = 128 transitions), so it would have no effect; give batch_size <= 128"),
        (["--seed", "3", "--seeds", "1,2"], "--seed 3 and --seeds 1,2: --seeds runs one training per seed and --seed "
         "would be ignored; give the seed in --seeds"),
        (["--scenario", "mixed-slo", "--scenarios", "bursty"], "--scenario mixed-slo and --scenarios bursty: "
         "--scenarios runs one training per scenario and --scenario would be ignored"),
        (["--hp", "learning_rate=0.01", "--hp-grid", "learning_rate=0.001,0.002"], "--hp learning_rate=0.01 and "
         "--hp-grid learning_rate: each of the grid's values replaces the --hp one, which would be ignored"),
        (["--hp", "env_kwargs={load: 1.0}", "--hp-grid", "env_kwargs.load=1,2"], "--hp env_kwargs={load: 1.0} and "
         "--hp-grid env_kwargs.load: each"),
        (["--eval-baselines", ""], "--eval-baselines: an empty list (''); name baselines, or leave it out"),
        (["--eval-baselines", ","], "--eval-baselines: an empty list (','); name baselines"),
        (["--hp-grid", "learning_rate=" + ",".join(f"{i}e-6" for i in range(1, 3001)), "--hp-grid",
          "gamma=" + ",".join(f"0.9{i:04d}" for i in range(3000))], "a sweep of 9,000,000 trainings (1 x 1 x 3000 x "
         "3000: scenarios x seeds x the values of each grid key) is more than the 1,000 one sweep may run; split it"),
    ],
)  # fmt: skip
def test_an_option_given_twice_or_to_no_effect_is_one_line_and_writes_nothing(
    tmp_path: Path, key_home: Path, extra: list[str], message: str, capsys: pytest.CaptureFixture
) -> None:
    """A value that one option would silently override or ignore (``--hp n_envs`` under ``--n-envs``, a cloning
    hyperparameter with ``--bc none``), or a reward that is 0 at every step: refused before anything is written."""
    run = tmp_path / "run"
    scenario = [] if "--scenario" in extra else ["--scenario", "mixed-slo"]
    line = _refused([*scenario, "--out", str(run), "--no-progress", *extra], capsys)
    assert message in line
    assert not run.exists()


@pytest.mark.parametrize(
    ("hp", "message"),
    [
        ({"n_steps": 1 << 20, "n_envs": 32}, "'n_steps' (maskable_ppo; from the hyperparameter file or --hp): n_steps "
         "1,048,576 x n_envs 32 transitions in one rollout are over 16,777,216"),
        ({"bc_steps": 10**7, "bc_dagger": 1}, "'bc_steps' (maskable_ppo; from the hyperparameter file or --hp): "
         "bc_steps 10,000,000 x (1 + bc_dagger 1) labelled steps, all kept in memory, are over 10,000,000"),
        ({"bc_steps": 10**6, "bc_stride": 1000}, "bc_steps 1,000,000 x bc_stride 1000 steps played in one round are "
         "over 100,000,000"),
        ({"policy_kwargs": {"lstm_hidden_size": 10**6}}, "lstm_hidden_size must be an integer in [1, 65,536]"),
        # 10^8 val episodes (a hang): refused with the least eval_freq and the most eval_episodes that fit
        ({"eval_freq": 1, "eval_episodes": 10_000, "n_timesteps": 10_000}, "'eval_episodes' (maskable_ppo; from the "
         "hyperparameter file or --hp): 10,000 val episodes x 10,001 evaluations (n_timesteps 10,000 // eval_freq 1, "
         "and the start's) are 100,010,000 evaluation episodes, over 100,000: give eval_freq >= 1,001 or "
         "eval_episodes <= 9"),
    ],
)  # fmt: skip
def test_counts_in_range_but_too_many_together_are_refused(hp: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError) as caught:
        resolve_hyperparams(TrainConfig(scenario="bursty", hp=hp))
    assert message in str(caught.value)
    with pytest.raises(ValueError, match=r"^n_envs: expected an integer in \[1, 256\], got 100000$"):
        TrainConfig(n_envs=100_000)


def test_an_on_policy_batch_size_over_its_rollout_is_refused_only_where_it_means_that() -> None:
    """SB3's PPO family cuts mini-batches from one rollout (``n_steps x n_envs``): a larger ``batch_size`` is the
    whole rollout. DQN's ``batch_size`` samples a replay buffer (its ``n_steps`` is n-step returns): not refused."""
    hp = {"n_steps": 64, "n_envs": 2, "batch_size": 129}
    for algo in ("maskable_ppo", "ppo", "recurrent_ppo"):
        with pytest.raises(ValueError, match=r"'batch_size' .*129 is over the rollout .*give batch_size <= 128"):
            resolve_hyperparams(TrainConfig(algo=algo, hp=hp))
        assert resolve_hyperparams(TrainConfig(algo=algo, hp={**hp, "batch_size": 128}))["batch_size"] == 128
    assert resolve_hyperparams(TrainConfig(algo="dqn", hp={"batch_size": 1024, "n_envs": 1}))["batch_size"] == 1024


def test_a_sweep_is_capped_before_its_trainings_are_built() -> None:
    from agents.sweep import MAX_SWEEP_TRAININGS, sweep_configs

    base = TrainConfig(quick=True)
    grid = {"ent_coef": [str(i) for i in range(10)], "gamma": [f"0.{i}" for i in range(1, 10)]}
    seeds = list(range(MAX_SWEEP_TRAININGS // 90 + 1))
    with pytest.raises(ValueError, match=r"a sweep of 1,080 trainings \(1 x 12 x 10 x 9: scenarios x seeds"):
        sweep_configs(base, Path("runs/sweep"), seeds=seeds, hp_grid=grid)
    assert len(sweep_configs(base, Path("runs/sweep"), seeds=seeds[:11], hp_grid=grid)) == 990


def test_resume_without_a_checkpoint_keeps_the_earlier_runs_results(
    trained_run: TrainedRun, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """``--resume`` on a finished run whose checkpoints are gone: nothing to resume from, and starting afresh would
    replace its model and policy; refused, nothing touched. A folder without an earlier training's results
    (empty, or one killed before its first evaluation) still starts afresh under ``--resume``."""
    run = _copy(trained_run, tmp_path, monkeypatch)
    for path in (run / "checkpoints").iterdir():
        path.unlink()
    before = _listing(run)
    line = _refused(["--scenario", "mixed-slo", "--out", str(run), "--resume", *TINY, "--timesteps", "384"], capsys)
    assert f"--resume: {run / 'checkpoints'} holds no checkpoint, so there is nothing to resume from" in line
    assert "results (model.zip, best_model.zip, best.json, eval_history.json, summary.json, bc.json, policy" in line
    assert "they are kept: choose another --out" in line
    assert _listing(run) == before
    (run / "checkpoints").rmdir()
    line = _refused(["--scenario", "mixed-slo", "--out", str(run), "--resume", *TINY], capsys)
    assert "nothing to resume from" in line and _listing(run) == {k: v for k, v in before.items() if k != "checkpoints"}
    for fresh in ("empty", "killed"):  # no earlier results: --resume starts afresh, as scripts that always pass it do
        folder = tmp_path / fresh
        folder.mkdir()
        if fresh == "killed":  # killed before its first evaluation: only the set-up files and the key of its run
            for name in ("args.json", "config.yml", "command.txt"):
                shutil.copy(trained_run.out / name, folder / name)
        args = parse_args(["--scenario", "mixed-slo", "--out", str(folder), "--resume", *TINY])
        assert args.config.resume


def _edit_history(run: Path, entry: int, value: Any, *, step: bool = False) -> None:
    path = run / "eval_history.json"
    record = json.loads(path.read_text())
    record["history"][entry][0 if step else 1] = value
    path.write_text(json.dumps(record))  # NaN as the token NaN, as an edit writes it


def _edit_args(run: Path, edit: Any) -> None:
    path = run / "args.json"
    path.write_text(json.dumps(edit(json.loads(path.read_text()))))


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda run: _edit_history(run, 1, float("nan")), "history entry 1 ([128, NaN]): the attainment must be a "
         "finite number in [0, 1], got nan, which no evaluation writes: the file was changed"),
        (lambda run: _edit_history(run, 2, 1.5), "history entry 2 ([256, 1.5]): the attainment must be a finite "
         "number in [0, 1], got 1.5"),
        (lambda run: _edit_history(run, 2, 64, step=True), "history entry 2 ([64, "),
        (lambda run: _edit_history(run, 0, -1, step=True), "history entry 0 ([-1, "),
        (lambda run: _edit_history(run, 1, "128", step=True), "the step must be an integer >= 0, got '128'"),
        (lambda run: (run / "eval_history.json").write_text("{"), "eval_history.json: cannot read the evaluations "
         "so far"),
        (lambda run: (run / "best.json").write_text('{"best_eval_attainment": NaN}'), "best.json: "
         "'best_eval_attainment' must be a finite number in [0, 1], got nan"),
        # args.json without the run's id: named, not the checkpoint (once blamed as another run's)
        (lambda run: _edit_args(run, lambda d: {k: v for k, v in d.items() if k != "run_id"}), "args.json: no run_id "
         "(the run's id, which its checkpoints are signed with), got None; it was edited: choose another --out"),
        (lambda run: _edit_args(run, lambda d: {**d, "run_id": ""}), "args.json: no run_id (the run's id, which its "
         "checkpoints are signed with), got ''"),
        (lambda run: _edit_args(run, lambda d: [1, 2]), "args.json: expected a JSON object (the run's options), got "
         "list"),
    ],
)  # fmt: skip
def test_resume_refuses_an_evaluation_record_no_evaluation_writes(
    trained_run: TrainedRun,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture,
    edit: Any,
    message: str,
) -> None:
    """A NaN, an attainment outside [0, 1], a step out of order in ``eval_history.json`` (or ``best.json``): one
    line naming the file and the entry, before anything is written, never carried into ``summary.json``. So is an
    ``args.json`` without the run's id (its checkpoints are signed with it)."""
    run = _copy(trained_run, tmp_path, monkeypatch)
    edit(run)
    before = _listing(run)
    line = _refused(["--scenario", "mixed-slo", "--out", str(run), "--resume", *TINY, "--timesteps", "384"], capsys)
    assert message in line and str(run) in line and "signature binds" not in line
    assert _listing(run) == before


def _strict(text: str) -> Any:
    def refuse(token: str) -> None:
        raise AssertionError(f"{token} in a JSON file")

    return json.loads(text, parse_constant=refuse)


def test_the_runs_json_files_hold_no_nan_and_a_score_never_measured_is_null(
    trained_run: TrainedRun, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    written = finite_json({"a": float("nan"), "b": [float("-inf"), 1.5], "c": (2,)})
    assert written == '{"a": null, "b": [null, 1.5], "c": [2]}'
    monkeypatch.setenv("XDG_CONFIG_HOME", str(trained_run.out.parent / "config"))
    run = tmp_path / "run"
    shutil.copytree(trained_run.resumed, run)  # at its budget of 384 steps
    (run / "best.json").unlink()  # no best to beat, and nothing left to learn: no evaluation in this resume
    (run / "complete.json").unlink()  # killed after its last checkpoint (a finished run at its budget is refused)
    assert main(["--scenario", "mixed-slo", "--out", str(run), "--resume", *TINY, "--timesteps", "384"]) == 0
    summary = _strict((run / "summary.json").read_text())
    assert summary["best_eval_attainment"] is None  # -inf, never measured: null, not -Infinity
    assert [step for step, _ in summary["eval_history"]] == [0, 128, 256, 384]
    for path in run.rglob("*.json"):
        _strict(path.read_text())
    capsys.readouterr()


def test_the_evaluation_episodes_cap_lets_the_fix_it_names_through() -> None:
    hp = {"eval_freq": 1_001, "eval_episodes": 10_000, "n_timesteps": 10_000}  # 10 evaluations x 10,000 episodes
    assert resolve_hyperparams(TrainConfig(scenario="bursty", hp=hp))["eval_freq"] == 1_001
    with pytest.raises(ValueError, match="give eval_freq >= 1,001"):
        resolve_hyperparams(TrainConfig(scenario="bursty", hp={**hp, "eval_freq": 1_000}))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("learning_rate: 0.5\n", "h.yml: no entry for scenario 'mixed-slo' and no 'default' entry (its keys: "
         "learning_rate); expected a mapping of scenario -> hyperparameters, e.g. 'default: {learning_rate: 0.0003}'"),
        ("warp_speed: 9\n", "h.yml: no entry for scenario 'mixed-slo' and no 'default' entry (its keys: warp_speed)"),
        ("", "h.yml: no entry for scenario 'mixed-slo' and no 'default' entry (its keys: none)"),
        ("default: {warp_speed: 9}\n", "h.yml: unknown hyperparameter(s) 'warp_speed' for maskable_ppo in the entry "
         "used for scenario 'mixed-slo'"),
        ("mixed-slo: {learnin_rate: 0.1}\n", "did you mean 'learning_rate'?"),
        ("mixed-slo: 0.5\n", "h.yml: the 'mixed-slo' entry must be a mapping of hyperparameters, got 0.5"),
    ],
)  # fmt: skip
def test_a_hyperparameter_file_that_would_apply_nothing_is_one_line_naming_it(
    tmp_path: Path, key_home: Path, text: str, message: str, capsys: pytest.CaptureFixture
) -> None:
    """A flat ``--hyperparams`` file (``learning_rate: 0.5``) is read as keyed by scenario: with no entry for the
    scenario and no ``default`` it applied nothing (and dropped the algorithm's own file) without a word."""
    (tmp_path / "h.yml").write_text(text)
    run = tmp_path / "run"
    line = _refused(["--scenario", "mixed-slo", "--out", str(run), "--hyperparams", str(tmp_path / "h.yml")], capsys)
    assert message in line
    assert not run.exists()
    (tmp_path / "h.yml").write_text("default: {learning_rate: 0.5}\n")  # the shape it expects: applied
    config = parse_args(["--scenario", "mixed-slo", "--out", str(run), "--hyperparams", str(tmp_path / "h.yml")]).config
    assert resolve_hyperparams(config)["learning_rate"] == 0.5


def test_resume_with_other_hyperparameters_is_refused_naming_them(
    trained_run: TrainedRun, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """A checkpoint trained at one learning rate would go on at another, and config.yml would say the whole run
    used it; the budget, the evaluation's keys and the cloning's (a resumed run clones nothing) may differ."""
    run = _copy(trained_run, tmp_path, monkeypatch)
    before = _listing(run)
    argv = ["--scenario", "mixed-slo", "--out", str(run), "--resume", *TINY, "--timesteps", "384"]
    line = _refused([*argv, "--hp", "learning_rate=0.1", "--hp", "gamma=0.5"], capsys)
    assert f"--resume: {run} was trained with other hyperparameters (config.yml): gamma 0.995 there, 0.5 here; " in line
    assert "learning_rate 0.0003 there, 0.1 here; resume with the run's own (its command.txt)" in line
    assert "(only n_timesteps, eval_freq, eval_episodes, eval_load, eval_num_requests may change on a resume)" in line
    line = _refused([*argv, "--hp", "env_kwargs.num_requests=40"], capsys)
    assert "env_kwargs.num_requests 30 there, 40 here" in line
    assert _listing(run) == before
    args = parse_args([*argv, "--hp", "eval_load=2.0", "--hp", "bc_steps=300"])  # no bc_dagger: a clone's keys
    hp, _, _ = preflight(args.config, warn=False)
    earlier = yaml.safe_load((run / "config.yml").read_text())
    assert (hp["bc_steps"], hp["bc_dagger"]) == (earlier["bc_steps"], earlier["bc_dagger"]) == (200, 2)


def test_a_resume_without_its_evaluation_record_says_what_is_lost(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    assert read_history(tmp_path, {}, 256) == []
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"--resume: {tmp_path / 'eval_history.json'} is missing: the evaluations before step 256 are lost, and "
        f"summary.json's eval_history starts with this run's; {tmp_path / 'best.json'} still holds the best so far"
    ]
    assert read_history(tmp_path, {}, 256, warn=False) == read_history(tmp_path, {}, 0) == []  # a fresh run: none
    assert capsys.readouterr().err == ""


def test_resume_of_a_run_killed_before_its_first_checkpoint_starts_afresh(
    trained_run: TrainedRun, tmp_path: Path, key_home: Path, capsys: pytest.CaptureFixture
) -> None:
    """A training killed after its evaluation of the start policy (step 0) but before its first checkpoint left
    best.json, eval_history.json, best_model.zip and the policy pair, all of the start policy, which a fresh start
    builds again: ``--resume`` starts afresh, saying what it replaces. A best or an evaluation past step 0 is a
    learnt model: refused, as a finished run is
    (``test_resume_without_a_checkpoint_keeps_the_earlier_runs_results``)."""
    run = tmp_path / "killed"
    run.mkdir()
    for name in ("args.json", "config.yml", "command.txt", "best_model.zip", "policy.json", "policy.safetensors"):
        shutil.copy(trained_run.out / name, run / name)
    best = json.loads((trained_run.out / "best.json").read_text())
    (run / "best.json").write_text(json.dumps({**best, "timesteps": 0}))
    history = json.loads((trained_run.out / "eval_history.json").read_text())
    (run / "eval_history.json").write_text(json.dumps({**history, "history": history["history"][:1]}))
    argv = ["--scenario", "mixed-slo", "--out", str(run), "--resume", *TINY]
    assert parse_args(argv).config.resume
    assert fresh_start_note(parse_args(argv).config) == (
        f"--resume: no checkpoint in {run / 'checkpoints'}; starting afresh, replacing what a training killed before "
        "its first checkpoint left (best_model.zip, best.json, eval_history.json, policy.json, policy.safetensors: "
        "its evaluation of the start policy, at step 0)"
    )
    before = _listing(run)
    (run / "eval_history.json").write_text(json.dumps(history))  # evaluated at 128 too: learnt
    line = _refused(argv, capsys)
    assert "holds an earlier training's results (best_model.zip, best.json, eval_history.json, policy.json" in line
    (run / "eval_history.json").write_text(json.dumps({**history, "history": history["history"][:1]}))
    (run / "best.json").unlink()  # a best model that nothing dates
    assert "they are kept: choose another --out" in _refused(argv, capsys)
    assert _listing(run).keys() == before.keys() - {"best.json"}


def test_a_training_into_an_evaluations_folder_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """A training would replace an evaluation's complete.json with its own."""
    out = tmp_path / "eval"
    out.mkdir()
    (out / "evaluation.json").write_text("{}")
    before = _listing(out)
    line = _refused(["--scenario", "mixed-slo", "--out", str(out), *TINY_TRAIN], capsys)
    assert "holds an evaluation (evaluation.json); choose another --out" in line and _listing(out) == before


def test_a_resume_with_its_budget_reached_or_passed_is_refused_and_nothing_written(
    trained_run: TrainedRun, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """A finished run resumed to the budget it reached would replace its ``model.zip`` with its last checkpoint
    (saved before the last update) and learn nothing; a budget below the steps trained would make ``args.json``
    say the run trained fewer: both refused in one line, nothing written."""
    run = _copy(trained_run, tmp_path, monkeypatch)
    shutil.copy(trained_run.out / "complete.json", run / "complete.json")
    assert json.loads((run / "complete.json").read_text())["timesteps"] == 256
    before = _listing(run)
    argv = ["--scenario", "mixed-slo", "--out", str(run), "--resume", *TINY]
    for budget in ("256", "128"):
        line = _refused([*argv, "--timesteps", budget], capsys)
        assert f"--resume: {run} finished at 256 steps (complete.json); nothing to resume; give --timesteps > 256" in (
            line
        )
    (run / "complete.json").unlink()  # killed after its last checkpoint: a budget below it is refused
    before.pop("complete.json")
    line = _refused([*argv, "--timesteps", "128"], capsys)
    assert f"--resume: {run} has trained 256 steps (its checkpoint model_256_steps.zip), more than the budget" in line
    assert "give --timesteps >= 256" in line
    assert _listing(run) == before


def test_a_resume_with_another_seed_or_cloning_is_refused_naming_both_values(
    trained_run: TrainedRun, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    run = _copy(trained_run, tmp_path, monkeypatch)
    before = _listing(run)
    argv = ["--scenario", "mixed-slo", "--out", str(run), "--resume", *TINY, "--timesteps", "384"]
    line = _refused([*argv, "--seed", "5"], capsys)
    assert f"--resume: {run} was trained with --seed 0, this command gives 5; resume with the run's own --seed" in line
    line = _refused([*argv, "--bc", "fcfs"], capsys)
    assert "was trained with --bc (not given), this command gives 'fcfs'; resume with the run's own --bc" in line
    assert _listing(run) == before  # args.json, config.yml and command.txt untouched


def test_workers_without_a_sweep_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    run = tmp_path / "run"
    line = _refused(["--scenario", "mixed-slo", "--out", str(run), *TINY, "--workers", "2"], capsys)
    assert "--workers spreads a sweep's trainings over workers, and this command trains once" in line
    assert not run.exists()


def test_a_resumed_sweep_keeps_the_trainings_that_finished_at_their_budget(
    tmp_path: Path, key_home: Path, capsys: pytest.CaptureFixture
) -> None:
    """Rerunning a killed sweep with --resume: each training that finished at its budget (complete.json) is kept
    as it is and listed in sweep.json, instead of the whole sweep being refused for it (a resume at the budget
    of one training alone is refused: ``check_budget``)."""
    from agents.sweep import finished_result, run_sweep
    from agents.training import finished_at_budget

    sweep = tmp_path / "sweep"
    argv = ["--scenario", "mixed-slo", "--seeds", "0,1", "--out", str(sweep), "--resume", *TINY_TRAIN]
    args = parse_args(argv)
    assert len(args.configs) == 2 and args.kept == []  # nothing finished yet: both train
    done = args.configs[0].run_folder
    done.mkdir(parents=True)
    (done / "complete.json").write_text(json.dumps({"timesteps": 256}))
    (done / "summary.json").write_text(json.dumps({"best_eval_attainment": 0.9}))
    assert finished_at_budget(args.configs[0]) == 256
    args = parse_args(argv)
    assert [c.run_folder for c in args.kept] == [done] and len(args.configs) == 1
    assert f"--resume: {done} finished at 256 steps; kept as it is" in capsys.readouterr().err
    results = run_sweep([], sweep, progress=False, kept=[finished_result(done)])
    assert results == [{"out": str(done), "returncode": 0, "summary": {"best_eval_attainment": 0.9}}]
    assert json.loads((sweep / "sweep.json").read_text()) == results


def test_resume_refuses_a_run_whose_exported_best_is_gone(
    trained_run: TrainedRun, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """The policy pair is written with each new best only: a resume of a run whose pair was deleted would finish
    without one (complete.json beside no policy), so it is refused in one line naming the files."""
    run = _copy(trained_run, tmp_path, monkeypatch)
    (run / "policy.json").unlink()
    line = _refused(["--scenario", "mixed-slo", "--out", str(run), "--resume", *TINY, "--timesteps", "512"], capsys)
    assert "the best model's export (policy.json) is gone" in line
    (run / "best_model.zip").unlink()
    line = _refused(["--scenario", "mixed-slo", "--out", str(run), "--resume", *TINY, "--timesteps", "512"], capsys)
    assert "the best model's export (best_model.zip, policy.json) is gone" in line


@pytest.mark.parametrize(
    "hp",
    [
        ["env_kwargs.num_requests=30", 'env_kwargs={"iterations_per_step": 16}'],
        ['env_kwargs={"iterations_per_step": 16}', "env_kwargs.num_requests=30"],
    ],
)
def test_an_hp_mapping_and_a_key_inside_it_are_refused(
    hp: list[str], tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """``--hp env_kwargs.num_requests=30 --hp 'env_kwargs={...}'``: the mapping silently replaced the key set inside
    it (the episodes ran at the file's 600 requests). One key given twice stays an override (the last counts)."""
    argv = ["--scenario", "mixed-slo", "--out", str(tmp_path / "r"), "--timesteps", "256"]
    line = _refused([*argv, *(x for item in hp for x in ("--hp", item))], capsys)
    assert f"--hp {hp[0]} and --hp {hp[1]}: one sets a key inside the other" in line and not (tmp_path / "r").exists()


def test_a_resume_whose_trace_changed_under_the_same_path_is_refused(tmp_path: Path) -> None:
    """A resume after the --trace file's rows were edited (the same path) trained on without a word."""
    import shutil

    from agents.train_config import TrainConfig, resolve_hyperparams
    from agents.training import TRACE_DIGEST, check_run_folder, prepare_run_folder

    trace = tmp_path / "t.csv"
    shutil.copy(Path(__file__).parent / "data" / "heldout" / "conv_code_2tenants.csv", trace)
    options = {"trace": str(trace), "trace_format": "generic",
               "trace_columns": "arrival=arrival,prompt_len=prompt_len,output_len=output_len"}  # fmt: skip
    first = TrainConfig(trace=options, out=tmp_path / "run")
    out = prepare_run_folder(first, resolve_hyperparams(first))
    recorded = json.loads((out / "args.json").read_text())[TRACE_DIGEST]
    resumed = TrainConfig(trace=options, out=out, resume=True)
    check_run_folder(resumed)  # the same trace: resumable
    lines = trace.read_text().splitlines()
    lines[5] = lines[5].replace(",", ",9", 1)  # one request's prompt edited
    trace.write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=f"--resume: the --trace file {trace} changed since {out} was trained on it "
                                         rf"\(sha256 \w+ against {recorded} in its args.json\)"):  # fmt: skip
        check_run_folder(resumed)
