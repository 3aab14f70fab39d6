"""``LLMSched-v1`` (schema 2, workload-agnostic) and ``LLMSched-v0`` (schema 1, per named tenant): the
single-node Gymnasium environment, ``LLMSchedEnv``, a thin wrapper over ``engine``, ``sim`` and ``decision``."""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from gymnasium import spaces

from llmsched_env.common.checks import check_int
from llmsched_env.costs.base import CostModel
from llmsched_env.costs.loader import cost_model_of
from llmsched_env.decision.actions import ActionSpec
from llmsched_env.decision.loop import DecisionLoop
from llmsched_env.decision.observation import OBS_CLIP, make_encoder
from llmsched_env.decision.policy import PolicyContext
from llmsched_env.decision.schema import ENV_IDS, SCHEMA_VERSION, check_schema, env_id
from llmsched_env.engine.config import EngineConfig
from llmsched_env.engine.remote_kv import RemoteKVConfig
from llmsched_env.engine.request import Request
from llmsched_env.envs.base import NOT_RESET, EnvBase
from llmsched_env.envs.options import EpisodeConfig, engine_config
from llmsched_env.envs.render import render_ansi, render_rgb
from llmsched_env.sim.simulator import Simulator
from llmsched_env.workloads.library import get_scenario, list_scenarios
from llmsched_env.workloads.prediction import LengthPredictor
from llmsched_env.workloads.scenarios import Scenario, SyntheticSource, TraceSource
from llmsched_env.workloads.workload import WorkloadConfig

__all__ = ["ENV_IDS", "LLMSchedEnv", "SingleNodeConfig", "env_id", "make_v0", "make_v1"]


@dataclass(frozen=True, kw_only=True)
class SingleNodeConfig(EpisodeConfig):
    """``LLMSchedEnv``'s arguments; ``None``: the scenario's."""

    scenario: str | Scenario | None = None  # a library name (None: ``default``) or a Scenario
    workload: WorkloadConfig | None = None  # instead of a scenario
    cost_model: str | CostModel | None = None  # a preset, a JSON path or a CostModel
    engine: EngineConfig | Mapping[str, Any] | None = None
    remote_kv: RemoteKVConfig | None = None
    action_spec: ActionSpec | None = None  # None: the schema's for the engine
    iterations_per_step: int = 1  # hold each action k iterations, rewards summed
    schema: int = SCHEMA_VERSION  # 2: workload-agnostic, 1: per named tenant (``decision.schema``)
    # none, exact or lognormal:SIGMA: predicted output lengths, read by SPRW and the ``pred/`` features
    length_prediction: str | Mapping[str, Any] | LengthPredictor | None = None


def _named_scenario(name: object) -> Scenario:
    """The library scenario ``name`` (None: ``default``); ``ValueError`` naming the field ``scenario`` for an
    empty, unknown or non-text name (an empty one is not taken for ``default``)."""
    if name is None:
        return get_scenario("default")
    if not isinstance(name, str) or not name.strip():
        raise ValueError(
            f"LLMSchedEnv.scenario must be a scenario name ({', '.join(list_scenarios())}) or a Scenario, "
            f"got {name!r:.80}"
        )
    try:
        return get_scenario(name)
    except ValueError as exc:
        raise ValueError(f"LLMSchedEnv.scenario: {exc}") from None


class LLMSchedEnv(EnvBase[SingleNodeConfig]):
    """Schedule one LLM serving engine, one engine iteration per step.

    ## Description
    Requests of several tenants arrive (Poisson, or a trace's) at a continuous-batching engine with a paged KV
    cache. Each step the agent sets the knobs of the next iteration's batch builder; the simulator forms the batch
    (running decodes, unfinished prefills in chunks, then waiting requests in the chosen order), the cost model
    times it, and the clock moves on.

    ## Action space
    ``MultiDiscrete(action_spec.nvec)``: queue order (FCFS, priority with aging, earliest TTFT deadline, shortest
    prompt, VTC, longest cached prefix), token budget, chunk cap, batch mix, admission cap (0 holds admission),
    KV reserve, shedding. ``action_masks()`` gives the valid options (MaskablePPO). The action reaches the engine
    through ``decision.loop.DecisionLoop``: a masked-out component moves to its first valid option
    (``info["action_projected"]``); a malformed action is refused with a ``ValueError`` naming the component.

    ## Observation space
    ``Box(-10, 10, (n,), float32)`` of named features (``obs_names``): queue, KV, running set, remote-KV fetches,
    latency over SLO, attainment and arrival rate over the nominal rate; then, in schema 2 (default), tenant-agnostic
    features (urgency bands, length predictions, four urgency-ordered tenant slots, aggregates of the rest), in
    schema 1 six per named tenant (``decision.observation``).

    ## Rewards
    Each request counts once, when its outcome is known: ``good`` (+1/N) within its TTFT and TPOT SLOs, ``miss``
    (−1/N) rejected, past its TTFT deadline without a first token, or finished too slowly; unresolved requests
    miss at the episode's end, so a drained episode returns ``2 · slo_attainment − 1``. ``preempt`` (weight 0 by
    default) charges recompute preemptions. Terms in ``info["rewards"]``.

    ## Episode end
    ``terminated`` once every request has arrived and finished or been rejected; ``truncated`` past
    ``horizon_s`` or ``max_steps``. The last ``info["metrics"]`` holds the episode metrics.

    ## Arguments
    A ``SingleNodeConfig`` (each field says what it means), or its fields as keywords. On ``val`` and ``test``,
    ``reset(options={"window": k})`` or the ``window`` attribute replays the ``k``-th window.
    """

    metadata: dict[str, Any] = {"render_modes": ["ansi", "rgb_array"], "render_fps": 10}  # noqa: RUF012
    config_class = SingleNodeConfig

    def __init__(self, config: SingleNodeConfig | None = None, **kwargs: Any) -> None:
        super().__init__(config, **kwargs)
        c = self.config
        if c.workload is not None and c.scenario is not None:
            raise ValueError("give either scenario= or workload=, not both")
        if c.workload is not None:
            if not isinstance(c.workload, WorkloadConfig):
                raise ValueError(f"workload must be a WorkloadConfig, got {type(c.workload).__name__}")
            wl = c.workload
            sc = Scenario(
                "custom", "a user workload", lambda sp, scale: SyntheticSource(wl, sp), num_requests=wl.num_requests
            )
        else:
            sc = c.scenario if isinstance(c.scenario, Scenario) else _named_scenario(c.scenario)
        check_int("LLMSchedEnv", "iterations_per_step", c.iterations_per_step, 1)
        self.schema = check_schema(c.schema, "LLMSchedEnv.schema")
        self.length_predictor = LengthPredictor.of(c.length_prediction)
        self.iterations_per_step = c.iterations_per_step
        self.scenario = sc
        self.engine_config = engine_config(c.engine if c.engine is not None else sc.engine)
        cm = c.cost_model if c.cost_model is not None else sc.cost_model
        self.cost_model = cost_model_of("LLMSchedEnv.cost_model", cm)
        self._episode_args(c)
        self.num_requests = c.num_requests if c.num_requests is not None else sc.num_requests
        self.remote_kv = c.remote_kv if c.remote_kv is not None else sc.remote_kv
        for name, kind in (("remote_kv", "a RemoteKVConfig"), ("action_spec", "an ActionSpec")):
            value = getattr(c, name)
            if value is not None and not isinstance(value, RemoteKVConfig if name == "remote_kv" else ActionSpec):
                raise TypeError(f"LLMSchedEnv.{name} must be {kind} or None, got {type(value).__name__}")
        self.source = sc.source(self.split, self.cost_model)
        if isinstance(self.source, TraceSource):  # an episode larger than the trace's part fails now, not at reset
            self.source.check_episode(self.num_requests)
        self.action_spec = c.action_spec or ActionSpec.for_engine(self.engine_config, self.schema)
        self.action_spec.check_engine(self.engine_config)
        self.tenants = self.source.tenants
        # arrival/rate is measured against the scenario's nominal (load 1.0) rate, so it reads as the load
        self.encoder = make_encoder(self.schema, self.engine_config, self.tenants, self.source.nominal_rate_rps())
        self.obs_names = self.encoder.names
        self.action_space = spaces.MultiDiscrete(np.array(self.action_spec.nvec, dtype=np.int64))
        self.observation_space = spaces.Box(-OBS_CLIP, OBS_CLIP, shape=(self.encoder.size,), dtype=np.float32)
        self.sim: Simulator | None = None
        self.history: deque[tuple[float, int, float, float]] = deque(maxlen=600)
        self._last_step_s = 0.0
        # how the agent's action reaches the engine (decision.loop): validated, held for iterations_per_step
        # iterations, corrected where the mask forbids it; the agent is the policy, so no deadline or fallback
        self.decisions = DecisionLoop(self.action_spec, self.encoder, hold=c.iterations_per_step, name="the action")
        self._signature = (
            ("scenario", sc.name),
            ("split", self.split),
            ("num_requests", self.num_requests),
            ("engine", self.engine_config),
            ("tenants", self.tenants),
            ("cost_model", self.cost_model),
            ("remote_kv", self.remote_kv),
            ("action_spec", self.action_spec),
            ("schema", self.schema),
            ("iterations_per_step", c.iterations_per_step),
            ("reward", self.reward_config),
            ("horizon_s", self.horizon_s),
            ("max_steps", self.max_steps),
            ("length_prediction", str(self.length_predictor)),
        )

    @property
    def nominal_rate_rps(self) -> float:
        """The episode's arrival rate at its load."""
        return self.source.nominal_rate_rps() * self.load

    # ---------------------------------------------------------------------------------------- hooks
    def _core(self) -> Simulator | None:
        return self.sim

    def _start(self, requests: list[Request]) -> np.ndarray:
        self.sim = Simulator(
            self.engine_config, self.tenants, self.cost_model, requests, remote_kv=self.remote_kv, rng=self.np_random
        )
        self._last_step_s = 0.0
        self.decisions.reset()
        self.history.clear()
        return self.decisions.observe(self.sim.engine, 0.0)

    def _advance(self, action: Any) -> tuple[bool, bool, dict[str, Any]]:
        sim, loop = self.sim, self.decisions
        if sim is None:
            raise RuntimeError(NOT_RESET.format("step"))
        engine = sim.engine
        loop.take(action, engine)  # validates: ValueError naming the component of a malformed action
        corrected = loop.stats.num_corrected
        t0 = engine.now_s
        terminated = False
        for _ in range(self.iterations_per_step):
            decision = loop.next(engine)  # the action, corrected where the mask forbids it now
            assert decision is not None  # no ENGINE_DEFAULT fallback here
            sim.step(decision)
            if self.check_invariants:
                sim.check_invariants()
            if sim.done:
                terminated = True
                break
        self._last_step_s = engine.now_s - t0
        if self.render_mode is not None:
            self.history.append((sim.now_s, engine.num_waiting_total, engine.pool.usage, self._last_step_s))
        return terminated, loop.stats.num_corrected != corrected, {}

    def _progress(self) -> tuple[float, int, int, int, int, int]:
        sim = self.sim
        assert sim is not None
        e = sim.engine
        return sim.now_s, sim.num_steps, e.num_arrived, e.num_good, e.num_missed, e.num_preemptions

    def _metrics(self) -> dict[str, float]:
        assert self.sim is not None
        return self.sim.metrics()

    def _observe(self) -> np.ndarray:
        assert self.sim is not None
        return self.decisions.observe(self.sim.engine, self._last_step_s)

    def _mask(self) -> np.ndarray:
        assert self.sim is not None
        return self.action_spec.mask(self.sim.engine).copy()  # callers (SB3) may write to it

    def _check(self) -> None:
        assert self.sim is not None
        self.sim.check_invariants()

    def _render(self) -> str | np.ndarray:
        assert self.sim is not None
        if self.render_mode == "ansi":
            return render_ansi(self.sim, self._last_step_s)
        return render_rgb(self.sim, list(self.history))

    def _draw_requests(self) -> list[Request]:
        requests = super()._draw_requests()
        if self.length_predictor.enabled:  # its own stream: the requests are the same with or without it
            self.length_predictor.apply(requests, np.random.default_rng([7, int(self.np_random.integers(2**63))]))
        return requests

    def _fork(self) -> dict[str, Any]:
        """The simulator (engine, clock, requests still to arrive; ``Simulator.fork``), the step time and the
        render history. O(live requests + KV blocks)."""
        assert self.sim is not None
        return {
            "sim": self.sim.fork(None),
            "last_step_s": self._last_step_s,
            "history": list(self.history),
            "step": self.sim.num_steps,
        }

    def _restore(self, state: dict[str, Any]) -> None:
        self._restore_episode(state)
        self.sim = state["sim"].fork(self.np_random)  # the remote KV store draws from this env's generator
        self._last_step_s = state["last_step_s"]
        self.history.clear()
        self.history.extend(state["history"])

    def policy_context(self) -> PolicyContext:
        """The static facts a heuristic baseline is built from."""
        return PolicyContext(
            self.engine_config, self.tenants, self.cost_model, self.action_spec, self.obs_names, self.scenario.name
        )


def _versioned(schema: int, kwargs: dict[str, Any]) -> LLMSchedEnv:
    config = kwargs.pop("config", None)
    given = config.schema if isinstance(config, SingleNodeConfig) else kwargs.pop("schema", schema)
    if given != schema:
        other = ENV_IDS.get(given) if isinstance(given, int) and not isinstance(given, bool) else None
        hint = f": gym.make({other!r}) is the env of schema {given}" if other else f" (schemas: {sorted(ENV_IDS)})"
        raise ValueError(f"{ENV_IDS[schema]} is the env of observation schema {schema}, not {given!r}{hint}")
    return LLMSchedEnv(config, **kwargs) if config is not None else LLMSchedEnv(schema=schema, **kwargs)


def make_v0(**kwargs: Any) -> LLMSchedEnv:
    """``gym.make("LLMSched-v0", ...)``: the env of schema 1 (features per named tenant; the layout of the
    per-tenant policies). ``schema=`` may only repeat 1."""
    return _versioned(1, kwargs)


def make_v1(**kwargs: Any) -> LLMSchedEnv:
    """``gym.make("LLMSched-v1", ...)``: the env of schema 2 (workload-agnostic features; the generalist's).
    ``schema=`` may only repeat 2."""
    return _versioned(2, kwargs)
