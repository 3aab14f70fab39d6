"""Arguments both envs share: the episode's shape (``check_episode_args``), the load (``load_arg``), the
engine config (``engine_config``) and the trace window of a reset (``reset_window``), each checked with a
``ValueError`` naming the argument (the reward weights are ``envs.reward.RewardConfig``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium as gym

from llmsched_env.common.checks import MAX_LOAD, MIN_LOAD, check_int, check_positive, is_finite_number
from llmsched_env.common.fields import as_dataclass
from llmsched_env.engine.config import EngineConfig
from llmsched_env.workloads.scenarios import check_split, episode_window

__all__ = [
    "MAX_EPISODE_REQUESTS",
    "MAX_LOAD",
    "MIN_LOAD",
    "check_episode_args",
    "engine_config",
    "load_arg",
    "reset_window",
]

MAX_EPISODE_REQUESTS = 1_000_000  # an episode holds every request in memory: more would exhaust it, not run


def check_episode_args(
    env: gym.Env, split: str, num_requests: int | None, horizon_s: float, max_steps: int, render_mode: str | None
) -> None:
    """Raise ``ValueError`` naming the argument (and ``env``'s class) unless ``split`` is one of ``SPLITS``,
    ``num_requests`` is None or an integer from 1 to ``MAX_EPISODE_REQUESTS``, ``horizon_s`` > 0 (inf for
    none), ``max_steps`` an integer >= 1 and ``render_mode`` None or one of ``env.metadata["render_modes"]``."""
    owner = type(env).__name__
    render_modes = env.metadata["render_modes"]
    check_split(split)
    if num_requests is not None:
        check_int(owner, "num_requests", num_requests, 1)
        if num_requests > MAX_EPISODE_REQUESTS:
            raise ValueError(f"{owner}.num_requests must be at most {MAX_EPISODE_REQUESTS}, got {num_requests}")
    if not (isinstance(horizon_s, (int, float)) and horizon_s > 0):  # inf (no horizon) is allowed
        raise ValueError(f"{owner}.horizon_s must be > 0 (inf for none), got {horizon_s!r}")
    check_int(owner, "max_steps", max_steps, 1)
    if render_mode is not None and render_mode not in render_modes:
        raise ValueError(f"render_mode must be one of {list(render_modes)}, got {render_mode!r}")


def load_arg(owner: str, load: float | Sequence[float]) -> tuple[float, tuple[float, float] | None]:
    """``(load, range)`` from an env's ``load`` argument: a number (range None), or ``(low, high)`` from which
    each episode draws its load uniformly (load starts at low). ValueError naming ``owner`` otherwise."""
    if isinstance(load, (tuple, list)):
        finite = all(is_finite_number(x) for x in load)
        if len(load) != 2 or not finite or not all(MIN_LOAD <= x <= MAX_LOAD for x in load) or load[0] > load[1]:
            raise ValueError(
                f"{owner}.load range must be (low, high) with {MIN_LOAD} <= low <= high <= {MAX_LOAD}, got {load!r}"
            )
        return float(load[0]), (float(load[0]), float(load[1]))
    number = check_positive(owner, "load", load)
    if not MIN_LOAD <= number <= MAX_LOAD:
        raise ValueError(f"{owner}.load must be between {MIN_LOAD} and {MAX_LOAD} (× the nominal rate), got {load!r}")
    return float(number), None


def engine_config(engine: EngineConfig | Mapping[str, Any] | None) -> EngineConfig:
    """An ``EngineConfig`` from an env's ``engine`` argument: None (the defaults), a config, or a dict of fields."""
    return EngineConfig() if engine is None else as_dataclass(EngineConfig, "engine", engine)


def reset_window(env: Any, seed: int | None, options: Mapping[str, Any] | None) -> int | None:
    """The trace window a ``reset(seed=seed, options=options)`` of ``env`` replays: ``options["window"]``, else
    ``env.window``, else the seed's on val and test (``episode_window``; None: a random one). ``ValueError``
    naming the option for anything but an integer >= 0."""
    window = (options or {}).get("window", env.window)
    if window is None:
        return episode_window(env.split, seed)
    check_int(type(env).__name__, "window", window, 0)
    return int(window)
