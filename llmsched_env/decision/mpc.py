"""``mpc``: a model-predictive scheduler that plans on forecast futures, never on the real one.

    planner = MPCPlanner(spec, candidates, MPCConfig(k=64, futures=4, horizon=64, tail=64), seed=0)
    index = planner.decide(sim)          # every k iterations: the candidate setting to play for the next k
    parse_mpc("mpc:k=32,futures=8")     # the policy-list spelling

Every ``k`` iterations the planner forks the simulator it is given (``Simulator.with_future``) into ``futures``
forecast futures: the requests still to arrive are replaced by a sample from a ``workloads.forecast`` fitted on
the arrivals seen so far, and every live request's output length by a sample from what is known of it (its
prediction, or its tenant's finished outputs longer than what it has produced). On each future it plays every
candidate setting (``candidates[0]`` is the base; ``evaluation.mpc`` passes the base and its single-knob moves,
as ``lookahead`` does) for ``horizon`` iterations, then the base for ``tail`` more, all candidates on the same
futures (common random numbers), and scores each rollout as the env's reward does: requests met minus requests
missed meanwhile. It commits the candidate with the best mean score over the futures (``score=mean``) or the
best mean over its worst quarter of futures (``score=worst``, risk-averse); the base wins ties, and another
candidate must beat the base by more than ``margin`` requests. A rollout stops early where the forecast ends
(the clock passes the last forecast arrival's horizon) or the simulated engine has nothing left to do.

It reads the engine's state as it stands: arrivals so far, the state of live requests, the outputs of finished
ones; it never reads a request that has not arrived nor a live request's true output length (``Simulator
.with_future`` overwrites them in the fork before any rollout runs). So it is a scheduler one could deploy: its
decisions before any time ``t`` do not change when everything after ``t`` does (``tests/test_mpc.py``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from llmsched_env.common.checks import check_int
from llmsched_env.decision.actions import ActionSpec
from llmsched_env.decision.loop import DecisionLoop
from llmsched_env.decision.moves import REQUEST_MOVES, pick, play, redundant
from llmsched_env.decision.spelling import spell, split_options
from llmsched_env.engine.batch import Decision
from llmsched_env.engine.engine import Engine
from llmsched_env.engine.request import Request
from llmsched_env.sim.simulator import Simulator
from llmsched_env.workloads.forecast import Forecaster

__all__ = ["CANDIDATE_SETS", "MPC", "SCORES", "MPCConfig", "MPCPlanner", "parse_mpc", "produced_tokens"]

MPC = "mpc"
SCORES = ("mean", "worst")
CANDIDATE_SETS = ("neighbours", "requests")  # the base and its single-knob moves; those and per-request moves
_FIRST_FORECAST_ID = 1 << 40  # forecast requests' ids: far above any real one


@dataclass(frozen=True)
class MPCConfig:
    """``k``: iterations between two decisions; ``futures``: forecast futures per decision; ``horizon``:
    iterations each candidate plays on each future; ``tail``: iterations of the base after it; ``score``:
    ``mean`` or ``worst`` (the mean over the worst quarter of futures); ``margin``: requests by which a candidate
    must beat the base's score to be chosen; ``z``: and by more than ``z`` standard errors of its paired advantage
    over the futures (0: the plain mean); ``window``: recent arrivals (and finished requests per tenant) the
    forecast is fitted on; ``base``: ``tuned`` (the scenario's tuned entry) or a static named rule; ``terminal``:
    also count as missed, at a rollout's end, the running requests whose time per output token so far exceeds
    their target (an estimate of the misses the horizon cuts off); ``candidates``: ``neighbours`` (the settings
    the caller gives) or ``requests`` (those and the per-request moves of ``decision.moves``). ``ValueError``
    naming the field."""

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

    @property
    def name(self) -> str:
        """The policy-list spelling and the ``policy`` column of its rows: ``mpc``, then the options that differ
        from the defaults."""
        return spell(MPC, self, _text)


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    return f"{value:g}" if isinstance(value, float) else str(value)


def parse_mpc(entry: str) -> MPCConfig | None:
    """The config ``entry`` spells (``mpc`` or ``mpc:KEY=VALUE,...`` with the keys of ``MPCConfig``); None when
    ``entry`` is not an mpc. One-line ``ValueError`` naming the bad option."""
    given = split_options(entry, MPC, MPCConfig)
    if given is None:
        return None
    kwargs: dict[str, Any] = {}
    for key, value in given.items():
        if key in ("score", "base", "candidates"):
            kwargs[key] = value
        elif key == "terminal":
            if value not in ("true", "false"):
                raise ValueError(f"policy {entry!r}: mpc.terminal must be true or false, got {value!r}")
            kwargs[key] = value == "true"
        else:
            number = key in ("margin", "z")
            try:
                kwargs[key] = float(value) if number else int(value)
            except ValueError:
                kind = "a number" if number else "an integer"
                raise ValueError(f"policy {entry!r}: mpc.{key} must be {kind}, got {value!r}") from None
    try:
        return MPCConfig(**kwargs)
    except ValueError as exc:
        raise ValueError(f"policy {entry!r}: {exc}") from None


class MPCPlanner:
    """The planner (module docstring) over ``candidates`` (settings; ``candidates[0]`` is the base) in the action
    space ``spec``, and the per-request ``moves`` (names of ``decision.moves.REQUEST_MOVES``: each made at the
    decision point, then the base played); ``seed`` drives its forecasts. ``decide(sim)`` returns the index of the
    candidate to play: a setting's, or ``len(candidates) + j`` for move ``moves[j]``, which the caller makes on its
    engine at once (``decision.moves.make_move`` on the request ``pick`` names) before playing the base.
    ``num_decisions``, ``num_switches`` (decisions that chose another candidate than the base), ``num_moves``
    (those that chose a move), ``planning_s``
    (wall seconds spent in ``decide``) and ``engine_s`` (the engine's clock between the first and the last
    decision) say what it did and cost."""

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
        self.num_decisions = 0
        self.num_switches = 0
        self.num_moves = 0
        self.planning_s = 0.0
        self.first_decision_s: float | None = None
        self.last_decision_s = 0.0
        self.last_scores: np.ndarray | None = None  # futures x candidates, of the last decision

    @property
    def engine_s(self) -> float:
        """The engine's clock from the first decision to the last."""
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
        moves = [
            j
            for j, move in enumerate(self.moves)
            if (r := pick(move, engine)) is not None and not redundant(move, engine, r, self.candidates[0].order)
        ]
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
        """Play ``action`` for ``horizon`` iterations then the base for ``tail`` on ``sim`` (a fork of its own);
        requests met minus requests missed meanwhile."""
        engine = sim.engine
        loop = self._loop
        start = engine.num_good - engine.num_missed
        for act, n in ((action, self.config.horizon), (self.actions[0], self.config.tail)):
            loop.take(act, hold=None)
            for _ in range(n):
                if sim.done or sim.now_s >= until_s:
                    return float(engine.num_good - engine.num_missed - start) - self._late(engine)
                d = loop.next(engine)
                assert d is not None  # no ENGINE_DEFAULT fallback here
                sim.step(d)
        return float(engine.num_good - engine.num_missed - start) - self._late(engine)

    def _late(self, engine: Any) -> int:
        """With ``terminal``: the running requests whose time per output token so far already exceeds their
        target (they are likely to miss once they finish, after the rollout), counted as misses; else 0."""
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


def produced_tokens(engine: Engine, r: Request) -> int:
    """Output tokens ``r`` has produced on ``engine`` by now, without touching it (a decoding request's counter is
    brought up to date lazily, ``Engine.sync``)."""
    if r.decoding:
        return int(r.decode_out0 + engine.num_rounds - r.decode_round0)
    return int(r.num_output_tokens)


def _worst_quarter(scores: np.ndarray) -> np.ndarray:
    """Per candidate, the mean over its worst quarter of futures (at least one)."""
    n = max(1, scores.shape[0] // 4)
    return np.sort(scores, axis=0)[:n].mean(axis=0)
