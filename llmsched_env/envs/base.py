"""``EnvBase``, the template every env shares (HighwayEnv's ``AbstractEnv``): the typed config and its keyword
spelling, seeding, the trace window, ``reset``, ``step``, ``action_masks``, ``render`` and the episode fork
(``snapshot`` / ``restore``); each env supplies the hooks. A snapshot is opaque and restores any number of
times into an env made with the same arguments (anything else is refused in one line).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any, ClassVar, Generic, TypeVar

import gymnasium as gym
import numpy as np
from gymnasium.utils import seeding

from llmsched_env.common.checks import check_bool, check_int
from llmsched_env.engine.request import Request
from llmsched_env.envs.options import EpisodeConfig, check_episode_args, check_reset_options, load_arg, reset_window
from llmsched_env.envs.reward import RewardConfig, RewardTracker

C = TypeVar("C")
NOT_RESET = "call reset() before {}()"  # ``_advance`` raises it itself: ``step`` is the hot path
Step = tuple[np.ndarray, float, bool, bool, dict[str, Any]]


@dataclass(frozen=True, eq=False)
class EnvSnapshot:
    """One moment of one episode (``snapshot()``), for ``restore()``: ``env`` names the env's class,
    ``signature`` its arguments; ``state`` is the env's own."""

    env: str
    signature: tuple[Any, ...]
    state: dict[str, Any]

    def __repr__(self) -> str:
        return f"EnvSnapshot({self.env}, step {self.state.get('step', '?')})"


class EnvBase(gym.Env, Generic[C]):
    """The shared template. An env sets ``config_class`` and ``_signature`` (the arguments a snapshot must match)
    and implements the hooks: ``_core`` (the simulator, None before reset), ``_start(requests)`` (the first
    observation), ``_advance(action)`` (``(terminated, projected, extra info)``), ``_progress`` (simulated time,
    steps taken, requests arrived, met, missed, preemptions: one call a step), ``_metrics``, ``_observe``, ``_mask``,
    ``_fork`` (the simulator's part of a snapshot), ``_restore(state)`` (calling ``_restore_episode`` before the
    simulator's fork), ``_check`` (invariants) and ``_render``."""

    # typed as gymnasium.Env types it (an instance attribute), set here for the class
    metadata: dict[str, Any] = {"render_modes": [], "render_fps": 10}  # noqa: RUF012
    config_class: ClassVar[type]
    _signature: tuple[tuple[str, Any], ...] = ()
    num_requests: int | None
    source: Any  # draws the episode's requests (``workloads.scenarios``)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Show the config's fields as the keywords of the env's ``__init__`` (``inspect.signature``, ``help``)."""
        super().__init_subclass__(**kwargs)
        init = cls.__dict__.get("__init__")
        if init is not None and "config_class" in cls.__dict__:
            keyword = inspect.Parameter.KEYWORD_ONLY
            params = [inspect.Parameter(f.name, keyword, default=f.default) for f in fields(cls.config_class)]
            config = inspect.Parameter("config", inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None)
            self = inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)
            init.__signature__ = inspect.Signature([self, config, *params])

    def __init__(self, config: C | None = None, **kwargs: Any) -> None:
        super().__init__()
        if config is None:
            config = self.config_class(**kwargs)
        elif not isinstance(config, self.config_class):
            name = self.config_class.__name__
            raise ValueError(f"{type(self).__name__}: config must be a {name}, got {type(config).__name__}")
        elif kwargs:
            raise ValueError(f"{type(self).__name__}: give a {self.config_class.__name__} or keywords, not both")
        self.config: C = config

    def _episode_args(self, c: EpisodeConfig) -> None:
        """Check and keep the arguments every env of ``EpisodeConfig`` shares."""
        owner = type(self).__name__
        check_episode_args(owner, c, self.metadata["render_modes"])
        load, self.load_range = load_arg(owner, c.load)
        self.split, self.load = c.split, float(load)
        self.reward_config = RewardConfig.of(c.reward)
        self.horizon_s, self.max_steps, self.render_mode = c.horizon_s, c.max_steps, c.render_mode
        self.check_invariants = check_bool(owner, "check_invariants", c.check_invariants)
        self.window: int | None = None  # the trace window every reset replays (None: the seed's on val and test)
        self._episode_window: int | None = None
        self._source_load = 1.0  # the source's load at env load 1.0
        self._reward: RewardTracker | None = None

    # hooks (see the class docstring)
    _core: Callable[[], Any]
    _start: Callable[[list[Request]], np.ndarray]
    _advance: Callable[[Any], tuple[bool, bool, dict[str, Any]]]
    _progress: Callable[[], tuple[float, int, int, int, int, int]]
    _metrics: Callable[[], dict[str, float]]
    _observe: Callable[[], np.ndarray]
    _mask: Callable[[], np.ndarray]
    _fork: Callable[[], dict[str, Any]]
    _restore: Callable[[dict[str, Any]], None]
    _check: Callable[[], None]

    def _render(self) -> Any:
        return None

    # ---------------------------------------------------------------------------------------- template
    def _require(self, what: str) -> Any:
        core = self._core()
        if core is None:
            raise RuntimeError(NOT_RESET.format(what))
        return core

    reset_options: ClassVar[tuple[str, ...]] = ("window",)  # what ``reset(options=...)`` takes; another key is refused

    def _seed(self, seed: int | None, options: Mapping[str, Any] | None = None) -> int | None:
        """Seed the env's generator with ``seed`` (a Python or numpy integer >= 0, taken as a Python int) once
        ``options`` holds only ``reset_options``; the seed as an int."""
        owner = f"{type(self).__name__}.reset"
        check_reset_options(owner, options, self.reset_options)
        if seed is not None:  # gymnasium's own check ends in its error class; this names the argument
            check_int(owner, "seed", seed, 0)
            seed = int(seed)  # gymnasium takes Python ints only
        super().reset(seed=seed)
        return seed

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        seed = self._seed(seed, options)
        self._episode_window = reset_window(self, seed, options)
        requests = self._draw_requests()
        self._reward = RewardTracker(self.reward_config, len(requests))
        obs = self._start(requests)
        if self.check_invariants:
            self._check()
        return obs, {}

    def step(self, action: Any) -> Step:
        terminated, projected, extra = self._advance(action)  # RuntimeError before reset: NOT_RESET
        now_s, num_steps, arrived, met, missed, preempted = self._progress()
        truncated = not terminated and (now_s >= self.horizon_s or num_steps >= self.max_steps)
        assert self._reward is not None
        reward, rewards = self._reward.step(arrived, met, missed, preempted, terminated or truncated)
        info: dict[str, Any] = {"rewards": rewards, "action_projected": projected, **extra}
        if terminated or truncated:
            info["metrics"] = self._metrics()
            info["load"] = self.load
        return self._observe(), reward, terminated, truncated, info

    def slo_tally(self) -> tuple[int, int, int]:
        """``(requests, met, missed)`` of the episode after the last step: its requests, and those already known to
        meet or to miss their SLO (an outcome, once counted, never changes; ``evaluation.decided`` stops on them)."""
        self._require("slo_tally")
        tally = self._reward
        assert tally is not None
        return tally.num_requests, tally.num_good, tally.num_missed

    def action_masks(self) -> np.ndarray:
        """Valid options of each action component, concatenated (sb3-contrib MaskablePPO)."""
        self._require("action_masks")
        return self._mask()

    def render(self) -> Any:
        if self._core() is None or self.render_mode is None:
            return None
        return self._render()

    def _draw_requests(self) -> list[Request]:
        if self.load_range is not None:
            self.load = float(self.np_random.uniform(*self.load_range))
        load = self.load * self._source_load
        return self.source.sample(self.np_random, self.num_requests, load, self._episode_window)

    def episode_requests(self, seed: int) -> list[Request]:
        """Fresh copies of the requests ``reset(seed=seed)`` replays (for another executor to serve)."""
        rng, self.np_random = self.np_random, seeding.np_random(seed)[0]
        window, self._episode_window = self._episode_window, reset_window(self, seed, None)
        try:
            return self._draw_requests()
        finally:
            self.np_random, self._episode_window = rng, window

    # ---------------------------------------------------------------------------------------- fork
    def snapshot(self) -> EnvSnapshot:
        """The episode as it stands; ``restore(snapshot)`` and the same actions then replay the same
        observations, rewards, infos and metrics."""
        self._require("snapshot")
        state = {**self._fork(), **self._episode_state()}
        return EnvSnapshot(type(self).__name__, self._signature, state)

    def restore(self, snapshot: EnvSnapshot) -> None:
        """Put the episode back as ``snapshot`` (from this env or another of the same arguments) holds it; one-line
        ``ValueError`` for a snapshot of another kind of env or of other arguments."""
        kind = type(self).__name__
        if not isinstance(snapshot, EnvSnapshot):
            raise ValueError(f"{kind}.restore: expected what snapshot() returned, got {type(snapshot).__name__}")
        if snapshot.env != kind:
            raise ValueError(f"{kind}.restore: this snapshot was taken from a {snapshot.env}")
        if snapshot.signature is not self._signature:
            for (name, mine), (_, theirs) in zip(self._signature, snapshot.signature, strict=True):
                if mine != theirs:
                    raise ValueError(
                        f"{kind}.restore: the snapshot's env was made with {name}={theirs!r}, this one with {mine!r}"
                    )
        self._restore(snapshot.state)
        if self.check_invariants:
            self._check()

    def _episode_state(self) -> dict[str, Any]:
        """What a snapshot holds besides the simulator: the generator, the reward bookkeeping (copied), the load
        and the trace window."""
        assert self._reward is not None
        return {
            "rng": self.np_random.bit_generator.state,
            "seed": self._np_random_seed,
            "reward": self._reward.copy(),
            "load": self.load,
            "window": self._episode_window,
        }

    def _restore_episode(self, state: dict[str, Any]) -> None:
        """The generator, reward bookkeeping (copied again), load and window of ``state``."""
        self.np_random.bit_generator.state = state["rng"]
        self._np_random_seed = state["seed"]
        self._reward = state["reward"].copy()
        self.load = state["load"]
        self._episode_window = state["window"]
