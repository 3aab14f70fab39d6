"""A "live" run made by llmsched's own simulator, written in the live benchmark's formats (steps.jsonl,
requests.jsonl, requests.json, the result JSON of ``vllm bench serve``), for ``test_live_replay.py``.

Every engine iteration is logged as the vLLM adapter logs one (its batch features, ``t0 = t1`` at its start,
``t2 = t3`` at its end, ``busy`` when the next iteration starts straight away), every request as the server
logs it when it finishes, on a ``time.time()``-like clock (``EPOCH_S`` plus the simulated time). The client's
view is the engine's plus a constant front-end delay. The server log also holds what a real one would besides
this run: an unlabelled ready-check request, another run's request and a step before the run.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from llmsched_env.costs.base import CostModel
from llmsched_env.costs.linear import LinearCostModel
from llmsched_env.decision.actions import ActionSpec
from llmsched_env.decision.observation import make_encoder
from llmsched_env.decision.policy import PolicyContext
from llmsched_env.decision.registry import make_scheduler
from llmsched_env.decision.schema import SCHEMA_VERSION
from llmsched_env.decision.serve import serve
from llmsched_env.engine.batch import Batch, Decision
from llmsched_env.engine.config import SLO_CLASSES, EngineConfig, TenantConfig
from llmsched_env.engine.request import Request
from llmsched_env.sim.metrics import token_times
from llmsched_env.sim.simulator import Simulator

EPOCH_S = 1.7e9  # the live clock is time.time(): the simulated times are written on top of it
TRUE_MODEL = LinearCostModel((2e-3, 4e-5, 3e-4, 2e-8, 1e-9), name="true")
TENANTS = (TenantConfig("chat", SLO_CLASSES["chat"]), TenantConfig("batch", SLO_CLASSES["batch"]))
# a KV pool small enough that the workload preempts
ENGINE = EngineConfig(num_kv_blocks=96, block_size=16, max_num_seqs=16, max_num_batched_tokens=512, max_model_len=1024)


class LoggingSimulator(Simulator):
    """A simulator that keeps every iteration as a ``steps.jsonl`` record, on its own clock; its iterations are
    priced by ``clock`` while the engine and the policy see ``cost_model``."""

    def __init__(self, clock: CostModel, *args: Any) -> None:
        super().__init__(*args, clock=clock)
        self.records: list[dict[str, Any]] = []

    def step(self, decision: Decision) -> Batch:
        t0 = self.now_s
        batch = super().step(decision)
        dt = 0.0 if batch.is_empty else batch.time_s(self.clock)
        busy = not self.done and self.now_s == t0 + dt  # the next iteration starts when this one ends
        self.records.append({"t0": t0, "t1": t0, "t2": t0 + dt, "t3": t0 + dt,
                             "prefill_tokens": batch.num_prefill_tokens,
                             "decode_seqs": batch.num_decode_seqs, "kv_tokens": batch.num_kv_tokens,
                             "attn_pairs": batch.prefill_attn_pairs, "num_prefill_seqs": len(batch.prefill_reqs),
                             "busy": busy})  # fmt: skip
        return batch


def workload(num_requests: int, rate_rps: float, seed: int) -> list[Request]:
    """Poisson arrivals, prompts of 8-400 tokens, outputs of 1-48 tokens (some of one), two tenants."""
    rng = np.random.default_rng(seed)
    arrivals = np.cumsum(rng.exponential(1.0 / rate_rps, num_requests))
    prompts = rng.integers(8, 400, num_requests)
    outputs = np.where(rng.random(num_requests) < 0.1, 1, rng.integers(2, 48, num_requests))
    tenants = rng.integers(0, len(TENANTS), num_requests)
    return [
        Request(i, float(arrivals[i]), int(prompts[i]), int(outputs[i]), int(tenants[i])) for i in range(num_requests)
    ]


def simulate(policy: str, requests: list[Request], seen: CostModel = TRUE_MODEL) -> LoggingSimulator:
    """Serve ``requests`` under the baseline ``policy``, which sees the cost model ``seen``, in a logging
    simulator timed by ``TRUE_MODEL``, as the env's loop does."""
    sim = LoggingSimulator(TRUE_MODEL, ENGINE, TENANTS, seen, requests)
    spec = ActionSpec.for_engine(ENGINE)
    encoder = make_encoder(SCHEMA_VERSION, ENGINE, TENANTS, 1.0)
    ctx = PolicyContext(ENGINE, TENANTS, seen, spec, encoder.names)
    serve(sim, make_scheduler(policy, ctx), encoder, spec, make_scheduler("fcfs", ctx))
    return sim


def _append_jsonl(path: Path, records: list[dict[str, Any]]) -> None:
    with path.open("a") as f:
        f.write("".join(json.dumps(r) + "\n" for r in records))


def write_run(
    folder: Path,
    policy: str = "fcfs",
    num_requests: int = 60,
    rate_rps: float = 40.0,
    seed: int = 0,
    frontend_s: float = 0.004,
    log_dir: Path | None = None,
    epoch_s: float = EPOCH_S,
    prefix: str = "req-",
    seen: CostModel = TRUE_MODEL,
) -> dict[str, Any]:
    """Simulate a run and write the client's files into ``folder`` and the server's logs into ``log_dir``
    (default: ``folder``; appended to, so several runs may share it) at ``epoch_s`` on the clock, labels
    ``prefix`` + index, the policy seeing the cost model ``seen``. Returns the simulator's metrics and the
    per-request engine-side TTFT and E2E (send order)."""
    folder.mkdir(parents=True, exist_ok=True)
    logs = log_dir or folder
    logs.mkdir(parents=True, exist_ok=True)
    requests = workload(num_requests, rate_rps, seed)
    sim = simulate(policy, requests, seen)
    rounds = np.asarray(sim.engine.round_end_s)
    late = {"id": "cmpl-other", "label": "other-run-0", "tenant": "chat", "arrival": epoch_s - 50.0,
            "first_scheduled": None, "first_token": None, "finish": epoch_s - 49.0, "prompt_tokens": 5,
            "output_tokens": 0, "status": "aborted", "preemptions": 0, "cached_tokens": 0}  # fmt: skip
    server = [late, {**late, "id": "cmpl-ready", "label": None, "status": "length_capped", "output_tokens": 1}]
    plan, ttft, e2e = [], [], []
    for i, r in enumerate(requests):  # the client plans some send times and draws the others (null)
        t = token_times(r, rounds)
        ttft.append(float(t[0] - r.arrival_s))
        e2e.append(float(t[-1] - r.arrival_s))
        label = f"{prefix}{r.request_id}"
        plan.append({"label": label, "tenant": TENANTS[r.tenant].name, "prompt_tokens": r.prompt_len,
                     "output_tokens": r.output_len, "send_s": None if i % 2 else r.arrival_s})  # fmt: skip
        server.append({"id": f"cmpl-{label}-0", "label": label, "tenant": TENANTS[r.tenant].name,
                       "arrival": epoch_s + r.arrival_s, "first_scheduled": epoch_s + r.first_scheduled_s,
                       "first_token": epoch_s + t[0], "finish": epoch_s + t[-1], "prompt_tokens": r.prompt_len,
                       "output_tokens": len(t), "status": "length_capped", "preemptions": r.num_preemptions,
                       "cached_tokens": 0})  # fmt: skip
    server.sort(key=lambda rec: rec["finish"])  # the server logs a request when it finishes
    duration = max(e2e[i] + requests[i].arrival_s for i in range(num_requests)) + frontend_s
    result = {"duration": duration, "completed": num_requests, "request_throughput": num_requests / duration,
              "input_lens": [r.prompt_len for r in requests], "output_lens": [r.output_len for r in requests],
              "ttfts": [x + frontend_s for x in ttft], "latencies": [x + frontend_s for x in e2e],
              "itls": [[] for _ in requests], "start_times": [r.arrival_s for r in requests],
              "errors": ["" for _ in requests]}  # fmt: skip
    before = {**sim.records[0], "t0": epoch_s - 60.0, "t1": epoch_s - 60.0, "t2": epoch_s - 59.9,
              "t3": epoch_s - 59.9, "busy": False}  # fmt: skip
    steps = [{**r, **{k: epoch_s + r[k] for k in ("t0", "t1", "t2", "t3")}} for r in sim.records]
    _append_jsonl(logs / "steps.jsonl", [before, *steps])
    _append_jsonl(logs / "requests.jsonl", server)
    (folder / "requests.json").write_text(json.dumps(plan, indent=1))
    (folder / "bench-result.json").write_text(json.dumps(result))
    return {"metrics": sim.metrics(), "ttft_s": np.array(ttft), "e2e_s": np.array(e2e),
            "preemptions": sum(r.num_preemptions for r in requests)}  # fmt: skip
