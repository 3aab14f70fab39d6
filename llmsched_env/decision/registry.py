"""The schedulers and routers chosen by name: ``SCHEDULERS`` (factories of a ``Policy`` from a
``PolicyContext`` and a seed) and ``ROUTERS`` (of a ``RoutingPolicy`` from a ``RouterContext``). ``baselines``
registers its heuristics on import, which the entry point ``llmsched.policies`` triggers on lookup.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import overload

from llmsched_env.common.registry import Registry
from llmsched_env.decision.policy import Policy, PolicyContext
from llmsched_env.decision.router import RouterContext, RoutingPolicy

SchedulerFactory = Callable[[PolicyContext, "int | None"], Policy]
RouterFactory = Callable[[RouterContext, "int | None"], RoutingPolicy]

SCHEDULERS: Registry[SchedulerFactory] = Registry("scheduler", plugins="llmsched.policies")
ROUTERS: Registry[RouterFactory] = Registry("router", plugins="llmsched.policies")


def make_scheduler(name: str, ctx: PolicyContext, seed: int | None = None) -> Policy:
    """The scheduler ``name`` built for ``ctx``; ``seed`` drives the random ones. ``ValueError`` listing the
    registered names when ``name`` is unknown."""
    return SCHEDULERS.get(name)(ctx, seed)


def make_router(name: str, ctx: RouterContext, seed: int | None = None) -> RoutingPolicy:
    """The router ``name`` built for ``ctx``; ``seed`` drives the random ones. ``ValueError`` listing the
    registered names when ``name`` is unknown."""
    return ROUTERS.get(name)(ctx, seed)


@overload
def make_policy(name: str, ctx: PolicyContext, seed: int | None = None) -> Policy: ...
@overload
def make_policy(name: str, ctx: RouterContext, seed: int | None = None) -> RoutingPolicy: ...
@overload
def make_policy(name: str, ctx: PolicyContext | RouterContext, seed: int | None = None) -> Policy | RoutingPolicy: ...


def make_policy(name: str, ctx: PolicyContext | RouterContext, seed: int | None = None) -> Policy | RoutingPolicy:
    """``make_scheduler`` for a ``PolicyContext``, ``make_router`` for a ``RouterContext`` (code that holds either)."""
    if isinstance(ctx, RouterContext):
        return make_router(name, ctx, seed)
    return make_scheduler(name, ctx, seed)
