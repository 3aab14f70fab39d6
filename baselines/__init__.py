"""Heuristic schedulers that act only through the env's action space, so they run wherever an agent runs (the
simulator env, the torch runtime); numpy and the core only. Each is a ``Policy`` built from a policy context:

    >>> policy = baselines.make("slo_aware", env.unwrapped.policy_context(), seed=0)
    >>> action = policy.act(obs, env.unwrapped.action_masks())

The rules (``available()``): fcfs, prefill_first, priority_aging, sjf, sprw, lpm, vtc, kv_guard (``rules``),
sarathi, slo_aware (``slo``), tuned (``tuned.json``) and random, each class saying its rule and origin. Routers
for ``LLMSchedCluster-v0``: ``baselines.routing`` (``make_router``, ``available_routers()``).
"""

# ruff: noqa: F401 (the package re-exports these names)

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from baselines.base import BaselinePolicy, RandomPolicy, StaticPolicy
from baselines.routing import available_routers, make_router
from baselines.rules import (
    FCFSPolicy,
    KVGuardPolicy,
    LPMPolicy,
    PrefillFirstPolicy,
    PriorityAgingPolicy,
    SJFPolicy,
    SPRWPolicy,
    VTCPolicy,
    fcfs_decision,
)
from baselines.slo import SarathiPolicy, SLOAwarePolicy, tpot_budget
from baselines.tuned import TunedPolicy
from llmsched_env.decision.policy import Policy, PolicyContext
from llmsched_env.decision.registry import ROUTERS, SCHEDULERS, make_policy, make_scheduler

for _cls in (
    FCFSPolicy, PrefillFirstPolicy, PriorityAgingPolicy, SJFPolicy, SPRWPolicy, LPMPolicy, VTCPolicy, KVGuardPolicy,
    SarathiPolicy, SLOAwarePolicy, TunedPolicy, RandomPolicy,
):
    SCHEDULERS.register(_cls.name, _cls)


def available() -> list[str]:
    """Names ``make`` accepts: the table above, in its order, then any scheduler registered elsewhere."""
    return SCHEDULERS.names()


def make(name: str, ctx: PolicyContext, seed: int | None = None) -> Policy:
    """The baseline ``name`` built for ``ctx`` (``seed`` drives the random ones); ``ValueError`` listing the
    names when ``name`` is unknown."""
    return make_scheduler(name, ctx, seed)


# a single-node baseline for a PolicyContext (LLMSched-v1), a router for a RouterContext (LLMSchedCluster-v0)
make_for = make_policy


def per_workload(names: str, seed: int | None = None,
                 builders: Mapping[str, Callable[[Any], Policy]] | None = None) -> Callable[[Any], Policy]:
    """A policy factory for ``run_episode``: the first of ``names`` (e.g. ``tuned,slo_aware``) that builds for the
    env's workload, rebuilt when ``LLMSchedMix-v0`` draws a new one (else the last name's ``ValueError``);
    ``builders`` build names from the env itself (``agents.teacher``)."""
    listed = [n for n in names.split(",") if n]
    if not listed:
        raise ValueError(f"per_workload: no baseline named in {names!r}")
    extra = dict(builders or {})
    built: dict[str, Any] = {}

    def build(name: str, env: Any) -> Policy:
        return extra[name](env) if name in extra else make_for(name, env.unwrapped.policy_context(), seed)

    def make(env: Any) -> Policy:
        inner = getattr(env.unwrapped, "inner", None)
        if "policy" not in built or built["inner"] is not inner:
            for name in listed[:-1]:
                try:
                    built["policy"] = build(name, env)
                    break
                except ValueError:
                    continue
            else:
                built["policy"] = build(listed[-1], env)
            built["inner"] = inner
        return built["policy"]

    return make
