#!/usr/bin/env bash
# Build a venv with the [vllm] extra (vLLM 0.33.0, which pins torch 2.14.0 and pulls a CUDA build: about 9 GB and
# 4-5 minutes here) beside this checkout, install the project into it and run the tests marked `vllm`.
#   bench/vllm_check.sh                 # venv in ${LLMSCHED_VLLM_VENV:-${TMPDIR:-/tmp}/llmsched-vllm-venv}
#   bench/vllm_check.sh -k parity       # extra arguments go to pytest
# Re-running reuses the venv. Everything runs on the CPU: vLLM's real scheduler, fake model outputs.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${LLMSCHED_VLLM_VENV:-${TMPDIR:-/tmp}/llmsched-vllm-venv}"
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
if [ ! -x "$VENV/bin/python" ]; then
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q --upgrade pip
fi
"$VENV/bin/pip" install -q -e '.[vllm]' 'pytest>=7.4' 'hypothesis>=6.90'
"$VENV/bin/python" -c "import vllm, torch; print('vllm', vllm.__version__, 'torch', torch.__version__)"
exec "$VENV/bin/python" -m pytest -m vllm -p no:cacheprovider "$@"
