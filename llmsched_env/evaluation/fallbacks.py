"""Runs whose policy fell back (the torch runtime, ``--engine vllm``): a row whose ``fallback_share`` is over
``FALLBACK_LIMIT`` shows as ``mine [fallback 100%]`` and is warned about on stderr. Simulator rows have no such field.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from llmsched_env.decision.serve import FALLBACK_SHARE
from llmsched_env.evaluation.tables import format_cell

__all__ = ["FALLBACK_LIMIT", "FALLBACK_SHARE", "fallback_mark", "fallback_share", "fallback_summary",
           "fallback_warning"]  # fmt: skip

FALLBACK_LIMIT = 0.01  # a run whose share of fallback decisions exceeds this is marked (1%)
_SHARE_KEYS = (FALLBACK_SHARE, f"{FALLBACK_SHARE}_mean", f"sim/{FALLBACK_SHARE}", f"vllm/{FALLBACK_SHARE}")


def fallback_share(row: Mapping[str, Any]) -> float | None:
    """The share of ``row``'s decisions that fell back (the larger of two engines'); None for a row without one."""
    shares = [float(row[key]) for key in _SHARE_KEYS if row.get(key) is not None]
    return max(shares) if shares else None


def _percent(share: float) -> str:
    return f"{share * 100:.3g}%"


def fallback_mark(row: Mapping[str, Any]) -> str:
    """`` [fallback 100%]`` to follow the policy's name when ``row``'s share is over ``FALLBACK_LIMIT``, else ""."""
    share = fallback_share(row)
    return f" [fallback {_percent(share)}]" if share is not None and share > FALLBACK_LIMIT else ""


def fallback_warning(row: Mapping[str, Any]) -> str | None:
    """The stderr line for a run (or search) over ``FALLBACK_LIMIT``, else None."""
    share = fallback_share(row)
    if share is None or share <= FALLBACK_LIMIT:
        return None
    where = f"policy {row['policy']} on scenario {row['scenario']}"
    seed = f"seed {format_cell(row.get('seed'))}"
    if "capacity_load" in row:  # a capacity search's row: its share is over every episode the search played
        where += " in its capacity search" + (f" of {seed}" if row.get("seed") is not None else "")
    else:
        where += f" at load {format_cell(row.get('load'))}, {seed}"
    return (
        f"warning: {where}: {_percent(share)} of its decisions fell back (the policy raised, was late or gave a "
        f"malformed action), over the {_percent(FALLBACK_LIMIT)} limit; its row is marked [fallback]"
    )


def fallback_summary(runs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """A summary row's ``fallback_share_mean`` and ``fallback_over_limit`` when ``runs`` carry shares, else ``{}``."""
    if not runs or any(FALLBACK_SHARE not in r for r in runs):
        return {}
    mean = sum(float(r[FALLBACK_SHARE]) for r in runs) / len(runs)
    return {f"{FALLBACK_SHARE}_mean": mean, "fallback_over_limit": mean > FALLBACK_LIMIT}
