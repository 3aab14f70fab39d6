"""The schedulers and routers chosen by name, for every env, the runtime and the command lines.

A scheduler factory builds a single-node ``Policy`` from a ``PolicyContext`` and a seed; a router factory a
``RoutingPolicy`` from a ``RouterContext``. The ``baselines`` package registers its heuristics here when
imported, and the entry point ``llmsched.policies`` (``pyproject.toml``) makes a lookup import it, so that
``LLMSchedCluster-v0``'s ``local_policy="fcfs"`` works without the env importing ``baselines``. Register a
policy of your own with ``SCHEDULERS.register("mine", factory)``.
"""

from __future__ import annotations

from collections.abc import Callable

from llmsched_env.common.registry import Registry
from llmsched_env.decision.policy import Policy, PolicyContext
from llmsched_env.decision.router import RouterContext, RoutingPolicy

__all__ = ["ROUTERS", "SCHEDULERS", "RouterFactory", "SchedulerFactory", "make_policy"]

SchedulerFactory = Callable[[PolicyContext, "int | None"], Policy]
RouterFactory = Callable[[RouterContext, "int | None"], RoutingPolicy]

SCHEDULERS: Registry[SchedulerFactory] = Registry("scheduler", plugins="llmsched.policies")
ROUTERS: Registry[RouterFactory] = Registry("router", plugins="llmsched.policies")


def make_policy(name: str, ctx: PolicyContext | RouterContext, seed: int | None = None) -> Policy | RoutingPolicy:
    """The scheduler ``name`` built for a ``PolicyContext`` (``LLMSched-v0``), or the router ``name`` for a
    ``RouterContext`` (``LLMSchedCluster-v0``). ``seed`` drives the random ones. ``ValueError`` listing the
    registered names when ``name`` is unknown."""
    if isinstance(ctx, RouterContext):
        return ROUTERS.get(name)(ctx, seed)
    return SCHEDULERS.get(name)(ctx, seed)
