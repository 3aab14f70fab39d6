"""Worker processes die with their parent, whatever signal ends it (docs/reliability.md, "Worker processes").

``llmsched-evaluate --workers 2`` and ``llmsched-train --workers 2`` (a sweep: pool workers, each running a
training as a child) and a training over subprocess envs are killed (SIGKILL, SIGTERM, SIGINT) once their
workers run; every process below them must be gone soon after. The pieces (``llmsched_env.common.lifetime``)
are checked on their own first. Linux only: the process tree is read from /proc.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from llmsched_env.common.lifetime import ORPHAN_EXIT
from llmsched_env.evaluation.distributed import ray_imap

ROOT = Path(__file__).resolve().parents[1]
GONE_S = 20.0  # how long the workers may take to go once their parent has
READY_S = 300.0  # how long the workers may take to start, on a loaded 2-core machine

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads the process tree from /proc")

# the command, with SIGINT back to its default (a shell's background job inherits it ignored) before Python starts
UNIGNORE = (
    "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
    "os.execv(sys.executable, [sys.executable, *sys.argv[1:]])"
)
Tree = dict[int, tuple[str, str]]  # pid -> (its start time, as /proc/PID/stat gives it; its command line)
GRID = ["--policies", "fcfs,slo_aware", "--scenarios", "mixed-slo", "--loads", "1,1.2", "--seeds", "0,1,2,3,4,5,6,7",
        "--num-requests", "2000", "--no-plots", "--no-progress"]  # fmt: skip  # minutes of work: killed long before
TINY_SWEEP = ["--scenarios", "mixed-slo,bursty", "--timesteps", "100000", "--n-envs", "1", "--bc", "none",
              "--eval-baselines", "fcfs", "--no-progress"]  # fmt: skip


def _stat(pid: int) -> tuple[str, str] | None:
    """(state, start time) of ``pid``; None when there is no such process."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()  # after "pid (comm) ": state is field 3, starttime field 22
    return fields[0], fields[19]


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _children(pid: int) -> list[int]:
    found: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for task in tasks:
        try:
            found += [int(child) for child in Path(f"/proc/{pid}/task/{task}/children").read_text().split()]
        except OSError:
            continue
    return found


def _tree(pid: int) -> Tree:
    """Every live process below ``pid``."""
    tree: Tree = {}
    todo = _children(pid)
    while todo:
        child = todo.pop()
        stat = _stat(child)
        if stat is not None and child not in tree:
            tree[child] = (stat[1], _cmdline(child))
            todo += _children(child)
    return tree


def _alive(pid: int, start: str) -> bool:
    """Whether the process ``pid`` that started at ``start`` still runs (a zombie has ended; a new process
    with the same PID is another one)."""
    stat = _stat(pid)
    return stat is not None and stat[0] != "Z" and stat[1] == start


def _threads(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/task"))
    except OSError:
        return 0


def _started(marker: str, count: int) -> Callable[[Tree], bool]:
    """Ready when ``count`` processes whose command line holds ``marker`` run with their parent-watching thread
    (a worker has one thread until ``die_with_parent`` starts that one)."""

    def ready(tree: Tree) -> bool:
        workers = [pid for pid, (_, cmd) in tree.items() if marker in cmd]
        return len(workers) >= count and all(_threads(pid) >= 2 for pid in workers)

    return ready


def _end_and_watch(
    argv: list[str], signum: int, ready: Callable[[Tree], bool], tmp_path: Path
) -> tuple[int, Tree, list[int], str]:
    """Start ``argv`` (in the checkout), wait until ``ready`` says its workers run, send ``signum`` to it alone,
    and wait (up to ``GONE_S``) for every process that was below it to go. Returns its exit status, the tree
    at the signal, the PIDs still alive at the deadline (killed then) and its stderr."""
    err_path = tmp_path / "stderr.txt"
    with err_path.open("w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-c", UNIGNORE, *argv], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=err
        )
    tree: Tree = {}
    try:
        deadline = time.monotonic() + READY_S
        while not ready(tree := _tree(proc.pid)):
            assert proc.poll() is None, f"ended before its workers ran: {err_path.read_text()[-2000:]}"
            assert time.monotonic() < deadline, f"workers never ran: {tree}"
            time.sleep(0.1)
        tree = _tree(proc.pid)
        os.kill(proc.pid, signum)
        code = proc.wait(timeout=GONE_S)
        deadline = time.monotonic() + GONE_S
        while any(_alive(pid, start) for pid, (start, _) in tree.items()) and time.monotonic() < deadline:
            time.sleep(0.1)
        return code, tree, [pid for pid, (start, _) in tree.items() if _alive(pid, start)], err_path.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for pid, (start, _) in tree.items():  # leave nothing behind when the test fails
            if _alive(pid, start):
                os.kill(pid, signal.SIGKILL)


def _check(code: int, signum: int, tree: Tree, left: list[int], err: str) -> None:
    assert not left, f"alive {GONE_S:g} s after the parent's {signal.Signals(signum).name}: " + "; ".join(
        f"{pid} {tree[pid][1][:120]}" for pid in left
    )
    if signum == signal.SIGKILL:
        assert code == -signal.SIGKILL
    else:  # the parent unwound: its own cleanup ran, and it ended in one line, with no traceback
        assert code == (143 if signum == signal.SIGTERM else 130), err[-2000:]
        assert "Traceback" not in err, err[-2000:]
        assert ("terminated (SIGTERM)" if signum == signal.SIGTERM else "interrupted") in err.splitlines()[-1], err


# ---- the pieces ----------------------------------------------------------------------------------------------

PARENT = """
import subprocess, sys, threading, time
from llmsched_env.common.lifetime import guarded_command

def start():
    child = subprocess.Popen(guarded_command("timeit", ["-n", "1", "-r", "1", "import time; time.sleep(120)"]))
    print(child.pid, flush=True)

if sys.argv[1] == "main":
    start()
else:  # from a thread that ends at once: no death signal (it would come now), the watching thread alone
    thread = threading.Thread(target=start)
    thread.start()
    thread.join()
time.sleep(120)
"""


@pytest.mark.parametrize("started_from", ["main", "thread"])
def test_a_guarded_child_dies_with_its_killed_parent(started_from: str) -> None:
    parent = subprocess.Popen([sys.executable, "-c", PARENT, started_from], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    assert parent.stdout is not None
    child = int(parent.stdout.readline())
    start = (_stat(child) or ("", ""))[1]
    try:
        deadline = time.monotonic() + READY_S
        while _threads(child) < 2:  # until die_with_parent has run
            assert _alive(child, start) and time.monotonic() < deadline, "the child never started its watch"
            time.sleep(0.05)
        assert _alive(child, start), "the child ended with the thread that started it"
        parent.kill()
        parent.wait()
        deadline = time.monotonic() + GONE_S
        while _alive(child, start) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(child, start)
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
        if _alive(child, start):
            os.kill(child, signal.SIGKILL)


def test_a_worker_whose_parent_is_already_gone_exits_at_once() -> None:
    code = "from llmsched_env.common.lifetime import die_with_parent; die_with_parent(0); print('still here')"
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == ORPHAN_EXIT and done.stdout == ""


def test_sigterm_unwinds_inside_sigterm_raises_and_kills_outside() -> None:
    code = (
        "import os, signal, time\nfrom llmsched_env.common.lifetime import sigterm_raises\n"
        "try:\n    with sigterm_raises():\n        os.kill(os.getpid(), signal.SIGTERM)\n        time.sleep(60)\n"
        "finally:\n    print('cleaned up', signal.getsignal(signal.SIGTERM) is signal.SIG_DFL, flush=True)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 143 and done.stdout == "cleaned up True\n" and "Traceback" not in done.stderr


def _sleep_then_mark(folder: str) -> None:
    Path(folder, "started").touch()
    time.sleep(120)
    Path(folder, "finished").touch()


def _fail_once_started(folder: str) -> None:
    while not Path(folder, "started").exists():
        time.sleep(0.01)
    raise ValueError("this job fails")


def test_a_failing_job_stops_the_jobs_still_running(tmp_path: Path) -> None:
    jobs = [(_sleep_then_mark, str(tmp_path)), (_fail_once_started, str(tmp_path))]
    with pytest.raises(ValueError, match="this job fails"):
        list(ray_imap(lambda fn, folder: fn(folder), jobs, num_cpus=2))
    assert (tmp_path / "started").exists() and not (tmp_path / "finished").exists()  # terminated, not awaited


# ---- the commands ------------------------------------------------------------------------------------------


SLOW = pytest.mark.slow  # each starts 2 workers that import the simulator: ~8 s on the 2-core machine


@pytest.mark.parametrize(
    "signum",
    [pytest.param(signal.SIGKILL, id="KILL"), pytest.param(signal.SIGTERM, id="TERM", marks=SLOW),
     pytest.param(signal.SIGINT, id="INT", marks=SLOW)],
)  # fmt: skip
def test_evaluate_workers_die_with_the_command(signum: int, tmp_path: Path) -> None:
    argv = ["evaluate.py", *GRID, "--workers", "2", "--out", str(tmp_path / "out")]
    code, tree, left, err = _end_and_watch(argv, signum, _started("spawn_main", 2), tmp_path)
    assert sum("spawn_main" in cmd for _, cmd in tree.values()) == 2
    _check(code, signum, tree, left, err)


@pytest.mark.slow  # two trainings start, each in a worker of its own
@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGTERM], ids=["KILL", "TERM"])
def test_a_training_sweeps_workers_and_trainings_die_with_the_command(signum: int, tmp_path: Path) -> None:
    argv = ["train.py", *TINY_SWEEP, "--workers", "2", "--out", str(tmp_path / "sweep"), "--force"]
    code, tree, left, err = _end_and_watch(argv, signum, _started("agents.cli", 2), tmp_path)
    assert sum("spawn_main" in cmd for _, cmd in tree.values()) == 2  # the pool's workers, and below them
    assert sum("agents.cli" in cmd for _, cmd in tree.values()) == 2  # a training each
    _check(code, signum, tree, left, err)


@pytest.mark.slow  # a training of its own
def test_subprocess_envs_die_with_the_killed_training(tmp_path: Path) -> None:
    argv = ["train.py", "--scenario", "mixed-slo", "--vec-env", "subproc", "--n-envs", "2", "--timesteps", "100000",
            "--bc", "none", "--eval-baselines", "fcfs", "--no-progress", "--out", str(tmp_path / "run")]  # fmt: skip

    def envs_ready(tree: Tree) -> bool:  # the env workers: the forkserver's children
        server = [pid for pid, (_, cmd) in tree.items() if "forkserver" in cmd and _stat(pid) is not None]
        envs = [pid for pid in tree if server and pid in _children(server[0])]
        return len(envs) >= 2 and all(_threads(pid) >= 2 for pid in envs)

    code, tree, left, err = _end_and_watch(argv, signal.SIGKILL, envs_ready, tmp_path)
    _check(code, signal.SIGKILL, tree, left, err)
