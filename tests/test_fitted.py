"""Traffic fitted to a trace (``workloads.fitted``): what it keeps of the part it is fitted to, what it does not
carry over, how the capacity search grows its windows, and how the commands label and key it."""

from __future__ import annotations

import csv
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from llmsched_env.cluster.scenarios import get_cluster_scenario, list_cluster_scenarios
from llmsched_env.commands.evaluate import main
from llmsched_env.decision.planners.tuned import trace_key, val_episode_size
from llmsched_env.engine.config import SLOClass
from llmsched_env.evaluation import EvalConfig
from llmsched_env.evaluation.capacity import find_capacity, summarize_capacity
from llmsched_env.evaluation.sustained import scenario_windows
from llmsched_env.workloads.fitted import FittedSource, fit_tenants, fitted_scenario
from llmsched_env.workloads.library import get_scenario, list_scenarios, mixture_scenarios
from llmsched_env.workloads.scenarios import TraceSource, scenario_from_trace
from llmsched_env.workloads.trace import Trace
from llmsched_env.workloads.windows import max_sustained_load, window_span

COLUMNS = "arrival=t,prompt_len=in,output_len=out,tenant=who"


def _two_tenant_trace(path: Path, n: int = 3000) -> Path:
    """Tenant ``a`` bursty (Gamma gaps, CV 3) at 3x the rate of tenant ``b`` (Poisson); each row's prompt length is
    its row number + 1 (so a request names its row) and its output length its row number mod 7 + 1."""
    rng = np.random.default_rng(7)
    a = np.cumsum(rng.gamma(1 / 9, 9 / 3.0, size=3 * n // 4))
    b = np.cumsum(rng.exponential(1.0, size=n // 4))
    rows = sorted([(t, "a") for t in a] + [(t, "b") for t in b])
    lines = ["t,in,out,who"] + [f"{t:.6f},{i + 1},{i % 7 + 1},{k}" for i, (t, k) in enumerate(rows)]
    path.write_text("\n".join(lines) + "\n")
    return path


def _replay(path: Path, slo: str = "chat") -> object:
    cls = SLOClass(slo, *map(float, slo.split(":"))) if ":" in slo else slo
    columns = dict(kv.split("=") for kv in COLUMNS.split(","))
    return scenario_from_trace(path, "generic", slo_class=cls, columns=columns)


def _cv(times: np.ndarray) -> float:
    gaps = np.diff(times)
    return float(gaps.std() / gaps.mean())


def test_fitted_traffic_keeps_each_tenant_s_share_burstiness_and_rows(tmp_path: Path) -> None:
    replay = _replay(_two_tenant_trace(tmp_path / "two.csv"))
    part = replay.source("test")  # type: ignore[attr-defined]
    assert isinstance(part, TraceSource)
    fits = fit_tenants(part.trace, 2)
    codes = np.asarray(part.trace.tenant)
    for k, fit in enumerate(fits):
        mine = np.flatnonzero(codes == k)
        assert fit.share == pytest.approx(mine.size / len(part.trace))
        assert fit.cv == pytest.approx(_cv(part.trace.arrival_s[mine]))
    assert fits[0].cv > 2 and 0.7 < fits[1].cv < 1.3
    source = FittedSource.of_replay(part, "two.csv")
    n = 20 * len(part.trace)  # far longer than the part
    requests = source.sample(np.random.default_rng(0), n, 1.0)
    assert [r.request_id for r in requests] == list(range(n))
    times = np.array([r.arrival_s for r in requests])
    assert np.all(np.diff(times) >= 0) and times[0] > 0
    assert times[-1] == pytest.approx(n / part.rate_rps, rel=0.1)  # the replay's nominal rate
    tenant = np.array([r.tenant for r in requests])
    for k, fit in enumerate(fits):
        assert np.mean(tenant == k) == pytest.approx(fit.share, abs=0.02)
        assert _cv(times[tenant == k]) == pytest.approx(fit.cv, rel=0.15)
    prompt_to_row = {int(p): i for i, p in enumerate(part.trace.prompt_len.tolist())}
    for r in requests[:500]:  # each request is a row of its own tenant, its lengths paired as in the part
        row = prompt_to_row[r.prompt_len]
        assert part.trace.output_len[row] == r.output_len and codes[row] == r.tenant
    first_round = [prompt_to_row[r.prompt_len] for r in requests if r.tenant == 1][: fits[1].rows.size]
    assert sorted(first_round) == sorted(fits[1].rows.tolist())  # every row once per round


def test_same_seed_same_traffic_and_a_window_s_span_is_inverse_to_the_load(tmp_path: Path) -> None:
    source = FittedSource.of_replay(_replay(_two_tenant_trace(tmp_path / "two.csv")).source("test"), "two.csv")  # type: ignore[attr-defined]

    def draw(seed: int, n: int, load: float) -> list[tuple[float, int, int, int]]:
        reqs = source.sample(np.random.default_rng(seed), n, load)
        return [(r.arrival_s, r.prompt_len, r.output_len, r.tenant) for r in reqs]

    assert draw(3, 800, 1.0) == draw(3, 800, 1.0)
    assert draw(3, 800, 1.0) != draw(4, 800, 1.0)
    at1, at2 = draw(3, 800, 1.0), draw(3, 800, 2.0)
    assert [a[1:] for a in at1] == [a[1:] for a in at2]
    assert np.allclose([a[0] for a in at1], [2 * a[0] for a in at2])
    longer = draw(3, 4000, 1.0)  # the first 800 arrivals of a longer window are the shorter window's: exact merge
    assert np.allclose([a[0] for a in longer[:800]], [a[0] for a in at1])
    assert [a[3] for a in longer[:800]] == [a[3] for a in at1]
    span = window_span(source, "test", 0, 800, 1.0)
    limit = max_sustained_load(source, "test", 0, 800)
    assert limit == pytest.approx(span.span_s / span.required_s, rel=1e-6)  # exact in one step


def test_prefix_sharing_stays_within_a_round_and_never_exceeds_the_part_s() -> None:
    ids = ((1, 2), (1, 2, 3), (9,), (1, 4), ())
    trace = Trace("p", "p.jsonl", np.arange(5.0), np.full(5, 1024), np.full(5, 8), prefix_ids=ids)
    from llmsched_env.engine.config import SLO_CLASSES, TenantConfig

    source = FittedSource(trace, (TenantConfig("t", slo=SLO_CLASSES["chat"]),), 1.0, "test", "p.jsonl")
    requests = source.sample(np.random.default_rng(0), 15, 1.0)  # three rounds of the five rows
    for n in range(3):
        got = sorted(requests[i].prefix_ids or () for i in range(5 * n, 5 * n + 5))
        shift = 10 * n  # each round's ids are its own: the part's largest id is 9
        assert got == sorted(tuple(x + shift for x in row) for row in ids)
    seen = [x for r in requests for x in (r.prefix_ids or ())]
    reuse = 1 - len(set(seen)) / len(seen)
    assert reuse == pytest.approx(Trace.describe(trace)["prefix_reuse_share"])


def test_a_fitted_scenario_is_labelled_named_and_left_out_of_the_generalist_s_mixture(tmp_path: Path) -> None:
    fitted = get_scenario("azure-conv-fitted")
    assert fitted.traffic == "fitted to azure_llm_2023/AzureLLMInferenceTrace_conv.csv"
    assert {"azure-conv-fitted", "mooncake-conv-fitted"} <= set(list_scenarios())
    assert not set(mixture_scenarios()) & {"azure-conv-fitted", "mooncake-conv-fitted"}
    assert isinstance(fitted.source("test"), FittedSource)
    replay = get_scenario("azure-conv").source("test")
    assert fitted.source("test").nominal_rate_rps() == replay.nominal_rate_rps()
    for name in list_cluster_scenarios():
        if name.endswith("-fitted"):
            cluster = get_cluster_scenario(name)
            base = get_cluster_scenario(name.removesuffix("-fitted"))
            assert cluster.scenario().traffic and (cluster.num_replicas, cluster.rate_rps) == (
                base.num_replicas,
                base.rate_rps,
            )
    synthetic = fitted_scenario(get_scenario("bursty"), "nothing")
    with pytest.raises(ValueError, match="traffic can be fitted to a timed trace's replay only"):
        synthetic.source("test")


def test_capacity_on_fitted_traffic_grows_its_windows_even_from_a_size_the_user_gave(tmp_path: Path) -> None:
    """--num-requests sizes the replay's windows and the fitted traffic's first ones; above the load where those
    stop being sustained the fitted traffic's grow (the replay's cannot: its search ends at a lower bound). Every
    row of the fitted traffic says so."""
    replay = _replay(_two_tenant_trace(tmp_path / "two.csv"), slo="5:5")  # met at any load
    fitted = fitted_scenario(replay, "two.csv")  # type: ignore[arg-type]
    config = EvalConfig(scenarios=[replay, fitted], seeds=[0, 1], num_requests=100)
    kept = find_capacity(config, replay, "fcfs")
    assert kept["window_limited"] is True and "traffic" not in kept
    row = find_capacity(config, fitted, "fcfs")
    cap = scenario_windows(config, fitted).max_load((0, 1))
    assert row["traffic"] == "fitted to two.csv" and row["window_requests"] > 100
    assert row["capacity_load"] > cap and row["max_sustained_load"] > row["capacity_load"]
    (agg,) = summarize_capacity([row])
    assert agg["traffic"] == "fitted to two.csv"


def test_the_command_line_runs_the_replay_and_its_fitted_traffic_side_by_side(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _two_tenant_trace(tmp_path / "two.csv")
    base = ["--trace", str(path), "--trace-format", "generic", "--trace-columns", COLUMNS, "--no-progress"]
    out = tmp_path / "out"
    assert main([*base, "--fitted-traffic", "--policies", "fcfs", "--loads", "0.5", "--seeds", "0", "--num-requests",
                 "50", "--out", str(out)]) == 0  # fmt: skip
    with (out / "results.csv").open() as f:
        rows = [(r["scenario"], r["traffic"], r["load"]) for r in csv.DictReader(f)]
    assert rows == [("two", "", "0.5"), ("two-fitted", f"fitted to {path}", "0.5")]
    for wrong in (["--scenarios", "bursty", "--fitted-traffic"], [*base[:-1], "--fitted-traffic", "--trace-rate", "x"]):
        with pytest.raises(SystemExit):
            main([*wrong, "--policies", "fcfs"])
    assert "--fitted-traffic apply to --trace only" in capsys.readouterr().err
    lengths = tmp_path / "lengths.csv"
    lengths.write_text("in,out\n" + "".join(f"{i + 1},3\n" for i in range(200)))
    with pytest.raises(SystemExit):
        main(["--trace", str(lengths), "--trace-format", "generic", "--trace-columns", "prompt_len=in,output_len=out",
              "--trace-rate", "2", "--fitted-traffic", "--policies", "fcfs"])  # fmt: skip
    assert "has no arrival times; its episodes are generated already" in capsys.readouterr().err


def test_fitted_traffic_has_a_tuned_key_of_its_own_and_val_windows_of_its_own_size(tmp_path: Path) -> None:
    path = _two_tenant_trace(tmp_path / "two.csv")
    replay = _replay(path)
    fitted = fitted_scenario(replay, str(path))  # type: ignore[arg-type]
    options = {"trace": str(path), "trace_format": "generic", "trace_columns": COLUMNS}
    a, b = trace_key(options, replay), trace_key(options, fitted)  # type: ignore[arg-type]
    assert a.key.startswith("two@") and b.key.startswith("two-fitted@") and b.identity["traffic"] == "fitted"
    assert a.key.split("@")[1] != b.key.split("@")[1]
    assert val_episode_size(replay, [0, 1, 2]) is not None  # type: ignore[arg-type]
    assert val_episode_size(fitted, [0, 1, 2]) is None  # generated: windows of any size
    assert replace(fitted, num_requests=7).traffic == fitted.traffic
