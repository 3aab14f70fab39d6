#!/usr/bin/env bash
# The headline (README, docs/results.md): per-seed capacity on test seeds 0-4 of every named baseline,
# `tuned`, the generalist (learned) and the lookahead bound, per scenario, then the router scenarios with the
# shipped trained router (agent); then the tables (routers: headline.md; the generalist: generalist.md).
#   bash bench/headline.sh [RESULTS]          (default docs/results/test; one core; see docs/results.md)
#   SCENARIOS="azure-code bursty" CLUSTERS="" POLICIES=fcfs,tuned,lookahead bash bench/headline.sh RESULTS
#                                             (a part: those scenarios, no router scenario, those policies)
# The figures in the docs were produced scenario by scenario with these same commands (tuned searched
# apart, into RESULTS/S-capacity-tuned, as its table was filled; the generalist, random and mixed-slo's vtc
# into S-capacity-generalist and S-capacity-schema2 on 2026-12-02); bench/headline.py gathers them all.
#   RESUME=1 bash bench/headline.sh RESULTS  continues after a kill: each run takes the searches its
#                                             RESULTS/S-capacity/rows.jsonl holds (docs/reliability.md) and
#                                             a finished one is rewritten from its rows, not measured again
set -euo pipefail
OUT=${1:-docs/results/test}
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
B=${POLICIES:-fcfs,prefill_first,priority_aging,sjf,sprw,lpm,vtc,kv_guard,sarathi,slo_aware,random,tuned,learned,lookahead}
R=round_robin,least_outstanding,least_kv_load,prefix_affinity,power_of_two,random
# Episode sizes (--num-requests): a trace scenario's test part holds five disjoint windows of at most
# 433 (azure-conv), 143 (azure-code) and 393 (mooncake-conv, remote-kv) requests; a generated one takes the
# windows whose arrivals last 20x their mean TTFT target (evaluation.md, "Sustained windows") past the
# capacities measured before this rule: default 12000, mixed-slo 2000, mix-shift 2200, the others 1000. A
# cluster scenario replays its base trace's test part: five windows of 433 (azure-conv) or 393 (mooncake).
size() {
  case "$1" in
    azure-conv) echo 433 ;; azure-code) echo 143 ;; mooncake-conv|remote-kv) echo 393 ;;
    default) echo 12000 ;; mixed-slo) echo 2000 ;; mix-shift) echo 2200 ;;
    cluster-azure-conv-*) echo 433 ;; cluster-mooncake-*) echo 393 ;; *) echo 1000 ;;
  esac
}
for S in ${SCENARIOS-default azure-conv azure-code mooncake-conv sharegpt-poisson bursty multi-tenant-overload \
         mixed-slo tenants-on-off mix-shift short-long remote-kv}; do
  python evaluate.py --capacity --per-seed --split test --seeds 0,1,2,3,4 --scenarios "$S" ${RESUME:+--resume} \
      --num-requests "$(size "$S")" --policies "$B" --no-progress --force --out "$OUT/$S-capacity"
done
for S in ${CLUSTERS-cluster-azure-conv-4 cluster-azure-conv-8 cluster-mooncake-4 cluster-mooncake-8}; do
  python evaluate.py --capacity --per-seed --split test --seeds 0,1,2,3,4 --scenarios "$S" ${RESUME:+--resume} \
      --num-requests "$(size "$S")" --policies "$R,agent=policies/$S" --no-progress --force --out "$OUT/$S-capacity"
done
python bench/headline.py --results "$OUT"
python bench/headline.py --results "$OUT" --agent learned --out "$OUT/generalist"
