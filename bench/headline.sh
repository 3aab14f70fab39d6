#!/usr/bin/env bash
# The headline (README, docs/results.md): per-seed capacity on test seeds 0-4 of every named baseline,
# `tuned`, the shipped per-scenario agent and the generalist (learned), per scenario, then the router
# scenarios; then the tables (per-scenario agents and routers: headline.md; the generalist: generalist.md).
#   bash bench/headline.sh [RESULTS]          (default docs/results/test; one core; see docs/results.md)
# The figures in the docs were produced scenario by scenario with these same commands (tuned searched
# apart, into RESULTS/S-capacity-tuned, as its table was filled; the generalist, random and mixed-slo's vtc
# into S-capacity-generalist and S-capacity-schema2 on 2026-12-02); bench/headline.py gathers them all.
set -euo pipefail
OUT=${1:-docs/results/test}
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
B=fcfs,prefill_first,priority_aging,sjf,sprw,lpm,vtc,kv_guard,sarathi,slo_aware,random,tuned,learned
R=round_robin,least_outstanding,least_kv_load,prefix_affinity,power_of_two,random
for S in default azure-conv azure-code mooncake-conv sharegpt-poisson bursty multi-tenant-overload mixed-slo \
         tenants-on-off mix-shift short-long remote-kv; do
  python evaluate.py --capacity --per-seed --split test --seeds 0,1,2,3,4 --scenarios "$S" \
      --policies "$B,agent=policies/$S" --no-progress --force --out "$OUT/$S-capacity"
done
for S in cluster-azure-conv-4 cluster-azure-conv-8 cluster-mooncake-4 cluster-mooncake-8; do
  python evaluate.py --capacity --per-seed --split test --seeds 0,1,2,3,4 --scenarios "$S" \
      --policies "$R,agent=policies/$S" --no-progress --force --out "$OUT/$S-capacity"
done
python bench/headline.py --results "$OUT"
python bench/headline.py --results "$OUT" --agent learned --out "$OUT/generalist"
