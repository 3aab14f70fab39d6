"""Reading trace files that may be gzip-compressed: a name ending in ``.gz`` is decompressed on the fly, any
other name is read as it is. The format is the suffix before ``.gz`` (``a.csv.gz`` is a CSV file named ``a``).
Stdlib only.
"""

from __future__ import annotations

import gzip
import zlib
from pathlib import Path
from typing import TextIO

__all__ = [
    "DECOMPRESS_ERRORS",
    "GZIP_SUFFIX",
    "bad_gzip_message",
    "data_stem",
    "data_suffix",
    "is_gzip",
    "open_text",
    "read_bytes",
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


def read_bytes(path: Path) -> bytes:
    """The file's content, decompressed when its name ends in ``.gz``.

    Raises ``OSError`` when the file cannot be read and one of ``DECOMPRESS_ERRORS`` when a ``.gz`` file is not
    valid gzip data; callers turn both into a message naming the file."""
    data = path.read_bytes()
    return gzip.decompress(data) if is_gzip(path) else data


def open_text(path: Path) -> TextIO:
    """The file opened for reading text with ``newline=""`` (as the csv module wants), through gzip when its name
    ends in ``.gz``. Decompression errors (``DECOMPRESS_ERRORS``) surface while reading, not here."""
    if is_gzip(path):
        return gzip.open(path, "rt", newline="")
    return path.open(newline="")


def bad_gzip_message(path: Path, error: Exception) -> str:
    """The one-line message for one of ``DECOMPRESS_ERRORS`` raised while reading ``path``."""
    return f"{path}: not a valid gzip file ({error}); a name ending in .gz must hold gzip data"
