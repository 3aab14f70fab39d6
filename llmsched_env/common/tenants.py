"""Tenants: how many a workload may have, and what a tenant's name may hold. The one place for both rules.

- **A cap**: a workload (a trace's tenant column, a scenario's or a randomized space's tenants, a user's
  ``WorkloadConfig``) has at most ``MAX_TENANTS`` distinct tenants, 1,024 unless ``$LLMSCHED_MAX_TENANTS`` says
  more (parsed as the size limits of ``common.files`` are: a value that is not a whole number > 0 is one error
  naming the variable). Far above legitimate use (the shipped scenarios have at most 16 tenants, the held-out
  traces 12); each tenant costs every step of the decision loop time (its per-tenant observation), so 10,000
  tenants took 400 s (docs/reliability.md, "Tenants").
- **A name rule** (``tenant_name_problem``): a tenant's name is a non-empty string of printable characters
  (no tab, newline or other control or invisible character), without ``|`` (it breaks the markdown tables)
  or ``/`` (it breaks the ``tenant/NAME/metric`` keys of the metrics, the TensorBoard tags and the plots), and
  not ``other``: ``OTHER_TENANTS`` names the group of the tenants past the first ``TOP_TENANTS`` in the metrics
  (``sim.metrics``), which no tenant may share.

Every place a tenant name enters uses these: the trace parser (naming the file, line and column), and
``TenantConfig`` (every scenario, workload and tenant spec is built of them). Stdlib only.
"""

from __future__ import annotations

from llmsched_env.common.checks import label_fault
from llmsched_env.common.files import CountLimit

__all__ = [
    "KEY_SEPARATOR",
    "MAX_TENANTS",
    "OTHER_TENANTS",
    "check_tenant_count",
    "check_tenant_name",
    "listed_tenants",
    "tenant_name_problem",
    "too_many_tenants",
]

# The most distinct tenants a workload may have (docs/reliability.md, "Tenants: a cap, names, and tables that
# stay readable"). Each step's observation costs time in proportion to the tenants: an fcfs episode of 1,000
# requests took 21 s over 1,024 tenants against 2.2 s over 16 (the same peak memory, 95 MB).
MAX_TENANTS = CountLimit("the tenants of a workload", 1024, "LLMSCHED_MAX_TENANTS")
# The name of the group that holds, in the metrics, the tenants past the busiest ``sim.metrics.TOP_TENANTS``.
OTHER_TENANTS = "other"
KEY_SEPARATOR = "/"  # of the tenant/NAME/metric keys


def tenant_name_problem(name: object) -> str | None:
    """What is wrong with ``name`` as a tenant's name, in words for the end of a message ("must not hold ...,
    got NAME"); None when it is fine. A table label's rule (``common.checks.label_fault``: no control
    character, no ``|``), no ``/`` and no other non-printable character, and not ``OTHER_TENANTS``."""
    if not isinstance(name, str) or not name:
        return f"must be a non-empty string, got {name!r}"
    fault = label_fault(name)
    if fault is None and KEY_SEPARATOR in name:
        fault = f"the key separator {KEY_SEPARATOR!r}"
    if fault is None:
        fault = next((f"the non-printable character {c!r}" for c in name if not c.isprintable()), None)
    if fault is not None:
        return f"must not hold {fault} (a tenant's name goes into tables and tenant/NAME/... keys), got {name!r}"
    if name == OTHER_TENANTS:
        return f"must not be {OTHER_TENANTS!r}: the metrics keep it for the group of the tenants past the busiest"
    return None


def check_tenant_name(owner: str, name: object) -> None:
    """``ValueError`` naming ``owner`` (``TenantConfig``) when ``name`` breaks the name rule."""
    problem = tenant_name_problem(name)
    if problem is not None:
        raise ValueError(f"{owner} name {problem}")


def too_many_tenants(count: int, bound: int) -> str:
    """The message for a workload of ``count`` tenants (or more, while counting) over ``bound``, with the hint."""
    return f"{count:,} tenants, over the limit of {bound:,} for {MAX_TENANTS.what}{MAX_TENANTS.hint()}"


def check_tenant_count(owner: str, count: int) -> None:
    """``ValueError`` naming ``owner`` when a workload of ``count`` tenants passes ``MAX_TENANTS``."""
    bound = MAX_TENANTS.value()
    if count > bound:
        raise ValueError(f"{owner}: {too_many_tenants(count, bound)}")


def listed_tenants(names: list[str], limit: int = 16) -> str:
    """``names`` joined by commas for a one-line note, the first ``limit`` of them and how many in all past
    that ("t1, t2, ... (1,024 in all)"), so that a note on a workload of many tenants stays a readable line."""
    more = f", ... ({len(names):,} in all)" if len(names) > limit else ""
    return ", ".join(names[:limit]) + more
