"""The ``lookahead`` bound's options and how a policy list spells it (the bounds themselves: ``bounds``). It is
clairvoyant, a reference and not a scheduler: its rows are named with ``BOUND_MARK``, never a baseline.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from llmsched_env.common.checks import check_int
from llmsched_env.decision.planners.mpc import MPC, MPCConfig
from llmsched_env.decision.spelling import parse_spelled, spell

__all__ = ["BOUND_MARK", "CANDIDATE_SETS", "LOOKAHEAD", "LookaheadConfig", "is_bound", "join_options",
           "parse_lookahead"]  # fmt: skip

LOOKAHEAD = "lookahead"
BOUND_MARK = " (bound, not deployable)"  # appended to every lookahead row's policy name
# the base and every single-knob move of it; the base alone; the neighbours plus per-request moves (which waiting
# request goes next, which running request is preempted, which waiting request is shed)
CANDIDATE_SETS = ("neighbours", "base", "requests")
END = "end"  # tail=end: the base plays to the episode's end


def is_bound(policy: str) -> bool:
    """Whether a results row's ``policy`` names a bound (a lookahead row), never a deployable policy."""
    return str(policy).endswith(BOUND_MARK)


@dataclass(frozen=True)
class LookaheadConfig:
    """``k``: iterations between two decisions; ``horizon``: iterations each candidate plays; ``tail``: iterations of
    the base after it (None: to the episode's end); ``candidates``: ``neighbours``, ``base`` or ``requests``;
    ``base``: ``tuned`` or a static named rule. ``ValueError`` naming the field."""

    k: int = 64
    horizon: int = 64
    tail: int | None = 256
    candidates: str = "neighbours"
    base: str = "tuned"

    def __post_init__(self) -> None:
        check_int("lookahead", "k", self.k, 1)
        check_int("lookahead", "horizon", self.horizon, 1)
        if self.tail is not None:
            check_int("lookahead", "tail", self.tail, 0)
        if self.candidates not in CANDIDATE_SETS:
            sets = ", ".join(CANDIDATE_SETS)
            raise ValueError(f"lookahead.candidates must be one of {sets}, got {self.candidates!r}")
        if not isinstance(self.base, str) or not self.base:
            raise ValueError(f"lookahead.base must be tuned or a static named rule, got {self.base!r}")

    @property
    def spelled(self) -> str:
        """The policy-list spelling: ``lookahead``, then the options that differ from the defaults."""
        return spell(LOOKAHEAD, self, _text)

    @property
    def name(self) -> str:
        """The ``policy`` column of its rows: the spelling, marked as a bound."""
        return self.spelled + BOUND_MARK


def _text(value: Any) -> str:
    return END if value is None else str(value)


def join_options(items: list[str]) -> list[str]:
    """A comma-split policy list with each lookahead or mpc spelling's ``KEY=VALUE`` options joined back to it."""
    keys = {
        LOOKAHEAD + ":": {f.name for f in fields(LookaheadConfig)},
        MPC + ":": {f.name for f in fields(MPCConfig)},
    }
    out: list[str] = []
    for item in items:
        key, eq, _ = item.partition("=")
        head = next((h for h in keys if out and out[-1].startswith(h)), None)
        if eq and head is not None and key in keys[head]:
            out[-1] += "," + item
        else:
            out.append(item)
    return out


def parse_lookahead(entry: str) -> LookaheadConfig | None:
    """The config ``entry`` spells (``lookahead[:KEY=VALUE,...]`` or a row name ending in ``BOUND_MARK``); None when
    ``entry`` is not a lookahead. One-line ``ValueError`` naming the bad option."""
    text = entry[: -len(BOUND_MARK)] if is_bound(entry) else entry
    return parse_spelled(text, LOOKAHEAD, LookaheadConfig, {"tail": END}, entry)
