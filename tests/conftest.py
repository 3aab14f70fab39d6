"""Test-session set-up: the tests replay the public traces shipped in the package, so a ``LLMSCHED_TRACE_DIR``
set in the caller's shell (which replaces them) is dropped here, for this process and the scripts it starts."""

from __future__ import annotations

import os

os.environ.pop("LLMSCHED_TRACE_DIR", None)


def pytest_collection_modifyitems(config: object, items: list) -> None:
    """Tests marked ``vllm`` need the optional [vllm] extra: skipped, with the reason, where vllm is not importable."""
    import importlib.util

    import pytest

    if importlib.util.find_spec("vllm") is not None:
        return
    skip = pytest.mark.skip(reason="vllm is not installed (pip install 'llmsched[vllm]', or bench/vllm_check.sh)")
    for item in items:
        if "vllm" in item.keywords:
            item.add_marker(skip)
