"""Real serving traces as immutable ``Trace``s: ``load_azure``, ``load_mooncake``, ``load_lengths``,
``load_generic`` (a column mapping) and ``load_trace`` (by format name), plain or ``.gz``, cached per file and
options; every problem is a ``TraceError`` naming the file, line and field (``trace_parsers``).
"""

from __future__ import annotations

import inspect
import os
from collections import OrderedDict
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from llmsched_env.common.files import TRACE_BYTES, FileRefusedError, check_regular_file
from llmsched_env.workloads.trace import MOONCAKE_PREFIX_ID_TOKENS, Trace
from llmsched_env.workloads.trace_parsers import (
    TraceError,
    _unreadable,
    read_azure,
    read_generic,
    read_lengths,
    read_mooncake,
)

TRACE_FORMATS = ("azure", "mooncake", "lengths", "generic")
_CACHE_MAX_ENTRIES = 32
_CACHE: OrderedDict[tuple[Any, ...], Trace] = OrderedDict()


def cached_load(path: str | os.PathLike[str], fmt: str, reader: Callable[..., Trace], **options: Any) -> Trace:
    """``reader(resolved path, **options)``, cached per (path, mtime, size, ``fmt``, options)."""
    given = Path(path).expanduser()
    p = given.resolve()
    try:
        st = p.stat()
    except OSError as e:
        raise _unreadable(p, e) from None
    try:  # named as given: a link to /dev/zero is refused naming the link (the read checks again, bounded)
        check_regular_file(given, TRACE_BYTES)
    except FileRefusedError as e:
        raise TraceError(str(e)) from None
    frozen = tuple(sorted((k, tuple(sorted(v.items())) if isinstance(v, Mapping) else v) for k, v in options.items()))
    key = (str(p), st.st_mtime_ns, st.st_size, fmt, frozen)
    try:
        hash(key)
    except TypeError:
        return reader(p, **options)  # an unhashable option value: parse without caching
    trace = _CACHE.get(key)
    if trace is None:
        trace = _CACHE[key] = reader(p, **options)
        while len(_CACHE) > _CACHE_MAX_ENTRIES:
            _CACHE.popitem(last=False)
    _CACHE.move_to_end(key)
    return trace


def clear_trace_cache() -> None:
    """Forget every parsed trace (they are re-read on the next load)."""
    _CACHE.clear()


# -------------------------------------------------------------------------------------------------- loaders


def load_azure(path: str | os.PathLike[str], *, max_context: int | None = None, overlong: str = "reject",
               sort: bool = False) -> Trace:
    """The Azure LLM inference 2023 CSV (``TIMESTAMP,ContextTokens,GeneratedTokens``; wall-clock timestamps)."""
    return cached_load(path, "azure", read_azure, max_context=max_context, overlong=overlong, sort=sort)


def load_mooncake(path: str | os.PathLike[str], seed: int = 0, tick_s: float | None = None, *,
                  max_context: int | None = None, overlong: str = "reject", sort: bool = False) -> Trace:
    """The Mooncake FAST'25 JSONL, each request spread at random (``seed``) over its ~3 s tick ``[t, t + tick_s)``
    (None: the median gap between distinct timestamps; 0: the raw timestamps), then sorted."""
    limits = {"max_context": max_context, "overlong": overlong, "sort": sort}
    return cached_load(path, "mooncake", read_mooncake, seed=seed, tick_s=tick_s, **limits)


def load_lengths(path: str | os.PathLike[str], *, max_context: int | None = None, overlong: str = "reject",
                 sort: bool = False) -> Trace:
    """Paired lengths (no arrival times) from a CSV with ``num_prefill_tokens`` and ``num_decode_tokens`` columns."""
    return cached_load(path, "lengths", read_lengths, max_context=max_context, overlong=overlong, sort=sort)


def load_generic(path: str | os.PathLike[str], columns: Mapping[str, str], time_unit: str = "s", *,
                 prefix_id_tokens: int = MOONCAKE_PREFIX_ID_TOKENS, max_context: int | None = None,
                 overlong: str = "reject", sort: bool = False) -> Trace:
    """Your own CSV or JSON-lines file (plain or ``.gz``) read through ``columns`` (our field -> its column or key):
    ``prompt_len``, ``output_len`` (required), ``arrival`` (in ``time_unit``; none: length-only), ``prefix_ids``
    (a JSON list or space-separated integers), ``tenant`` (any string)."""
    limits = {"max_context": max_context, "overlong": overlong, "sort": sort}
    options = {"columns": columns, "time_unit": time_unit, "prefix_id_tokens": prefix_id_tokens}
    return cached_load(path, "generic", read_generic, **options, **limits)


_LOADERS: dict[str, Callable[..., Trace]] = {"azure": load_azure, "mooncake": load_mooncake, "lengths": load_lengths,
                                             "generic": load_generic}


def load_trace(path: str | os.PathLike[str], format: str, **options: Any) -> Trace:
    """Load ``path`` with the loader of ``format`` (one of ``TRACE_FORMATS``), passing ``options`` on."""
    loader = _LOADERS.get(format)
    if loader is None:
        raise TraceError(f"{path}: unknown trace format {format!r}; expected one of {TRACE_FORMATS}")
    accepted = [name for name in inspect.signature(loader).parameters if name != "path"]
    unknown = sorted(set(options) - set(accepted))
    if unknown:
        raise TraceError(f"{path}: unknown option(s) {unknown} for format {format!r}; accepted: {accepted}")
    if format == "generic" and "columns" not in options:
        raise TraceError(f"{path}: format 'generic' needs a columns mapping (our field -> the file's column)")
    return loader(path, **options)
