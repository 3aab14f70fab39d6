"""Arguments both envs share: the load (``load_arg``) and the engine config (``engine_config``), each checked
with a ``ValueError`` naming the argument (the reward weights are ``envs.reward.RewardConfig``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from llmsched_env.common.checks import check_positive
from llmsched_env.common.fields import from_fields
from llmsched_env.engine.config import EngineConfig

__all__ = ["engine_config", "load_arg"]


def load_arg(owner: str, load: float | Sequence[float]) -> tuple[float, tuple[float, float] | None]:
    """``(load, range)`` from an env's ``load`` argument: a number (range None), or ``(low, high)`` from which
    each episode draws its load uniformly (load starts at low). ValueError naming ``owner`` otherwise."""
    if isinstance(load, (tuple, list)):
        if len(load) != 2 or not all(isinstance(x, (int, float)) and x > 0 for x in load) or load[0] > load[1]:
            raise ValueError(f"{owner}.load range must be (low, high) with 0 < low <= high, got {load!r}")
        return float(load[0]), (float(load[0]), float(load[1]))
    check_positive(owner, "load", load)
    return float(load), None


def engine_config(engine: EngineConfig | Mapping[str, Any] | None) -> EngineConfig:
    """An ``EngineConfig`` from an env's ``engine`` argument: None (the defaults), a config, or a dict of fields."""
    if engine is None:
        return EngineConfig()
    if isinstance(engine, EngineConfig):
        return engine
    if isinstance(engine, Mapping):
        return from_fields(EngineConfig, "engine", engine)
    raise ValueError(f"engine must be an EngineConfig or a dict, got {type(engine).__name__}")
