"""How every command line ends (docs/reliability.md): ``command`` wraps a console script's ``main`` so that Ctrl-C,
SIGTERM and SIGHUP unwind through the command's clean-up (its ``finally`` blocks: temporary files removed, locks
and worker processes released) and end in one line on stderr, status 130, 143 or 129; a full disk or quota
(ENOSPC, EDQUOT), met anywhere, a background writer thread included, ends in one error line, status 1; a standard
output closed early (a pipe into ``head``) ends in one line, status 141. Each line says what the command kept and
how to go on, as the command said with ``keep`` once it knew.

    @command("llmsched-evaluate", "evaluate.py")
    def main(argv=None) -> int: ...
"""

from __future__ import annotations

import argparse
import errno
import functools
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import Any, NoReturn, TypeVar

from llmsched_env.commands.help import program
from llmsched_env.common.checks import one_line
from llmsched_env.common.files import InputFileError
from llmsched_env.common.lifetime import Terminated, sigterm_raises
from llmsched_env.common.outputs import OutputRefusedError

__all__ = ["DISK_FULL", "FILE_ERRORS", "INTERRUPTED", "PATH_ERRORS", "PIPE_CLOSED", "command", "disk_full", "ending",
           "keep", "one_line", "refuse", "reject"]  # fmt: skip

DISK_FULL = (errno.ENOSPC, errno.EDQUOT)  # a full disk, an exhausted quota
# what a path met that the checks before the work did not foresee (a name too long, a file where a folder goes,
# a folder taken since): one error line naming the path
PATH_ERRORS = frozenset(getattr(errno, name) for name in ("ENAMETOOLONG", "ENOENT", "EEXIST", "EACCES", "EPERM",
                        "ENOTDIR", "EISDIR", "ELOOP", "EROFS", "ETXTBSY", "EBUSY", "EXDEV")
                        if hasattr(errno, name))  # fmt: skip
INTERRUPTED = 128 + int(signal.SIGINT)  # 130, as a shell reports a Ctrl-C
PIPE_CLOSED = 141  # 128 + SIGPIPE, as a shell reports a writer whose reader ended
# the signals that unwind like Ctrl-C while a command runs (each left alone when ignored or handled already)
UNWINDING = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name))
_HOW = {"SIGINT": "interrupted", "SIGTERM": "terminated (SIGTERM)", "SIGHUP": "ended by SIGHUP (its terminal closed)"}

# what a file, folder or lock holds, not how the command line is written: refused in one line without the usage block
# (InputFileError: FileRefusedError, PolicyFileError, TraceError, CheckpointError; OutputRefusedError: OutputBusyError)
FILE_ERRORS: tuple[type[Exception], ...] = (InputFileError, OutputRefusedError, OSError)

F = TypeVar("F", bound=Callable[..., Any])
Kept = str | Callable[[], str]

_said: dict[str, Any] = {"kept": None, "resume": None}  # what the running command keeps and how to go on (keep)
_thread_errors: list[BaseException] = []  # a full disk met in a background thread of the running command


def keep(kept: Kept | None, resume: Kept | None = None) -> None:
    """From now on, the running command's ending line says ``kept`` (what stays) and ``resume`` (how to go on), each
    a text or a function that gives it when the line is written; None: nothing to say."""
    _said["kept"], _said["resume"] = kept, resume


def ending(how: str, free_space: bool = False) -> str:
    """``how`` (why the command ended), then what it kept and how to go on (``keep``); with ``free_space`` the way
    on begins with freeing space."""
    said, go_on = (_text(_said[name]) for name in ("kept", "resume"))
    go_on = go_on if go_on is not None else "rerun it" if free_space else None
    if go_on is not None and free_space:
        go_on = f"free space and {go_on}"
    return "; ".join(part for part in (how, ": ".join(p for p in (said, go_on) if p)) if part)


def _text(said: Kept | None) -> str | None:
    """``said``, called when a function; None when it fails (the ending line is written whatever the folder holds)."""
    try:
        return said() if callable(said) else said
    except Exception:
        return None


def disk_full(exc: BaseException | None) -> OSError | None:
    """The ENOSPC or EDQUOT ``OSError`` that ``exc`` is, was raised from or while handling, or None; a library that
    reports it in its own words (safetensors: ``... (os error 28)``) counts, as an ``OSError`` of that number."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, OSError) and exc.errno in DISK_FULL:
            return exc
        text = str(exc)
        for number in DISK_FULL:
            if f"(os error {number})" in text:
                return OSError(number, os.strerror(number))
        exc = exc.__cause__ or exc.__context__
    return None


def _broken_pipe(exc: BaseException) -> bool:
    """Whether ``exc`` is a write to a pipe whose reader is gone (EPIPE)."""
    return isinstance(exc, OSError) and exc.errno == errno.EPIPE


def _disk_full_line(prog: str, full: OSError) -> str:
    where = f"{full.filename}: " if full.filename else ""
    _close_bars()
    why = full.strerror or os.strerror(full.errno or errno.ENOSPC)
    return one_line(f"{prog}: error: " + ending(f"{where}{why}", True))


def _say(line: str) -> None:
    """``line`` on stderr, on a line of its own, if stderr can still be written (a hung-up terminal cannot)."""
    _close_bars()
    with suppress(OSError, ValueError):
        print(one_line(line), file=sys.stderr, flush=True)


def _close_bars() -> None:
    """Close the progress bars still drawn (tqdm's, left open by the unwinding), so that what follows starts a line
    of its own."""
    module = sys.modules.get("tqdm")
    for bar in list(getattr(getattr(module, "tqdm", None), "_instances", None) or ()):
        with suppress(Exception):
            bar.close()


def _quiet_stdout() -> None:
    """Point stdout at /dev/null, so that the interpreter's last flush into a closed pipe says nothing."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # stdout replaced (a test's capture): nothing to redirect
        pass


@contextmanager
def _thread_disk_full() -> Iterator[None]:
    """While inside, a full disk met by a background thread (TensorBoard's event writer) is kept for the ending
    line instead of a thread traceback; anything else a thread raises is reported as before."""
    earlier = threading.excepthook

    def hook(args: threading.ExceptHookArgs) -> None:
        if disk_full(args.exc_value) is not None and args.exc_value is not None:
            _thread_errors.append(args.exc_value)
            return
        earlier(args)

    threading.excepthook = hook
    try:
        yield
    finally:
        if threading.excepthook is hook:
            threading.excepthook = earlier


def command(console_script: str, script: str | None = None) -> Callable[[F], F]:
    """Wrap a command's ``main`` so that it ends as the module docstring says; the lines name the program
    ``program(console_script, script)`` (``script``: its name as ``python SCRIPT``)."""

    def wrap(main: F) -> F:
        @functools.wraps(main)
        def run(*args: Any, **kwargs: Any) -> Any:
            prog = program(console_script, script) if script is not None else console_script
            said, errors = dict(_said), list(_thread_errors)  # a command run inside another keeps the outer's
            keep(None)
            _thread_errors.clear()
            try:
                with sigterm_raises(UNWINDING), _thread_disk_full():
                    result = main(*args, **kwargs)
                    sys.stdout.flush()  # a closed pipe fails here, not in the interpreter's last flush
                if _thread_errors:  # the command ended well, but a writer thread lost its writes
                    full = disk_full(_thread_errors[0])
                    assert full is not None
                    where = f"{full.filename}: " if full.filename else ""
                    raise SystemExit(f"{prog}: error: {where}{full.strerror} in a background writer (TensorBoard's "
                                     "event files), whose last writes are lost; the command itself ended")  # fmt: skip
                return result
            except KeyboardInterrupt:
                _say(f"{prog}: " + ending(_HOW["SIGINT"]))
                raise SystemExit(INTERRUPTED) from None
            except Terminated as exc:
                _say(f"{prog}: " + ending(_HOW.get(signal.Signals(exc.signum).name, f"ended by signal {exc.signum}")))
                raise SystemExit(exc.code) from None
            except Exception as exc:
                if _broken_pipe(exc):
                    _quiet_stdout()
                    _say(f"{prog}: " + ending("its output was closed early (the command reading it ended)"))
                    raise SystemExit(PIPE_CLOSED) from None
                full = disk_full(exc)
                if full is not None:
                    raise SystemExit(_disk_full_line(prog, full)) from None
                if isinstance(exc, OSError) and exc.filename is not None and exc.errno in PATH_ERRORS:
                    _say(f"{prog}: error: " + ending(f"{exc.filename}: {exc.strerror or os.strerror(exc.errno or 0)}"))
                    raise SystemExit(1) from None
                raise
            finally:
                _said.update(said)
                _thread_errors[:] = errors

        return run  # type: ignore[return-value]

    return wrap


def refuse(prog: str, message: str, status: int = 2) -> NoReturn:
    """End the command with one line ``PROG: error: MESSAGE`` and ``status``, no usage block: a refusal of what the
    files, folders or locks named hold (the command line itself was well formed)."""
    _say(f"{prog}: error: {message}")
    raise SystemExit(status)


def reject(parser: argparse.ArgumentParser, exc: Exception, text: str | None = None) -> NoReturn:
    """End the command on ``exc`` (said as ``text`` when given) in one line: an error line without the usage block
    (``refuse``) for what a file, folder or lock holds (``FILE_ERRORS``), else a usage line (status 2) for a bad
    option value."""
    message = str(exc) if text is None else text
    if isinstance(exc, FILE_ERRORS):
        refuse(parser.prog, message)
    parser.error(one_line(message))
