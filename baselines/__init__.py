"""Heuristic schedulers that act only through the env's action space.

Each baseline is a ``Policy`` (``act(observation, action_mask) -> action``) built from a policy context
(``LLMSchedEnv.policy_context()``: engine config, tenants, cost model, action spec, observation names), so it
runs wherever an agent runs: in the simulator env and in the torch runtime. Every action it returns lies
inside the mask it was given. Importing this package needs numpy and the core only (no gymnasium, no torch).

    >>> policy = baselines.make("slo_aware", env.unwrapped.policy_context(), seed=0)
    >>> action = policy.act(obs, env.unwrapped.action_masks())

| name | rule | from |
|---|---|---|
| fcfs | FCFS, decode-first chunked prefill, budget ~2048, admit all that fit | vLLM v1 default |
| prefill_first | as fcfs, but prefill-only iterations while prefill is pending | vLLM v0 / SGLang default |
| priority_aging | tenant priority with aging | vLLM priority scheduling |
| sjf | shortest prefill first, starvation guard | length-aware schedulers |
| sprw | shortest predicted remaining work, starvation guard | predicted-length / learning-to-rank schedulers |
| lpm | longest cached prefix first | SGLang lpm |
| vtc | least-served tenant first | VTC (Sheng et al., OSDI'24) |
| kv_guard | as fcfs, keep 10% KV free, admit <= 8 per iteration | Orca / SGLang conservative admission |
| sarathi | budget = chunk from the TPOT SLO, fixed | Sarathi-Serve stall-free batching |
| slo_aware | EDF, TTFT shedding, budget from the TPOT SLO per iteration | EDF + Mooncake early rejection |
| tuned | every knob at its best static setting for the scenario, found on val (``tuned.json``) | ``llmsched-tune`` |
| random | uniform valid action | floor |

Routers for ``LLMSchedCluster-v0`` (``baselines.routing``) pick a replica from the cluster observation and
mask: ``make_router(name, env.unwrapped.policy_context(), seed)`` with ``name`` one of ``round_robin``,
``least_outstanding``, ``least_kv_load`` (Llumnix), ``prefix_affinity`` (cache-aware with a load cap),
``power_of_two`` and ``random`` (``available_routers()``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from baselines.base import BaselinePolicy, StaticPolicy
from baselines.random_policy import RandomPolicy
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

__all__ = ["ROUTERS", "SCHEDULERS", "BaselinePolicy", "FCFSPolicy", "KVGuardPolicy", "LPMPolicy", "Policy",
           "PrefillFirstPolicy", "PriorityAgingPolicy", "RandomPolicy", "SJFPolicy", "SLOAwarePolicy",
           "SPRWPolicy", "SarathiPolicy", "StaticPolicy", "TunedPolicy", "VTCPolicy", "available",
           "available_routers", "fcfs_decision", "make", "make_for", "make_router", "per_workload", "tpot_budget"]

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


def per_workload(
    names: str, seed: int | None = None, builders: Mapping[str, Callable[[Any], Policy]] | None = None
) -> Callable[[Any], Policy]:
    """A policy factory for ``run_episode`` (called with the env after each reset): the first of ``names`` (a
    comma list, e.g. ``tuned,slo_aware``) that builds for the env's workload, rebuilt whenever
    ``LLMSchedMix-v0`` draws a new one; the last name's ``ValueError`` when none builds. ``builders``: names
    built by ``builders[name](env)`` instead of from the policy context (``agents.teacher``)."""
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
