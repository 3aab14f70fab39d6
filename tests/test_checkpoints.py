"""Resuming a training loads only a checkpoint this user's training signed (checkpoints are pickles: a crafted
one runs code); hyperparameter typos and bad values are one usage line before anything is written."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from agents import checkpoints
from agents.checkpoints import CheckpointError, latest_checkpoint, sign_checkpoint, verify_checkpoint
from agents.cli import main
from agents.config import HYPERPARAM_DIR
from agents.sb3 import ALGOS
from agents.train_config import TrainConfig, resolve_hyperparams


@pytest.fixture(autouse=True)
def _own_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Each test has its own key folder (never the user's)."""
    home = tmp_path / "config"
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home))
    return home


def _checkpoint(folder: Path, steps: int, data: bytes = b"PK\x03\x04 a checkpoint") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"model_{steps}_steps.zip"
    path.write_bytes(data)
    return path


def test_a_signed_checkpoint_verifies_and_the_key_is_private(tmp_path: Path, _own_key: Path) -> None:
    ckpt = _checkpoint(tmp_path / "checkpoints", 128)
    sig = sign_checkpoint(ckpt)
    assert sig.name == "model_128_steps.zip.sig"
    verify_checkpoint(ckpt)
    key = checkpoints.key_path()
    assert key.parent.parent == _own_key and key.stat().st_mode & 0o077 == 0 and len(key.read_bytes()) == 32


def test_a_key_others_may_read_is_refused_with_the_chmod_to_run(tmp_path: Path) -> None:
    ckpt = _checkpoint(tmp_path / "checkpoints", 32)
    sign_checkpoint(ckpt)
    key = checkpoints.key_path()
    for mode in (0o644, 0o660, 0o602):
        key.chmod(mode)
        with pytest.raises(CheckpointError, match=rf"readable or writable by others \(mode {mode:04o}\)") as info:
            verify_checkpoint(ckpt)
        assert str(info.value).endswith(f"chmod 600 {key}") and "\n" not in str(info.value)
        with pytest.raises(CheckpointError, match="chmod 600"):
            sign_checkpoint(ckpt)  # nor does a training sign with it
    key.chmod(0o600)
    verify_checkpoint(ckpt)


def test_unsigned_changed_and_foreign_checkpoints_are_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ckpt = _checkpoint(tmp_path / "checkpoints", 64)
    with pytest.raises(CheckpointError, match=r"refusing to load .*model_64_steps\.zip: it has no signature"):
        verify_checkpoint(ckpt)
    sign_checkpoint(ckpt)
    ckpt.write_bytes(b"PK\x03\x04 another pickle")
    with pytest.raises(CheckpointError, match="its signature does not match"):
        verify_checkpoint(ckpt)
    sign_checkpoint(ckpt)
    verify_checkpoint(ckpt)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "someone-else"))  # another user's key
    with pytest.raises(CheckpointError, match="no checkpoint key at"):
        verify_checkpoint(ckpt)
    sign_checkpoint(_checkpoint(tmp_path / "other", 1))  # that user now has a key of their own
    with pytest.raises(CheckpointError, match="its signature does not match") as info:
        verify_checkpoint(ckpt)
    assert "\n" not in str(info.value)


def test_latest_checkpoint_orders_by_steps_and_ignores_odd_names(tmp_path: Path) -> None:
    folder = tmp_path / "checkpoints"
    assert latest_checkpoint(folder) is None
    for steps in (9, 10, 100):
        _checkpoint(folder, steps)
    (folder / "model_x_steps.zip").write_bytes(b"")
    assert latest_checkpoint(folder) == folder / "model_100_steps.zip"


def test_resume_refuses_a_folder_someone_else_wrote_before_loading_or_writing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    run = tmp_path / "run"
    _checkpoint(run / "checkpoints", 256, b"crafted pickle")

    def must_not_load(*args: object, **kwargs: object) -> None:
        raise AssertionError("an unsigned checkpoint was unpickled")

    monkeypatch.setattr(ALGOS["maskable_ppo"], "load", must_not_load)
    with pytest.raises(SystemExit) as exc:
        main(["--scenario", "bursty", "--out", str(run), "--resume", "--no-progress"])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "refusing to load" in err and "model_256_steps.zip" in err and "pickles" in err
    assert sorted(p.name for p in run.iterdir()) == ["checkpoints"]  # nothing written


@pytest.mark.parametrize(
    ("hp", "message"),
    [
        ("learnin_rate=1e-4", "'learnin_rate' (maskable_ppo; from the hyperparameter file or --hp): unknown; did you "
         "mean 'learning_rate'?"),
        ("learning_rate=abc", "'learning_rate' (maskable_ppo; from the hyperparameter file or --hp): must be a finite "
         "number, got 'abc'"),
        ("normalize_advantage=3", "must be true or false, got 3"),
        ("n_envs=0", "'n_envs' (maskable_ppo; from the hyperparameter file or --hp): must be an integer >= 1"),
        ("eval_load=-1", "'eval_load'"),
        ("env_kwargs.num_requets=30", "'env_kwargs.num_requets' (maskable_ppo; from the hyperparameter file or --hp): "
         "unknown env argument; did you mean 'num_requests'?"),
        # ranges: each of these failed after the run folder was written, or trained nonsense without a word
        ("learning_rate=-1", "'learning_rate' (maskable_ppo; from the hyperparameter file or --hp): must be a number "
         "in (0, 1], got -1"),
        ("n_steps=0", "'n_steps' (maskable_ppo; from the hyperparameter file or --hp): must be an integer in [1, "),
        ("batch_size=0", "'batch_size'"),
        ("n_epochs=-1", "'n_epochs'"),
        ("gamma=2", "'gamma' (maskable_ppo; from the hyperparameter file or --hp): must be a number in (0, 1], got 2"),
        ("clip_range=-0.2", "'clip_range' (maskable_ppo; from the hyperparameter file or --hp): must be a number in "
         "(0, inf), got -0.2"),
        ("policy_kwargs.net_arch=[100000, 100000]", "net_arch widths must be integers in [1, 65536], got 100000"),
        ("policy_kwargs.net_arch=[60000, 60000, 60000]", "holds 7,200,000,000 weights between hidden layers"),
        ("n_timesteps=1000000000000", "'n_timesteps' (maskable_ppo; from the hyperparameter file or --hp): must be an "
         "integer in [1, 1,000,000,000]"),
        # counts with a cap (each unbounded one grew a list, a buffer or a folder of checkpoints until the OOM killer)
        ("eval_episodes=1000000000", "'eval_episodes' (maskable_ppo; from the hyperparameter file or --hp): must be an "
         "integer in [1, 10,000], got 1000000000"),
        ("eval_freq=1", "'eval_freq' (maskable_ppo; from the hyperparameter file or --hp): 1 gives 300,000 "
         "evaluations, each with a checkpoint, in n_timesteps 300,000; at most 10,000: give eval_freq >= 30"),
        ("eval_freq=2000000000", "'eval_freq' (maskable_ppo; from the hyperparameter file or --hp): must be an "
         "integer in [1, 1,000,000,000]"),
        ("eval_num_requests=10000000", "'eval_num_requests'"),
        ("eval_load=5000", "'eval_load' (maskable_ppo; from the hyperparameter file or --hp): must be a number in "
         "[0.001, 1000], got 5000"),
        ("bc_steps=100000000000", "'bc_steps' (maskable_ppo; from the hyperparameter file or --hp): must be an integer "
         "in [1, 10,000,000], got 100000000000"),
        ("bc_dagger=1000", "'bc_dagger'"),
        ("bc_stride=100000", "'bc_stride'"),
        ("anchor_epochs=100000", "'anchor_epochs'"),
        ("stats_window_size=0", "'stats_window_size'"),
        ("n_envs=100000", "'n_envs' (maskable_ppo; from the hyperparameter file or --hp): must be an integer in "
         "[1, 256], got 100000"),
        ("policy_kwargs.optimizer_kwargs.eps=.nan", "'policy_kwargs.optimizer_kwargs.eps' (maskable_ppo; from the "
         "hyperparameter file or --hp): must be a number, got nan"),
    ],
)  # fmt: skip
def test_a_bad_hyperparameter_is_one_usage_line_and_writes_no_run_folder(
    tmp_path: Path, hp: str, message: str, capsys: pytest.CaptureFixture
) -> None:
    run = tmp_path / "run"
    with pytest.raises(SystemExit) as exc:
        main(["--scenario", "bursty", "--out", str(run), "--hp", hp, "--no-progress"])
    assert exc.value.code == 2
    assert message in capsys.readouterr().err
    assert not run.exists()


def test_every_shipped_hyperparameter_entry_passes_the_checks() -> None:
    for file in sorted(HYPERPARAM_DIR.glob("*.yml")):
        for scenario in yaml.safe_load(file.read_text()):
            if scenario != "default":  # every entry resolves on top of "default"
                for quick in (False, True):
                    resolve_hyperparams(TrainConfig(algo=file.stem, scenario=scenario, quick=quick))


def test_a_signature_binds_its_checkpoint_to_the_run_and_the_step(tmp_path: Path) -> None:
    import json
    import shutil

    run = {"run": "a1b2", "algo": "maskable_ppo", "scenario": "bursty"}
    spaces = {"observation_space": "Box(-10.0, 10.0, (40,), float32)", "action_space": "MultiDiscrete([3 4])"}
    early = _checkpoint(tmp_path / "checkpoints", 128)
    sign_checkpoint(early, binding={**run, **spaces})
    verify_checkpoint(early, run)
    checkpoints.check_spaces(early, spaces)

    def refused(path: Path, binding: dict[str, str], match: str) -> None:
        with pytest.raises(CheckpointError, match=match) as info:
            verify_checkpoint(path, binding)
        assert "\n" not in str(info.value) and str(path) in str(info.value)

    # a rollback: the earlier checkpoint and its signature copied to a later step's names
    late = tmp_path / "checkpoints" / "model_512_steps.zip"
    shutil.copy(early, late)
    shutil.copy(str(early) + ".sig", str(late) + ".sig")
    refused(late, run, r"binds it to step '128', not '512' as here \(a checkpoint copied from another step")
    refused(early, {**run, "run": "c3d4"}, r"binds it to run 'a1b2', not 'c3d4' as here \(another run's checkpoint\)")
    refused(early, {**run, "algo": "dqn"}, "binds it to algo 'maskable_ppo', not 'dqn'")
    with pytest.raises(CheckpointError, match="binds it to observation_space Box"):
        checkpoints.check_spaces(early, {**spaces, "observation_space": "Box(-10.0, 10.0, (41,), float32)"})
    # the binding is under the HMAC: rewriting the recorded step to match the name breaks the signature
    record = json.loads(Path(str(late) + ".sig").read_text())
    record["binding"]["step"] = "512"
    Path(str(late) + ".sig").write_text(json.dumps(record))
    refused(late, run, "its signature does not match")
    # a signature that binds nothing (as before bindings) is not taken for a run's
    sign_checkpoint(late)
    verify_checkpoint(late)  # bytes alone, where no run is asked for
    refused(late, run, "its signature names no run")
    assert checkpoints.newest_signed_checkpoint(tmp_path / "checkpoints", run) == (
        early,
        [(late, checkpoints.UNBOUND)],
    )
