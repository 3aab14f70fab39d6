"""Tenants (docs/reliability.md, "Tenants: a cap, names, and tables that stay readable"): a workload's distinct
tenants are capped (``LLMSCHED_MAX_TENANTS`` raises the cap), a tenant's name that would break a table or a
``tenant/NAME/metric`` key is refused in one line naming the file, line and field, and past ``TOP_TENANTS``
tenants the metrics, results.csv and the service plot keep the busiest and pool the rest as ``other``."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest

from llmsched_env.commands.evaluate import main
from llmsched_env.common.tenants import MAX_TENANTS, OTHER_TENANTS, listed_tenants, tenant_name_problem
from llmsched_env.costs.loader import load_cost_model
from llmsched_env.engine.batch import Decision
from llmsched_env.engine.config import EngineConfig, TenantConfig
from llmsched_env.evaluation import plots
from llmsched_env.evaluation.plots import _tenant_groups, plot_tenant_service
from llmsched_env.sim import metrics as metrics_module
from llmsched_env.sim.metrics import TOP_TENANTS, compute_metrics, jain_index
from llmsched_env.sim.simulator import Simulator
from llmsched_env.workloads.randomized import RandomizedSpace
from llmsched_env.workloads.traces import TraceError, clear_trace_cache, load_trace
from llmsched_env.workloads.workload import LengthDist, TenantWorkload, WorkloadConfig, generate, tenant_configs
from tests.test_bounded_reads import _usage_error  # the one error line of llmsched-evaluate, with no traceback

COLUMNS = {"arrival": "arrival", "prompt_len": "prompt_len", "output_len": "output_len", "tenant": "tenant"}
FLAGS = ["--trace-format", "generic", "--trace-columns", ",".join(f"{k}={v}" for k, v in COLUMNS.items())]
COST = load_cost_model("llama3-8b-h100")


@pytest.fixture(autouse=True)
def _default_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    """The default cap (no LLMSCHED_MAX_TENANTS from the caller's shell) and no trace cached from another test."""
    monkeypatch.delenv("LLMSCHED_MAX_TENANTS", raising=False)
    clear_trace_cache()


def _trace(path: Path, tenants: list[str], rows: int | None = None) -> Path:
    """A generic CSV trace: row i of tenant ``tenants[i]`` until each has one, then tenant k with weight
    k + 1 (so the tenants have distinct request counts), one arrival every 0.05 s."""
    rng = np.random.default_rng(0)
    weights = np.arange(1, len(tenants) + 1, dtype=np.float64)
    lines = ["arrival,prompt_len,output_len,tenant"]
    for i in range(rows or len(tenants)):
        k = i if i < len(tenants) else int(rng.choice(len(tenants), p=weights / weights.sum()))
        lines.append(f"{i * 0.05:.2f},{int(rng.integers(20, 200))},{int(rng.integers(2, 40))},{tenants[k]}")
    path.write_text("\n".join(lines) + "\n")
    return path


# ------------------------------------------------------------------------------------------------------ the cap
def test_a_trace_past_the_cap_is_refused_at_the_first_tenant_past_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    cap = MAX_TENANTS.default
    path = _trace(tmp_path / "many.csv", [f"u{i}" for i in range(cap + 1)], rows=cap + 20)
    with pytest.raises(TraceError) as info:
        load_trace(path, "generic", columns=COLUMNS)
    message = str(info.value)
    # the header is line 1, the first row of tenant number cap + 1 is line cap + 2: refused there
    assert message == (
        f"{path}:{cap + 2}: column 'tenant' brings the trace to 1,025 tenants, over the limit of 1,024 for the "
        "tenants of a workload; set LLMSCHED_MAX_TENANTS to a larger number to raise it"
    )
    line = _usage_error(["--trace", str(path), *FLAGS], capsys)
    assert f"{path}:{cap + 2}: column 'tenant' brings the trace to 1,025 tenants" in line

    monkeypatch.setenv("LLMSCHED_MAX_TENANTS", "2_000")
    assert len(load_trace(path, "generic", columns=COLUMNS).tenant_names) == cap + 1
    clear_trace_cache()
    for bad in ("lots", "0", "-3"):
        monkeypatch.setenv("LLMSCHED_MAX_TENANTS", bad)
        with pytest.raises(TraceError) as info:
            load_trace(path, "generic", columns=COLUMNS)
        assert str(info.value) == (
            f"{path}: LLMSCHED_MAX_TENANTS={bad!r}: expected a whole number > 0 (the limit for the tenants of a "
            "workload)"
        )


def test_the_cap_holds_for_workloads_built_in_code(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLMSCHED_MAX_TENANTS", "3")
    lengths = LengthDist.fixed(10, 5)
    tenants = tuple(TenantWorkload(TenantConfig(f"t{i}"), 1.0, lengths) for i in range(4))
    with pytest.raises(ValueError, match=r"WorkloadConfig\.tenants: 4 tenants, over the limit of 3 .*LLMSCHED_MAX_TEN"):
        WorkloadConfig(tenants, 10)
    assert len(WorkloadConfig(tenants[:3], 10).tenants) == 3
    with pytest.raises(ValueError, match=r"RandomizedSpace\.max_tenants: 16 tenants, over the limit of 3"):
        RandomizedSpace()


# ----------------------------------------------------------------------------------------------- the name rule
@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("a\tb", "the control character '\\t'"),
        ("a\nb", "the control character '\\n'"),
        ("a|b", "the table separator '|'"),
        ("a/b", "the key separator '/'"),
        ("a\u200bb", "the non-printable character '\\u200b'"),
        ("other", "must not be 'other'"),
        ("t" * 100_000, "must be at most 256 characters, got 'tttt"),
    ],
)
def test_a_tenant_name_that_breaks_the_outputs_is_refused_naming_file_line_and_field(
    name: str, says: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    jsonl = tmp_path / "names.jsonl"  # JSON holds any character, a newline too
    rows = [{"arrival": t, "prompt_len": 5, "output_len": 5, "tenant": n} for t, n in ((0, "ok"), (1, "ok"), (2, name))]
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(TraceError) as info:
        load_trace(jsonl, "generic", columns=COLUMNS)
    message = str(info.value)
    assert message.startswith(f"{jsonl}:3: key 'tenant' ") and says in message and "\n" not in message, message
    assert len(message) < 1_000
    if "\n" not in name:  # a CSV row cannot hold a newline (it ends the row); the rest are refused there too
        path = tmp_path / "names.csv"
        path.write_text(f'arrival,prompt_len,output_len,tenant\n0,5,5,ok\n1,5,5,"{name}"\n')
        line = _usage_error(["--trace", str(path), *FLAGS], capsys)
        assert f"{path}:3: column 'tenant' " in line and says in line, line
    with pytest.raises(ValueError, match="TenantConfig name must") as error:
        TenantConfig(name)
    assert says in str(error.value)


def test_the_names_shipped_and_tested_pass_the_rule() -> None:
    for name in ("chat", "batch", "long_context", "t0-chat-poisson", "tenant07", "a=b", "heavy", "日本", "a b"):
        assert tenant_name_problem(name) is None, name


def test_a_note_on_many_tenants_stays_one_short_line() -> None:
    assert listed_tenants(["a", "b"]) == "a, b"
    long = listed_tenants([f"u{i:04d}" for i in range(1024)])
    assert long.endswith("u0015, ... (1,024 in all)") and len(long) < 160


# ----------------------------------------------------------------------------------------------- top k + other
def _run(num_tenants: int, num_requests: int = 400) -> tuple[Simulator, dict[str, float]]:
    """A finished simulation of ``num_tenants`` tenants whose rates grow with their index (weights 1 and 2),
    and its metrics."""
    lengths = LengthDist.fixed(64, 8)
    wl = WorkloadConfig(
        tuple(
            TenantWorkload(TenantConfig(f"t{i:02d}", weight=1.0 + i % 2), 0.5 + 0.1 * i, lengths)
            for i in range(num_tenants)
        ),
        num_requests,
    )
    sim = Simulator(EngineConfig(num_kv_blocks=64), tenant_configs(wl), COST, generate(wl, np.random.default_rng(3)))
    while not sim.done:
        sim.step(Decision())
    return sim, sim.metrics()


def _groups(metrics: dict[str, float]) -> list[str]:
    return list(dict.fromkeys(k.split("/")[1] for k in metrics if k.startswith("tenant/")))


def test_past_k_tenants_the_busiest_are_kept_and_the_rest_pooled_as_other(monkeypatch: pytest.MonkeyPatch) -> None:
    sim, m = _run(40)
    tenants = sim.engine.tenants
    groups = _groups(m)
    assert len(groups) == TOP_TENANTS + 1 and groups[-1] == OTHER_TENANTS
    monkeypatch.setattr(metrics_module, "TOP_TENANTS", 1000)  # every tenant's figures, as before the cap
    full = sim.metrics()
    monkeypatch.undo()
    counts = {t.name: full[f"tenant/{t.name}/num_requests"] for t in tenants}
    busiest = sorted(counts, key=lambda n: (-counts[n], n))[:TOP_TENANTS]
    assert groups[:-1] == [t.name for t in tenants if t.name in busiest]  # in the tenants' order
    rest = [n for n in counts if n not in busiest]
    for key in ("num_requests", "slo_attainment", "service", "ttft_p99_s", "tpot_p99_s"):  # the kept: unchanged
        for name in busiest:
            assert m[f"tenant/{name}/{key}"] == full[f"tenant/{name}/{key}"]
    assert m["tenant/other/num_tenants"] == len(rest) == 40 - TOP_TENANTS
    assert m["tenant/other/num_requests"] == sum(counts[n] for n in rest) > 0
    met = sum(full[f"tenant/{n}/slo_attainment"] * counts[n] for n in rest)
    assert m["tenant/other/slo_attainment"] == pytest.approx(met / m["tenant/other/num_requests"], rel=1e-12)
    assert m["tenant/other/service"] == pytest.approx(sum(full[f"tenant/{n}/service"] for n in rest), rel=1e-12)
    # attainment and p99s over the pooled requests: the run's own figures over those requests alone
    theirs = [r for r in sim.arrived_requests() if tenants[r.tenant].name in rest]
    pooled = compute_metrics(theirs, tenants, sim.engine.round_end_s, duration_s=m["duration_s"])
    for key in ("ttft_p99_s", "tpot_p99_s", "slo_attainment"):
        assert m[f"tenant/other/{key}"] == pooled[key], key
    # fairness over every tenant, not over the groups
    service = [full[f"tenant/{t.name}/service"] for t in tenants if counts[t.name] > 0]
    assert m["jain_fairness"] == full["jain_fairness"] == pytest.approx(jain_index(service), rel=1e-12)
    assert m["jain_fairness"] != pytest.approx(jain_index([m[f"tenant/{g}/service"] for g in groups]))


def test_k_tenants_or_fewer_keep_every_tenant_and_no_other() -> None:
    sim, m = _run(TOP_TENANTS, num_requests=200)
    assert _groups(m) == [t.name for t in sim.engine.tenants]
    assert not any(k.startswith("tenant/other/") for k in m)


def test_ties_are_broken_by_name() -> None:
    names = [f"t{i}" for i in range(20)][::-1]
    first = sorted(names)[:TOP_TENANTS]  # t0, t1, t10..t19, t2, t3: kept in the tenants' order
    assert [names[k] for k in metrics_module.busiest_tenants(names, [5] * 20)] == [n for n in names if n in first]


def test_the_service_plot_has_at_most_k_plus_one_groups(tmp_path: Path) -> None:
    """Two seeds whose busiest tenants differ: the plot folds them into one top K and ``other``, keeping each
    run's total service."""
    runs = []
    for seed in range(2):
        row: dict[str, object] = {"policy": "fcfs", "scenario": "s", "load": 1.0, "seed": seed, "jain_fairness": 0.5}
        for i in range(TOP_TENANTS):
            k = i + seed * 4  # seed 1's busiest are t04..t19
            row[f"tenant/t{k:02d}/num_requests"] = 10.0 + k
            row[f"tenant/t{k:02d}/service"] = 100.0 * (k + 1)
        row["tenant/other/num_requests"], row["tenant/other/service"] = 30.0, 500.0
        runs.append(row)
    assert (plots._TOP_TENANTS, plots._OTHER_TENANTS) == (TOP_TENANTS, OTHER_TENANTS)  # its copies agree
    tenants, per_run = _tenant_groups(runs)
    assert len(tenants) == TOP_TENANTS + 1 and tenants[-1] == OTHER_TENANTS
    for row, service in zip(runs, per_run, strict=True):
        total = sum(v for k, v in row.items() if k.endswith("/service"))
        assert sum(service.values()) == pytest.approx(total)
    assert plot_tenant_service(runs, tmp_path / "tenant_service.png").stat().st_size > 0


def test_results_csv_of_a_40_tenant_trace_has_k_plus_one_tenant_groups(tmp_path: Path) -> None:
    path = _trace(tmp_path / "forty.csv", [f"u{i:02d}" for i in range(40)], rows=2000)
    out = tmp_path / "out"
    argv = ["--trace", str(path), *FLAGS, "--policies", "fcfs", "--seeds", "0", "--num-requests", "150"]
    assert main([*argv, "--out", str(out), "--no-progress"]) == 0
    with (out / "results.csv").open(newline="") as f:
        header = next(csv.reader(f))
    groups = list(dict.fromkeys(c.split("/")[1] for c in header if c.startswith("tenant/")))
    assert len(groups) == TOP_TENANTS + 1 and groups[-1] == OTHER_TENANTS
    assert "tenant/other/num_tenants" in header
    assert (out / "tenant_service.png").exists()
