"""What every env's episode takes (``EpisodeConfig``, the typed form of the shared keywords) and the checks of
those arguments, each a ``ValueError`` naming the argument (reward weights: ``envs.reward.RewardConfig``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from llmsched_env.common.checks import MAX_LOAD, MIN_LOAD, check_int, check_positive, is_finite_number
from llmsched_env.common.fields import as_dataclass
from llmsched_env.engine.config import EngineConfig
from llmsched_env.envs.reward import RewardConfig
from llmsched_env.workloads.scenarios import check_split, episode_window

MAX_EPISODE_REQUESTS = 1_000_000  # an episode holds every request in memory: more would exhaust it, not run


@dataclass(frozen=True, kw_only=True)
class EpisodeConfig:
    """The arguments ``LLMSched-v1`` and ``LLMSchedCluster-v0`` share."""

    split: str = "train"  # train: random windows of the training part; val, test: seed s replays the s-th window
    num_requests: int | None = None  # default: the scenario's
    load: float | tuple[float, float] = 1.0  # x the nominal rate, or a (low, high) range drawn per episode
    reward: RewardConfig | Mapping[str, float] | None = None  # the reward's weights (a RewardConfig or a dict)
    horizon_s: float = float("inf")  # truncated past this simulated time
    max_steps: int = 1_000_000  # truncated past this many steps
    render_mode: str | None = None  # ansi or rgb_array (single node)
    check_invariants: bool = False  # check the engine's invariants every step (for tests)


def check_episode_args(owner: str, config: EpisodeConfig, render_modes: Sequence[str]) -> None:
    """``ValueError`` naming the argument unless the split is known, ``num_requests`` None or in [1,
    ``MAX_EPISODE_REQUESTS``], ``horizon_s`` > 0, ``max_steps`` >= 1 and ``render_mode`` None or in ``render_modes``."""
    check_split(config.split)
    if config.num_requests is not None:
        check_int(owner, "num_requests", config.num_requests, 1)
        if config.num_requests > MAX_EPISODE_REQUESTS:
            raise ValueError(f"{owner}.num_requests must be at most {MAX_EPISODE_REQUESTS}, got {config.num_requests}")
    horizon_s = config.horizon_s
    if isinstance(horizon_s, bool) or not (isinstance(horizon_s, (int, float)) and horizon_s > 0):  # inf: no horizon
        raise ValueError(f"{owner}.horizon_s must be > 0 (inf for none), got {horizon_s!r}")
    check_int(owner, "max_steps", config.max_steps, 1)
    if config.render_mode is not None and config.render_mode not in render_modes:
        raise ValueError(f"render_mode must be one of {list(render_modes)}, got {config.render_mode!r}")


def load_arg(owner: str, load: float | Sequence[float]) -> tuple[float, tuple[float, float] | None]:
    """``(load, range)``: a number (range None), or ``(low, high)``, each episode's load drawn from it (load
    starts at low)."""
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
    """An ``EngineConfig`` from None (the defaults), a config, or a dict of fields."""
    return EngineConfig() if engine is None else as_dataclass(EngineConfig, "engine", engine)


def check_reset_options(owner: str, options: Any, known: Sequence[str]) -> None:
    """``TypeError`` unless ``options`` is None or a mapping; ``ValueError`` naming a key not in ``known``."""
    if options is None:
        return
    if not isinstance(options, Mapping):
        raise TypeError(f"{owner}: options must be a dict or None, got {type(options).__name__}")
    unknown = [k for k in options if k not in known]
    if unknown:
        takes = f"reset takes only {', '.join(map(repr, known))}" if known else "reset takes none"
        raise ValueError(f"{owner}: unknown option {unknown[0]!r} ({takes})")


def reset_window(env: Any, seed: int | None, options: Mapping[str, Any] | None) -> int | None:
    """The trace window a reset replays: ``options["window"]``, else ``env.window``, else the seed's on val and
    test (``episode_window``; None: a random one)."""
    window = (options or {}).get("window", env.window)
    if window is None:
        return episode_window(env.split, seed)
    check_int(type(env).__name__, "window", window, 0)
    return int(window)
