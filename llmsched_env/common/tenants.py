"""Tenants: at most ``MAX_TENANTS`` (1,024, or ``$LLMSCHED_MAX_TENANTS``), and a name (``tenant_name_problem``)
non-empty, at most ``MAX_TENANT_NAME`` characters, printable, without ``|`` or ``/`` and not ``other``
(``OTHER_TENANTS``).
"""

from __future__ import annotations

from llmsched_env.common.checks import label_fault, shown
from llmsched_env.common.files import CountLimit

# an fcfs episode of 1,000 requests took 21 s over 1,024 tenants, 2.2 s over 16
MAX_TENANTS = CountLimit("the tenants of a workload", 1024, "LLMSCHED_MAX_TENANTS")
OTHER_TENANTS = "other"  # the metrics' group of the tenants past the busiest ``sim.metrics.TOP_TENANTS``
KEY_SEPARATOR = "/"  # of the tenant/NAME/metric keys
MAX_TENANT_NAME = 256  # characters: a name is a column of tables and a part of metric keys


def tenant_name_problem(name: object) -> str | None:
    """What is wrong with ``name`` as a tenant's name, for the end of a message; None when it is fine."""
    if not isinstance(name, str) or not name:
        return f"must be a non-empty string, got {shown(name)}"
    if len(name) > MAX_TENANT_NAME:
        return f"must be at most {MAX_TENANT_NAME} characters, got {shown(name)}"
    fault = label_fault(name)
    if fault is None and KEY_SEPARATOR in name:
        fault = f"the key separator {KEY_SEPARATOR!r}"
    if fault is None:
        fault = next((f"the non-printable character {c!r}" for c in name if not c.isprintable()), None)
    if fault is not None:
        return f"must not hold {fault} (a tenant's name goes into tables and tenant/NAME/... keys), got {shown(name)}"
    if name == OTHER_TENANTS:
        return f"must not be {OTHER_TENANTS!r}: the metrics keep it for the group of the tenants past the busiest"
    return None


def check_tenant_name(owner: str, name: object) -> None:
    """``ValueError`` naming ``owner`` (``TenantConfig``) when ``name`` breaks the name rule."""
    problem = tenant_name_problem(name)
    if problem is not None:
        raise ValueError(f"{owner} name {problem}")


def too_many_tenants(count: int, bound: int) -> str:
    """The message for a workload of ``count`` tenants over ``bound``, with the hint to raise it."""
    return f"{count:,} tenants, over the limit of {bound:,} for {MAX_TENANTS.what}{MAX_TENANTS.hint()}"


def check_tenant_count(owner: str, count: int) -> None:
    """``ValueError`` naming ``owner`` when a workload of ``count`` tenants passes ``MAX_TENANTS``."""
    bound = MAX_TENANTS.value()
    if count > bound:
        raise ValueError(f"{owner}: {too_many_tenants(count, bound)}")


def listed_tenants(names: list[str], limit: int = 16) -> str:
    """The first ``limit`` of ``names`` joined by commas, and how many in all past that (``t1, t2, ... (1,024 in
    all)``)."""
    more = f", ... ({len(names):,} in all)" if len(names) > limit else ""
    return ", ".join(names[:limit]) + more
