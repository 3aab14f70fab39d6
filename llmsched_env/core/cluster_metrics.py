"""Metrics and invariants of a cluster run.

Each engine counts decode rounds on its own clock (``round_end_s``), and all decode segments of a request lie
on one replica, its *home*: the replica it was routed to, or the decode replica its KV moved to. The metrics
therefore concatenate every replica's round clock and shift each finished request's segments by its home's
offset (on copies), then run the single-node ``compute_metrics`` once over every routed request and once per
replica, over the requests that replica served (routed to it, or decoded on it). Keys:

- the single-node set (``slo_attainment``, ``ttft_p99_s``, ...), with ``kv_usage_mean`` / ``kv_usage_peak``
  over all replicas' iterations, ``num_iterations`` summed, ``num_replicas``;
- ``replica/{i}/``: ``num_requests``, ``num_finished``, ``slo_attainment``, ``goodput_rps``,
  ``request_throughput_rps``, ``output_throughput_tps``, ``ttft_p99_s``, ``tpot_p99_s``, ``kv_usage_mean``,
  ``kv_usage_peak``, ``num_iterations``, ``preemptions``, ``tokens`` (prompt tokens admitted + output tokens);
- ``imbalance/requests_max_mean``, ``imbalance/requests_cv``, ``imbalance/tokens_max_mean``,
  ``imbalance/tokens_cv`` over the router's replicas (max over mean and coefficient of variation; 1 and 0 are
  perfect balance), and the same with ``imbalance/decode_`` over the decode pool when disaggregated;
- disaggregated: ``kv_transfers``, ``kv_transfer_bytes``, ``kv_transfer_mean_s`` (queueing + wire + latency)
  and ``kv_transfer_queue_mean_s`` (waiting for the link).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from llmsched_env.core.metrics import compute_metrics
from llmsched_env.core.request import Request, Status

if TYPE_CHECKING:
    from llmsched_env.core.cluster import Cluster

__all__ = ["check_cluster", "cluster_metrics", "imbalance"]

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
    kv_time = sum(rep.kv_usage_time_s for rep in reps)
    extra: dict[str, float] = {
        "kv_usage_mean": sum(rep.kv_usage_sum for rep in reps) / kv_time if kv_time else 0.0,
        "kv_usage_peak": max(rep.kv_usage_peak for rep in reps),
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
        out[f"{key}/kv_usage_mean"] = rep.kv_usage_sum / rep.kv_usage_time_s if rep.kv_usage_time_s else 0.0
        out[f"{key}/kv_usage_peak"] = rep.kv_usage_peak
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


def check_cluster(cluster: Cluster) -> None:
    """Raise AssertionError naming the first inconsistency: a replica's engine invariants; a routed request
    not in exactly one place (one replica's queue, running set, landed queue, finished or rejected list, or a
    KV transfer in flight); a replica with work but no pending event, or with two; a clock ahead of the
    cluster's. O(state): for tests."""
    seen: dict[int, str] = {}

    def place(r: Request, where: str) -> None:
        assert r.request_id not in seen, f"request {r.request_id} is in {seen[r.request_id]} and {where}"
        seen[r.request_id] = where

    now = cluster.now_s
    events = [0] * len(cluster.replicas)
    for t, kind, i in cluster.pending_events():
        assert t >= now, f"an event at {t} lies before the cluster clock {now}"
        if kind == 0:
            events[i] += 1
    for rep in cluster.replicas:
        eng = rep.engine
        eng.check_invariants()
        i = rep.index
        assert eng.now_s <= now + 1e-12, f"replica {i}'s clock {eng.now_s} is ahead of the cluster's {now}"
        assert events[i] == int(rep.busy), f"replica {i}: busy={rep.busy} but {events[i]} pending events"
        assert rep.busy or not eng.has_work, f"replica {i} has work but nothing will run it"
        assert rep.batch is None or rep.busy, f"replica {i} holds a batch while idle"
        for where, reqs in (
            ("waiting", eng.waiting_requests()),
            ("running", eng.running.values()),
            ("landed", eng.landed),
            ("finished", eng.finished),
            ("rejected", eng.rejected),
        ):
            for r in reqs:
                place(r, f"replica {i} {where}")
    for r in cluster.in_flight.values():
        place(r, "a KV transfer")
        assert r.status == Status.TRANSFERRING, f"in-flight {r} has status {r.status.name}"
    assert sum(rep.num_incoming for rep in cluster.replicas) == len(cluster.in_flight), "incoming counts drifted"
    assert len(seen) == cluster.num_routed, f"{len(seen)} requests placed but {cluster.num_routed} routed"
    assert all(r.arrival_s <= now for r in cluster.arrived_requests()), "a routed request arrives in the future"
