"""Routing heuristics for ``LLMSchedCluster-v0``: each picks an unmasked replica from the cluster observation
(built from a ``RouterContext``), wherever a learned router runs: round_robin, least_outstanding, least_kv_load
(Llumnix), prefix_affinity (SGLang router), power_of_two and random.

    >>> router = baselines.make_router("prefix_affinity", env.unwrapped.policy_context(), seed=0)
"""

from __future__ import annotations

import numpy as np

from baselines.base import check_context, check_observation, check_seed
from llmsched_env.decision.registry import ROUTERS, make_router
from llmsched_env.decision.router import RouterContext

__all__ = ["ROUTERS", "LeastKVLoadRouter", "LeastOutstandingRouter", "PowerOfTwoRouter", "PrefixAffinityRouter",
           "RandomRouter", "RoundRobinRouter", "Router", "available_routers", "make_router"]


class Router:
    """Shared plumbing: feature indices, the seeded generator, the mask check and the outstanding-load vector."""

    name = "router"

    def __init__(self, ctx: RouterContext, seed: int | None = None) -> None:
        check_context(type(self).__name__, ctx, RouterContext)
        check_seed(type(self).__name__, seed)
        self.ctx = ctx
        self.n = ctx.num_replicas
        self._obs_size = len(ctx.obs_names)
        self.seed = seed
        self.rng = np.random.default_rng(seed)  # what the random rules draw from
        self._waiting = ctx.feature_index("num_waiting")
        self._running = ctx.feature_index("num_running")
        self._turn = 0  # rotates the tie-break so equal replicas share the load

    def _valid(self, action_mask: np.ndarray) -> np.ndarray:
        m = np.asarray(action_mask, dtype=bool)
        if m.shape != (self.n,) or not m.any():
            raise ValueError(f"action_mask must be {self.n} booleans with at least one True, got {action_mask!r}")
        return m

    def _features(self, observation: np.ndarray) -> np.ndarray:
        """``observation`` after one shape check (``ValueError`` naming the argument)."""
        if getattr(observation, "shape", None) != (self._obs_size,):
            check_observation(type(self).__name__, observation, self._obs_size)
        return observation

    def outstanding(self, observation: np.ndarray) -> np.ndarray:
        """Waiting + running requests per replica (in count-scale units)."""
        observation = self._features(observation)
        return observation[self._waiting] + observation[self._running]

    def _argmin(self, score: np.ndarray, mask: np.ndarray) -> int:
        """The valid replica with the lowest score; ties go to the first at or after the rotating turn."""
        order = (np.arange(self.n) + self._turn) % self.n
        self._turn += 1
        s = np.where(mask, score, np.inf)[order]
        return int(order[int(np.argmin(s))])

    def act(self, observation: np.ndarray, action_mask: np.ndarray) -> int:
        raise NotImplementedError


class RoundRobinRouter(Router):
    """``round_robin``: replicas in turn, skipping masked ones."""

    name = "round_robin"

    def act(self, observation: np.ndarray, action_mask: np.ndarray) -> int:
        m = self._valid(action_mask)
        for k in range(self.n):
            i = (self._turn + k) % self.n
            if m[i]:
                self._turn = i + 1
                return i
        raise AssertionError("unreachable: the mask has a valid replica")


class LeastOutstandingRouter(Router):
    """``least_outstanding``: fewest waiting + running requests."""

    name = "least_outstanding"

    def act(self, observation: np.ndarray, action_mask: np.ndarray) -> int:
        return self._argmin(self.outstanding(observation), self._valid(action_mask))


class LeastKVLoadRouter(Router):
    """``least_kv_load``: most free KV blocks per request (Llumnix's freeness, queued demand subtracted)."""

    name = "least_kv_load"

    def __init__(self, ctx: RouterContext, seed: int | None = None) -> None:
        super().__init__(ctx, seed)
        self._free = ctx.feature_index("kv_free_per_request")

    def act(self, observation: np.ndarray, action_mask: np.ndarray) -> int:
        return self._argmin(-self._features(observation)[self._free], self._valid(action_mask))


class PrefixAffinityRouter(Router):
    """``prefix_affinity``: the replica caching the longest prefix of the request unless its load exceeds ``load_cap``
    x the mean (and the mean by ``min_slack``); otherwise, or with no prefix cached, least outstanding."""

    name = "prefix_affinity"
    load_cap = 1.5
    min_slack = 4  # requests: at low load a replica a few requests above the mean keeps its affinity

    def __init__(self, ctx: RouterContext, seed: int | None = None) -> None:
        super().__init__(ctx, seed)
        self._hit = ctx.feature_index("prefix_hit")

    def act(self, observation: np.ndarray, action_mask: np.ndarray) -> int:
        m = self._valid(action_mask)
        load = self.outstanding(observation)  # checks the observation's shape
        hit = np.where(m, observation[self._hit], -1.0)
        best = float(hit.max())
        if best > 0.0:
            ties = np.flatnonzero(hit == best)
            i = int(ties[np.argmin(load[ties])])
            mean = float(load[m].mean())
            if load[i] <= max(self.load_cap * mean, mean + self.min_slack / self.ctx.count_scale):
                return i
        return self._argmin(load, m)


class PowerOfTwoRouter(Router):
    """``power_of_two``: two distinct valid replicas drawn at random (seeded), the less loaded one."""

    name = "power_of_two"

    def act(self, observation: np.ndarray, action_mask: np.ndarray) -> int:
        valid = np.flatnonzero(self._valid(action_mask))
        if valid.size == 1:
            return int(valid[0])
        a, b = self.rng.choice(valid, size=2, replace=False)
        load = self.outstanding(observation)
        return int(b) if load[b] < load[a] else int(a)


class RandomRouter(Router):
    """``random``: a uniformly random valid replica (seeded)."""

    name = "random"

    def act(self, observation: np.ndarray, action_mask: np.ndarray) -> int:
        return int(self.rng.choice(np.flatnonzero(self._valid(action_mask))))


for _cls in (
    RoundRobinRouter, LeastOutstandingRouter, LeastKVLoadRouter, PrefixAffinityRouter, PowerOfTwoRouter, RandomRouter,
):
    ROUTERS.register(_cls.name, _cls)


def available_routers() -> list[str]:
    """Names ``make_router`` accepts: the table above, in its order, then any router registered elsewhere."""
    return ROUTERS.names()
