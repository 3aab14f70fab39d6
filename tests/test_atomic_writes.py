"""Files a crash or a full disk must not destroy: a write goes to a temporary file beside its target and
replaces it in one step (``common.outputs.replaced_atomically``), so the old file survives a failed write.
Training writes best_model.zip, best.json, model.zip and summary.json so, and exports a policy pair so."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from llmsched_env.common.outputs import replaced_atomically, write_text_atomically


def _full_disk(*args: object, **kwargs: object) -> None:
    raise OSError(errno.ENOSPC, "No space left on device")


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary_one(tmp_path: Path) -> None:
    target = tmp_path / "best_model.zip"
    target.write_bytes(b"the old best")
    with pytest.raises(OSError, match="No space left"), replaced_atomically(target) as tmp:
        assert tmp.parent == tmp_path and tmp.suffix == ".zip" and tmp != target
        tmp.write_bytes(b"half of the new")
        _full_disk()
    assert target.read_bytes() == b"the old best" and sorted(tmp_path.iterdir()) == [target]
    write_text_atomically(target, "the new best")
    assert target.read_text() == "the new best" and sorted(tmp_path.iterdir()) == [target]


def test_a_failed_export_keeps_the_previous_policy_pair(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import gymnasium as gym
    import torch
    from sb3_contrib import MaskablePPO

    import agents.export as export
    from llmsched_env.runtime.policy_file import load_policy_file

    torch.set_num_threads(1)
    env = gym.make("LLMSched-v1", scenario="mixed-slo", num_requests=20)
    model = MaskablePPO("MlpPolicy", env, n_steps=32, batch_size=32, seed=0, device="cpu")
    out = tmp_path / "policy"
    export.export_policy(model, env, out, extra={"seed": 0})
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    model2 = MaskablePPO("MlpPolicy", env, n_steps=32, batch_size=32, seed=1, device="cpu")
    monkeypatch.setattr(export, "load_policy_file", _full_disk)  # fails after both new files are written
    with pytest.raises(OSError, match="No space left"):
        export.export_policy(model2, env, out, extra={"seed": 1})
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # no staging folder, the old pair whole
    assert load_policy_file(out).meta["seed"] == 0


def test_an_unusable_out_is_refused_before_any_work(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    import os

    from llmsched_env.commands.evaluate import main as evaluate_main
    from llmsched_env.common.outputs import check_output

    a_file = tmp_path / "results.txt"
    a_file.write_text("x")
    with pytest.raises(ValueError, match="is a file; give a folder"):
        check_output(a_file)
    with pytest.raises(ValueError, match="is a folder; give a file name"):
        check_output(tmp_path, file=True)
    assert check_output(tmp_path / "new" / "deeper") == tmp_path / "new" / "deeper"  # created later, may be
    monkeypatch.setattr(os, "access", lambda *args: False)  # as on a read-only filesystem
    with pytest.raises(ValueError, match=f"cannot be written \\({tmp_path} is not a writable folder\\)"):
        check_output(tmp_path / "new" / "deeper")
    with pytest.raises(SystemExit):  # the command: one usage line, before the grid runs
        evaluate_main(["--scenarios", "default", "--policies", "fcfs", "--num-requests", "20", "--out", str(a_file)])
    assert "--out" in capsys.readouterr().err.strip().splitlines()[-1]


def test_a_device_fifo_socket_or_link_at_an_output_is_refused_and_left_as_it_was(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    import os
    import socket

    from llmsched_env.commands.calibrate import main as calibrate_main
    from llmsched_env.commands.tune import main as tune_main
    from llmsched_env.common.outputs import check_output

    os.mkfifo(tmp_path / "fifo.json")
    real = tmp_path / "real.json"
    real.write_text("{}")
    (tmp_path / "link.json").symlink_to(real)
    (tmp_path / "null.json").symlink_to("/dev/null")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(tmp_path / "sock.json"))
    cases = {
        "/dev/null": "is a character device",
        str(tmp_path / "fifo.json"): "is a FIFO",
        str(tmp_path / "sock.json"): "is a socket",
        str(tmp_path / "null.json"): "null.json -> /dev/null: is a character device",  # a link: its target
    }
    try:
        for path, kind in cases.items():
            with pytest.raises(ValueError, match=kind) as err:
                check_output(path, force=True, file=True)
            assert "\n" not in str(err.value) and path in str(err.value)
            with pytest.raises(ValueError, match=kind.split(": ")[-1]):
                write_text_atomically(path, "x")  # every atomic write refuses it too, whoever checked before
            for command in (["--scenarios", "mixed-slo", "--seeds", "0", "--out", path, "--force"],):
                with pytest.raises(SystemExit):
                    tune_main(command)
                assert "--out" in capsys.readouterr().err.strip().splitlines()[-1]
        with pytest.raises(SystemExit):  # before profiling: /dev/null stays a device, /dev/null.samples.csv unmade
            calibrate_main(["profile", "--model", "tiny", "--out", "/dev/null", "--force"])
        assert "character device" in capsys.readouterr().err.strip().splitlines()[-1]
        assert os.path.exists("/dev/null") and not os.path.isfile("/dev/null")
        assert not os.path.exists("/dev/null.samples.csv")
        assert (tmp_path / "null.json").is_symlink()
        # a link to a regular file is followed: its target is written, the link stays
        assert check_output(tmp_path / "link.json", file=True) == tmp_path / "link.json"
        write_text_atomically(tmp_path / "link.json", "new")
        assert (tmp_path / "link.json").is_symlink() and real.read_text() == "new"
    finally:
        sock.close()


def _last_err_line(capsys: pytest.CaptureFixture) -> str:
    lines = capsys.readouterr().err.strip().splitlines()
    return lines[-1] if lines else ""


def test_an_empty_output_path_is_refused_by_every_command(capsys: pytest.CaptureFixture) -> None:
    """``--out "$UNSET"``: Path("") is the working folder, which would be written into (its results.csv replaced,
    its PNGs removed). Every output option parses through ``output_path``, which refuses an empty or blank path."""
    import argparse

    from agents.cli import parse_args as train_args
    from llmsched_env.commands.calibrate import main as calibrate_main
    from llmsched_env.commands.live_replay import build_parser as live_replay_parser
    from llmsched_env.commands.tune import main as tune_main
    from llmsched_env.common.outputs import output_path

    for blank in ("", "  "):
        with pytest.raises(argparse.ArgumentTypeError, match="an empty path"):
            output_path(blank)
    assert output_path("runs/x") == Path("runs/x") and output_path(".") == Path(".")  # the folder, when asked
    commands = [
        ("--out", lambda: tune_main(["--scenarios", "mixed-slo", "--out", ""])),
        ("--out", lambda: train_args(["--out", ""])),
        ("--out", lambda: calibrate_main(["fidelity", "--model", "tiny", "--preset", "x", "--out", " "])),
        ("--save-model", lambda: live_replay_parser().parse_args(["run", "--save-model", ""])),
        ("--out", lambda: live_replay_parser().parse_args(["run", "--out", ""])),
    ]
    for option, run in commands:
        with pytest.raises(SystemExit) as exit_:
            run()
        assert exit_.value.code == 2
        assert f"argument {option}: an empty path (an unset variable?)" in _last_err_line(capsys)


def test_a_file_output_ending_with_a_separator_is_refused(capsys: pytest.CaptureFixture) -> None:
    """``--out t/`` names a folder; an option that writes a file wrote a file ``t`` instead. Every option that
    writes one file parses through ``file_output_path``, which refuses a trailing separator."""
    from llmsched_env.commands.live_replay import build_parser as live_replay_parser
    from llmsched_env.commands.tune import main as tune_main

    commands = [
        ("--out", lambda: tune_main(["--scenarios", "mixed-slo", "--out", "t/"])),
        ("--save-model", lambda: live_replay_parser().parse_args(["run", "--save-model", "m/"])),
        ("--out", lambda: live_replay_parser().parse_args(["run", "--out", "r/"])),
    ]
    for option, run in commands:
        with pytest.raises(SystemExit) as exit_:
            run()
        assert exit_.value.code == 2
        line = _last_err_line(capsys)
        assert f"argument {option}: " in line and "a folder; this option writes a file" in line


def test_a_link_in_an_output_folder_at_a_name_the_command_writes_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """A link at ``results.csv`` would have the run replace the file it points to, outside --out; a link loop
    there would fail after the whole run. Refused before any work, in one line; the link and its target stay."""
    from llmsched_env.commands.evaluate import main as evaluate_main
    from llmsched_env.common.outputs import check_output

    victim = tmp_path / "victim.csv"
    victim.write_text("precious")
    out = tmp_path / "O"
    (out / "inside").mkdir(parents=True)
    (out / "results.csv").symlink_to("../victim.csv")
    (out / "results.json").symlink_to("results.json")  # a loop
    (out / "checkpoints").symlink_to(tmp_path)  # a folder written into, outside --out
    (out / "tb").symlink_to("inside")  # a folder written into, inside --out: the files stay inside
    for name, to in (("results.csv", "../victim.csv"), ("results.json", "results.json")):
        with pytest.raises(ValueError) as err:
            check_output(out, files=[name])
        message = str(err.value)
        assert "\n" not in message and f"{name} is a symbolic link (to {to})" in message
        assert "the command writes its own files in --out: remove it" in message
    with pytest.raises(ValueError, match="checkpoints is a symbolic link"):
        check_output(out, folders=["checkpoints"])
    assert check_output(out, folders=["tb"], files=["other.csv"]) == out  # a link it does not write through
    with pytest.raises(SystemExit):
        evaluate_main(["--scenarios", "mixed-slo", "--policies", "fcfs", "--num-requests", "20", "--out", str(out)])
    assert "results.csv is a symbolic link" in _last_err_line(capsys)
    assert victim.read_text() == "precious" and (out / "results.csv").is_symlink()


def test_a_link_loop_a_dangling_link_or_a_file_on_the_way_is_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """``ln -s B A; ln -s A B`` as --out was a RuntimeError traceback (from resolving it), a dangling link as
    --tensorboard a FileExistsError after every run, ``--out f/x.json`` under a file a NotADirectoryError: each
    is one line before any work now, naming the option. A FIFO given as a folder is called a FIFO."""
    import os

    from agents.cli import parse_args as train_args
    from llmsched_env.commands.evaluate import main as evaluate_main
    from llmsched_env.commands.tune import main as tune_main
    from llmsched_env.common.outputs import check_output, check_replaceable

    (tmp_path / "A").symlink_to("B")
    (tmp_path / "B").symlink_to("A")
    (tmp_path / "S.json").symlink_to("S.json")
    (tmp_path / "f").write_text("x")
    (tmp_path / "L").symlink_to(tmp_path / "nothing")
    os.mkfifo(tmp_path / "fifo")
    loop = "is a symbolic link loop"
    cases = [
        (dict(path=tmp_path / "A"), loop),
        (dict(path=tmp_path / "A", force=True), loop),  # not only where the shipped folders are looked for
        (dict(path=tmp_path / "S.json", file=True), loop),  # a link the user names is followed, to no end here
        (dict(path=tmp_path / "A" / "x"), "a symbolic link loop (a link that leads back to itself) lies on the way"),
        (dict(path=tmp_path / "f" / "x.json", file=True), f"{tmp_path / 'f'} is not a folder (a regular file)"),
        (dict(path=tmp_path / "f" / "x"), f"{tmp_path / 'f'} is not a folder"),
        (dict(path=tmp_path / "L", option="--tensorboard"), f"is a symbolic link to {tmp_path / 'nothing'}, which"),
        (dict(path=tmp_path / "fifo"), "is a FIFO (named pipe); give a folder"),
    ]
    for kwargs, message in cases:
        with pytest.raises(ValueError) as err:
            check_output(**kwargs)
        assert message in str(err.value) and "\n" not in str(err.value)
        assert str(err.value).startswith(f"{kwargs.get('option', '--out')} {kwargs['path']}: ")
    with pytest.raises(ValueError, match="is not a folder"):
        check_replaceable(tmp_path / "f" / "x.json")  # every atomic write: one line, not NotADirectoryError
    with pytest.raises(ValueError, match="is not a folder"):
        write_text_atomically(tmp_path / "f" / "x.json", "x")
    runs = {
        "tune": lambda out: tune_main(["--scenarios", "mixed-slo", "--seeds", "0", "--out", out]),
        "train": lambda out: train_args(["--out", out]),
        "evaluate": lambda out: evaluate_main(["--scenarios", "mixed-slo", "--policies", "fcfs", "--out", out]),
    }
    for command, run in runs.items():
        for out, message in ((tmp_path / "A", loop), (tmp_path / "f" / "x.json", f"{tmp_path / 'f'} is not a folder")):
            with pytest.raises(SystemExit):
                run(str(out))
            assert f"--out {out}: {message}" in _last_err_line(capsys), command
    with pytest.raises(SystemExit):
        evaluate_main(["--scenarios", "mixed-slo", "--policies", "fcfs", "--tensorboard", str(tmp_path / "L")])
    assert "--tensorboard" in _last_err_line(capsys) and (tmp_path / "L").is_symlink()


def _unsealed_copy(tmp_path: Path) -> tuple[Path, bytes]:
    """A copy of a shipped test policy without its ``fields_sha256`` (as exported before the record), and the bytes
    of its policy.json."""
    import json
    import shutil

    from llmsched_env.decision.policy_file import FIELDS_KEY

    folder = tmp_path / "p"
    shutil.copytree(Path(__file__).parent / "data" / "policies" / "mixed-slo", folder)
    meta = json.loads((folder / "policy.json").read_text())
    meta.pop(FIELDS_KEY)
    (folder / "policy.json").write_text(json.dumps(meta, indent=1))
    return folder, (folder / "policy.json").read_bytes()


def test_a_policy_that_cannot_be_replaced_is_one_error_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """seal_policy on a policy.json that cannot be replaced (immutable, a read-only folder) was a PermissionError
    traceback: one error line per policy now, the next policies still sealed, status 1, the file as it was."""
    import os

    from llmsched_env.commands.seal_policy import main as seal_main

    folder, before = _unsealed_copy(tmp_path)

    def refused(src: object, dst: object) -> None:
        raise PermissionError(1, "Operation not permitted", str(src), None, str(dst))

    monkeypatch.setattr(os, "replace", refused)  # as chattr +i, or a read-only folder for a non-root user
    assert seal_main([str(folder)]) == 1
    captured = capsys.readouterr()
    assert captured.err.strip().splitlines() == [
        f"seal_policy: error: {folder / 'policy.json'}: cannot be replaced (Operation not permitted); left as it was"
    ]
    assert (folder / "policy.json").read_bytes() == before and sorted(p.name for p in folder.iterdir()) == sorted(
        p.name for p in (Path(__file__).parent / "data" / "policies" / "mixed-slo").iterdir()
    )  # no temporary file left


def test_a_policy_that_fails_its_probe_once_sealed_is_put_back_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """seal_policy wrote the record, then ran the network's probe: a policy failing it was left rewritten."""
    from llmsched_env.commands import seal_policy
    from llmsched_env.decision.policy_file import PolicyFileError

    folder, before = _unsealed_copy(tmp_path)
    loads = iter([seal_policy.load_policy_file, None])

    def probe_fails_once_sealed(path: object) -> object:
        first = next(loads)
        if first is None:
            raise PolicyFileError(f"{path}: a logit is not finite on the probe inputs")
        return first(path)

    monkeypatch.setattr(seal_policy, "load_policy_file", probe_fails_once_sealed)
    assert seal_policy.main([str(folder)]) == 1
    assert "a logit is not finite" in capsys.readouterr().err
    assert (folder / "policy.json").read_bytes() == before
