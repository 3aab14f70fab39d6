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

__all__ = ["Policy", "PolicyContext", "bounded_act", "reads_observation", "start_episode"]


@dataclass(frozen=True)
class PolicyContext:
    """What a heuristic may know about the engine it schedules, besides its observations. ``scenario`` names
    the scenario the engine serves ("" where none is at hand: the vLLM adapter, the runtime's fidelity runs), so
    a policy can look settings up by name (``tuned``). ``planning_state``: where the driver can give one, a
    function returning a simulator in the engine's state now, for a planner to fork (``mpc``): a serving loop's
    own simulator, or a copy built from vLLM's scheduler (None: no planner runs here); ``background_planning``:
    the driver's loop must not wait for a plan (vLLM's), so a planner plans on a worker thread."""

    engine: EngineConfig
    tenants: tuple[TenantConfig, ...]
    cost_model: CostModel
    action_spec: ActionSpec
    obs_names: tuple[str, ...]
    scenario: str = ""
    planning_state: Callable[[], Simulator] | None = field(default=None, compare=False)
    background_planning: bool = False


@runtime_checkable
class Policy(Protocol):
    """Anything that maps an observation and its action mask to a MultiDiscrete action.

    A policy whose action depends on the mask alone may set a class attribute ``reads_observation = False``
    (see ``reads_observation``): callers then skip encoding the observation for it. A policy with memory
    (a recurrent one) defines ``start_episode()``, which clears it; whoever runs episodes calls
    ``start_episode(policy)`` before each episode's first ``act``.

    A policy whose ``act`` does a fixed, small amount of work (a table lookup, a numpy forward pass of a given
    network) may declare ``bounded_act = True`` in the class that defines its ``act`` (see ``bounded_act``):
    the vLLM adapter then checks its deadline after the call instead of arming a timer around it."""

    def act(self, observation: np.ndarray, action_mask: np.ndarray) -> np.ndarray: ...


def reads_observation(policy: object) -> bool:
    """False for a policy that declares ``reads_observation = False`` (it acts on the mask alone), else True."""
    return bool(getattr(policy, "reads_observation", True))


def bounded_act(policy: object) -> bool:
    """True when the class that defines ``policy``'s ``act`` declares ``bounded_act`` and it is true for this
    policy: its ``act`` cannot hang, so no timer need interrupt it. A subclass that overrides ``act`` does not
    inherit its parent's claim."""
    for klass in type(policy).__mro__:
        if "act" in vars(klass):
            return "bounded_act" in vars(klass) and bool(getattr(policy, "bounded_act", False))
    return False


def start_episode(policy: object) -> None:
    """Tell ``policy`` that a new episode starts: a stateful policy (one with a ``start_episode`` method, e.g.
    a recurrent SB3 model) forgets the previous episode; a stateless one is left alone."""
    hook = getattr(policy, "start_episode", None)
    if callable(hook):
        hook()
