"""Per-request data of one finished episode, for the plots (latency CDFs, KV usage over time)."""

from __future__ import annotations

import numpy as np

from llmsched_env.engine.request import Status, tpot_s
from llmsched_env.sim.metrics import token_times
from llmsched_env.sim.simulator import Simulator

__all__ = ["episode_details"]


def episode_details(sim: Simulator, kv_series: bool = True) -> dict[str, np.ndarray]:
    """Per-request latencies of the episode ``sim`` just ran, for plots: ``ttft_s`` of every finished
    request, ``tpot_s`` of those of more than one token, and with ``kv_series`` the KV usage after every step."""
    rounds = np.asarray(sim.engine.round_end_s, dtype=np.float64)
    ttft, tpot = [], []
    for r in sim.arrived_requests():
        if r.status == Status.FINISHED:
            t = token_times(r, rounds)
            ttft.append(t[0] - r.arrival_s)
            if len(t) > 1:
                tpot.append(float(tpot_s(t[0], t[-1], len(t))))
    out = {"ttft_s": np.asarray(ttft, dtype=np.float64), "tpot_s": np.asarray(tpot, dtype=np.float64)}
    if kv_series:
        kv_t, kv_u = sim.kv_usage_series()
        out["kv_time_s"], out["kv_usage"] = kv_t - sim.start_s, kv_u
    return out
