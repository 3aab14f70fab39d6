"""llmsched inside vLLM v1: the offline scheduler harness, the lockstep parity check against llmsched's engine,
a ``Scheduler`` subclass that lets any llmsched ``Policy`` decide vLLM's batches, and vLLM in the loop of the
simulator.

Everything here needs the optional extra ``pip install 'llmsched[vllm]'`` (vLLM ``VLLM_VERSION``, whose private
scheduler internals it reads and sets); ``require_vllm()`` says so in one line when it is missing. Nothing else in
the project imports vllm.
"""

from __future__ import annotations

import importlib.util

__all__ = ["VLLM_VERSION", "VllmMissingError", "require_vllm", "vllm_available"]

VLLM_VERSION = "0.33.0"  # the version the adapter was written and tested against (pyproject's [vllm] extra)


class VllmMissingError(RuntimeError):
    """vLLM is not importable, or is not the version the adapter was tested with."""


def vllm_available() -> bool:
    """Whether the ``vllm`` package can be imported here (without importing it)."""
    return importlib.util.find_spec("vllm") is not None


def require_vllm() -> None:
    """Raise ``VllmMissingError`` with one actionable line unless vLLM ``VLLM_VERSION`` is installed."""
    if not vllm_available():
        raise VllmMissingError(
            f"vLLM is not installed: pip install 'llmsched[vllm]' (vllm=={VLLM_VERSION}), or run bench/vllm_check.sh"
        )
    from importlib.metadata import version

    found = version("vllm")
    if found != VLLM_VERSION:
        raise VllmMissingError(
            f"vLLM {found} is installed, but the adapter reads scheduler internals of vLLM {VLLM_VERSION}: "
            f"pip install vllm=={VLLM_VERSION}"
        )
