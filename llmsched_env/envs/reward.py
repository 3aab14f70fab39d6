"""The reward of every env: the weights of its terms (``RewardConfig``) and the bookkeeping that prices each
step's change in requests met, missed and preempted (``RewardTracker``). Each request counts once: ``good``
(+1/N) or ``miss`` (-1/N); arrived requests without an outcome miss at the end, so a drained episode returns
``2 * slo_attainment - 1``; ``preempt`` (weight 0 by default) charges recompute preemptions.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields

from llmsched_env.common.checks import MAX_REWARD_WEIGHT, check_int, check_positive
from llmsched_env.common.fields import as_dataclass


@dataclass(frozen=True)
class RewardConfig:
    """Weights (>= 0 and at most ``MAX_REWARD_WEIGHT``, 1e6) of the named reward terms ``good``, ``miss`` and
    ``preempt``; at least one of them > 0 (a reward that is 0 at every step teaches nothing)."""

    good: float = 1.0
    miss: float = 1.0
    preempt: float = 0.0

    def __post_init__(self) -> None:
        for f in fields(self):
            check_positive("RewardConfig", f.name, getattr(self, f.name), allow_zero=True, maximum=MAX_REWARD_WEIGHT)
        if not any(getattr(self, f.name) for f in fields(self)):
            raise ValueError(
                "RewardConfig: the reward weights good, miss and preempt are all 0: the reward is 0 at every step "
                "and trains nothing; give at least one a weight > 0"
            )

    @classmethod
    def of(cls, reward: RewardConfig | Mapping[str, float] | None) -> RewardConfig:
        """The config an env's ``reward`` argument names: None (the defaults), a config, or a dict of weights.
        ValueError naming the field for an unknown one."""
        return cls() if reward is None else as_dataclass(cls, "reward", reward)

    def terms(self, num_good: int, num_missed: int, num_preempted: int, norm: float) -> dict[str, float]:
        """The named reward terms of one step: requests newly met, missed and preempted, each times ``norm``."""
        return {
            "good": self.good * num_good * norm,
            "miss": -self.miss * num_missed * norm,
            "preempt": -self.preempt * num_preempted * norm,
        }


class RewardTracker:
    """One episode's reward bookkeeping: prices the change in running counts (``num_requests``: N, 0 read as 1)."""

    def __init__(self, config: RewardConfig, num_requests: int) -> None:
        check_int("RewardTracker", "num_requests", num_requests, 0)
        self.config = config
        self.num_requests = num_requests
        self.norm = 1.0 / max(num_requests, 1)
        self.num_good = 0
        self.num_missed = 0
        self.num_preempted = 0

    def copy(self) -> RewardTracker:
        """An independent copy (an env's ``snapshot()``)."""
        c = RewardTracker.__new__(RewardTracker)
        c.__dict__.update(self.__dict__)
        return c

    def step(
        self, num_arrived: int, num_good: int, num_missed: int, num_preempted: int, ended: bool
    ) -> tuple[float, dict[str, float]]:
        """``(reward, terms)`` of one step from the running counts (arrived, met, missed, preemptions); with ``ended``
        the arrived requests still without an outcome miss."""
        d_good = num_good - self.num_good
        d_missed = num_missed - self.num_missed
        d_preempted = num_preempted - self.num_preempted
        self.num_good, self.num_missed, self.num_preempted = num_good, num_missed, num_preempted
        if ended:
            d_missed += num_arrived - num_good - num_missed
        terms = self.config.terms(d_good, d_missed, d_preempted, self.norm)
        return terms["good"] + terms["miss"] + terms["preempt"], terms
