"""Bounded reading of a file a user names: only a regular file (checked before and after the non-blocking open),
at most its kind's ``ByteLimit`` (raised by an environment variable the error names); ``BoundedReader`` bounds
a stream's bytes and lines. Refusals are one-line ``FileRefusedError`` (a ``ValueError``).

    text = read_text(path, CONFIG_BYTES)
    with open_regular(path, TRACE_BYTES) as f: ...
"""

from __future__ import annotations

import csv
import importlib
import io
import json
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

_KIB, _MIB, _GIB = 1 << 10, 1 << 20, 1 << 30
_CHUNK = 1 << 20  # bytes read at a time by BoundedReader.readall


class InputFileError(ValueError):
    """A file or folder a command reads that fails its checks (its kind, size or content), not the command line's
    syntax: one line naming it (the commands print it without their usage block)."""


def retold(exc: ValueError, text: str) -> ValueError:
    """``exc`` said as ``text``: an ``InputFileError`` of its own kind stays one (a command prints it without the
    usage block), anything else is a ``ValueError``."""
    return type(exc)(text) if isinstance(exc, InputFileError) else ValueError(text)


class FileRefusedError(InputFileError):
    """A file that is not read: not a regular file, or larger than the limit of its kind. One line naming it."""


@dataclass(frozen=True)
class ByteLimit:
    """The most bytes one kind of file may hold: ``default``, or ``$env`` when set (None: a fixed limit)."""

    what: str  # the kind of file, for messages: "a trace", "the policy weights", ...
    default: int
    env: str | None = None
    unit: str = "bytes"  # what the limit counts, for messages ("" for a plain count: ``CountLimit``)

    def value(self) -> int:
        """The limit now: ``$env`` when set and not empty, else ``default``; ``ValueError`` naming the variable for a
        value that is not a whole number > 0."""
        text = os.environ.get(self.env, "").strip() if self.env else ""
        if not text:
            return self.default
        try:
            limit = int(text)
        except ValueError:
            limit = 0
        if limit <= 0:
            raise ValueError(
                f"{self.env}={text!r}: expected a whole number{self._of()} > 0 (the limit for {self.what})"
            )
        return limit

    def hint(self) -> str:
        """How to raise the limit, for the end of a message ("" when it is fixed)."""
        return f"; set {self.env} to a larger number{self._of()} to raise it" if self.env else ""

    def _of(self) -> str:
        return f" of {self.unit}" if self.unit else ""


@dataclass(frozen=True)
class CountLimit(ByteLimit):
    """A ``ByteLimit`` on a number of things rather than bytes (the tenants of a workload, ``common.tenants``)."""

    unit: str = ""


# The limits, each well above any legitimate file of its kind (docs/reliability.md, "Bounded reads").
TRACE_BYTES = ByteLimit("a trace", 1 * _GIB, "LLMSCHED_MAX_TRACE_BYTES")  # on disk, and decompressed for a .gz
TRACE_LINE_BYTES = ByteLimit("a trace line", 1 * _MIB, "LLMSCHED_MAX_TRACE_LINE_BYTES")
POLICY_BYTES = ByteLimit("the policy weights", 256 * _MIB, "LLMSCHED_MAX_POLICY_BYTES")
CHECKPOINT_BYTES = ByteLimit("a checkpoint", 1 * _GIB, "LLMSCHED_MAX_CHECKPOINT_BYTES")
CONFIG_BYTES = ByteLimit("a JSON or YAML file", 16 * _MIB, "LLMSCHED_MAX_CONFIG_BYTES")
RECORD_BYTES = ByteLimit("a live run's records", 1 * _GIB, "LLMSCHED_MAX_RECORD_BYTES")
SIGNATURE_BYTES = ByteLimit("a checkpoint signature", 4 * _KIB)  # 64 hex digits and a newline
KEY_BYTES = ByteLimit("the checkpoint key", 4 * _KIB)  # 32 bytes
LIMITS = (TRACE_BYTES, TRACE_LINE_BYTES, POLICY_BYTES, CHECKPOINT_BYTES, CONFIG_BYTES, RECORD_BYTES, SIGNATURE_BYTES,
          KEY_BYTES)  # fmt: skip

_KINDS: tuple[tuple[Callable[[int], bool], str], ...] = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def file_kind(mode: int) -> str:
    """What a file of ``mode`` (``st_mode``) that is no regular file is, in words ("a FIFO (named pipe)", ...)."""
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def _not_regular(path: Path, mode: int, what: str) -> FileRefusedError:
    real = os.path.realpath(path)
    target = f", reached through a link to {real}" if real != os.path.abspath(path) else ""
    return FileRefusedError(f"{path}: {file_kind(mode)}{target}; {what} must be a regular file")


def _too_big(path: Path, size: int, limit: ByteLimit, bound: int) -> FileRefusedError:
    return FileRefusedError(f"{path}: {size:,} bytes, over the {bound:,}-byte limit for {limit.what}{limit.hint()}")


def check_regular_file(path: str | os.PathLike[str], limit: ByteLimit) -> os.stat_result:
    """``path``'s ``os.stat`` (links followed) when it is a regular file of at most ``limit`` bytes;
    ``FileRefusedError`` otherwise (``OSError`` as ``os.stat`` raises it). Opens nothing."""
    p = Path(path)
    st = os.stat(p)
    if not stat.S_ISREG(st.st_mode):
        raise _not_regular(p, st.st_mode, limit.what)
    bound = limit.value()
    if st.st_size > bound:
        raise _too_big(p, st.st_size, limit, bound)
    return st


def open_regular(path: str | os.PathLike[str], limit: ByteLimit, start: int = 0) -> IO[bytes]:
    """``path`` opened for reading bytes once ``check_regular_file`` passes, checked again on the descriptor,
    refusing to read past ``limit`` (counting the ``start`` bytes skipped) should the file grow."""
    p = Path(path)
    check_regular_file(p, limit)
    fd = os.open(p, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise _not_regular(p, st.st_mode, limit.what)
        if start:
            os.lseek(fd, start, os.SEEK_SET)
        raw = io.FileIO(fd, "rb", closefd=True)
    except BaseException:
        os.close(fd)
        raise
    return io.BufferedReader(BoundedReader(raw, p, limit, before=start), buffer_size=_CHUNK)


def read_bytes(path: str | os.PathLike[str], limit: ByteLimit, start: int = 0) -> bytes:
    """The content of the regular file ``path`` (``open_regular``), from byte ``start`` to its end."""
    with open_regular(path, limit, start) as f:
        return f.read()


def read_text(path: str | os.PathLike[str], limit: ByteLimit, encoding: str = "utf-8") -> str:
    """``read_bytes`` decoded (``UnicodeDecodeError``, a ``ValueError``, for bytes that are not ``encoding``)."""
    return read_bytes(path, limit).decode(encoding)


def csv_records(path: str | os.PathLike[str], limit: ByteLimit) -> list[tuple[int, dict[str, str]]]:
    """The rows of the CSV file ``path`` with their 1-based lines, as dicts keyed by the header; ``ValueError``
    naming the file and line for a malformed row or one with more fields than the header."""
    reader = csv.DictReader(io.StringIO(read_text(path, limit), newline=""))
    rows: list[tuple[int, dict[str, str]]] = []
    try:
        for row in reader:
            extra = row.pop(None, None)
            if extra is not None and any(str(cell).strip() for cell in extra):
                raise ValueError(
                    f"{path}:{reader.line_num}: the row has {len(row) + len(extra)} fields but the header "
                    f"{len(row)}; the extra ones belong to no column"
                )
            rows.append((reader.line_num, row))
    except csv.Error as exc:
        raise ValueError(f"{path}:{reader.line_num}: malformed CSV ({exc})") from None
    return rows


class BoundedReader(io.RawIOBase):
    """A binary stream over ``inner`` raising ``FileRefusedError`` (naming ``path``) past ``limit`` bytes or a line
    longer than ``line_limit``; closing it closes ``inner``, then ``underlying``."""

    def __init__(
        self,
        inner: Any,
        path: str | os.PathLike[str],
        limit: ByteLimit,
        line_limit: ByteLimit | None = None,
        decompressed: bool = False,
        underlying: Any = None,
        before: int = 0,
    ) -> None:
        super().__init__()
        self._inner = inner
        self._path = Path(path)
        self._limit = limit
        self._bound = limit.value()
        self._line_limit = line_limit
        self._line_bound = line_limit.value() if line_limit is not None else 0
        self._decompressed = decompressed
        self._underlying = underlying
        self._total = before  # bytes through so far (``before``: those of the file before ``inner``'s position)
        self._newlines = 0  # line ends through so far
        self._run = 0  # bytes since the last line end

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        n: int = self._inner.readinto(buffer) or 0
        if n:
            self._total += n
            if self._total > self._bound:
                how = "decompresses to" if self._decompressed else "holds"
                raise FileRefusedError(
                    f"{self._path}: {how} more than {self._bound:,} bytes, the limit for {self._limit.what}"
                    f"{self._limit.hint()}"
                )
            if self._line_limit is not None:
                self._count_lines(bytes(memoryview(buffer)[:n]))
        return n

    def readall(self) -> bytes:
        chunks = []
        while chunk := self.read(_CHUNK):
            chunks.append(chunk)
        return b"".join(chunks)

    def _count_lines(self, data: bytes) -> None:
        bound = self._line_bound
        first = data.find(b"\n")
        if first < 0:
            self._run += len(data)
            if self._run > bound:
                raise self._long_line(self._newlines + 1)
            return
        if self._run + first > bound:
            raise self._long_line(self._newlines + 1)
        last = data.rfind(b"\n")
        if last - first - 1 > bound:  # the whole lines between the chunk's first and last line end
            for i, piece in enumerate(data[first + 1 : last].split(b"\n"), start=2):
                if len(piece) > bound:
                    raise self._long_line(self._newlines + i)
        self._newlines += data.count(b"\n")
        self._run = len(data) - last - 1
        if self._run > bound:
            raise self._long_line(self._newlines + 1)

    def _long_line(self, line: int) -> FileRefusedError:
        assert self._line_limit is not None
        return FileRefusedError(
            f"{self._path}:{line}: a line longer than {self._line_bound:,} bytes, the limit for "
            f"{self._line_limit.what}{self._line_limit.hint()}"
        )

    def close(self) -> None:
        if not self.closed:
            try:
                self._inner.close()
                if self._underlying is not None:
                    self._underlying.close()
            finally:
                super().close()


def parse_json(text: str, **kwargs: Any) -> Any:
    """``json.loads``, a document nested past the recursion limit raised as a ``json.JSONDecodeError`` (not a
    ``RecursionError``)."""
    try:
        return json.loads(text, **kwargs)
    except RecursionError:
        raise json.JSONDecodeError("nested too deeply to parse", text[:80], 0) from None


def read_config(path: str | os.PathLike[str], what: str, yaml: bool = False) -> Any:
    """The YAML (with ``yaml``, or a ``.yaml``/``.yml`` file) or JSON document in the file ``path`` (at most
    ``CONFIG_BYTES``); one-line ``ValueError`` naming the file when it cannot be read (``what`` it is) or parsed."""
    p = Path(path)
    try:
        text = read_text(p, CONFIG_BYTES)
    except FileRefusedError:  # a FIFO, a device, a file over the limit: one line naming it already
        raise
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"{p}: cannot read {what} ({exc})") from None
    kind = "YAML" if yaml or p.suffix in (".yaml", ".yml") else "JSON"
    try:
        # yaml by name: the compiled engine's type check follows this module and sees only the build requirements
        return parse_json(text) if kind == "JSON" else importlib.import_module("yaml").safe_load(text)
    except RecursionError:
        raise ValueError(f"{p}: invalid YAML (nested too deeply to parse)") from None
    except Exception as exc:  # yaml.YAMLError (its context, problem and line), json.JSONDecodeError
        why = "; ".join(str(x) for x in (getattr(exc, "context", None), getattr(exc, "problem", None)) if x)
        mark = getattr(exc, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        why = why or (str(exc) or type(exc).__name__).splitlines()[0]
        raise ValueError(f"{p}{line}: invalid {kind} ({why})") from None
