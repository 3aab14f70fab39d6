"""Reading trace files that may be gzip-compressed: a name ending in ``.gz`` is decompressed on the fly, any
other name is read as it is. The format is the suffix before ``.gz`` (``a.csv.gz`` is a CSV file named ``a``).

Reads are bounded (``llmsched_env.common.files``): only a regular file is read; its size on disk and, for a
``.gz`` file, the bytes it decompresses to are capped by ``TRACE_BYTES`` (``$LLMSCHED_MAX_TRACE_BYTES``, 1 GiB by
default) and each line by ``TRACE_LINE_BYTES`` (``$LLMSCHED_MAX_TRACE_LINE_BYTES``, 1 MiB), decompressed as a
stream so a gzip bomb is refused after the cap, not after filling the memory. Stdlib only.
"""

from __future__ import annotations

import gzip
import io
import zlib
from pathlib import Path
from typing import TextIO

from llmsched_env.common.files import TRACE_BYTES, TRACE_LINE_BYTES, BoundedReader, open_regular

__all__ = [
    "DECOMPRESS_ERRORS", "GZIP_SUFFIX", "bad_gzip_message", "data_stem", "data_suffix", "is_gzip", "open_bytes",
    "open_text", "read_bytes",
]

GZIP_SUFFIX = ".gz"
# What a damaged or mislabelled .gz file raises while it is read (BadGzipFile is an OSError; a truncated
# stream ends in EOFError; corrupt deflate data in zlib.error).
DECOMPRESS_ERRORS: tuple[type[Exception], ...] = (gzip.BadGzipFile, EOFError, zlib.error)


def is_gzip(path: Path) -> bool:
    """True when ``path``'s name ends in ``.gz`` (any case): the file is read through gzip."""
    return path.suffix.lower() == GZIP_SUFFIX


def data_suffix(path: Path) -> str:
    """The lower-case suffix that names the format, ``.gz`` set aside: ``.csv`` for ``a.csv`` and ``a.csv.gz``."""
    return Path(path.stem).suffix.lower() if is_gzip(path) else path.suffix.lower()


def data_stem(path: Path) -> str:
    """The file's name without its format suffix, ``.gz`` set aside: ``a`` for ``a.csv`` and ``a.csv.gz``."""
    return Path(path.stem).stem if is_gzip(path) else path.stem


def open_bytes(path: Path) -> io.BufferedReader:
    """The file opened for reading its bytes, decompressed on the fly when its name ends in ``.gz``, and bounded:
    a file that is not regular, or larger than ``TRACE_BYTES`` on disk, is refused here (before it is opened);
    more than ``TRACE_BYTES`` decompressed, or a line longer than ``TRACE_LINE_BYTES``, while it is read. Each
    refusal is a ``FileRefusedError`` (a ``ValueError``) naming the file, the limit and its variable."""
    raw = open_regular(path, TRACE_BYTES)
    try:
        if is_gzip(path):
            unzipped = gzip.GzipFile(fileobj=raw, mode="rb")  # closing it leaves raw open: BoundedReader closes both
            bounded = BoundedReader(unzipped, path, TRACE_BYTES, TRACE_LINE_BYTES, decompressed=True, underlying=raw)
        else:
            bounded = BoundedReader(raw, path, TRACE_BYTES, TRACE_LINE_BYTES)
    except BaseException:
        raw.close()
        raise
    return io.BufferedReader(bounded, buffer_size=1 << 20)


def read_bytes(path: Path) -> bytes:
    """The file's content, decompressed when its name ends in ``.gz``, within the bounds of ``open_bytes``.

    Raises ``OSError`` when the file cannot be read, one of ``DECOMPRESS_ERRORS`` when a ``.gz`` file is not
    valid gzip data, and ``FileRefusedError`` past a bound; callers turn the first two into a message naming the
    file (the third names it already)."""
    with open_bytes(path) as f:
        return f.read()


def open_text(path: Path) -> TextIO:
    """The file opened for reading UTF-8 text with ``newline=""`` (as the csv module wants), through gzip when its
    name ends in ``.gz``, within the bounds of ``open_bytes``. Decompression errors (``DECOMPRESS_ERRORS``) and a
    ``FileRefusedError`` past a size or line bound surface while reading; a file that is not regular or too
    large on disk is refused here."""
    return io.TextIOWrapper(open_bytes(path), encoding="utf-8", newline="")


def bad_gzip_message(path: Path, error: Exception) -> str:
    """The one-line message for one of ``DECOMPRESS_ERRORS`` raised while reading ``path``."""
    return f"{path}: not a valid gzip file ({error}); a name ending in .gz must hold gzip data"
