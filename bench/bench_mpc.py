"""What ``mpc`` gains over ``tuned`` at a fixed load and what its planning costs, beside the same episodes under
``tuned``; with ``--oracle``, the same planner handed part of the true future, to measure what each piece of
information is worth (a measurement, not a policy: an oracle planner is clairvoyant).

    OMP_NUM_THREADS=1 python bench/bench_mpc.py --scenarios mixed-slo,mix-shift --policy mpc --seeds 0,1,2,3,4
    OMP_NUM_THREADS=1 python bench/bench_mpc.py --scenarios mixed-slo --policy mpc:futures=1 --oracle both

Per scenario, at ``--load`` (default: ``tuned``'s val capacity load from the shipped table), on ``--split``
windows of ``--num-requests`` requests, one episode per seed: SLO attainment of ``tuned`` and of the planner, the
paired gain in points (mean ± 95% half-width, Student t; and seed by seed), the decisions that switched away
from the base (and chose a per-request move), and the planning cost: wall milliseconds per decision on this
machine against the engine's own time (simulated, on the scenario's cost model) over the ``k`` iterations a
decision governs, and their ratio, the share of a core the planner would need to keep up beside the engine.
``--oracle``: ``lengths`` gives every future the true output lengths of the live requests, ``arrivals`` the true
requests still to arrive (with their true lengths), ``both`` both (one future is then the truth: use
``futures=1``).

``--advantages`` instead plays ``tuned``'s own episode (``--seeds``' first) and, at every ``k``-th iteration, asks
the planner and the same planner told the whole truth (one future) for their scores, without acting on them:
per candidate, its mean advantage over the base under the forecasts and under the truth, how often each saw it
ahead, and the correlation of the two across decision points. A forecast that favours a candidate the truth
does not is a bias no number of futures removes.

``--calibration`` plays ``tuned``'s episode too and checks the forecast itself at every ``k``-th iteration: the
mean tokens still to come of the live requests, drawn against their true ones, and the forecast arrival rate
against the arrivals of the next 5 s (only while arrivals go on that long: the end of a window is a drain no
forecast of the past foresees); ``--uncensored`` fits the lengths on the finished requests alone.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import fields, replace
from typing import Any

import gymnasium as gym
import numpy as np
import torch

import llmsched_env  # noqa: F401
from llmsched_env.decision.planners.mpc import MPCPlanner, MPCPolicy, mpc_on_env, parse_mpc, produced_tokens
from llmsched_env.decision.planners.tuned import load_tuned_table
from llmsched_env.decision.registry import SCHEDULERS, make_scheduler
from llmsched_env.engine.request import Request
from llmsched_env.envs.episode import run_episode
from llmsched_env.evaluation.stats import mean_ci95
from llmsched_env.sim.simulator import Simulator
from llmsched_env.workloads.forecast import Forecast, Forecaster

ORACLES = ("none", "lengths", "arrivals", "both")


class _Told(Forecaster):
    """A forecaster that hands the planner part of the truth (``oracle``): the measurement's, never a policy's."""

    def __init__(self, oracle: str, window: int) -> None:
        super().__init__(window=window)
        object.__setattr__(self, "oracle", oracle)
        object.__setattr__(self, "sim", None)

    def fit(
        self, arrived: Any, finished: Any, now_s: float, max_model_len: int | None = None, live: Any = ()
    ) -> Forecast:
        fc = super().fit(arrived, finished, now_s, max_model_len, live)
        sim: Simulator = self.sim  # type: ignore[attr-defined]
        oracle: str = self.oracle  # type: ignore[attr-defined]
        if oracle in ("lengths", "both"):
            object.__setattr__(fc, "output_len", lambda rng, r, produced: r.output_len)
        if oracle in ("arrivals", "both"):
            pending = sim.requests[len(sim.requests) - sim.num_pending_arrivals :]

            def arrivals(rng: Any, until_s: float, first_id: int, pending: list[Request] = pending) -> list[Request]:
                return [r.copy() for r in pending if r.arrival_s <= until_s]

            object.__setattr__(fc, "arrivals", arrivals)
        return fc


class _ToldPlanner(MPCPlanner):
    def decide(self, sim: Simulator) -> int:
        object.__setattr__(self.forecaster, "sim", sim)
        return super().decide(sim)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--scenarios", default="mixed-slo,mix-shift")
    p.add_argument("--policy", default="mpc", help="mpc[:k=..,futures=..,horizon=..,tail=..,...]")
    p.add_argument("--num-requests", type=int, default=1000)
    p.add_argument("--split", default="val")
    p.add_argument("--load", type=float, default=None, help="default: tuned's val capacity for the scenario")
    p.add_argument("--seeds", default="0,1,2,3,4")
    p.add_argument("--oracle", choices=ORACLES, default="none")
    p.add_argument("--advantages", action="store_true", help="forecast against truth along tuned's episode")
    p.add_argument("--calibration", action="store_true", help="the forecast's lengths and rate against the truth")
    p.add_argument("--uncensored", action="store_true", help="--calibration: lengths from finished requests alone")
    args = p.parse_args()
    torch.set_num_threads(1)
    config = parse_mpc(args.policy)
    if config is None:
        raise SystemExit(f"--policy {args.policy!r} is not an mpc spelling")
    seeds = [int(s) for s in args.seeds.split(",")]
    table: Any = SCHEDULERS.get("tuned").shipped_table  # type: ignore[attr-defined]
    entries = load_tuned_table(table).entries
    told = "" if args.oracle == "none" else f", told the true {args.oracle}"
    print(f"{config.name}{told}: {args.num_requests} requests, split {args.split}, seeds {args.seeds}, one core")
    print(f"{'scenario':22s} {'load':>5s} {'tuned':>6s} {'mpc':>6s} {'gain (points)':>15s} {'switched':>12s} "
          f"{'moves':>5s} {'plan ms':>8s} {'engine ms':>9s} {'share':>6s} {'wall s':>7s}  gain per seed")  # fmt: skip
    if args.advantages or args.calibration:
        for scenario in filter(None, args.scenarios.split(",")):
            entry = entries.get(scenario)
            load = args.load or (float(entry["provenance"]["val_capacity_load"]) if entry else 1.0)
            if args.advantages:
                advantages(scenario, args.split, args.num_requests, load, seeds[0], config)
            else:
                calibration(scenario, args.split, args.num_requests, load, seeds[0], config, args.uncensored)
        return
    for scenario in filter(None, args.scenarios.split(",")):
        entry = entries.get(scenario)
        load = args.load if args.load is not None else float(entry["provenance"]["val_capacity_load"]) if entry else 1.0
        env = gym.make("LLMSched-v1", scenario=scenario, split=args.split, num_requests=args.num_requests, load=load)
        u: Any = env.unwrapped
        gains, tuned_att, mpc_att = [], [], []
        decisions = switches = moves = 0
        planning = engine = 0.0
        t0 = time.perf_counter()
        for seed in seeds:
            tuned = run_episode(env, make_scheduler("tuned", u.policy_context()), seed)["slo_attainment"]
            made: list[MPCPolicy] = []

            def build(e: gym.Env, made: list[MPCPolicy] = made, seed: int = seed) -> MPCPolicy:
                policy = mpc_on_env(e, config, seed)
                if args.oracle != "none":
                    old = policy.planner
                    planner = _ToldPlanner(old.spec, old.candidates, config, seed, old.moves)
                    planner.forecaster = _Told(args.oracle, config.window)
                    policy.planner = planner
                made.append(policy)
                return policy

            mine = run_episode(env, build, seed)["slo_attainment"]
            planner = made[0].planner
            tuned_att.append(tuned)
            mpc_att.append(mine)
            gains.append(100 * (mine - tuned))
            decisions += planner.num_decisions
            switches += planner.num_switches
            moves += planner.num_moves
            planning += planner.planning_s
            engine += planner.engine_s * planner.num_decisions / max(planner.num_decisions - 1, 1)
        mean, half = mean_ci95(gains)
        plan_ms, engine_ms = 1000 * planning / decisions, 1000 * engine / decisions
        print(f"{scenario:22s} {load:5.2f} {np.mean(tuned_att):6.3f} {np.mean(mpc_att):6.3f} "
              f"{mean:+7.2f} ± {half:4.2f} {switches:5d} / {decisions:4d} {moves:5d} {plan_ms:8.0f} {engine_ms:9.0f} "
              f"{plan_ms / engine_ms:6.2f} {time.perf_counter() - t0:7.0f}  "
              f"[{' '.join(f'{g:+.1f}' for g in gains)}]", flush=True)  # fmt: skip
        env.close()


def advantages(scenario: str, split: str, num_requests: int, load: float, seed: int, config: Any) -> None:
    """``--advantages`` (module docstring) on one episode of ``scenario``."""
    env = gym.make("LLMSched-v1", scenario=scenario, split=split, num_requests=num_requests, load=load)
    env.reset(seed=seed)
    u: Any = env.unwrapped
    tuned = make_scheduler("tuned", u.policy_context())
    forecast = mpc_on_env(env, config, seed).planner
    truth = _ToldPlanner(forecast.spec, forecast.candidates, replace(config, futures=1), seed)
    truth.forecaster = _Told("both", config.window)
    seen: list[np.ndarray] = []
    told: list[np.ndarray] = []
    steps = 0
    while True:
        if steps % config.k == 0:
            for planner, out in ((forecast, seen), (truth, told)):
                planner.decide(u.sim)
                assert planner.last_scores is not None
                mean = planner.last_scores.mean(axis=0)
                out.append(mean - mean[0])
        _, _, terminated, truncated, _ = env.step(tuned.act(np.zeros(1), u.action_masks()))
        steps += 1
        if terminated or truncated:
            break
    env.close()
    f, t = np.array(seen), np.array(told)
    base = forecast.candidates[0]
    print(f"{scenario} at load {load:.2f}, seed {seed}: {len(f)} decision points along tuned's episode; base {base}")
    print(f"{'candidate (its move from the base)':44s} {'forecast':>9s} {'truth':>7s} {'f > 0':>6s} {'t > 0':>6s} "
          f"{'corr':>6s}")  # fmt: skip
    for i, c in enumerate(forecast.candidates[1:], 1):
        move = {f.name: getattr(c, f.name) for f in fields(base) if getattr(c, f.name) != getattr(base, f.name)}
        text = ", ".join(f"{k}={getattr(v, 'name', v)}" for k, v in move.items())
        a, b = f[:, i], t[:, i]
        corr = float(np.corrcoef(a, b)[0, 1]) if a.std() > 0 and b.std() > 0 else float("nan")
        print(f"{text:44s} {a.mean():+9.2f} {b.mean():+7.2f} {np.mean(a > 0):6.2f} {np.mean(b > 0):6.2f} {corr:+6.2f}")


def calibration(
    scenario: str, split: str, num_requests: int, load: float, seed: int, config: Any, uncensored: bool = False
) -> None:
    """``--calibration`` (module docstring) on one episode of ``scenario``; ``uncensored``: the length estimate
    from the finished requests alone, without the running ones as censored observations."""
    env = gym.make("LLMSched-v1", scenario=scenario, split=split, num_requests=num_requests, load=load)
    env.reset(seed=seed)
    u: Any = env.unwrapped
    tuned = make_scheduler("tuned", u.policy_context())
    forecaster = Forecaster(window=config.window)
    rng = np.random.default_rng(seed)
    drawn: list[int] = []
    true: list[int] = []
    rates: list[tuple[float, float]] = []
    steps, ahead_s = 0, 5.0
    while True:
        if steps % config.k == 0 and steps:
            sim, engine = u.sim, u.sim.engine
            live = engine.live_requests()
            produced = [produced_tokens(engine, r) for r in live]
            fc = forecaster.fit(
                sim.arrived_requests(), engine.finished, engine.now_s, engine.config.max_model_len,
                [] if uncensored else [(r.tenant, g) for r, g in zip(live, produced, strict=True)],
            )  # fmt: skip
            for r, g in zip(live, produced, strict=True):
                drawn.append(fc.output_len(rng, r, g) - g)
                true.append(r.output_len - g)
            pending = sim.requests[len(sim.requests) - sim.num_pending_arrivals :]
            if pending and pending[-1].arrival_s > engine.now_s + ahead_s:
                came = sum(1 for r in pending if r.arrival_s <= engine.now_s + ahead_s)
                rates.append((fc.rate_rps, came / ahead_s))
        _, _, terminated, truncated, _ = env.step(tuned.act(np.zeros(1), u.action_masks()))
        steps += 1
        if terminated or truncated:
            break
    env.close()
    d, t, r = np.array(drawn), np.array(true), np.array(rates)
    print(f"{scenario} at load {load:.2f}, seed {seed}, along tuned's episode:")
    print(f"  tokens still to come of the live requests ({d.size} draws): forecast mean {d.mean():.1f}, median "
          f"{np.median(d):.0f}; true mean {t.mean():.1f}, median {np.median(t):.0f}")  # fmt: skip
    if r.size:
        print(f"  arrival rate ({len(r)} points): forecast mean {r[:, 0].mean():.2f}/s, the next 5 s "
              f"{r[:, 1].mean():.2f}/s")  # fmt: skip


if __name__ == "__main__":
    main()
