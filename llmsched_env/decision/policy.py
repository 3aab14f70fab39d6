"""What a scheduling policy is (``Policy``: observation and mask in, action out) and what a heuristic is built
from (``PolicyContext``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

from llmsched_env.costs.base import CostModel
from llmsched_env.decision.actions import ActionSpec
from llmsched_env.engine.config import EngineConfig, TenantConfig

__all__ = ["Policy", "PolicyContext", "reads_observation"]


@dataclass(frozen=True)
class PolicyContext:
    """What a heuristic may know about the engine it schedules, besides its observations."""

    engine: EngineConfig
    tenants: tuple[TenantConfig, ...]
    cost_model: CostModel
    action_spec: ActionSpec
    obs_names: tuple[str, ...]


@runtime_checkable
class Policy(Protocol):
    """Anything that maps an observation and its action mask to a MultiDiscrete action.

    A policy whose action depends on the mask alone may set a class attribute ``reads_observation = False``
    (see ``reads_observation``): callers then skip encoding the observation for it."""

    def act(self, observation: np.ndarray, action_mask: np.ndarray) -> np.ndarray: ...


def reads_observation(policy: object) -> bool:
    """False for a policy that declares ``reads_observation = False`` (it acts on the mask alone), else True."""
    return bool(getattr(policy, "reads_observation", True))
