"""Engine state to observations and actions to decisions, for the simulator envs, the torch runtime and any
other engine alike: the action space and its masks, the observation encoders (single node and router), the
``Policy`` protocols, and the registries of schedulers and routers by name. No gymnasium, no torch.
"""

from llmsched_env.decision.actions import ACTION_COMPONENTS, UNLIMITED, ActionSpec
from llmsched_env.decision.local import LocalScheduler
from llmsched_env.decision.observation import OBS_CLIP, SCHEMA_VERSION, ObservationEncoder
from llmsched_env.decision.policy import Policy, PolicyContext
from llmsched_env.decision.registry import ROUTERS, SCHEDULERS, make_policy
from llmsched_env.decision.router import ClusterObservationEncoder, RouterContext, RoutingPolicy

__all__ = [
    "ACTION_COMPONENTS",
    "OBS_CLIP",
    "ROUTERS",
    "SCHEDULERS",
    "SCHEMA_VERSION",
    "UNLIMITED",
    "ActionSpec",
    "ClusterObservationEncoder",
    "LocalScheduler",
    "ObservationEncoder",
    "Policy",
    "PolicyContext",
    "RouterContext",
    "RoutingPolicy",
    "make_policy",
]
