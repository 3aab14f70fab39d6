"""Test-session set-up: the tests replay the public traces shipped in the package, so a ``LLMSCHED_TRACE_DIR``
set in the caller's shell (which replaces them) is dropped here, for this process and the scripts it starts;
``trained_run`` is the one training the fast tier shares; ``vllm`` tests skip where vllm is not installed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.trained_run import TrainedRun, train_once

os.environ.pop("LLMSCHED_TRACE_DIR", None)


@pytest.fixture(scope="session")
def trained_run(tmp_path_factory: pytest.TempPathFactory) -> TrainedRun:
    """The fast tier's one end-to-end training (``tests/trained_run.py``), run once per session when asked for."""
    base: Path = tmp_path_factory.mktemp("trained_run")
    return train_once(base)


def pytest_collection_modifyitems(config: object, items: list) -> None:
    """Tests marked ``vllm`` need the optional [vllm] extra: skipped, with the reason, where vllm is not importable."""
    import importlib.util

    if importlib.util.find_spec("vllm") is not None:
        return
    skip = pytest.mark.skip(reason="vllm is not installed (pip install 'llmsched[vllm]', or bench/vllm_check.sh)")
    for item in items:
        if "vllm" in item.keywords:
            item.add_marker(skip)
