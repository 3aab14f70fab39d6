"""Each latency's mean split into the front end, the wait in the engine and the engine's steps: live from a block's
logs (``live.blocks.block_record``'s ``components``), predicted (``live.sim.predict_block``'s component keys and
their ``mean_prediction``), and the error of a prediction shared among them (``live.split``)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from llmsched_env.costs.loader import load_cost_model
from llmsched_env.decision.policy_spec import resolve_policy
from llmsched_env.live.blocks import COMPONENT_KEYS, COMPONENTS, METRICS, block_record, component_key
from llmsched_env.live.sim import mean_prediction, predict_block, simulate
from llmsched_env.live.split import (
    markdown_table,
    predicted_components,
    read_components,
    split_rows,
    split_table,
    worst,
)  # fmt: skip
from llmsched_env.live.workloads import WORKLOADS, block_stream, stream_requests, tenant_configs
from llmsched_env.sim.setup import SimSetup
from tests.live_synthetic import TENANTS, write_run

SLOS = {t.name: t for t in TENANTS}
META = {"cell": "c", "round": 0, "arm": "fcfs", "warmup": False}


def _write_block(folder: Path) -> Path:
    """A hand-built block of four requests: three served (the third of one token), the fourth failed and aborted.
    Engine times from 100 s; the client's TTFT and E2E are the engine's plus a front end of its own per request."""
    folder.mkdir(parents=True)
    logs = folder / "server-log"
    logs.mkdir()
    # label: arrival, first scheduled, first token, finish, output tokens, client TTFT, client E2E
    served = {"a": (100.0, 100.5, 101.0, 103.0, 5, 1.25, 3.5), "b": (100.2, 100.2, 100.45, 101.2, 3, 0.5, 1.2),
              "c": (100.4, 101.4, 101.9, 101.9, 1, 1.6, 1.6)}  # fmt: skip
    plan = [{"label": k, "tenant": "chat", "prompt_tokens": 10, "output_tokens": v[4], "send_s": None}
            for k, v in served.items()]  # fmt: skip
    plan.append({"label": "d", "tenant": "chat", "prompt_tokens": 10, "output_tokens": 4, "send_s": None})
    server = [{"id": k, "label": k, "tenant": "chat", "arrival": a, "first_scheduled": s, "first_token": t,
               "finish": f, "prompt_tokens": 10, "output_tokens": n, "status": "stopped", "preemptions": 0,
               "cached_tokens": 0} for k, (a, s, t, f, n, _, _) in served.items()]  # fmt: skip
    server.append({**server[0], "id": "d", "label": "d", "first_token": None, "status": "aborted"})
    result = {"duration": 4.0, "request_throughput": 0.75, "input_lens": [10] * 4,
              "output_lens": [v[4] for v in served.values()] + [0],
              "ttfts": [v[5] for v in served.values()] + [0.0], "latencies": [v[6] for v in served.values()] + [0.0],
              "errors": ["", "", "", "boom"]}  # fmt: skip
    (folder / "requests.json").write_text(json.dumps(plan))
    (folder / "result.json").write_text(json.dumps(result))
    (logs / "requests.jsonl").write_text("".join(json.dumps(r) + "\n" for r in server))
    (logs / "steps.jsonl").write_text("")
    return logs


def test_a_blocks_components_are_the_means_over_its_served_requests_and_add_up(tmp_path: Path) -> None:
    logs = _write_block(tmp_path / "run")
    rec = block_record(tmp_path / "run", logs, SLOS, None, META)
    got = rec["components"]
    assert rec["completed"] == 3
    want = {
        # front end (client - engine TTFT): .25, .25, .1; wait: .5, 0, 1; steps to the first token: .5, .25, .5
        "ttft": {"total_s": 3.35 / 3, "frontend_s": 0.6 / 3, "wait_s": 0.5, "steps_s": 1.25 / 3},
        # front end (client - engine E2E): .5, .2, .1; steps to the finish: 2.5, 1, .5
        "e2e": {"total_s": 2.1, "frontend_s": 0.8 / 3, "wait_s": 0.5, "steps_s": 4 / 3},
        # a and b only (c has one token): client (3.5 - 1.25) / 4, (1.2 - .5) / 2; engine 2 / 4, .75 / 2
        "tpot": {"total_s": (0.5625 + 0.35) / 2, "frontend_s": (0.0625 - 0.025) / 2, "steps_s": 0.4375},
    }
    assert set(got) == set(want)
    for lat, figures in want.items():
        assert set(got[lat]) == set(figures)
        for name, v in figures.items():
            assert got[lat][name] == pytest.approx(v, abs=1e-9), (lat, name)
        parts = sum(v for name, v in got[lat].items() if name != "total_s")
        assert parts == pytest.approx(got[lat]["total_s"], abs=1e-12)
    # as blocks.jsonl holds it, read back; a block without server logs has none
    assert read_components("blocks.jsonl:1", json.loads(json.dumps(got))) == got
    alone = block_record(tmp_path / "run", None, SLOS, None, META, span_s=(0.0, 4.0))
    assert alone["components"] is None and read_components("blocks.jsonl:1", alone.get("components")) is None


def test_a_simulated_runs_front_end_is_its_constant_delay(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    write_run(tmp_path / "run", num_requests=40, frontend_s=0.004, log_dir=logs)
    got = block_record(tmp_path / "run", logs, SLOS, None, META)["components"]
    assert got["ttft"]["frontend_s"] == pytest.approx(0.004, abs=1e-6)  # (a time.time() clock: float error)
    assert got["e2e"]["frontend_s"] == pytest.approx(0.004, abs=1e-6)
    assert got["tpot"]["frontend_s"] == pytest.approx(0.0, abs=1e-6)
    assert got["ttft"]["wait_s"] > 0 and got["e2e"]["steps_s"] > got["ttft"]["steps_s"] > 0
    for lat in COMPONENTS:
        assert sum(v for k, v in got[lat].items() if k != "total_s") == pytest.approx(got[lat]["total_s"], abs=1e-9)


MIXED = WORKLOADS["mixed-slo"]


def test_the_predicted_components_add_up_and_their_front_end_is_the_delay() -> None:
    model = load_cost_model("runtime-tiny-cpu")
    tenants = tenant_configs(MIXED, 0.5)
    setup = SimSetup(MIXED.engine, tuple(tenants), model, policy=resolve_policy("fcfs"), nominal_rate_rps=40.0)
    stream = block_stream(MIXED, 40.0, 0)
    plain, slow = predict_block(stream, setup, 0.0), predict_block(stream, setup, 0.25)
    assert set(COMPONENT_KEYS) <= set(slow) and set(METRICS) <= set(slow)
    for lat, parts in COMPONENTS.items():
        total = slow[component_key(lat)]
        assert sum(slow[component_key(lat, p)] for p in parts) == pytest.approx(total, abs=1e-12), lat
        for p in parts:  # the same engine: the delay moves the front end only
            shift = 0.25 if p == "frontend" and lat != "tpot" else 0.0
            assert slow[component_key(lat, p)] == pytest.approx(plain[component_key(lat, p)] + shift, abs=1e-12)
    assert plain["ttft_frontend_mean_s"] == 0.0 and plain["tpot_frontend_mean_s"] == pytest.approx(0.0, abs=1e-12)
    assert slow["ttft_wait_mean_s"] > 0 and slow["ttft_steps_mean_s"] > 0  # a busy engine: requests wait
    # the parts are of the simulated requests' own latencies
    result = simulate(setup.with_requests(stream_requests(stream, tenants)))
    assert slow["ttft_mean_s"] == pytest.approx(float(np.nanmean(result.ttft_s)) + 0.25, abs=1e-12)
    assert slow["ttft_wait_mean_s"] == pytest.approx(float(np.nanmean(result.wait_s)), abs=1e-12)
    assert slow["tpot_mean_s"] == pytest.approx(float(np.nanmean(result.tpot_s)), abs=1e-12)


def test_mean_prediction_averages_the_components_where_the_blocks_hold_them() -> None:
    old = {**dict.fromkeys(METRICS, 1.0), "preemptions": 2.0, "shed": 0.0}
    new = {**old, **dict.fromkeys(COMPONENT_KEYS, 0.5), "ttft_mean_s": 3.0}
    assert set(mean_prediction([old, old])) == {*METRICS, "preemptions", "shed"}  # predictions made before them
    both = mean_prediction([new, {**new, "ttft_mean_s": 5.0, "tpot_mean_s": math.nan}])
    assert both["ttft_mean_s"] == 4.0 and both["tpot_mean_s"] == 0.5 and both["e2e_wait_mean_s"] == 0.5
    mixed = mean_prediction([old, new])
    assert mixed["ttft_mean_s"] == 3.0 and mixed["preemptions"] == 2.0 and set(COMPONENT_KEYS) <= set(mixed)


def _live(ttft: tuple[float, float, float], e2e: tuple[float, float, float],
          tpot: tuple[float, float]) -> dict[str, dict[str, float]]:  # fmt: skip
    """A block's components from its parts (front end, wait, steps; TPOT: front end, steps)."""
    return {
        "ttft": {"total_s": sum(ttft), "frontend_s": ttft[0], "wait_s": ttft[1], "steps_s": ttft[2]},
        "tpot": {"total_s": sum(tpot), "frontend_s": tpot[0], "steps_s": tpot[1]},
        "e2e": {"total_s": sum(e2e), "frontend_s": e2e[0], "wait_s": e2e[1], "steps_s": e2e[2]},
    }


def _predicted(ttft: tuple[float, float, float], e2e: tuple[float, float, float],
               tpot: tuple[float, float]) -> dict[str, float]:  # fmt: skip
    out = {}
    for lat, parts in (("ttft", ttft), ("tpot", tpot), ("e2e", e2e)):
        out[component_key(lat)] = sum(parts)
        out.update({component_key(lat, p): v for p, v in zip(COMPONENTS[lat], parts, strict=True)})
    return out


def _rows() -> list[dict[str, Any]]:
    # fcfs: two blocks, TTFT parts (.02, .2, .08) and (.02, .4, .08): live .02 + .3 + .08 = .4 s
    live = {
        "fcfs": [_live((0.02, 0.2, 0.08), (0.02, 0.2, 1.0), (0.001, 0.02)),
                 _live((0.02, 0.4, 0.08), (0.02, 0.4, 1.0), (0.001, 0.02)), None],
        "slo_aware": [_live((0.01, 0.1, 0.09), (0.01, 0.1, 2.0), (0.0, 0.01))],
        "vllm": [None, None],  # vLLM's own scheduler: no logs
    }  # fmt: skip
    # predicted for fcfs: wait .14 (-.16 s: -40% of .4), steps .056 (-6%), front end .012 (-2%): -48% in all
    predicted = {"fcfs": _predicted((0.012, 0.14, 0.056), (0.02, 0.3, 1.1), (0.001, 0.023))}
    return split_rows("c", live, predicted)


def test_split_rows_share_the_error_of_each_latency_among_its_parts() -> None:
    rows = _rows()
    assert [(r["arm"], r["latency"]) for r in rows] == [
        ("fcfs", "ttft"), ("fcfs", "tpot"), ("fcfs", "e2e"), ("slo_aware", "ttft"), ("slo_aware", "tpot"),
        ("slo_aware", "e2e"),
    ]  # fmt: skip
    ttft = rows[0]
    assert ttft["cell"] == "c" and ttft["blocks"] == 2
    assert ttft["live_s"] == pytest.approx(0.4) and ttft["predicted_s"] == pytest.approx(0.208)
    assert ttft["error"] == pytest.approx(-0.48)
    assert ttft["wait_live_s"] == pytest.approx(0.3) and ttft["wait_predicted_s"] == pytest.approx(0.14)
    shares = {p: ttft[f"{p}_share"] for p in COMPONENTS["ttft"]}
    assert shares == pytest.approx({"frontend": -0.02, "wait": -0.40, "steps": -0.06})
    assert sum(shares.values()) == pytest.approx(ttft["error"]) and ttft["misses_most"] == "wait"
    tpot = rows[1]
    assert "wait_share" not in tpot and tpot["steps_share"] == pytest.approx(0.003 / 0.021)
    assert tpot["misses_most"] == "steps" and rows[2]["error"] == pytest.approx(0.1 / 1.32)
    unpredicted = rows[3]  # no prediction for slo_aware: the live split only
    assert unpredicted["live_s"] == pytest.approx(0.2) and math.isnan(unpredicted["error"])
    assert math.isnan(unpredicted["wait_share"]) and unpredicted["misses_most"] == ""


def test_a_block_without_a_latency_leaves_it_to_the_others() -> None:
    one_token = _live((0.1, 0.1, 0.1), (0.1, 0.1, 0.1), (0.0, 0.0))
    one_token["tpot"] = dict.fromkeys(one_token["tpot"], math.nan)  # every output of one token: no TPOT
    rows = split_rows("c", {"fcfs": [one_token, _live((0.1, 0.1, 0.1), (0.1, 0.1, 0.1), (0.01, 0.02))]}, {})
    tpot = next(r for r in rows if r["latency"] == "tpot")
    assert tpot["blocks"] == 1 and tpot["live_s"] == pytest.approx(0.03) and tpot["steps_live_s"] == 0.02
    assert next(r for r in rows if r["latency"] == "ttft")["blocks"] == 2


def test_the_table_and_the_worst_line() -> None:
    rows = _rows()
    assert worst(rows) == "TTFT's -48% error (cell c, arm fcfs): engine wait -40%, engine steps -6%, front end -2%"
    assert worst(rows[3:]).startswith("no latency split") and worst([]).startswith("no latency split")
    block = _live((0.1, 0.1, 0.2), (0.1, 0.1, 0.2), (0.0, 0.01))
    totals_only = split_rows("c", {"a": [block]}, {"a": {"e2e_mean_s": 0.6}})
    assert worst(totals_only) == "E2E's +50% error (cell c, arm a)"  # no part predicted: none named
    lines = split_table(rows).splitlines()
    assert lines[0] == ("| cell | arm | latency | blocks | live ms | predicted ms | error | front end | engine wait | "
                        "engine steps | misses most |")  # fmt: skip
    assert lines[2] == ("| c | fcfs | TTFT | 2 | 400 | 208 | -48% | 20.0 → 12.0 (-2%) | 300 → 140 (-40%) | "
                        "80.0 → 56.0 (-6%) | engine wait |")  # fmt: skip
    assert lines[3].startswith("| c | fcfs | TPOT | 2 | 21.0 | 24.0 | +14% | 1.00 → 1.00 (+0%) |  | 20.0 → 23.0 (+14%)")
    assert lines[5] == ("| c | slo_aware | TTFT | 1 | 200 | n/a | n/a | 10.0 → n/a (n/a) | 100 → n/a (n/a) | "
                        "90.0 → n/a (n/a) |  |")  # fmt: skip
    assert markdown_table(("a|b",), [["x"]]) == "| a\\|b |\n|---|\n| x |"


def test_malformed_components_are_named() -> None:
    good = _live((0.1, 0.1, 0.1), (0.1, 0.1, 0.1), (0.0, 0.0))
    for bad, match in [
        ([], r"blocks.jsonl:3: field 'components' must be an object or null"),
        ({k: v for k, v in good.items() if k != "e2e"}, r"blocks.jsonl:3: components: missing field 'e2e'"),
        ({**good, "ttft": {"total_s": 1.0}}, r"blocks.jsonl:3: components.ttft: missing field 'frontend_s'"),
        ({**good, "tpot": {**good["tpot"], "steps_s": "x"}},
         r"blocks.jsonl:3: components.tpot: field 'steps_s' must be a number or null, got 'x'"),
    ]:  # fmt: skip
        with pytest.raises(ValueError, match=match):
            read_components("blocks.jsonl:3", bad)
    read = read_components("b", {**good, "tpot": {**good["tpot"], "total_s": None}})
    assert read is not None and math.isnan(read["tpot"]["total_s"])
    assert predicted_components("p.json: cells.c.arms.fcfs", {"ttft_p50_s": 1.0}) == {}
    got = predicted_components("p", {"ttft_mean_s": 1, "ttft_wait_mean_s": None, "shed": 0.0})
    assert got["ttft_mean_s"] == 1.0 and math.isnan(got["ttft_wait_mean_s"]) and set(got) == {
        "ttft_mean_s", "ttft_wait_mean_s"}  # fmt: skip
    with pytest.raises(ValueError, match=r"p.json: cells.c.arms.fcfs: field 'e2e_mean_s' must be a number or null"):
        predicted_components("p.json: cells.c.arms.fcfs", {"e2e_mean_s": True})
