"""Serving metrics of one run as vLLM's benchmark defines them (``compute_metrics``: requests -> a flat dict;
docs/baselines-and-metrics.md), vectorised over (prefill token, decode segment) records.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from llmsched_env.common.tenants import OTHER_TENANTS
from llmsched_env.engine.config import TenantConfig
from llmsched_env.engine.request import Request, Status, tpot_s

__all__ = ["TOP_TENANTS", "busiest_tenants", "compute_metrics", "jain_index", "token_times"]

_PERCENTILES = (50.0, 90.0, 99.0)
# Per-tenant figures are given for at most this many tenants, the busiest (``busiest_tenants``); the rest are
# pooled into one group ``tenant/other/...`` (``OTHER_TENANTS``), so results.csv, the plots and TensorBoard stay
# readable with many tenants. Jain's index is over every tenant all the same.
TOP_TENANTS = 16
_LATENCIES = ("ttft", "tpot", "itl", "e2el", "queue_delay")


def _segments(r: Request, num_rounds: int) -> list[tuple[int, int]]:
    """``r``'s closed decode segments, plus the open one (up to ``num_rounds``) while it is decoding."""
    segs = list(r.token_segments)
    if r.decoding and len(segs) == len(r.prefill_token_s) - 1:
        segs.append((r.decode_round0, num_rounds))
    return segs


def token_times(r: Request, round_end_s: Sequence[float] | np.ndarray) -> np.ndarray:
    """Times of ``r``'s output tokens so far, in order (a finished request has ``output_len`` of them)."""
    rounds = np.asarray(round_end_s, dtype=np.float64)
    segs = _segments(r, len(rounds))
    pieces: list[np.ndarray] = []
    for k, p in enumerate(r.prefill_token_s):
        pieces.append(np.array([p], dtype=np.float64))
        if k < len(segs):
            s, e = segs[k]
            pieces.append(rounds[s:e])
    return np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.float64)


def _num_produced(r: Request, num_rounds: int) -> int:
    """Output tokens ``r`` has produced, current even for a lazily decoding request (as ``Engine._sync``)."""
    if r.decoding:
        return r.decode_out0 + num_rounds - r.decode_round0
    return r.num_output_tokens


def busiest_tenants(names: Sequence[str], num_requests: Sequence[float] | np.ndarray) -> list[int]:
    """The indices of the tenants reported one by one: all, or the ``TOP_TENANTS`` busiest (ties by name, then
    index)."""
    if len(names) <= TOP_TENANTS:
        return list(range(len(names)))
    ranked = sorted(range(len(names)), key=lambda k: (-float(num_requests[k]), names[k], k))
    return sorted(ranked[:TOP_TENANTS])


def jain_index(values: Sequence[float] | np.ndarray) -> float:
    """Jain's fairness index (sum x)^2 / (n * sum x^2); 1.0 for fewer than two values or all zeros."""
    x = np.asarray(values, dtype=np.float64)
    sq = float(np.dot(x, x))
    if x.size <= 1 or sq == 0.0:
        return 1.0
    return float(x.sum() ** 2 / (x.size * sq))


def _stats(out: dict[str, float], name: str, x: np.ndarray, counts: np.ndarray | None = None) -> None:
    """``{name}_{mean,p50,p90,p99}_s`` of ``x`` (0.0 when empty); with ``counts``, each ``x[i]`` counted that often."""
    if counts is not None:
        _weighted_stats(out, name, x, counts)
        return
    if x.size == 0:
        out[f"{name}_mean_s"] = 0.0
        for q in _PERCENTILES:
            out[f"{name}_p{q:.0f}_s"] = 0.0
        return
    out[f"{name}_mean_s"] = float(x.mean())
    for q, v in zip(_PERCENTILES, np.percentile(x, _PERCENTILES), strict=True):
        out[f"{name}_p{q:.0f}_s"] = float(v)


def _weighted_stats(out: dict[str, float], name: str, values: np.ndarray, counts: np.ndarray) -> None:
    """``_stats`` of the sample holding ``values[i]`` ``counts[i]`` times, without building it: numpy's linear
    percentile read off the cumulative counts (ITL: each engine gap counted once per request decoding across it)."""
    keep = counts > 0
    values, counts = values[keep], counts[keep].astype(np.int64, copy=False)
    total = int(counts.sum())
    if total == 0:
        _stats(out, name, values[:0])
        return
    out[f"{name}_mean_s"] = float(np.dot(values, counts) / total)
    order = np.argsort(values, kind="stable")
    sorted_values = values[order]
    ends = np.cumsum(counts[order])  # ends[j]: how many sample elements are <= sorted_values[j] in order

    def element(k: np.ndarray) -> np.ndarray:  # the k-th element (0-based) of the sorted sample
        return sorted_values[np.searchsorted(ends, k, side="right")]

    virtual = (total - 1) * (np.asarray(_PERCENTILES) / 100.0)
    below = np.floor(virtual)
    a = element(below.astype(np.int64))
    b = element(np.minimum(below + 1, total - 1).astype(np.int64))
    t = virtual - below
    diff = b - a
    v = np.where(t >= 0.5, b - diff * (1 - t), a + diff * t)  # numpy's _lerp
    for q, x in zip(_PERCENTILES, v, strict=True):
        out[f"{name}_p{q:.0f}_s"] = float(x)


def _p99(x: np.ndarray) -> float:
    return float(np.percentile(x, 99.0)) if x.size else 0.0


def _finished_latencies(
    finished: list[Request], rounds: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, tuple[np.ndarray, np.ndarray]]:
    """Per finished request its first and last token times and token count, and the ITL gaps with their counts."""
    nf = len(finished)
    rid: list[int] = []
    pre: list[float] = []
    seg_s: list[int] = []
    seg_e: list[int] = []
    for i, r in enumerate(finished):
        p = r.prefill_token_s
        segs = r.token_segments
        if len(segs) != len(p) or not p:
            raise ValueError(
                f"finished request {r.request_id} has {len(p)} prefill tokens but {len(segs)} decode segments"
            )
        rid.extend([i] * len(p))
        pre.extend(p)
        for s, e in segs:
            seg_s.append(s)
            seg_e.append(e)
    rid_a = np.asarray(rid, dtype=np.int64)
    p_a = np.asarray(pre, dtype=np.float64)
    s_a = np.asarray(seg_s, dtype=np.int64)
    e_a = np.asarray(seg_e, dtype=np.int64)
    if nf == 0:
        empty = np.zeros(0, dtype=np.float64)
        return empty, empty, empty, (empty, np.zeros(0, dtype=np.int64))
    if e_a.size and (int(e_a.max()) > len(rounds) or np.any(s_a > e_a) or np.any(s_a < 0)):
        raise ValueError(f"a decode segment lies outside round_end_s (length {len(rounds)})")
    lens = e_a - s_a
    has = lens > 0
    # Time of the last token of each (prefill, segment) record.
    rec_last = np.where(has, rounds[np.maximum(e_a - 1, 0)] if rounds.size else 0.0, p_a)
    new_req = np.ones(rid_a.size, dtype=bool)
    new_req[1:] = rid_a[1:] != rid_a[:-1]
    last_rec = np.ones(rid_a.size, dtype=bool)
    last_rec[:-1] = new_req[1:]
    first_t = p_a[new_req]
    last_t = rec_last[last_rec]
    num_tokens = np.bincount(rid_a, weights=1 + lens, minlength=nf)
    # ITL gaps: prefill token -> first round of its segment; inside segments; segment end -> next prefill.
    gap_first = rounds[s_a[has]] - p_a[has] if rounds.size else np.zeros(0)
    gap_next = p_a[~new_req] - rec_last[np.flatnonzero(~new_req) - 1]
    # inside segments: round gap j (rounds[j + 1] - rounds[j]) once for every segment decoding across it
    # (start <= j <= end - 2), counted by a difference array, not listed gap by gap
    inner = lens > 1
    if inner.any() and rounds.size > 1:
        marks = np.bincount(s_a[inner], minlength=rounds.size) - np.bincount(e_a[inner] - 1, minlength=rounds.size)
        across = np.cumsum(marks)[:-1]
        round_gaps = np.diff(rounds)
    else:
        across = np.zeros(0, dtype=np.int64)
        round_gaps = np.zeros(0)
    gaps = np.concatenate([gap_first, gap_next])
    itl = (np.concatenate([gaps, round_gaps]), np.concatenate([np.ones(gaps.size, dtype=np.int64), across]))
    return first_t, last_t, num_tokens, itl


def compute_metrics(
    requests: Sequence[Request],
    tenants: Sequence[TenantConfig],
    round_end_s: Sequence[float] | np.ndarray,
    duration_s: float,
    extra: Mapping[str, float] | None = None,
) -> dict[str, float]:
    """Metrics (Python floats) over every arrived request; rates 0.0 when ``duration_s`` is 0; ``extra`` copied in
    last."""
    if not tenants:
        raise ValueError("compute_metrics needs at least one tenant")
    if not (isinstance(duration_s, (int, float)) and math.isfinite(duration_s) and duration_s >= 0):
        raise ValueError(f"duration_s must be a finite number >= 0, got {duration_s!r}")
    rounds = np.asarray(round_end_s, dtype=np.float64)
    num_rounds = len(rounds)
    nt = len(tenants)
    n = len(requests)

    # One pass over the requests gathers the per-request scalars.
    status = np.empty(n, dtype=np.int64)
    tenant = np.empty(n, dtype=np.int64)
    arrival = np.empty(n, dtype=np.float64)
    prompt = np.empty(n, dtype=np.float64)
    scheduled = np.empty(n, dtype=np.float64)  # first_scheduled_s, NaN if never scheduled
    produced = np.empty(n, dtype=np.float64)
    hits = remote_hits = admitted_tokens = 0
    preemptions = 0
    finished: list[Request] = []
    nan = math.nan
    for i, r in enumerate(requests):
        status[i] = r.status
        tenant[i] = r.tenant
        arrival[i] = r.arrival_s
        prompt[i] = r.prompt_len
        fs = r.first_scheduled_s
        scheduled[i] = nan if fs is None else fs
        produced[i] = _num_produced(r, num_rounds)
        hits += r.num_prefix_hit_tokens
        remote_hits += r.num_remote_tokens
        admitted_tokens += r.num_admitted_tokens
        preemptions += r.num_preemptions
        if r.status == Status.FINISHED:
            finished.append(r)
    if n and (tenant.min() < 0 or tenant.max() >= nt):
        raise ValueError(f"a request names a tenant outside 0..{nt - 1}; pass every TenantConfig of the run")

    is_fin = status == Status.FINISHED
    was_sched = ~np.isnan(scheduled)
    fin_tenant = tenant[is_fin]
    first_t, last_t, num_tokens, itl = _finished_latencies(finished, rounds)
    ttft = first_t - arrival[is_fin]
    tpot = tpot_s(first_t, last_t, num_tokens)  # 0 for a one-token request: its SLO check
    multi = num_tokens > 1  # the requests the TPOT statistics are over
    e2el = last_t - arrival[is_fin]
    queue_delay = scheduled[is_fin] - arrival[is_fin]

    out: dict[str, float] = {}
    for name, x in zip(_LATENCIES, (ttft, tpot[multi], itl[0], e2el, queue_delay), strict=True):
        _stats(out, name, x, itl[1] if name == "itl" else None)

    num_finished = int(is_fin.sum())
    num_rejected = int((status == Status.REJECTED).sum())
    out["num_requests"] = float(n)
    out["num_finished"] = float(num_finished)
    out["num_rejected"] = float(num_rejected)
    out["num_unfinished"] = float(n - num_finished - num_rejected)
    out["rejection_rate"] = num_rejected / n if n else 0.0

    rate = 1.0 / duration_s if duration_s > 0 else 0.0
    num_output = float(produced[is_fin].sum())
    out["request_throughput_rps"] = num_finished * rate
    out["output_throughput_tps"] = num_output * rate
    out["total_token_throughput_tps"] = (float(prompt[is_fin].sum()) + num_output) * rate

    ttft_slo = np.array([t.slo.ttft_s for t in tenants], dtype=np.float64)
    tpot_slo = np.array([t.slo.tpot_s for t in tenants], dtype=np.float64)
    ttft_ok = ttft / ttft_slo[fin_tenant] <= 1.0
    tpot_ok = tpot / tpot_slo[fin_tenant] <= 1.0
    met = ttft_ok & tpot_ok
    num_met = int(met.sum())
    out["slo_attainment"] = num_met / n if n else 0.0
    out["ttft_attainment"] = int(ttft_ok.sum()) / n if n else 0.0
    out["tpot_attainment"] = int(tpot_ok.sum()) / n if n else 0.0
    out["goodput_rps"] = num_met * rate

    weights = np.array([t.weight for t in tenants], dtype=np.float64)
    arrived_t = np.bincount(tenant, minlength=nt)
    raw_service = np.bincount(tenant, weights=np.where(was_sched, prompt, 0.0) + 2.0 * produced, minlength=nt)
    service = raw_service / weights
    out["jain_fairness"] = jain_index(service[arrived_t > 0])

    met_t = np.bincount(fin_tenant[met], minlength=nt)
    shown = busiest_tenants([t.name for t in tenants], arrived_t)
    groups: list[tuple[str, np.ndarray]] = [(tenants[k].name, np.array([k])) for k in shown]
    if len(shown) < nt:  # the rest pooled as one group, OTHER_TENANTS (a name no tenant may have)
        groups.append((OTHER_TENANTS, np.setdiff1d(np.arange(nt), shown)))
    for name, members in groups:
        key = f"tenant/{name}"
        mine = fin_tenant == members[0] if members.size == 1 else np.isin(fin_tenant, members)
        arrived, num_met = int(arrived_t[members].sum()), int(met_t[members].sum())
        out[f"{key}/num_requests"] = float(arrived)
        out[f"{key}/slo_attainment"] = float(num_met / arrived) if arrived else 0.0
        out[f"{key}/service"] = float(service[members].sum())
        out[f"{key}/ttft_p99_s"] = _p99(ttft[mine])
        out[f"{key}/tpot_p99_s"] = _p99(tpot[mine & multi])
        if len(groups) > len(shown) and name == OTHER_TENANTS:
            out[f"{key}/num_tenants"] = float(members.size)

    # over every admission (a preempted request is admitted again): prefill tokens found in the local prefix
    # cache / fetched from a remote KV store, over the prefill tokens the admissions needed
    out["prefix_cache_hit_rate"] = hits / admitted_tokens if admitted_tokens else 0.0
    out["remote_kv_hit_rate"] = remote_hits / admitted_tokens if admitted_tokens else 0.0
    out["preemptions"] = float(preemptions)
    if extra:
        for name, v in extra.items():
            out[name] = float(v)
    return {k: float(v) for k, v in out.items()}
