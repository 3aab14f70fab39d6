"""``SimSetup``: one simulation's parameters in one typed object, taken by every driver; ``simulator()`` builds it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from llmsched_env.costs.base import CostModel
from llmsched_env.engine.config import EngineConfig, TenantConfig
from llmsched_env.engine.remote_kv import RemoteKVConfig
from llmsched_env.engine.request import Request
from llmsched_env.sim.simulator import Simulator

__all__ = ["SimSetup"]


@dataclass(frozen=True, eq=False)
class SimSetup:
    """One simulation: ``requests`` sorted by arrival; ``iterations_per_step`` None: the policy's own;
    ``nominal_rate_rps`` None: the requests' mean rate; ``clock`` None: the ``cost_model``."""

    config: EngineConfig
    tenants: tuple[TenantConfig, ...]
    cost_model: CostModel
    requests: tuple[Request, ...] = ()
    policy: Any = "fcfs"
    iterations_per_step: int | None = None
    nominal_rate_rps: float | None = None
    seed: int = 0
    scenario: str = ""
    clock: CostModel | None = None
    remote_kv: RemoteKVConfig | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "tenants", tuple(self.tenants))
        object.__setattr__(self, "requests", tuple(self.requests))

    def with_requests(self, requests: Sequence[Request]) -> SimSetup:
        """The same setup serving ``requests``."""
        return replace(self, requests=tuple(requests))

    def rate_rps(self) -> float:
        """``nominal_rate_rps``, else the requests' mean arrival rate (1.0 when they span no time)."""
        if self.nominal_rate_rps:
            return self.nominal_rate_rps
        arrivals = [r.arrival_s for r in self.requests]
        span = max(arrivals) - min(arrivals)
        return len(arrivals) / span if span > 0 else 1.0

    def simulator(self, rng: np.random.Generator | None = None) -> Simulator:
        """The simulator of the requests; ``rng``: the remote KV store's generator."""
        return Simulator(self.config, self.tenants, self.cost_model, self.requests, self.remote_kv, rng, self.clock)
