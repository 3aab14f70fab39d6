"""``RepricedSimulator``: a simulator whose iterations are priced by one cost model (``clock``) while its
engine, and so the policy deciding on it, sees another (``cost_model``). The in-situ replays use it: a live or
runtime run's decisions saw the preset the engine was given, while the time each iteration took comes from
what the hardware measured (the calibrated model)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from llmsched_env.costs.base import CostModel
from llmsched_env.engine.batch import Batch
from llmsched_env.engine.config import EngineConfig, TenantConfig
from llmsched_env.engine.remote_kv import RemoteKVConfig
from llmsched_env.engine.request import Request
from llmsched_env.sim.simulator import Simulator

__all__ = ["RepricedSimulator"]


class RepricedSimulator(Simulator):
    """A ``Simulator`` over ``cost_model`` whose iterations last what ``clock`` prices them at."""

    def __init__(
        self,
        clock: CostModel,
        config: EngineConfig,
        tenants: Sequence[TenantConfig],
        cost_model: CostModel,
        requests: Sequence[Request],
        remote_kv: RemoteKVConfig | None = None,
        rng: np.random.Generator | None = None,
    ) -> None:
        super().__init__(config, tenants, cost_model, requests, remote_kv, rng)
        self.clock = clock

    def execute(self, batch: Batch) -> float:
        return batch.time_s(self.clock)
