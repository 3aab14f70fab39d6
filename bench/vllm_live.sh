#!/usr/bin/env bash
# The whole live experiment of docs/vllm.md ("A live vLLM server"), one workload at a time, on a quiet machine:
#   bench/vllm_live.sh random runs/vllm-live        # or: trace
# 1. calibrate: llmsched's fcfs serves the workload at five loads (one run each; the trace's val part), the
#    adapter logging every engine step;
# 2. fit a cost model to those steps (python -m llmsched_env.commands.live_replay ... --save-model);
# 3. from it, the SLO scale, the nominal rate and a trace to tune on (bench/vllm_live_setup.py), and the
#    tuned static setting (llmsched-tune on that trace's val part, with the fitted model and the live limits);
# 4. compare: vLLM's own scheduler, llmsched fcfs, slo_aware, the generalist (learned) and tuned, at three loads,
#    three repeats each (the server restarted for every scheduler and repeat), vLLM's client measuring;
# 5. the table (bench/vllm_live_report.py) and the simulator's prediction of the fcfs and slo_aware runs.
# RATES, CALIB_RATES, NUM_REQUESTS, REPEATS, SCHEDULERS and KV_BLOCKS override the defaults below.
set -euo pipefail
WORKLOAD=${1:?usage: bench/vllm_live.sh random|trace OUT}
OUT=${2:?usage: bench/vllm_live.sh random|trace OUT}
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
source "$ROOT/bench/vllm_venv.sh"
vllm_venv_build cpu >&2
PY="$VENV/bin/python"
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
if [ "$WORKLOAD" = random ]; then
    RATES=${RATES:-10,25,40}; CALIB_RATES=${CALIB_RATES:-5,15,25,35,45}; NUM_REQUESTS=${NUM_REQUESTS:-300}
else
    RATES=${RATES:-2,4,6}; CALIB_RATES=${CALIB_RATES:-1,2,3,4,6}; NUM_REQUESTS=${NUM_REQUESTS:-200}
fi
REPEATS=${REPEATS:-3}
KV_BLOCKS=${KV_BLOCKS:-256}
LIMITS=(--max-model-len 2048 --max-num-seqs 64 --max-num-batched-tokens 2048 --block-size 128 --num-kv-blocks "$KV_BLOCKS")
mkdir -p "$OUT"
exec > >(tee -a "$OUT/$WORKLOAD.log") 2>&1
echo "== $(date -u) $WORKLOAD into $OUT"

CAL="$OUT/calibrate-$WORKLOAD"
if [ ! -f "$CAL/cost-model.json" ]; then
    "$PY" -m llmsched_env.live.server --out "$CAL" --schedulers fcfs --workload "$WORKLOAD" \
        --rates "$CALIB_RATES" --repeats 1 --num-requests "$NUM_REQUESTS" --split val "${LIMITS[@]}"
    "$PY" -m llmsched_env.commands.live_replay "$CAL"/fcfs/"$WORKLOAD"-rate*-rep0 \
        --adapter-config "$CAL/fcfs/adapter.json" --save-model "$CAL/cost-model.json" --out "$CAL/replay.csv"
fi
SETUP="$OUT/setup-$WORKLOAD"
"$PY" "$ROOT/bench/vllm_live_setup.py" --cost-model "$CAL/cost-model.json" \
    --engine "$CAL/fcfs/server-log/engine.json" --workload "$WORKLOAD" --num-kv-blocks "$KV_BLOCKS" --out "$SETUP"
SCALE=$("$PY" -c "import json,sys; print(json.load(open(sys.argv[1]))['slo_scale'])" "$SETUP/setup.json")
NOMINAL=$("$PY" -c "import json,sys; print(json.load(open(sys.argv[1]))['nominal_rate_rps'])" "$SETUP/setup.json")
if [ "$WORKLOAD" = random ]; then TENANT_SLO="chat=$("$PY" -c "print(f'{1.0*$SCALE}:{0.1*$SCALE}')")"; fi
if [ "$WORKLOAD" = trace ]; then
    TENANT_SLO=$("$PY" -c "
from llmsched_env.engine.config import SLO_CLASSES as S
s=$SCALE; print(f\"conv={S['chat'].ttft_s*s}:{S['chat'].tpot_s*s},code={S['code'].ttft_s*s}:{S['code'].tpot_s*s}\")")
fi
if [ ! -f "$SETUP/tuned.json" ]; then
    "$VENV/bin/llmsched-tune" --trace "$SETUP/tune.csv" --trace-format generic \
        --trace-columns arrival=arrival,prompt_len=prompt_len,output_len=output_len,tenant=tenant \
        --tenant-slo "$TENANT_SLO" --cost-model "$CAL/cost-model.json" --num-requests "$NUM_REQUESTS" \
        "${LIMITS[@]}" \
        --out "$SETUP/tuned.json"
fi

SCHEDULERS=${SCHEDULERS:-vllm,fcfs,slo_aware,learned,tuned=$SETUP/tuned.json}
"$PY" -m llmsched_env.live.server --out "$OUT/$WORKLOAD" --schedulers "$SCHEDULERS" --workload "$WORKLOAD" \
    --rates "$RATES" --repeats "$REPEATS" --num-requests "$NUM_REQUESTS" --slo-scale "$SCALE" \
    --cost-model "$CAL/cost-model.json" --nominal-rate-rps "$NOMINAL" "${LIMITS[@]}"
"$PY" "$ROOT/bench/vllm_live_report.py" "$OUT/$WORKLOAD" --paired vllm --markdown --out "$OUT/$WORKLOAD/runs.csv"
# the simulator's prediction of the fcfs and slo_aware runs, two ways: a cost model fitted to the calibration
# runs (held out: other streams, another time), and one fitted to each run's own steps (in situ), the latter
# also with the front-end delay of the lightest calibration run added (frontend-*.csv)
CALIB_RUNS=$(ls -d "$CAL"/fcfs/"$WORKLOAD"-rate*-rep0 | paste -sd,)
LIGHT_RUN="$CAL/fcfs/$WORKLOAD-rate${CALIB_RATES%%,*}-rep0"
for policy in fcfs slo_aware; do
    [ -d "$OUT/$WORKLOAD/$policy" ] || continue
    "$PY" -m llmsched_env.commands.live_replay "$OUT/$WORKLOAD/$policy/$WORKLOAD"-rate*-rep* \
        --adapter-config "$OUT/$WORKLOAD/$policy/adapter.json" --fit-from "$CALIB_RUNS" \
        --out "$OUT/$WORKLOAD/replay-$policy.csv"
    rm -f "$OUT/$WORKLOAD/insitu-$policy"-*.csv "$OUT/$WORKLOAD/frontend-$policy"-*.csv
    for run in "$OUT/$WORKLOAD/$policy/$WORKLOAD"-rate*-rep*; do
        "$PY" -m llmsched_env.commands.live_replay "$run" --adapter-config "$OUT/$WORKLOAD/$policy/adapter.json" \
            --out "$OUT/$WORKLOAD/insitu-$policy-$(basename "$run").csv" > /dev/null
        "$PY" -m llmsched_env.commands.live_replay "$run" --adapter-config "$OUT/$WORKLOAD/$policy/adapter.json" \
            --frontend-from "$LIGHT_RUN" --out "$OUT/$WORKLOAD/frontend-$policy-$(basename "$run").csv" > /dev/null
    done
done
echo "== $(date -u) done"
