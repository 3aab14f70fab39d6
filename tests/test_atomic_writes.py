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
