"""``mpc``: a model-predictive scheduler that plans on forecast futures, never on the real one (docs/evaluation.md).

Every ``k`` iterations the planner forks the simulator (``Simulator.with_future``) into ``futures`` futures sampled
from a forecast of the arrivals so far, plays every candidate on each and commits the best score (the base wins
ties and must be beaten by more than ``margin``). It never reads a request that has not arrived nor a live
request's true output length, so it is deployable (``tests/test_mpc.py``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from llmsched_env.common.checks import check_int
from llmsched_env.decision.actions import ActionSpec
from llmsched_env.decision.loop import DecisionLoop
from llmsched_env.decision.planners.space import REQUEST_MOVES, acts, around, base_decision, play, setting_of
from llmsched_env.decision.policy import PolicyContext
from llmsched_env.decision.spelling import parse_spelled, spell
from llmsched_env.engine.batch import Decision
from llmsched_env.engine.engine import Engine
from llmsched_env.engine.request import Request
from llmsched_env.sim.simulator import Simulator
from llmsched_env.workloads.forecast import Forecaster

__all__ = ["CANDIDATE_SETS", "MPC", "SCORES", "MPCConfig", "MPCPlanner", "MPCPolicy", "mpc_factory", "mpc_for",
           "mpc_on_env", "parse_mpc", "planner_around", "planner_for", "planning_view", "produced_tokens"]  # fmt: skip

MPC = "mpc"
SCORES = ("mean", "worst")
CANDIDATE_SETS = ("neighbours", "requests")  # the base and its single-knob moves; those and per-request moves
_FIRST_FORECAST_ID = 1 << 40  # forecast requests' ids: far above any real one


@dataclass(frozen=True)
class MPCConfig:
    """The planner's knobs (docs/evaluation.md); ``table``: a ``tuned`` base's table ("": the shipped or the
    evaluation's), left out of the name. ``ValueError`` naming the field."""

    k: int = 64
    futures: int = 4
    horizon: int = 64
    tail: int = 64
    score: str = "mean"
    margin: float = 0.0
    z: float = 0.0
    window: int = 256
    base: str = "tuned"
    terminal: bool = False
    candidates: str = "neighbours"
    table: str = ""

    def __post_init__(self) -> None:
        for name, low, high in (
            ("k", 1, 100_000),
            ("futures", 1, 1_000),
            ("horizon", 1, 100_000),
            ("tail", 0, 100_000),
            ("window", 2, 1_000_000),
        ):
            value = getattr(self, name)
            check_int("mpc", name, value, low)
            if value > high:
                raise ValueError(f"mpc.{name} must be at most {high:,}, got {value}")
        if self.score not in SCORES:
            raise ValueError(f"mpc.score must be one of {', '.join(SCORES)}, got {self.score!r}")
        if isinstance(self.margin, bool) or not isinstance(self.margin, (int, float)) or not 0 <= self.margin < 1e9:
            raise ValueError(f"mpc.margin must be a number of requests >= 0, got {self.margin!r}")
        if isinstance(self.z, bool) or not isinstance(self.z, (int, float)) or not 0 <= self.z < 100:
            raise ValueError(f"mpc.z must be a number in [0, 100), got {self.z!r}")
        if not isinstance(self.base, str) or not self.base:
            raise ValueError(f"mpc.base must be tuned or a static named rule, got {self.base!r}")
        if self.candidates not in CANDIDATE_SETS:
            raise ValueError(f"mpc.candidates must be one of {', '.join(CANDIDATE_SETS)}, got {self.candidates!r}")
        if not isinstance(self.terminal, bool):
            raise ValueError(f"mpc.terminal must be true or false, got {self.terminal!r}")
        if not isinstance(self.table, str):
            raise ValueError(f"mpc.table must be a path, got {self.table!r}")

    @property
    def name(self) -> str:
        """The policy-list spelling and its rows' ``policy``: ``mpc`` and the options off their defaults."""
        return spell(MPC, replace(self, table=""), _text)


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    return f"{value:g}" if isinstance(value, float) else str(value)


def parse_mpc(entry: str) -> MPCConfig | None:
    """The config ``entry`` spells (``mpc[:KEY=VALUE,...]``); None when it is not an mpc. One-line ``ValueError``."""
    return parse_spelled(entry, MPC, MPCConfig)


class MPCPlanner:
    """The planner over ``candidates`` (settings, the base first) and the per-request ``moves``; ``seed`` drives its
    forecasts. ``decide(sim)`` returns a setting's index, or ``len(candidates) + j`` for ``moves[j]``, which the
    caller makes on its engine before playing the base."""

    def __init__(
        self,
        spec: ActionSpec,
        candidates: list[Decision],
        config: MPCConfig,
        seed: int = 0,
        moves: list[str] | None = None,
    ) -> None:
        if not candidates:
            raise ValueError("mpc needs at least one candidate setting (the base)")
        unknown = sorted(set(moves or ()) - set(REQUEST_MOVES))
        if unknown:
            raise ValueError(f"mpc: unknown per-request moves {unknown}; known: {', '.join(REQUEST_MOVES)}")
        self.moves = list(moves or ())
        self.spec = spec
        self.config = config
        self.candidates = list(candidates)
        self.actions = [spec.encode(d) for d in self.candidates]
        self.forecaster = Forecaster(window=config.window)
        self.rng = np.random.default_rng([int(seed), 0x6D7063])  # its own stream: "mpc"
        self._loop = DecisionLoop(spec, name="mpc")
        self.num_decisions = self.num_switches = self.num_moves = 0
        self.planning_s = 0.0
        self.first_decision_s: float | None = None
        self.last_decision_s = 0.0
        self.last_scores: np.ndarray | None = None  # futures x candidates, of the last decision

    @property
    def engine_s(self) -> float:
        return 0.0 if self.first_decision_s is None else self.last_decision_s - self.first_decision_s

    def decide(self, sim: Simulator) -> int:
        """The candidate to play from ``sim``'s state for the next ``k`` iterations (``sim`` is left as it is)."""
        t0 = time.perf_counter()
        cfg = self.config
        engine = sim.engine
        now = engine.now_s
        if self.first_decision_s is None:
            self.first_decision_s = now
        # the step time so far estimates how far in time the rollouts reach
        steps = max(sim.num_steps, 1)
        step_s = max((now - sim.start_s) / steps, sim.idle_tick_s)
        until = now + 2.0 * (cfg.horizon + cfg.tail) * step_s
        live = engine.live_requests()
        produced = [produced_tokens(engine, r) for r in live]
        forecast = self.forecaster.fit(
            sim.arrived_requests(),
            engine.finished,
            now,
            engine.config.max_model_len,
            [(r.tenant, g) for r, g in zip(live, produced, strict=True)],
        )
        # the per-request moves that act on someone here (the same in every future: they pick by state alone)
        moves = [j for j, move in enumerate(self.moves) if acts(move, engine, self.candidates[0].order) is not None]
        n = len(self.actions)
        scores = np.full((cfg.futures, n + len(self.moves)), -np.inf)
        for m in range(cfg.futures):
            lens = [forecast.output_len(self.rng, r, g) for r, g in zip(live, produced, strict=True)]
            arrivals = forecast.arrivals(self.rng, until, _FIRST_FORECAST_ID)
            key = int(self.rng.integers(2**63))
            future = sim.with_future(arrivals, lens, rng=np.random.default_rng(key))

            def fork(future: Simulator = future, key: int = key) -> Simulator:
                # its remote KV store draws what the future's own would: the same draws for every candidate
                return future.fork(np.random.default_rng(key))

            last = n - 1 + len(moves)  # the last rollout of this future plays on it, the others on forks of it
            for i, action in enumerate(self.actions):
                scores[m, i] = self._rollout(fork() if i < last else future, action, until)
            for k, j in enumerate(moves):
                run = fork() if n + k < last else future
                play(self.moves[j], run.engine)  # it picks by state, as on the engine the planner was given
                scores[m, n + j] = self._rollout(run, self.actions[0], until)
        value = scores.mean(axis=0) if cfg.score == "mean" else _worst_quarter(scores)
        # the paired advantage over the base, less z standard errors of it over the futures
        diff = scores - scores[:, :1]
        with np.errstate(invalid="ignore"):  # a move that picked nobody: -inf, never chosen
            spread = diff.std(axis=0, ddof=1) / np.sqrt(cfg.futures) if cfg.futures > 1 else np.zeros(len(value))
        sure = value - value[0] - cfg.z * spread
        best = 0
        for i in range(1, len(value)):
            if value[i] > value[best] and sure[i] > cfg.margin:
                best = i
        self.last_scores = scores
        self.num_decisions += 1
        self.num_switches += best != 0
        self.num_moves += best >= n
        self.last_decision_s = now
        self.planning_s += time.perf_counter() - t0
        return best

    def _rollout(self, sim: Simulator, action: np.ndarray, until_s: float) -> float:
        """Play ``action`` for ``horizon`` iterations, then the base for ``tail``, on ``sim``; met minus missed."""
        plan = [(action, self.config.horizon), (self.actions[0], self.config.tail)]
        net = rollout(self._loop, sim, plan, lambda: sim.done or sim.now_s >= until_s)
        return float(net) - self._late(sim.engine)

    def _late(self, engine: Any) -> int:
        """With ``terminal``: the running requests already over their time per output token target; else 0."""
        if not self.config.terminal:
            return 0
        now, late = engine.now_s, 0
        tenants = engine.tenants
        for r in engine.running.values():
            first = r.first_token_s
            if first is None:
                continue
            produced = produced_tokens(engine, r)
            if produced > 1 and (now - first) / (produced - 1) > tenants[r.tenant].slo.tpot_s:
                late += 1
        return late


def rollout(loop: DecisionLoop, sim: Simulator, plan: Sequence[tuple[np.ndarray, int | None]], ended: Any) -> int:
    """Play ``plan`` on ``sim`` (None: until ``ended()``) as the env applies actions; requests met minus missed."""
    engine = sim.engine
    start = engine.num_good - engine.num_missed
    for action, n in plan:
        loop.take(action, hold=None)
        i = 0
        while n is None or i < n:
            if ended():
                return engine.num_good - engine.num_missed - start
            d = loop.next(engine)
            assert d is not None  # no ENGINE_DEFAULT fallback here
            sim.step(d)
            i += 1
    return engine.num_good - engine.num_missed - start


def produced_tokens(engine: Engine, r: Request) -> int:
    """Output tokens ``r`` has produced by now, without syncing a decoding request's lazy counter."""
    if r.decoding:
        return int(r.decode_out0 + engine.num_rounds - r.decode_round0)
    return int(r.num_output_tokens)


def _worst_quarter(scores: np.ndarray) -> np.ndarray:
    """Per candidate, the mean over its worst quarter of futures (at least one)."""
    n = max(1, scores.shape[0] // 4)
    return np.sort(scores, axis=0)[:n].mean(axis=0)


class Emitter:
    """Candidate ``i``'s action projected on a step's mask, kept per mask pattern; a fresh copy per call."""

    def __init__(self, spec: ActionSpec, actions: list[np.ndarray]) -> None:
        self.spec = spec
        self.actions = actions
        self._cache: dict[tuple[int, bytes], np.ndarray] = {}

    def __call__(self, chosen: int, mask: np.ndarray) -> np.ndarray:
        key = (chosen, mask.tobytes())
        out = self._cache.get(key)
        if out is None:
            out = self._cache[key] = self.spec.project(self.actions[chosen], mask)
        return out.copy()


def planning_view(sim: Simulator) -> Simulator:
    """A plain simulator in ``sim``'s state now, for a planner where ``sim`` cannot fork or runs on another
    ``clock``."""
    engine = sim.engine
    memo = {id(r): r.copy() for r in engine.live_requests()}
    copy = engine.fork(memo)
    arrived = [memo.get(id(r), r) for r in sim.arrived_requests()]
    return Simulator.around(copy, arrived, sim.num_steps, sim.start_s)


class MPCPolicy:
    """``mpc`` as a ``Policy``: every ``k``-th ``act`` the ``planner`` decides on ``state()``, and the chosen setting
    plays until the next decision. ``live``: a per-request move is made on ``state()``'s engine. ``background``: the
    plan runs on a worker thread and applies from the first ``act`` after it lands (one still running at the next
    ``k``-th ``act`` skips it); a plan that raised raises from the ``act`` that would adopt it."""

    bounded_act = False  # planning inline has no fixed cost; in the background act does O(live requests)

    def __init__(self, planner: MPCPlanner, state: Any, *, live: bool = False, background: bool = False) -> None:
        if planner.moves and (not live or background):
            raise ValueError(
                "mpc: per-request moves (candidates=requests) are made on the engine the planner drives, inline: "
                "only llmsched-evaluate's simulator episodes run them"
            )
        self.planner = planner
        self.state = state
        self.background = background
        self.bounded_act = background
        self.num_adopted = self.num_skipped = self.lag_steps = 0
        self._steps = self._chosen = 0
        self._emit = Emitter(planner.spec, planner.actions)
        self._pool: Any = None
        self._pending: Any = None  # the plan in flight: a Future of (candidate, the act count at its state)

    def start_episode(self) -> None:
        """A new episode: plan again from its first ``act`` (a plan in flight is dropped)."""
        self._steps = 0
        self._chosen = 0
        self._pending = None

    def act(self, observation: np.ndarray, action_mask: np.ndarray) -> np.ndarray:
        k = self.planner.config.k
        if self._pending is not None and self._pending.done():
            pending, self._pending = self._pending, None
            chosen, at = pending.result()
            self._chosen = chosen
            self.num_adopted += 1
            self.lag_steps += self._steps - at
        if self._steps % k == 0:
            if not self.background:
                self._chosen = self._decide(self.state())
            elif self._pending is None:
                if self._pool is None:
                    from concurrent.futures import ThreadPoolExecutor

                    self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="llmsched-mpc")
                view, at = self.state(), self._steps
                self._pending = self._pool.submit(lambda: (self.planner.decide(view), at))
            else:
                self.num_skipped += 1
        self._steps += 1
        return self._emit(self._chosen, action_mask)

    def _decide(self, sim: Simulator) -> int:
        """The planner's choice on ``sim``; a per-request move is made on it now, and the base plays."""
        planner = self.planner
        return setting_of(planner.decide(sim), len(planner.actions), planner.moves, sim.engine)

    def summary(self) -> str:
        """One line: plans, switches, mean planning time (in the background: adopted, their lag, skipped)."""
        p = self.planner
        mean_ms = 1e3 * p.planning_s / p.num_decisions if p.num_decisions else 0.0
        line = f"{p.num_decisions} plans, {p.num_switches} off the base, {mean_ms:.1f} ms each"
        if self.background:
            lag = self.lag_steps / self.num_adopted if self.num_adopted else 0.0
            line += f", {self.num_adopted} adopted {lag:.1f} decisions late, {self.num_skipped} skipped"
        return line

    def close(self) -> None:
        """Stop the planning thread (a plan in flight finishes first)."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        self._pending = None


def mpc_for(config: MPCConfig, ctx: PolicyContext, seed: int = 0) -> MPCPolicy:
    """``mpc`` in ``ctx``, planning on ``ctx.planning_state()`` (on a thread where ``ctx.background_planning``).
    One-line ``ValueError`` where ``ctx`` gives no state, for per-request moves, or without a tuned entry."""
    if ctx.planning_state is None:
        raise ValueError(
            f"policy {config.name!r} plans on a copy of the engine's state, which this driver does not give: it runs "
            "in llmsched-evaluate's simulator episodes, the in-situ replays and the vLLM adapter (not on the torch "
            "runtime or as a cluster's router or local policy)"
        )
    if config.candidates == "requests":
        raise ValueError(
            f"policy {config.name!r}: per-request moves are made on the engine the planner drives; only "
            "llmsched-evaluate's simulator episodes run candidates=requests"
        )
    planner = planner_for(config, ctx, seed, None)
    return MPCPolicy(planner, ctx.planning_state, background=ctx.background_planning)


def planner_for(config: MPCConfig, ctx: PolicyContext, seed: int, table: Any = None) -> MPCPlanner:
    """``planner_around`` ``config``'s base in ``ctx``; one-line ``ValueError`` for a scenario without a tuned entry."""
    try:
        base = base_decision(config.base, ctx, seed, config.table or table)
    except ValueError as exc:
        reason = str(exc).split(";")[0]
        raise ValueError(
            f"mpc on {ctx.scenario!r}: {reason}; give it a static base (mpc:base=fcfs) or tune the scenario "
            "(llmsched-tune)"
        ) from None
    return planner_around(base, ctx.action_spec, config, seed)


def planner_around(base: Decision, spec: ActionSpec, config: MPCConfig, seed: int) -> MPCPlanner:
    """The planner over ``base``, its single-knob moves and (``candidates=requests``) the per-request moves."""
    settings, moves = around(base, spec, config.candidates)
    return MPCPlanner(spec, settings, config, seed, moves)


def mpc_on_env(env: Any, config: MPCConfig, seed: int = 0, table: Any = None) -> MPCPolicy:
    """``mpc`` on ``env`` (``LLMSched-v1`` of one iteration per step, reset), planning on its own simulator.
    One-line ``ValueError`` for an env it cannot plan on, or a scenario without a tuned entry."""
    u: Any = env.unwrapped
    if not hasattr(u, "sim") or not hasattr(u, "action_spec") or not hasattr(u, "policy_context"):
        raise ValueError(f"mpc plans on LLMSched-v1's simulator; {type(u).__name__} has no single-node simulator")
    if getattr(u, "iterations_per_step", 1) != 1:
        raise ValueError("mpc needs an env of one engine iteration per step (iterations_per_step=1)")
    if u.sim is None:
        raise ValueError("mpc: reset the env before building the planner")
    planner = planner_for(config, u.policy_context(), seed, table)
    return MPCPolicy(planner, lambda: u.sim, live=True)


def mpc_factory(config: MPCConfig, seed: int, table: Any = None) -> Callable[[Any], MPCPolicy]:
    """``mpc_on_env`` as ``run_episode``'s policy factory: built on the env once it is reset."""
    return lambda env: mpc_on_env(env, config, seed, table)
