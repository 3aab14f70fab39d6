"""The output-folder lock and completion marker (common/outputs.py): a second writer is refused in one line,
a killed holder leaves no stale lock, and the marker says whether the run in a folder finished."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from llmsched_env.common.outputs import COMPLETE_NAME, LOCK_NAME, is_complete, locked_output, mark_complete

HOLD = (
    "from llmsched_env.common.outputs import locked_output\nimport sys, time\n"
    "with locked_output(sys.argv[1], 'holder-command'):\n    print('held', flush=True)\n    time.sleep(60)\n"
)


def _holder(folder: Path) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(folder)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


def test_second_writer_refused_then_admitted_after_kill(tmp_path: Path) -> None:
    proc = _holder(tmp_path / "out")
    try:
        with pytest.raises(ValueError) as err, locked_output(tmp_path / "out", "second"):
            pass
        message = str(err.value)
        assert "\n" not in message and "holder-command" in message and f"pid {proc.pid}" in message
        assert "--out" in message
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    with locked_output(tmp_path / "out", "third") as folder:  # the kernel released the killed holder's lock
        assert folder == tmp_path / "out"


def test_sequential_writers_and_marker(tmp_path: Path) -> None:
    out = tmp_path / "run"
    with locked_output(out, "first"):
        assert not is_complete(out)
        mark_complete(out, {"command": "first"})
    assert is_complete(out)
    assert '"command": "first"' in (out / COMPLETE_NAME).read_text()
    with locked_output(out, "second"):
        assert not is_complete(out)  # a rerun is not complete until it says so
    assert not is_complete(out)


def test_lock_released_on_error(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError), locked_output(tmp_path, "failing"):
        raise RuntimeError("boom")
    with locked_output(tmp_path, "next"):  # not left held by the failed block
        pass


MERGE = (
    "import sys\nfrom llmsched_env.decision.planners.tuned import write_tuned_entries\n"
    "settings = {'queue_order': 'sjf', 'token_budget': 4096, 'chunk_cap': 4096, 'prefill_first': False,\n"
    "            'max_admit': 1, 'kv_reserve': 0.1, 'shed': True}\n"
    "entry = {'settings': settings, 'provenance': {'by': sys.argv[2]}}\n"
    "for i in range(15):\n    write_tuned_entries(sys.argv[1], {f'{sys.argv[2]}-{i}': entry})\n"
)


def test_concurrent_writers_of_one_tuned_table_lose_no_entry(tmp_path: Path) -> None:
    from llmsched_env.decision.planners.tuned import load_tuned_table

    table = tmp_path / "tuned.json"
    procs = [subprocess.Popen([sys.executable, "-c", MERGE, str(table), name]) for name in ("a", "b", "c")]
    assert [p.wait() for p in procs] == [0, 0, 0]
    assert sorted(load_tuned_table(table).entries) == sorted(f"{n}-{i}" for n in "abc" for i in range(15))


def test_a_lock_that_is_no_regular_file_is_refused_up_front_and_never_followed(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """``.t.json.lock`` a folder made llmsched-tune run its whole search and then fail with IsADirectoryError:
    refused before the search in one line (``check_update_lock``). A link at a lock is never followed (it would
    create or truncate the file it points to): ``updating`` and ``locked_output`` refuse it in one line."""
    from llmsched_env.commands.tune import main as tune_main
    from llmsched_env.common.outputs import OutputBusyError, check_update_lock, update_lock, updating

    table = tmp_path / "t.json"
    assert update_lock(table) == tmp_path / ".t.json.lock"
    update_lock(table).mkdir()
    with pytest.raises(SystemExit):
        tune_main(["--scenarios", "mixed-slo", "--seeds", "0", "--out", str(table)])
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].endswith(f"--out {table}: its lock {update_lock(table)} is a folder, not a regular file; remove it")
    assert not any("rung" in line for line in err) and not table.exists()  # before the search

    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    update_lock(table).rmdir()
    update_lock(table).symlink_to(victim)
    with pytest.raises(ValueError, match="is a symbolic link, not a regular file; remove it"):
        check_update_lock(table)
    with pytest.raises(ValueError, match="is a symbolic link"), updating(table):
        pass
    out = tmp_path / "out"
    out.mkdir()
    (out / LOCK_NAME).symlink_to(victim)
    with pytest.raises(OutputBusyError) as busy, locked_output(out, "second"):
        pass
    assert str(busy.value) == f"--out {out}: {LOCK_NAME} is a symbolic link; remove it"
    assert victim.read_text() == "precious"  # neither truncated nor written to
