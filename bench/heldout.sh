#!/usr/bin/env bash
# The generalist on the held-out traces of tests/data/heldout (docs/generalist.md): per-seed capacity on the
# test part of each trace, seeds 0-4 (its five disjoint windows: each trace's episodes are the largest whose
# five windows fit in its test part, 48-92 requests), of every named baseline, the generalist (`learned`),
# the lookahead bound (clairvoyant, not deployable) and `tuned`, the user's own rival: before judging, each trace is tuned on
# its val part (`llmsched-tune --trace` with that trace's options, into RESULTS/tuned.json, not the user table;
# wall times in RESULTS/tuning_times.csv), and `tuned=RESULTS/tuned.json` is judged on test; then the table and
# what tuning cost next to what training the generalist cost (RESULTS/tuning.md).
#   bash bench/heldout.sh [RESULTS] [POLICIES]    (default docs/results/heldout and every named baseline +
#                                                  learned + tuned; one core, about 30 minutes plus the tuning)
#   FITTED=1 bash bench/heldout.sh docs/results/heldout-fitted
#                                                 each trace also judged on traffic fitted to it (--fitted-traffic:
#                                                 scenario T-fitted beside the replay T, its windows growing with
#                                                 the load, so its capacities are sustained), tuned on both
# A POLICIES list re-measures those policies beside the full run, into a folder of their own that no other list
# writes: RESULTS/T-capacity-generalist for `learned` (the generalist), RESULTS/T-capacity-<p1+p2...> for any
# other list. bench/headline.py reads every T-capacity* folder, a later one's rows replacing the full run's, packed
# (python bench/results_archive.py pack RESULTS, as docs/results keeps them) or not.
set -euo pipefail
OUT=${1:-docs/results/heldout}
ALL=fcfs,prefill_first,priority_aging,sjf,sprw,lpm,vtc,kv_guard,sarathi,slo_aware,random,learned,tuned,lookahead
P=${2:-$ALL}
case "$P" in
    "$ALL") SUFFIX="" ;;
    learned) SUFFIX="-generalist" ;;
    *) SUFFIX="-${P//,/+}" ;;
esac
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
G="--trace-format generic --trace-columns arrival=arrival,prompt_len=prompt_len,output_len=output_len,tenant=tenant"
# `tuned` in POLICIES: the settings llmsched-tune finds on each trace's val part, kept in TABLE (the key of a
# trace's entry is its content and options, so judging with the same options finds the entry tuned here)
TABLE="$OUT/tuned.json" TIMES="$OUT/tuning_times.csv"
TUNE_SEEDS=${TUNE_SEEDS:-0,1,2}  # val windows: each trace's val part (83-329 requests) cut into one per seed
POL=",$P,"
POL=${POL//,tuned,/,tuned=$TABLE,}
POL=${POL#,}
POL=${POL%,}
TUNING=0
[[ ",$P," == *,tuned,* ]] && TUNING=1
F=""
((${FITTED:-0})) && F=--fitted-traffic
C="--capacity --per-seed --split test --seeds 0,1,2,3,4 --policies $POL --no-progress --force"
D=tests/data/heldout
if ((TUNING)); then
    mkdir -p "$OUT"
    echo "trace,tune_wall_s" > "$TIMES"
fi
judge() {  # NAME N TRACE-OPTIONS...: tune on the val part (when tuned is judged, timed), then judge on test
    local name=$1 n=$2 t0  # n: requests per test window, the most for which the test part holds five
    shift 2
    if ((TUNING)); then
        t0=$SECONDS
        python -m llmsched_env.commands.tune "$@" $F --seeds "$TUNE_SEEDS" --force --out "$TABLE"
        echo "$name,$((SECONDS - t0))" >> "$TIMES"
    fi
    python evaluate.py $C $F --num-requests "$n" "$@" --out "$OUT/$name-capacity$SUFFIX"
}
judge azure_code_1tenant 48 --trace $D/azure_code_1tenant.csv --trace-format azure --trace-slo code_long
judge sharegpt_12tenants 71 --trace $D/sharegpt_12tenants.csv $G \
    --tenant-slo tenant00=interactive,tenant01=interactive,tenant02=interactive,tenant03=interactive,tenant04=chat,tenant05=chat,tenant06=chat,tenant07=chat,tenant08=code,tenant09=code,tenant10=batch,tenant11=batch
judge conv_code_2tenants 92 --trace $D/conv_code_2tenants.csv $G --tenant-slo conv=chat,code=code_long
judge mooncake_1tenant 54 --trace $D/mooncake_1tenant.jsonl --trace-format mooncake --trace-slo long_context \
    --max-model-len 131072 --num-kv-blocks 16384 --max-num-seqs 64 --max-num-batched-tokens 8192
python bench/headline.py --results "$OUT" --agent learned --out "$OUT/generalist"
if ((TUNING)); then  # what a user pays for each rival: tuning per trace, against training the generalist once
    python - "$TIMES" "$TUNE_SEEDS" > "$OUT/tuning.md" <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
total = sum(int(r["tune_wall_s"]) for r in rows)
print(f"Tuning `tuned` on each held-out trace's val part (llmsched-tune --trace, val seeds {sys.argv[2]}, one core):")
print()
print("| trace | tuning wall time |")
print("|---|---|")
for r in rows:
    s = int(r["tune_wall_s"])
    print(f"| `{r['trace']}` | {s // 60} min {s % 60} s |")
print(f"| all {len(rows)} | {total // 60} min {total % 60} s |")
print()
print("Training the generalist, once for every workload: 11 min 16 s of wall time (`llmsched-train --scenario "
      "generalist --seed 0`, 2026-12-02, docs/generalist.md); a new trace then costs it nothing, where `tuned` "
      "costs one search per trace and per change of its options.")
PY
    cat "$OUT/tuning.md"
fi
