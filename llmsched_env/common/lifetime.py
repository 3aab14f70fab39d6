"""Worker processes that end with their parent: ``die_with_parent`` (Linux ``PR_SET_PDEATHSIG`` plus a watcher
thread), ``guarded_command`` (``python -m`` a module that way), ``sigterm_raises`` (SIGTERM, or other signals,
unwinds like Ctrl-C, as ``Terminated``). Standard library only.
"""

from __future__ import annotations

import ctypes
import os
import runpy
import signal
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from types import FrameType

ORPHAN_EXIT = 125  # the exit status of a worker that found its parent gone
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
_POLL_S = 0.5


def set_parent_death_signal(signum: int | None = None) -> bool:
    """Ask the kernel to send this process ``signum`` (default SIGKILL) when the thread that started it ends (Linux
    ``prctl``); True when set."""
    if not sys.platform.startswith("linux"):
        return False
    if signum is None:
        signum = signal.SIGKILL  # not defined on Windows: looked up here, on Linux only
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return False
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    prctl.restype = ctypes.c_int
    return int(prctl(_PR_SET_PDEATHSIG, int(signum), 0, 0, 0)) == 0


def die_with_parent(parent_pid: int | None = None, main_thread: bool = True) -> None:
    """End this process when its parent ends (``parent_pid``: the parent as it saw itself; another parent now exits at
    once with ``ORPHAN_EXIT``); ``main_thread`` False: no death signal, the watching thread alone."""
    parent = os.getppid() if parent_pid is None else int(parent_pid)
    if main_thread:
        set_parent_death_signal()
    if os.getppid() != parent:  # the parent died before the signal was set: nothing would send it now
        os._exit(ORPHAN_EXIT)
    threading.Thread(target=_watch, args=(parent,), name="llmsched-parent-watch", daemon=True).start()


def _watch(parent: int) -> None:
    """Exit this process (no cleanup) once ``parent`` is no longer its parent."""
    while os.getppid() == parent:
        time.sleep(_POLL_S)
    os._exit(ORPHAN_EXIT)


def guarded_command(module: str, argv: Sequence[str]) -> list[str]:
    """The command line of ``python -m module *argv`` that, started as a child of this thread, ends with this
    process."""
    main_thread = threading.current_thread() is threading.main_thread()
    return [sys.executable, "-m", __name__, str(os.getpid()), str(int(main_thread)), module, *argv]


def _run_guarded(args: Sequence[str]) -> None:
    """``guarded_command``'s child: ``args`` are the parent's PID, 1 or 0 (its main thread or not), the module and
    its arguments."""
    parent, main_thread, module, *rest = args
    die_with_parent(int(parent), main_thread == "1")
    sys.argv = [module, *rest]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


class Terminated(SystemExit):
    """The ``SystemExit`` a signal that ``sigterm_raises`` catches raises: status 128 + ``signum``."""

    def __init__(self, signum: int) -> None:
        super().__init__(128 + signum)
        self.signum = signum


@contextmanager
def sigterm_raises(signums: Sequence[int] = (signal.SIGTERM,)) -> Iterator[None]:
    """While inside, each of ``signums`` (default SIGTERM) raises ``Terminated`` (a ``SystemExit``, status 128 +
    the signal) in the main thread, so ``finally`` blocks run; nothing changes outside the main thread or for a
    signal that already has a handler or is ignored."""
    main = threading.current_thread() is threading.main_thread()
    ours = [s for s in signums if main and signal.getsignal(s) is signal.SIG_DFL]
    for signum in ours:
        signal.signal(signum, _raise_exit)
    try:
        yield
    finally:
        for signum in ours:
            if signal.getsignal(signum) is _raise_exit:
                signal.signal(signum, signal.SIG_DFL)


def _raise_exit(signum: int, frame: FrameType | None) -> None:
    raise Terminated(signum)


if __name__ == "__main__":
    _run_guarded(sys.argv[1:])
