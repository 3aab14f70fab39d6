"""The per-seed capacities the headline recorded (``docs/results/test`` and ``sustained``, packed by
``bench/results_archive.py``), to search again: a search must find each of them exactly (``tests/test_decided.py``)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from llmsched_env.evaluation import EvalConfig
from llmsched_env.evaluation.capacity import find_capacity
from tests.bench_scripts import bench_script

RESULTS = [Path(__file__).resolve().parents[1] / "docs" / "results" / part for part in ("test", "sustained")]
# the episode sizes the headline searched with (bench/headline.sh's size()); other scenarios: their own
SIZES = {"azure-conv": 433, "azure-code": 143, "mooncake-conv": 393, "remote-kv": 393, "default": 12000,
         "mixed-slo": 2000, "mix-shift": 2200, "cluster-azure-conv-4": 433, "cluster-mooncake-4": 393}  # fmt: skip
# the rules whose recorded rows today's code reproduces (a tuned table or a trained policy may have changed since)
RULES = ("fcfs", "prefill_first", "priority_aging", "sjf", "sprw", "lpm", "vtc", "kv_guard", "sarathi", "slo_aware",
         "round_robin", "least_outstanding", "least_kv_load", "prefix_affinity", "power_of_two")  # fmt: skip
QUICK = (("bursty", "fcfs", 0), ("azure-conv-fitted", "slo_aware", 0), ("multi-tenant-overload", "kv_guard", 0),
         ("bursty", "sjf", 0))  # fmt: skip
# the scenarios whose recorded rows the search before early stopping (998aa45) found again, rule by rule; the
# trace replays' (azure-code, azure-conv, mooncake-conv, remote-kv), mixed-slo's and mix-shift's rows came from
# earlier windows or sizes
SLOW_SCENARIOS = ("azure-conv-fitted", "bursty", "multi-tenant-overload", "sharegpt-poisson", "short-long",
                  "tenants-on-off", "cluster-azure-conv-4-fitted", "cluster-mooncake-4-fitted")  # fmt: skip


@dataclass(frozen=True)
class RecordedCapacity:
    """One recorded per-seed search: what it searched and the capacity it found."""

    scenario: str
    policy: str
    seed: int
    capacity_load: float

    def search(self) -> float:
        """The capacity today's search finds for the same (scenario, policy, seed) on ``test``."""
        config = EvalConfig(scenarios=[self.scenario], policies=[self.policy], seeds=[self.seed], split="test",
                            num_requests=SIZES.get(self.scenario))  # fmt: skip
        row = find_capacity(config, config.scenarios[0], config.policies[0], seed=self.seed, latency=False)
        return float(row["capacity_load"])


def _recorded(scenario: str) -> dict[tuple[str, int], float]:
    path = next(folder / f"{scenario}.tar.gz" for folder in RESULTS if (folder / f"{scenario}.tar.gz").exists())
    files = bench_script("results_archive").read_archive(path)
    rows = json.loads(files[f"{scenario}-capacity/results.json"])
    return {(r["policy"], int(r["seed"])): float(r["capacity_load"]) for r in rows}


def recorded_capacities(quick: bool) -> list[RecordedCapacity]:
    """``QUICK``'s cases, or seed 0 of every rule on ``SLOW_SCENARIOS``."""
    if quick:
        return [RecordedCapacity(s, p, k, _recorded(s)[(p, k)]) for s, p, k in QUICK]
    out = []
    for scenario in SLOW_SCENARIOS:
        found = _recorded(scenario)
        out += [RecordedCapacity(scenario, p, 0, found[(p, 0)]) for p in RULES if (p, 0) in found]
    return out
