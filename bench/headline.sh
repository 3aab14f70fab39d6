#!/usr/bin/env bash
# The headline (README, docs/results.md): per-seed capacity on test seeds 0-4 of every named baseline,
# `tuned`, the generalist (learned) and the lookahead bound, per scenario, then the router scenarios with the
# shipped trained router (agent); then the tables (routers: headline.md; the generalist: generalist.md).
#   bash bench/headline.sh [RESULTS]          (default docs/results/test; one core; see docs/results.md)
#   SCENARIOS="azure-code bursty" CLUSTERS="" POLICIES=fcfs,tuned,lookahead bash bench/headline.sh RESULTS
#                                             (a part: those scenarios, no router scenario, those policies;
#                                             RP=POLICIES the same for the router scenarios)
# The figures in the docs were produced scenario by scenario with these same commands (tuned searched
# apart, into RESULTS/S-capacity-tuned, as its table was filled; the generalist, random and mixed-slo's vtc
# into S-capacity-generalist and S-capacity-schema2 on 2026-12-02); bench/headline.py gathers them all.
# docs/results keeps each scenario's runs packed (python bench/results_archive.py pack RESULTS); bench/headline.py
# reads packed and plain runs alike, a plain one replacing its packed copy.
#   RESUME=1 bash bench/headline.sh RESULTS  continues after a kill: each run takes the searches its
#                                             RESULTS/S-capacity/rows.jsonl holds (docs/reliability.md) and
#                                             a finished one is rewritten from its rows, not measured again
set -euo pipefail
OUT=${1:-docs/results/test}
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
B=${POLICIES:-fcfs,prefill_first,priority_aging,sjf,sprw,lpm,vtc,kv_guard,sarathi,slo_aware,random,tuned,learned,lookahead}
R=round_robin,least_outstanding,least_kv_load,prefix_affinity,power_of_two,random
# the routing bound (decision.planners.bounds): the named rules switched every 64 arrivals, each choice played 64
# arrivals ahead then 64 more under the base rule (the best rule on the episode); RP=POLICIES replaces the whole list
LB=lookahead:tail=64
# Episode sizes (--num-requests): a trace replay's test part holds five disjoint windows of at most 433
# (azure-conv), 143 (azure-code) and 393 (mooncake-conv, remote-kv) requests. A generated scenario (the synthetic
# ones, and those fitted to a trace: *-fitted) gets none: its capacity searches grow the windows with the load
# (evaluation.md, "The capacity search's windows"), but default (12000, its windows since the sustained rule) and
# mixed-slo (2000) and mix-shift (2200), whose figures were measured on those sizes. The router scenarios are
# the clusters' fitted traffic (a replay's windows are sustained only below where routers differ); each plays
# its replay's trained router.
size() {
  case "$1" in
    azure-conv) echo 433 ;; azure-code) echo 143 ;; mooncake-conv|remote-kv) echo 393 ;;
    default) echo 12000 ;; mixed-slo) echo 2000 ;; mix-shift) echo 2200 ;;
    cluster-azure-conv-[48]|cluster-azure-conv-pd) echo 433 ;; cluster-mooncake-[48]) echo 393 ;; *) echo "" ;;
  esac
}
sized() { local n; n=$(size "$1"); [ -n "$n" ] && echo "--num-requests $n" || true; }
for S in ${SCENARIOS-default azure-conv azure-conv-fitted azure-code mooncake-conv sharegpt-poisson bursty \
         multi-tenant-overload mixed-slo tenants-on-off mix-shift short-long remote-kv}; do
  # shellcheck disable=SC2046  # sized gives the option and its value as two words, or nothing
  python evaluate.py --capacity --per-seed --split test --seeds 0,1,2,3,4 --scenarios "$S" ${RESUME:+--resume} \
      $(sized "$S") --policies "$B" --no-progress --force --out "$OUT/$S-capacity"
done
for S in ${CLUSTERS-cluster-azure-conv-4-fitted cluster-azure-conv-8-fitted cluster-mooncake-4-fitted \
         cluster-mooncake-8-fitted cluster-azure-conv-pd-fitted}; do
  A=policies/${S%-fitted}  # the trained router of the scenario's replay, where one is shipped (none for -pd)
  [ -d "$A" ] && A=",agent=$A" || A=""
  # shellcheck disable=SC2046
  python evaluate.py --capacity --per-seed --split test --seeds 0,1,2,3,4 --scenarios "$S" ${RESUME:+--resume} \
      $(sized "$S") --policies "${RP:-$R$A,$LB}" --no-progress --force --out "$OUT/$S-capacity"
done
python bench/headline.py --results "$OUT"
python bench/headline.py --results "$OUT" --agent learned --out "$OUT/generalist"
