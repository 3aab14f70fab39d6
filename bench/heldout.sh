#!/usr/bin/env bash
# The generalist on the held-out traces of tests/data/heldout (docs/generalist.md): per-seed capacity on the
# test part of each trace, seeds 0-4 (five windows of 100 requests at different offsets), of every named
# baseline and the generalist (`learned`; `tuned` has no settings for a trace it never saw); then the table.
#   bash bench/heldout.sh [RESULTS] [POLICIES]    (default docs/results/heldout and every named baseline +
#                                                  learned; one core, about 30 minutes)
# A POLICIES list re-measures those policies beside the full run, into a folder of their own that no other list
# writes: RESULTS/T-capacity-generalist for `learned` (the generalist), RESULTS/T-capacity-<p1+p2...> for any
# other list. bench/headline.py reads every T-capacity* folder, a later one's rows replacing the full run's.
set -euo pipefail
OUT=${1:-docs/results/heldout}
ALL=fcfs,prefill_first,priority_aging,sjf,sprw,lpm,vtc,kv_guard,sarathi,slo_aware,random,learned
P=${2:-$ALL}
case "$P" in
    "$ALL") SUFFIX="" ;;
    learned) SUFFIX="-generalist" ;;
    *) SUFFIX="-${P//,/+}" ;;
esac
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
G="--trace-format generic --trace-columns arrival=arrival,prompt_len=prompt_len,output_len=output_len,tenant=tenant"
C="--capacity --per-seed --split test --seeds 0,1,2,3,4 --num-requests 100 --policies $P --no-progress --force"
D=tests/data/heldout
python evaluate.py $C --trace $D/azure_code_1tenant.csv --trace-format azure --trace-slo code_long \
    --out "$OUT/azure_code_1tenant-capacity$SUFFIX"
python evaluate.py $C --trace $D/sharegpt_12tenants.csv $G --out "$OUT/sharegpt_12tenants-capacity$SUFFIX" \
    --tenant-slo tenant00=interactive,tenant01=interactive,tenant02=interactive,tenant03=interactive,tenant04=chat,tenant05=chat,tenant06=chat,tenant07=chat,tenant08=code,tenant09=code,tenant10=batch,tenant11=batch
python evaluate.py $C --trace $D/conv_code_2tenants.csv $G --tenant-slo conv=chat,code=code_long \
    --out "$OUT/conv_code_2tenants-capacity$SUFFIX"
python evaluate.py $C --trace $D/mooncake_1tenant.jsonl --trace-format mooncake --trace-slo long_context \
    --max-model-len 131072 --num-kv-blocks 16384 --max-num-seqs 64 --max-num-batched-tokens 8192 \
    --out "$OUT/mooncake_1tenant-capacity$SUFFIX"
python bench/headline.py --results "$OUT" --agent learned --out "$OUT/generalist"
