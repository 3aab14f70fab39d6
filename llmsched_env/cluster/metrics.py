"""Metrics of a cluster run: ``compute_metrics`` over every routed request on the replicas' concatenated round
clocks (each request's segments shifted by its home replica's offset), then ``replica/{i}/...``,
``imbalance/...`` over the router's replicas (and the decode pool) and, disaggregated, ``kv_transfer*``.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

import numpy as np

from llmsched_env.cluster.simulator import Cluster
from llmsched_env.engine.request import Request, Status
from llmsched_env.sim.kv_usage import KVUsage
from llmsched_env.sim.metrics import compute_metrics

_PER_REPLICA = (
    "num_requests",
    "num_finished",
    "slo_attainment",
    "goodput_rps",
    "request_throughput_rps",
    "output_throughput_tps",
    "ttft_p99_s",
    "tpot_p99_s",
)


def imbalance(values: Sequence[float]) -> tuple[float, float]:
    """``(max / mean, standard deviation / mean)`` of ``values``; ``(1.0, 0.0)`` when the mean is 0."""
    x = np.asarray(values, dtype=np.float64)
    mean = float(x.mean()) if x.size else 0.0
    if mean <= 0.0:
        return 1.0, 0.0
    return float(x.max()) / mean, float(x.std()) / mean


def _shifted(r: Request, offset: int) -> Request:
    """``r`` as ``compute_metrics`` must see it against the concatenated round clock (a copy if it differs)."""
    if r.decoding:  # counters are synced; freeze them so the global round count is never used for it
        c = copy.copy(r)
        c.decoding = False
        return c
    if offset and r.status == Status.FINISHED:
        c = copy.copy(r)
        c.token_segments = [(s + offset, e + offset) for s, e in r.token_segments]
        return c
    return r


def cluster_metrics(cluster: Cluster) -> dict[str, float]:
    """The metrics listed in the module docstring, over every request routed so far."""
    reps = cluster.replicas
    for rep in reps:
        rep.engine.sync_all()
    offsets = np.cumsum([0] + [len(rep.engine.round_end_s) for rep in reps])
    rounds = np.concatenate([np.asarray(rep.engine.round_end_s, dtype=np.float64) for rep in reps])
    arrived = cluster.arrived_requests()
    served: list[list[Request]] = [[] for _ in reps]
    views: list[Request] = []
    for r in arrived:
        placed = cluster.placed[r.request_id]
        home = cluster.home.get(r.request_id, placed)
        v = _shifted(r, int(offsets[home]))
        views.append(v)
        served[placed].append(v)
        if home != placed:
            served[home].append(v)
    duration = max(cluster.now_s - cluster.start_s, 1e-9)
    extra: dict[str, float] = {
        **KVUsage.merged(rep.kv_usage for rep in reps).metrics(),
        "num_iterations": float(sum(rep.num_iterations for rep in reps)),
        "num_replicas": float(len(reps)),
        "duration_s": duration,
    }
    if cluster.links:
        n = sum(link.num_transfers for link in cluster.links)
        extra["kv_transfers"] = float(n)
        extra["kv_transfer_bytes"] = float(sum(link.num_bytes for link in cluster.links))
        extra["kv_transfer_mean_s"] = sum(link.total_s for link in cluster.links) / n if n else 0.0
        extra["kv_transfer_queue_mean_s"] = sum(link.total_queue_s for link in cluster.links) / n if n else 0.0
    out = compute_metrics(views, cluster.tenants, rounds, duration, extra)
    tokens = []
    for i, rep in enumerate(reps):
        m = compute_metrics(served[i], cluster.tenants, rounds, duration)
        key = f"replica/{i}"
        for k in _PER_REPLICA:
            out[f"{key}/{k}"] = m[k]
        eng = rep.engine
        tokens.append(float(eng.num_prompt_tokens_admitted + eng.num_output_tokens))
        out.update(rep.kv_usage.metrics(f"{key}/"))
        out[f"{key}/num_iterations"] = float(rep.num_iterations)
        out[f"{key}/preemptions"] = float(eng.num_preemptions)
        out[f"{key}/tokens"] = tokens[-1]
    pools = [("", cluster.routable)] + ([("decode_", cluster.decode_pool)] if cluster.decode_pool else [])
    for prefix, pool in pools:
        num = [len(served[i]) for i in pool]
        out[f"imbalance/{prefix}requests_max_mean"], out[f"imbalance/{prefix}requests_cv"] = imbalance(num)
        out[f"imbalance/{prefix}tokens_max_mean"], out[f"imbalance/{prefix}tokens_cv"] = imbalance(
            [tokens[i] for i in pool]
        )
    return out
