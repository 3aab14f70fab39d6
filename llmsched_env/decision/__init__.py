"""Engine state to observations and actions to decisions, for the simulator envs, the torch runtime and any
other engine alike: the action space and its masks, the observation encoders (single node and router), the
``Policy`` protocols, and the registries of schedulers and routers by name. No gymnasium, no torch.
"""

# ruff: noqa: F401 (the package re-exports these names)

from llmsched_env.decision.actions import ACTION_COMPONENTS, UNLIMITED, ActionSpec
from llmsched_env.decision.local import LocalScheduler
from llmsched_env.decision.observation import OBS_CLIP, GenericObservationEncoder, ObservationEncoder, make_encoder
from llmsched_env.decision.policy import Policy, PolicyContext
from llmsched_env.decision.registry import ROUTERS, SCHEDULERS, make_policy, make_router, make_scheduler
from llmsched_env.decision.router import ClusterObservationEncoder, RouterContext, RoutingPolicy
from llmsched_env.decision.schema import SCHEMA_VERSION, SCHEMAS, check_schema
