"""Bounded reading of a file a user names: only a regular file (checked before and after the non-blocking open),
at most its kind's ``ByteLimit`` (raised by an environment variable the error names); ``BoundedReader`` bounds
a stream's bytes and lines; ``parse_yaml`` bounds a YAML document's nodes, aliases expanded, and ``read_config``
reads every JSON or YAML config through it or ``parse_json``. Refusals are one-line ``FileRefusedError`` (a
``ValueError``) or ``ValueError``.

    text = read_text(path, CONFIG_BYTES)
    data = read_config(path, "the adapter config")
    with open_regular(path, TRACE_BYTES) as f: ...
"""

from __future__ import annotations

import csv
import errno
import functools
import importlib
import io
import json
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from llmsched_env.common.checks import clipped, shown

_KIB, _MIB, _GIB = 1 << 10, 1 << 20, 1 << 30
_CHUNK = 1 << 20  # bytes read at a time by BoundedReader.readall


class InputFileError(ValueError):
    """A file or folder a command reads that fails its checks (its kind, size or content), not the command line's
    syntax: one line naming it (the commands print it without their usage block)."""


def retold(exc: ValueError, text: str) -> ValueError:
    """``exc`` said as ``text``: an ``InputFileError`` of its own kind stays one (a command prints it without the
    usage block), anything else is a ``ValueError``."""
    return type(exc)(text) if isinstance(exc, InputFileError) else ValueError(text)


class SettingError(InputFileError):
    """An environment variable the command reads that fails its check (not the command line's syntax): one line
    naming it, without the usage block."""


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
            raise SettingError(
                f"{self.env}={shown(text)}: expected a whole number{self._of()} > 0 (the limit for {self.what})"
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
# the nodes of a YAML document, each alias counted as the node it repeats: the shipped files hold at most a few
# hundred; 100,000 is read in about a second, and a value of that size stays cheap to walk, copy and print
YAML_NODES = CountLimit("a YAML document", 100_000, "LLMSCHED_MAX_YAML_NODES")
LIMITS = (TRACE_BYTES, TRACE_LINE_BYTES, POLICY_BYTES, CHECKPOINT_BYTES, CONFIG_BYTES, RECORD_BYTES, SIGNATURE_BYTES,
          KEY_BYTES, YAML_NODES)  # fmt: skip

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


LINK_LOOP = "a symbolic link loop (a link that leads back to itself)"


def unreachable(path: str | os.PathLike[str], exc: OSError) -> str:
    """Why ``path`` cannot be looked up (``exc`` from ``os.stat``), in words: a symbolic link loop (at it or on the
    way to it), a file on the way where a folder is needed, or the system's reason."""
    p = Path(path)
    if exc.errno == errno.ELOOP:
        try:
            os.stat(p.parent)
        except OSError:
            return f"{LINK_LOOP} lies on the way to it"
        return f"is {LINK_LOOP}"
    if exc.errno == errno.ENOTDIR:
        on_the_way = next((q for q in reversed(p.parents) if q.exists() and not q.is_dir()), None)
        if on_the_way is None:  # reached through a link
            return "a file lies on the way to it (links followed) where a folder is needed"
        mode = os.stat(on_the_way).st_mode
        kind = "a regular file" if stat.S_ISREG(mode) else file_kind(mode)
        return f"{on_the_way} is not a folder ({kind}), so nothing can be written under it"
    return f"cannot be looked up ({exc.strerror or exc})"


def refuse_nul(path: str | bytes | os.PathLike[Any], what: str = "") -> None:
    """A one-line ``FileRefusedError`` naming ``path`` (``what`` before it, e.g. ``"cost model file "``) when it holds a
    NUL byte, which no file's name can (``os`` calls raise a bare ``ValueError('embedded null byte')`` for one)."""
    text = os.fspath(path)
    if (b"\x00" in text) if isinstance(text, bytes) else ("\x00" in text):
        raise FileRefusedError(f"{what}{shown(text)}: a path cannot hold a NUL byte (\\x00); no file has this name")


def link_problem(path: str | os.PathLike[str]) -> str | None:
    """Why the input ``path`` names something that cannot be opened, in words: a symbolic link loop (at it or on
    the way to it) or a symbolic link to nothing; None when it opens, or when nothing at all is there. A NUL byte
    in ``path``: ``refuse_nul``'s ``FileRefusedError``."""
    refuse_nul(path)
    try:
        os.stat(path)
    except FileNotFoundError:
        if os.path.islink(path):
            return f"is a symbolic link to {os.readlink(path)}, which does not exist"
        return None
    except OSError as exc:
        return unreachable(path, exc) if exc.errno == errno.ELOOP else None
    return None


def resolved(path: str | os.PathLike[str]) -> Path:
    """``Path(path).resolve()``; a symbolic link loop on the way is a one-line ``FileRefusedError`` naming ``path``
    (``resolve`` raises ``RuntimeError`` for one, or ``OSError`` in later Pythons); a NUL byte: ``refuse_nul``."""
    refuse_nul(path)
    p = Path(path)
    try:
        return p.resolve()
    except (RuntimeError, OSError) as exc:
        raise FileRefusedError(f"{p}: {link_problem(p) or f'cannot be resolved ({exc})'}") from None


def check_regular_file(path: str | os.PathLike[str], limit: ByteLimit) -> os.stat_result:
    """``path``'s ``os.stat`` (links followed) when it is a regular file of at most ``limit`` bytes;
    ``FileRefusedError`` otherwise, a symbolic link loop included (other ``OSError`` as ``os.stat`` raises it).
    Opens nothing. A NUL byte in ``path``: ``refuse_nul``."""
    refuse_nul(path)
    p = Path(path)
    try:
        st = os.stat(p)
    except OSError as exc:
        if exc.errno != errno.ELOOP:
            raise
        raise FileRefusedError(f"{p}: {unreachable(p, exc)}; {limit.what} must be a regular file") from None
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
    """``json.loads``, a document nested past the recursion limit or with a number Python refuses to read (an
    integer of over 4,300 digits) raised as a ``json.JSONDecodeError`` (not a ``RecursionError`` or a bare
    ``ValueError``)."""
    try:
        return json.loads(text, **{"object_pairs_hook": _unique_keys, **kwargs})
    except RecursionError:
        raise json.JSONDecodeError("nested too deeply to parse", text[:80], 0) from None
    except json.JSONDecodeError:
        raise
    except ValueError as exc:  # int(): "Exceeds the limit (4300 digits) for integer string conversion"
        raise json.JSONDecodeError(clipped(str(exc).splitlines()[0], 200), "", 0) from None


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object as a dict; ``ValueError`` when a key appears twice (which one counts would be a guess)."""
    found = dict(pairs)
    if len(found) != len(pairs):
        seen: set[str] = set()
        twice = next(k for k, _ in pairs if k in seen or seen.add(k))  # type: ignore[func-returns-value]
        raise ValueError(f"the key {clipped(twice, 60)!r} appears twice in one object; give it once")
    return found


def parse_yaml(text: str, where: str, lines: bool = True) -> Any:
    """The YAML document ``text`` as PyYAML's ``safe_load`` reads it, its size bounded with every alias written out
    (an alias counts the whole node it repeats, so nested aliases cannot multiply a small file into a huge value):
    at most ``YAML_NODES`` nodes and ``CONFIG_BYTES`` characters of scalars (what a file without aliases may hold);
    no alias inside the node it names. One-line ``ValueError`` starting with ``where`` (and ``:LINE`` with
    ``lines``) for a document it refuses or cannot parse."""
    yaml = importlib.import_module("yaml")  # by name: see read_config
    loader = _bounded_loader(yaml)(text, YAML_NODES.value(), CONFIG_BYTES.value())
    try:
        return loader.get_single_data()
    except RecursionError:
        raise ValueError(f"{where}: invalid YAML (nested too deeply to parse)") from None
    except _YamlRefused as exc:
        at = f":{exc.line}" if lines else ""
        raise ValueError(f"{where}{at}: {exc}") from None
    except Exception as exc:  # yaml.YAMLError (its context, problem and line), a ValueError of a constructor
        why = "; ".join(str(x) for x in (getattr(exc, "context", None), getattr(exc, "problem", None)) if x)
        mark = getattr(exc, "problem_mark", None)
        at = f":{mark.line + 1}" if mark is not None and lines else ""
        why = clipped(why or (str(exc) or type(exc).__name__).splitlines()[0], 200)
        raise ValueError(f"{where}{at}: invalid YAML ({why})") from None
    finally:
        loader.dispose()


class _YamlRefused(Exception):
    """A YAML document ``parse_yaml`` does not build (too large expanded, a recursive alias), at 1-based ``line``."""

    def __init__(self, message: str, line: int) -> None:
        super().__init__(message)
        self.line = line


@functools.cache
def _bounded_loader(yaml: Any) -> type:
    """A ``yaml.SafeLoader`` counting the nodes and scalar characters of the document it composes, an alias as the
    expanded size of the node it names (kept per node: one visit of each node in all), refusing past its bounds."""

    class BoundedLoader(yaml.SafeLoader):
        def __init__(self, stream: str, max_nodes: int, max_chars: int) -> None:
            super().__init__(stream)
            self.bounds = (max_nodes, max_chars)
            self.nodes, self.chars = 0, 0
            self.sizes: dict[int, tuple[int, int]] = {}  # id(node) -> (nodes, characters), expanded

        def compose_node(self, parent: Any, index: Any) -> Any:
            event = self.peek_event()
            if isinstance(event, yaml.AliasEvent):
                target = self.anchors.get(event.anchor)  # None: PyYAML refuses the undefined alias
                nodes, chars = self.expanded(target, event) if target is not None else (0, 0)
            else:
                nodes, chars = 1, len(getattr(event, "value", "") or "")
            self.nodes, self.chars = self.nodes + nodes, self.chars + chars
            line = event.start_mark.line + 1
            if self.nodes > self.bounds[0]:
                raise _YamlRefused(
                    f"the YAML document holds more than {self.bounds[0]:,} nodes with its aliases written out, the "
                    f"limit for {YAML_NODES.what}{YAML_NODES.hint()}",
                    line,
                )
            if self.chars > self.bounds[1]:
                raise _YamlRefused(
                    f"the YAML document's values hold more than {self.bounds[1]:,} characters with its aliases "
                    f"written out, the limit for {CONFIG_BYTES.what}{CONFIG_BYTES.hint()}",
                    line,
                )
            return super().compose_node(parent, index)

        def compose_mapping_node(self, anchor: Any) -> Any:
            node = super().compose_mapping_node(anchor)
            seen: dict[tuple[str, str], int] = {}
            for key, _ in node.value:  # a merge (<<) may repeat a key: the mapping's own one counts
                if isinstance(key, yaml.ScalarNode) and key.tag != "tag:yaml.org,2002:merge":
                    line = key.start_mark.line + 1
                    first = seen.get((key.tag, key.value))
                    seen[(key.tag, key.value)] = line
                    if first is not None:
                        raise _YamlRefused(f"the key {clipped(key.value, 60)!r} appears twice in one mapping (lines "
                                           f"{first} and {line}); give it once", line)  # fmt: skip
            return node

        def expanded(self, node: Any, event: Any) -> tuple[int, int]:
            """The nodes and scalar characters of ``node`` with every alias in it written out (each capped just past
            its bound)."""
            sizes, (max_nodes, max_chars) = self.sizes, self.bounds
            stack = [(node, False)]
            while stack:
                item, ready = stack.pop()
                if id(item) in sizes:
                    continue
                if isinstance(item, yaml.ScalarNode):
                    sizes[id(item)] = (1, len(item.value))
                    continue
                if item.end_mark is None:  # still being composed: the alias is inside it
                    raise _YamlRefused(
                        f"the alias *{clipped(event.anchor, 40)} is inside the node it names (a recursive alias, "
                        "which no config needs)",
                        event.start_mark.line + 1,
                    )
                kids = _children(yaml, item)
                if ready:
                    nodes = 1 + sum(sizes[id(k)][0] for k in kids)
                    chars = sum(sizes[id(k)][1] for k in kids)
                    sizes[id(item)] = (min(nodes, max_nodes + 1), min(chars, max_chars + 1))
                else:
                    stack.append((item, True))
                    stack.extend((k, False) for k in kids if id(k) not in sizes)
            return sizes[id(node)]

    return BoundedLoader


def _children(yaml: Any, node: Any) -> list[Any]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def read_config(path: str | os.PathLike[str], what: str, yaml: bool = False) -> Any:
    """The YAML (with ``yaml``, or a ``.yaml``/``.yml`` file; ``parse_yaml``, its aliases bounded) or JSON
    (``parse_json``) document in the file ``path`` (at most ``CONFIG_BYTES``); one-line ``ValueError`` naming the
    file (and the line where the parser tells it) when it cannot be read (``what`` it is) or parsed."""
    p = Path(path)
    try:
        text = read_text(p, CONFIG_BYTES)
    except FileRefusedError:  # a FIFO, a device, a file over the limit: one line naming it already
        raise
    except (OSError, UnicodeDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else clipped(str(exc), 200)
        raise ValueError(f"{clipped(str(p), 200)}: cannot read {what} ({why})") from None
    if not (yaml or p.suffix in (".yaml", ".yml")):
        try:
            return parse_json(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{p}: invalid JSON ({clipped(str(exc).splitlines()[0], 200)})") from None
    # yaml by name: the compiled engine's type check follows this module and sees only the build requirements
    return parse_yaml(text, str(p))
