"""The router's side of a cluster: ``ClusterObservationEncoder`` (replicas' state and the arriving request as
named features on one scale for heterogeneous replicas) and ``route_mask`` (replicas that could ever hold it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar, Protocol, runtime_checkable

import numpy as np

from llmsched_env.cluster.config import ReplicaSpec
from llmsched_env.cluster.simulator import Cluster
from llmsched_env.costs.base import unloaded_decode_time_s
from llmsched_env.decision.observation import OBS_CLIP
from llmsched_env.engine.block_pool import chain_hashes
from llmsched_env.engine.config import TenantConfig
from llmsched_env.engine.request import Request

# Per routable replica, as ``replica/{i}/{feature}``.
REPLICA_FEATURES = (
    "num_waiting",  # waiting (and landed) requests / count scale
    "num_running",  # running requests / count scale
    "kv_used",  # share of its own KV pool in use
    "kv_free_per_request",  # (free blocks - blocks its queue needs) / (running + 1) / KV scale (Llumnix)
    "waiting_tokens",  # prefill tokens waiting / token scale
    "ttft_ratio",  # recent TTFT over the SLO (moving average of finished requests)
    "tpot_ratio",  # recent TPOT over the SLO
    "prefix_hit",  # share of the arriving request's prompt cached in its pool
    "speed",  # fastest replica's unloaded decode step / its own (1.0: the fastest)
)


ROUTE_COMPONENTS = ("replica",)


@dataclass(frozen=True)
class RouteSpec:
    """The router's action space in the exported-policy vocabulary: one component, ``replica``, with one option
    per routable replica (``agents.export`` writes it, ``runtime.policy_file`` checks it)."""

    components: ClassVar[tuple[str, ...]] = ROUTE_COMPONENTS
    num_replicas: int

    @property
    def nvec(self) -> tuple[int, ...]:
        return (self.num_replicas,)


@dataclass(frozen=True)
class RouterContext:
    """What a routing heuristic may know besides its observations: the feature names, how many replicas it
    chooses among, and the scales that turn features back into counts."""

    num_replicas: int
    obs_names: tuple[str, ...]
    count_scale: float  # requests per unit of num_waiting / num_running
    tenants: tuple[TenantConfig, ...]

    def feature_index(self, feature: str) -> np.ndarray:
        """Indices of ``replica/{i}/{feature}`` for i = 0..num_replicas-1."""
        where = {n: k for k, n in enumerate(self.obs_names)}
        return np.array([where[f"replica/{i}/{feature}"] for i in range(self.num_replicas)], dtype=np.int64)


@runtime_checkable
class RoutingPolicy(Protocol):
    """Anything that maps a cluster observation and its mask to a replica index."""

    def act(self, observation: np.ndarray, action_mask: np.ndarray) -> int: ...


def route_mask(cluster: Cluster, request: Request) -> np.ndarray:
    """Routable replicas that could ever hold ``request`` (its whole length fits the model and the pool);
    all of them when none can (the engine then rejects it with a reason)."""
    mask = np.empty(len(cluster.routable), dtype=bool)
    for k, i in enumerate(cluster.routable):
        eng = cluster.replicas[i].engine
        mask[k] = (
            request.total_len <= eng.config.max_model_len
            and eng.pool.blocks_for(request.total_len) <= eng.config.num_kv_blocks
        )
    if not mask.any():
        mask[:] = True
    return mask


class ClusterObservationEncoder:
    """Cluster state + the arriving request -> float32 features in [-OBS_CLIP, OBS_CLIP] (see module doc)."""

    def __init__(
        self,
        specs: Sequence[ReplicaSpec],
        tenants: Sequence[TenantConfig],
        nominal_rate_rps: float,
        disaggregated: bool = False,
    ) -> None:
        """``specs``: the routable replicas (the prefill pool when ``disaggregated``), in action order."""
        if not specs or not tenants:
            raise ValueError("ClusterObservationEncoder needs at least one replica spec and one tenant")
        self.tenants = tuple(tenants)
        self.count_scale = float(max(s.engine.max_num_seqs for s in specs))
        self.kv_scale = float(max(s.engine.num_kv_blocks for s in specs))
        self.token_scale = float(max(s.engine.max_num_batched_tokens for s in specs))
        self.nominal_rate_rps = max(nominal_rate_rps, 1e-9)
        self._min_ttft = min(t.slo.ttft_s for t in self.tenants)
        steps = [unloaded_decode_time_s(s.cost_model) for s in specs]
        self.speed = [min(steps) / x for x in steps]
        self.disaggregated = disaggregated
        names = [f"replica/{k}/{f}" for k in range(len(specs)) for f in REPLICA_FEATURES]
        names += ["request/prompt_len"] + [f"request/tenant/{t.name}" for t in self.tenants]
        names += ["cluster/arrival_rate", "cluster/attainment"]
        if self.disaggregated:
            names += ["decode/kv_used", "decode/num_landed", "decode/link_backlog"]
        self.names: tuple[str, ...] = tuple(names)

    @property
    def size(self) -> int:
        return len(self.names)

    def context(self) -> RouterContext:
        return RouterContext(len(self.speed), self.names, self.count_scale, self.tenants)

    def encode(self, cluster: Cluster, request: Request | None) -> np.ndarray:
        """The observation for routing ``request`` (zeros for its features when None: the episode is over)."""
        cs, ks, ts = self.count_scale, self.kv_scale, self.token_scale
        hashes: list[int] = []
        if request is not None and request.prefix_ids:
            if request.prefix_hashes is None:  # the engines reuse it: same block size everywhere
                request.prefix_hashes = chain_hashes(
                    request.prefix_ids, request.prefix_id_tokens, cluster.block_size, request.prompt_len
                )
            hashes = request.prefix_hashes
        feats: list[float] = []
        good = missed = 0
        rate = 0.0
        for k, i in enumerate(cluster.routable):
            eng = cluster.replicas[i].engine
            pool = eng.pool
            n_wait = sum(eng.num_waiting) + len(eng.landed)
            n_run = len(eng.running)
            w_tokens = sum(eng.waiting_tokens)
            hit = 0.0
            if hashes and request is not None:
                hit = len(pool.lookup(hashes, (request.prompt_len - 1) // pool.block_size)) * pool.block_size
                hit /= request.prompt_len
            feats += [
                n_wait / cs,
                n_run / cs,
                pool.usage,
                (pool.num_free_blocks - w_tokens / pool.block_size) / (n_run + 1) / ks,
                w_tokens / ts,
                eng.ttft_ratio_ewma,
                eng.tpot_ratio_ewma,
                hit,
                self.speed[k],
            ]
            rate += eng.arrival_rate()
        for rep in cluster.replicas:
            good += rep.engine.num_good
            missed += rep.engine.num_missed
        feats.append(request.prompt_len / ts if request is not None else 0.0)
        feats += [float(request is not None and request.tenant == t) for t in range(len(self.tenants))]
        feats += [rate / self.nominal_rate_rps, good / (good + missed) if good + missed else 1.0]
        if self.disaggregated:
            dec = [cluster.replicas[j] for j in cluster.decode_pool]
            backlog = max(link.backlog_s(cluster.now_s) for link in cluster.links)
            feats += [
                sum(r.engine.pool.usage for r in dec) / len(dec),
                sum(len(r.engine.landed) + r.num_incoming for r in dec) / cs / len(dec),
                backlog / self._min_ttft,
            ]
        obs = np.array(feats, dtype=np.float32)
        np.clip(obs, -OBS_CLIP, OBS_CLIP, out=obs)
        return obs
