"""What a scheduling policy is (``Policy``: observation and mask in, action out) and what a heuristic is built
from (``PolicyContext``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import numpy as np

from llmsched_env.costs.base import CostModel
from llmsched_env.decision.actions import ActionSpec
from llmsched_env.engine.config import EngineConfig, TenantConfig

if TYPE_CHECKING:
    from llmsched_env.sim.simulator import Simulator


@dataclass(frozen=True)
class PolicyContext:
    """What a heuristic may know besides its observations."""

    engine: EngineConfig
    tenants: tuple[TenantConfig, ...]
    cost_model: CostModel
    action_spec: ActionSpec
    obs_names: tuple[str, ...]
    scenario: str = ""  # the scenario's name ("" if none; ``tuned`` looks settings up by it)
    # a simulator in the engine's state now, for a planner (``mpc``) to fork (None: no planner runs here)
    planning_state: Callable[[], Simulator] | None = field(default=None, compare=False)
    background_planning: bool = False  # the driver must not wait for a plan (vLLM): plan on a worker thread


@runtime_checkable
class Policy(Protocol):
    """Maps an observation and its action mask to a MultiDiscrete action. Optional: ``reads_observation = False``
    (acts on the mask alone), ``bounded_act = True`` (``act`` cannot hang: no timer), ``start_episode()``."""

    def act(self, observation: np.ndarray, action_mask: np.ndarray) -> np.ndarray: ...


def reads_observation(policy: object) -> bool:
    """False for a policy that declares ``reads_observation = False`` (it acts on the mask alone), else True."""
    return bool(getattr(policy, "reads_observation", True))


def bounded_act(policy: object) -> bool:
    """True when the class that defines ``policy``'s ``act`` declares ``bounded_act`` true (an override of
    ``act`` does not inherit the claim)."""
    for klass in type(policy).__mro__:
        if "act" in vars(klass):
            return "bounded_act" in vars(klass) and bool(getattr(policy, "bounded_act", False))
    return False


def start_episode(policy: object) -> None:
    """Call ``policy.start_episode()`` if it has one (a stateful policy forgets the previous episode)."""
    hook = getattr(policy, "start_episode", None)
    if callable(hook):
        hook()
