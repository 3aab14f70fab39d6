#!/usr/bin/env bash
# The runtime's GPU check, one script: correctness tests on CUDA, the step-time and steadiness
# benches, profile and calibration, a short fidelity run (preset and in situ) and the policy decision-time
# bench, with the ~1B preset in bf16.
#   bash bench/gpu_check.sh [OUT_DIR]          (default OUT_DIR: results/gpu-check)
# MODEL / DEVICE / DTYPE / NUM_REQUESTS override the defaults (MODEL=tiny DEVICE=cpu DTYPE=float32 runs the same
# steps on a CPU, as a dry run). Everything printed also goes to OUT_DIR/report.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-results/gpu-check}
MODEL=${MODEL:-llama-1b}
DEVICE=${DEVICE:-cuda}
DTYPE=${DTYPE:-bfloat16}
NUM_REQUESTS=${NUM_REQUESTS:-150}
mkdir -p "$OUT"
exec > >(tee "$OUT/report.txt") 2>&1
echo "== $(date -u) $MODEL on $DEVICE ($DTYPE)"
python -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else '')"
echo "== correctness tests (the CUDA ones run when a GPU is present)"
python -m pytest tests/test_runtime_model.py tests/test_runtime_engine.py -q -p no:cacheprovider -rs
echo "== model step times"
python bench/bench_runtime_model.py --model "$MODEL" --device "$DEVICE" --dtype "$DTYPE"
echo "== how steady the step times are (5 s windows)"
python bench/bench_speed_drift.py --model "$MODEL" --device "$DEVICE" --dtype "$DTYPE" --seconds 20
echo "== profile and calibration"
python calibrate.py profile --model "$MODEL" --device "$DEVICE" --dtype "$DTYPE" --num-requests "$NUM_REQUESTS" \
    --out "$OUT/runtime-$MODEL-$DEVICE.json"
echo "== fidelity (workloads not used for fitting)"
python calibrate.py fidelity --model "$MODEL" --device "$DEVICE" --dtype "$DTYPE" --num-requests "$NUM_REQUESTS" \
    --preset "$OUT/runtime-$MODEL-$DEVICE.json" --policies fcfs,slo_aware --loads 0.5,0.8 --seeds 1 \
    --out "$OUT/fidelity-$MODEL-$DEVICE"
echo "== policy decision time against model step time"
python bench/bench_policy_decision.py --model "$MODEL" --device "$DEVICE" --dtype "$DTYPE" \
    --cost-model "$OUT/runtime-$MODEL-$DEVICE.json"
echo "== done: $OUT"
