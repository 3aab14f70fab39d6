"""Where the public traces the scenarios replay are found: shipped gzip-compressed under ``workloads/data/``
(licenses in ``data/README.md``), or in ``$LLMSCHED_TRACE_DIR`` laid out the same way (plain or ``.gz``)."""

from __future__ import annotations

import os
from pathlib import Path

from llmsched_env.workloads.traces import GZIP_SUFFIX, TraceError

TRACE_DIR_ENV = "LLMSCHED_TRACE_DIR"
PACKAGED_TRACE_DIR = Path(__file__).resolve().parent / "data"

# The public traces, by key, relative to ``trace_dir()``; each may also be stored as the name plus ``.gz``.
TRACE_FILES = {"azure-conv": "azure_llm_2023/AzureLLMInferenceTrace_conv.csv",
               "azure-code": "azure_llm_2023/AzureLLMInferenceTrace_code.csv",
               "mooncake-conv": "mooncake/conversation_trace.jsonl",
               "sharegpt": "sharegpt_lengths/sharegpt_8k_filtered_stats_llama2_tokenizer.csv"}


def trace_dir() -> Path:
    """The folder the public traces are read from: ``$LLMSCHED_TRACE_DIR`` when set (and not empty), else the
    copies shipped in the package (``PACKAGED_TRACE_DIR``)."""
    env = os.environ.get(TRACE_DIR_ENV)
    return Path(env).expanduser() if env else PACKAGED_TRACE_DIR


def trace_path(key: str) -> Path:
    """The file of the public trace ``key`` under ``trace_dir()``, plain or else ``.gz``; ``TraceError`` naming
    the folder when neither exists or the key is unknown."""
    rel = TRACE_FILES.get(key)
    if rel is None:
        raise TraceError(f"unknown public trace {key!r}; known: {sorted(TRACE_FILES)}")
    folder = trace_dir()
    for candidate in (folder / rel, folder / (rel + GZIP_SUFFIX)):
        if candidate.is_file():
            return candidate
    where = folder / rel
    if os.environ.get(TRACE_DIR_ENV):
        hint = f"{TRACE_DIR_ENV}={folder} is set; add the file there or unset it to use the shipped traces"
    else:
        hint = f"the package's trace data is missing (reinstall llmsched) or set {TRACE_DIR_ENV} to a folder with it"
    raise TraceError(f"{where}: public trace {key!r} not found (nor {where.name}{GZIP_SUFFIX}); {hint}")
