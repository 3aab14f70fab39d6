"""``LLMSchedMix-v0``: a different workload every episode (a library scenario near its knee, or a randomised one
with ``random_share``), on an ``LLMSched-v1`` of schema 2. On ``val`` and ``test`` seed ``s`` plays scenario
``s % len(scenarios)`` at ``val_load`` x its knee.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any, ClassVar

import numpy as np
from gymnasium import spaces

from llmsched_env.common.checks import check_bool, check_int, check_positive, is_finite_number, shown
from llmsched_env.decision.actions import ActionSpec
from llmsched_env.decision.observation import OBS_CLIP, GenericObservationEncoder
from llmsched_env.decision.policy import PolicyContext
from llmsched_env.engine.config import EngineConfig, TenantConfig
from llmsched_env.envs.base import EnvBase
from llmsched_env.envs.reward import RewardConfig
from llmsched_env.envs.single_node import LLMSchedEnv
from llmsched_env.workloads.library import get_scenario, list_scenarios, mixture_scenarios
from llmsched_env.workloads.prediction import LengthPredictor
from llmsched_env.workloads.randomized import DEFAULT_SPACE, RandomizedSpace, random_scenario
from llmsched_env.workloads.scenarios import check_split

DEFAULT_KNEE_LOAD = 1.5  # a library scenario's knee when none is given (its nominal rate is fcfs's knee)
DEFAULT_PREDICTIONS = ("none", "exact", "lognormal:0.5", "lognormal:1.0")
DEFAULT_LOAD_SPAN = (0.5, 1.5)  # training loads: this times the scenario's knee


@dataclass(frozen=True, kw_only=True)
class MixConfig:
    """``WorkloadMixEnv``'s arguments; the others as ``LLMSched-v1``."""

    scenarios: Sequence[str] | None = None  # None: ``mixture_scenarios()``
    split: str = "train"
    # scenario -> the load where the best heuristic keeps 90% attainment (None: ``DEFAULT_KNEE_LOAD`` each)
    knee_loads: Mapping[str, float] | None = None
    load_span: Sequence[float] = DEFAULT_LOAD_SPAN  # training loads, x the knee
    val_load: float = 1.0  # val and test load, x the knee
    random_share: float = 0.5  # the chance of a randomised scenario in training
    random_space: RandomizedSpace = DEFAULT_SPACE
    length_predictions: Sequence[str] = DEFAULT_PREDICTIONS  # one drawn per training episode
    num_requests: int | None = None  # capped by each scenario's size
    iterations_per_step: int = 1
    reward: RewardConfig | Mapping[str, float] | None = None
    check_invariants: bool = False


def _sequence(owner: str, name: str, value: object) -> tuple[Any, ...]:
    """``value`` as a tuple when it is a list or tuple (not text); else ``ValueError`` naming the argument."""
    if not isinstance(value, (list, tuple)):
        raise ValueError(f"{owner}.{name} must be a list, got {type(value).__name__}")
    return tuple(value)


class WorkloadMixEnv(EnvBase[MixConfig]):
    """One engine iteration per step, as ``LLMSched-v1``; a new workload each episode (module docstring), drawn
    as ``MixConfig`` says. ``info["workload"]`` of ``reset`` says what was drawn."""

    schema: ClassVar[int] = 2
    config_class = MixConfig

    def __init__(self, config: MixConfig | None = None, **kwargs: Any) -> None:
        super().__init__(config, **kwargs)
        c = self.config
        owner = "WorkloadMixEnv"
        names = tuple(mixture_scenarios() if c.scenarios is None else _sequence(owner, "scenarios", c.scenarios))
        unknown = [s for s in names if not isinstance(s, str) or s not in list_scenarios()]
        if unknown or not names:
            raise ValueError(f"{owner}.scenarios: unknown {unknown or names}; available: {list_scenarios()}")
        self.scenarios = names
        self.split = check_split(c.split)
        knees = {} if c.knee_loads is None else c.knee_loads
        if not isinstance(knees, Mapping):
            raise ValueError(f"{owner}.knee_loads must map scenario names to loads, got {type(knees).__name__}")
        unknown = [k for k in knees if k not in list_scenarios()]
        if unknown:  # a misspelt scenario's knee would be ignored
            raise ValueError(f"{owner}.knee_loads: unknown scenario {shown(unknown[0])}; available: {list_scenarios()}")
        self.knee_loads = {s: check_positive(owner, f"knee_loads[{s!r}]", knees.get(s, DEFAULT_KNEE_LOAD))
                           for s in names}  # fmt: skip
        span = _sequence(owner, "load_span", c.load_span)
        if len(span) != 2 or not all(is_finite_number(v) and v > 0 for v in span) or span[0] > span[1]:
            raise ValueError(f"{owner}.load_span must be [low, high] with 0 < low <= high, got {c.load_span!r}")
        self.load_span = (float(span[0]), float(span[1]))
        self.val_load = float(check_positive(owner, "val_load", c.val_load))
        share = c.random_share
        if not (is_finite_number(share) and 0.0 <= share <= 1.0):
            raise ValueError(f"{owner}.random_share must be a number in [0, 1], got {share!r}")
        self.random_share = float(share)
        if not isinstance(c.random_space, RandomizedSpace):
            raise ValueError(f"{owner}.random_space must be a RandomizedSpace, got {type(c.random_space).__name__}")
        self.random_space = c.random_space
        predictions = _sequence(owner, "length_predictions", c.length_predictions)
        self.length_predictions = tuple(str(LengthPredictor.of(p)) for p in predictions)
        if not self.length_predictions:
            raise ValueError(f"{owner}.length_predictions needs at least one entry (e.g. 'none')")
        if c.num_requests is not None:
            check_int(owner, "num_requests", c.num_requests, 1)
        self.num_requests = None if c.num_requests is None else int(c.num_requests)
        check_int(owner, "iterations_per_step", c.iterations_per_step, 1)
        self.iterations_per_step = int(c.iterations_per_step)
        self.reward = c.reward
        self.check_invariants = check_bool(owner, "check_invariants", c.check_invariants)
        self.render_mode = None
        probe = GenericObservationEncoder(EngineConfig(), (TenantConfig("probe"),), 1.0)
        self.obs_names = probe.names
        self.observation_space = spaces.Box(-OBS_CLIP, OBS_CLIP, shape=(probe.size,), dtype=np.float32)
        self.action_space = spaces.MultiDiscrete(np.array(ActionSpec.for_engine(EngineConfig(), 2).nvec))
        self.inner: LLMSchedEnv | None = None
        self.workload: dict[str, Any] = {}
        self.episode_seed: int | None = None
        self._signature = tuple((f.name, getattr(c, f.name)) for f in fields(c))

    # ---------------------------------------------------------------------------------------- the draw
    def draw(self, seed: int) -> tuple[LLMSchedEnv, dict[str, Any]]:
        """The env of the episode of ``seed`` and what was drawn (deterministic in ``seed``)."""
        rng = np.random.default_rng([11, seed])
        size: int | None
        if self.split != "train":  # the library in turn at val_load x its knee, no prediction
            name = self.scenarios[seed % len(self.scenarios)]
            scenario: Any = name
            load, size, prediction = self.knee_loads[name] * self.val_load, self._size(name), "none"
        else:
            if rng.random() < self.random_share:
                scenario = random_scenario(int(rng.integers(2**31)), self.random_space)
                name, size = scenario.name, self.num_requests
                load = float(rng.uniform(*self.random_space.load_range))
            else:
                name = scenario = self.scenarios[int(rng.integers(len(self.scenarios)))]
                load, size = float(self.knee_loads[name] * rng.uniform(*self.load_span)), self._size(name)
            prediction = self.length_predictions[int(rng.integers(len(self.length_predictions)))]
        env = LLMSchedEnv(
            scenario=scenario,
            load=load,
            num_requests=size,
            length_prediction=prediction,
            split=self.split,
            iterations_per_step=self.iterations_per_step,
            reward=self.reward,
            check_invariants=self.check_invariants,
            schema=2,
        )
        if self.split != "train":  # a trace's windows in turn, one pass over the library per window
            env.window = seed // len(self.scenarios)
        return env, {"scenario": name, "load": load, "length_prediction": prediction}

    def replay(self) -> tuple[LLMSchedEnv, int]:
        """A fresh env of the current episode's workload and the seed whose ``reset`` gives it the same requests
        (a teacher that tries settings on the episode plays them there: ``agents.teacher``)."""
        if self.episode_seed is None:
            raise RuntimeError("call reset() before replay(): each episode has its own workload")
        return self.draw(self.episode_seed)[0], self.episode_seed

    def _size(self, name: str) -> int | None:
        """Episode size for library scenario ``name``: ``num_requests`` capped by the scenario's own."""
        if self.num_requests is None:
            return None
        return min(self.num_requests, get_scenario(name).num_requests)

    # ---------------------------------------------------------------------------------------- gym API
    def _core(self) -> LLMSchedEnv | None:
        return self.inner

    reset_options: ClassVar[tuple[str, ...]] = ()  # each episode's workload (and its window) is drawn from the seed

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        seed = self._seed(seed, options)
        episode_seed = int(self.np_random.integers(2**31)) if seed is None or self.split == "train" else seed
        if self.inner is not None:
            self.inner.close()
        self.inner, self.workload = self.draw(episode_seed)
        self.episode_seed = episode_seed
        obs, info = self.inner.reset(seed=episode_seed)
        return obs, {**info, "workload": dict(self.workload)}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        inner: LLMSchedEnv = self._require("step")
        obs, reward, terminated, truncated, info = inner.step(action)
        if terminated or truncated:
            info["workload"] = dict(self.workload)
        return obs, reward, terminated, truncated, info

    def _mask(self) -> np.ndarray:
        assert self.inner is not None
        return self.inner.action_masks()

    def _fork(self) -> dict[str, Any]:
        """The episode's env (its own snapshot), the workload drawn and the episode's seed."""
        assert self.inner is not None
        return {"inner": self.inner.snapshot(), "workload": dict(self.workload), "episode_seed": self.episode_seed}

    def _episode_state(self) -> dict[str, Any]:
        return {"rng": self.np_random.bit_generator.state, "seed": self._np_random_seed}

    def _restore(self, state: dict[str, Any]) -> None:
        self.np_random.bit_generator.state = state["rng"]
        self._np_random_seed = state["seed"]
        if self.inner is None or self.episode_seed != state["episode_seed"]:
            if self.inner is not None:
                self.inner.close()
            self.inner = self.draw(state["episode_seed"])[0]
        self.inner.restore(state["inner"])
        self.workload, self.episode_seed = dict(state["workload"]), state["episode_seed"]

    def _check(self) -> None:
        assert self.inner is not None
        self.inner._check()

    @property
    def action_spec(self) -> ActionSpec:
        """The current episode's action layout (its options are the same in every episode)."""
        return self.inner.action_spec if self.inner is not None else ActionSpec.for_engine(EngineConfig(), 2)

    @property
    def sim(self) -> Any:
        return self.inner.sim if self.inner is not None else None

    def policy_context(self) -> PolicyContext:
        """The current episode's context (a heuristic is built for each episode, after ``reset``)."""
        inner: LLMSchedEnv = self._require("policy_context")
        return inner.policy_context()

    def close(self) -> None:
        if self.inner is not None:
            self.inner.close()
        super().close()
