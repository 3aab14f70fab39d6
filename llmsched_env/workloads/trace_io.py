"""Reading trace files, gzip-compressed when the name ends in ``.gz`` (``a.csv.gz`` is a CSV file named ``a``).
Reads are bounded (``common.files``): a regular file, at most ``TRACE_BYTES`` on disk and decompressed (as a
stream, so a gzip bomb stops at the cap), lines of at most ``TRACE_LINE_BYTES``.
"""

from __future__ import annotations

import gzip
import io
import zlib
from pathlib import Path

from llmsched_env.common.files import TRACE_BYTES, TRACE_LINE_BYTES, BoundedReader, open_regular

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
    """The file opened for reading bytes, decompressed when ``.gz``, bounded: a refusal is a ``FileRefusedError``
    naming the file, the limit and its variable (here, or while reading)."""
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
    """The file's content (``open_bytes``): ``OSError``, one of ``DECOMPRESS_ERRORS`` or ``FileRefusedError``."""
    with open_bytes(path) as f:
        return f.read()


def bad_gzip_message(path: Path, error: Exception) -> str:
    """The one-line message for one of ``DECOMPRESS_ERRORS`` raised while reading ``path``."""
    return f"{path}: not a valid gzip file ({error}); a name ending in .gz must hold gzip data"
