"""Each replica's own scheduler inside a cluster: ``LocalScheduler`` drives every replica's iterations with a
single-node ``Policy`` through that replica's ``ObservationEncoder`` and ``ActionSpec``. No gymnasium, no
torch."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from llmsched_env.cluster.simulator import Cluster
from llmsched_env.decision.actions import ActionSpec
from llmsched_env.decision.observation import ObservationEncoder
from llmsched_env.decision.policy import Policy
from llmsched_env.engine.batch import Decision
from llmsched_env.engine.engine import Engine

__all__ = ["LocalScheduler"]


class LocalScheduler:
    """``local_decide`` for ``Cluster``: replica i's single-node ``policies[i]`` acts on replica i's
    observation (``encoders[i]``) and mask (``specs[i]``); an action the mask forbids is projected onto it.
    A policy with ``needs_obs[i]`` False (a static rule) skips the encoding and is cached per mask."""

    def __init__(
        self,
        policies: Sequence[Policy],
        specs: Sequence[ActionSpec],
        encoders: Sequence[ObservationEncoder],
        needs_obs: Sequence[bool],
    ) -> None:
        if not (len(policies) == len(specs) == len(encoders) == len(needs_obs)):
            raise ValueError("LocalScheduler needs one policy, action spec, encoder and needs_obs per replica")
        self.policies = list(policies)
        self.specs = list(specs)
        self.encoders = list(encoders)
        self.needs_obs = list(needs_obs)
        self._zeros = [np.zeros(e.size, dtype=np.float32) for e in encoders]
        self._static: list[dict[int, Decision]] = [{} for _ in policies]
        self.cluster: Cluster | None = None  # bound after the cluster is built: last iteration times

    def __call__(self, i: int, engine: Engine) -> Decision:
        spec = self.specs[i]
        mask = spec.mask(engine)  # one cached read-only array per mask pattern
        if not self.needs_obs[i]:
            d = self._static[i].get(id(mask))
            if d is None:
                d = self._decide(i, self._zeros[i], mask)
                self._static[i][id(mask)] = d
            return d
        last = self.cluster.replicas[i].last_step_s if self.cluster is not None else 0.0
        return self._decide(i, self.encoders[i].encode(engine, last), mask)

    def _decide(self, i: int, obs: np.ndarray, mask: np.ndarray) -> Decision:
        spec = self.specs[i]
        action = np.asarray(self.policies[i].act(obs, mask), dtype=np.int64)
        if action.shape != (len(spec.nvec),) or np.any(action < 0) or np.any(action >= np.array(spec.nvec)):
            raise ValueError(f"replica {i}'s local policy returned {action!r}, outside MultiDiscrete{spec.nvec}")
        if not spec.allows(action, mask):
            action = spec.project(action, mask)
        return spec.decode(action)
