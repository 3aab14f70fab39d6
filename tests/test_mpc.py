"""``mpc``, the model-predictive planner on forecast futures: it is not clairvoyant (its decisions before a time
``t`` stay the same when every request arriving after ``t`` and every output length not yet known at ``t``
change, while a planner fed the true future does change them); with the true future it plays what the
lookahead bound of the same horizon plays; the engine and simulator hooks it uses keep the invariants; the
forecaster fits and conditions as documented; the policy list spells it; bad options and places it cannot run
are refused in one line."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import llmsched_env  # noqa: F401
from llmsched_env.commands.evaluate_args import policy_list
from llmsched_env.decision.loop import DecisionLoop
from llmsched_env.decision.planners.lookahead import BOUND_MARK
from llmsched_env.decision.planners.mpc import MPCConfig, MPCPlanner, MPCPolicy, mpc_on_env, parse_mpc
from llmsched_env.decision.planners.space import REQUEST_MOVES, neighbours, play
from llmsched_env.decision.planners.tuned import settings_of, write_tuned_entries
from llmsched_env.decision.policy_spec import resolve_policy
from llmsched_env.decision.registry import make_scheduler
from llmsched_env.engine.request import Request, Status
from llmsched_env.envs.episode import run_episode
from llmsched_env.evaluation.capacity import summarize_capacity
from llmsched_env.evaluation.config import EvalConfig
from llmsched_env.evaluation.grid import run_grid
from llmsched_env.evaluation.outputs import format_capacity_summary
from llmsched_env.evaluation.runtime_options import RuntimeOptions
from llmsched_env.evaluation.vllm_engine import compare_engines
from llmsched_env.sim.simulator import Simulator
from llmsched_env.workloads.forecast import Forecast, Forecaster, OutputLengths
from tests.bench_scripts import bench_script, write_capacities

SMALL = MPCConfig(k=16, futures=2, horizon=16, tail=16)


def _env(num_requests: int = 200, load: float = 2.6, scenario: str = "mixed-slo") -> gym.Env:
    return gym.make("LLMSched-v1", scenario=scenario, num_requests=num_requests, split="train", load=load)


def _fresh(requests: list[Request]) -> list[Request]:
    return [
        Request(
            r.request_id, r.arrival_s, r.prompt_len, r.output_len, r.tenant, r.prefix_ids or None, r.prefix_id_tokens
        )
        for r in requests
    ]


def _setting(seed: int = 0, moves: bool = False) -> tuple[Any, list[Request], MPCPlanner]:
    """The engine parts and requests of one mixed-slo episode, and a planner over tuned's neighbourhood."""
    env = _env()
    env.reset(seed=seed)
    u: Any = env.unwrapped
    requests = _fresh(u.sim.requests)
    base = make_scheduler("tuned", u.policy_context()).decision  # type: ignore[attr-defined]
    candidates = [base, *neighbours(base, u.action_spec)]
    env.close()
    return u, requests, MPCPlanner(u.action_spec, candidates, SMALL, seed, list(REQUEST_MOVES) if moves else None)


def _drive(u: Any, requests: list[Request], planner: MPCPlanner, until_s: float) -> list[tuple[float, int]]:
    """Run a simulator of ``requests`` under ``planner`` until the clock reaches ``until_s``; its decisions as
    (clock, candidate). The invariants are checked after every iteration."""
    sim = Simulator(u.sim.engine.config, u.sim.engine.tenants, u.sim.cost_model, requests)
    return _drive_sim(sim, planner, until_s)


def _drive_sim(sim: Simulator, planner: MPCPlanner, until_s: float) -> list[tuple[float, int]]:
    loop = DecisionLoop(planner.spec, name="test")
    decisions: list[tuple[float, int]] = []
    step = 0
    while not sim.done and sim.now_s < until_s:
        if step % planner.config.k == 0:
            chosen = planner.decide(sim)
            decisions.append((sim.now_s, chosen))
            if chosen >= len(planner.actions):  # a per-request move, made now; then the base
                play(planner.moves[chosen - len(planner.actions)], sim.engine)
                chosen = 0
            loop.take(planner.actions[chosen], hold=None)
        decision = loop.next(sim.engine)
        assert decision is not None
        sim.step(decision)
        sim.check_invariants()
        step += 1
    return decisions


def _changed_after(requests: list[Request], t: float, finished_ids: set[int], seed: int) -> list[Request]:
    """``requests`` with every arrival after ``t`` replaced (other times, prompts, outputs, tenants) and every
    output length not known at ``t`` (the request had not finished by then) made longer."""
    rng = np.random.default_rng(seed)
    before = [r for r in requests if r.arrival_s <= t]
    after = [r for r in requests if r.arrival_s > t]
    times = np.sort(t + rng.uniform(1e-3, 2.0 * (after[-1].arrival_s - t) + 1.0, size=len(after) + 7))
    tenants = sorted({r.tenant for r in requests})
    out = []
    for r in before:
        length = r.output_len if r.request_id in finished_ids else r.output_len + int(rng.integers(1, 300))
        out.append(Request(r.request_id, r.arrival_s, r.prompt_len, length, r.tenant))
    for i, a in enumerate(times.tolist()):
        prompt, output = int(rng.integers(8, 3000)), int(rng.integers(1, 800))
        out.append(Request(10_000 + i, a, prompt, output, tenants[i % len(tenants)]))
    return out


@pytest.mark.parametrize("moves", [False, True], ids=["settings", "with-per-request-moves"])
def test_its_decisions_before_t_ignore_everything_after_t(moves: bool) -> None:
    u, requests, planner = _setting(moves=moves)
    first = _drive(u, _fresh(requests), planner, float("inf"))
    assert len(first) > 8 and len({c for _, c in first}) > 1  # it switches: a planner that never did proves nothing
    t = requests[len(requests) // 2].arrival_s  # half the requests arrive after t
    assert sum(1 for d in first if d[0] < t) > 4
    if moves:
        assert max(c for _, c in first) >= len(planner.actions)  # it made per-request moves
    finished = {r.request_id for r in _run_until(u, requests, t, planner).engine.finished}
    other = _changed_after(requests, t, finished, seed=5)
    assert [r.output_len for r in other if r.arrival_s <= t] != [r.output_len for r in requests if r.arrival_s <= t]
    changed = _drive(u, other, MPCPlanner(planner.spec, planner.candidates, SMALL, 0, planner.moves), t)
    assert changed == [d for d in first if d[0] < t]


def _run_until(u: Any, requests: list[Request], t: float, planner: MPCPlanner) -> Simulator:
    """The simulator of ``requests`` under a fresh planner like ``planner``, stepped until its clock reaches ``t``:
    who has finished by then (their output lengths are known at ``t``)."""
    fresh = MPCPlanner(planner.spec, planner.candidates, planner.config, 0, planner.moves)
    sim = Simulator(u.sim.engine.config, u.sim.engine.tenants, u.sim.cost_model, _fresh(requests))
    _drive_sim(sim, fresh, t)
    return sim


def test_a_planner_fed_the_true_future_does_change_them(monkeypatch: pytest.MonkeyPatch) -> None:
    """The non-clairvoyance test can fail: the same planner, handed the true arrivals and lengths, decides
    otherwise before ``t`` when they change."""
    u, requests, planner = _setting()
    _drive(u, _fresh(requests), planner, float("inf"))
    t = requests[len(requests) // 2].arrival_s
    finished = {r.request_id for r in _run_until(u, requests, t, planner).engine.finished}
    other = _changed_after(requests, t, finished, seed=5)
    _clairvoyant(monkeypatch)
    told = _drive(u, _fresh(requests), MPCPlanner(planner.spec, planner.candidates, SMALL, 0), t)
    told_other = _drive(u, other, MPCPlanner(planner.spec, planner.candidates, SMALL, 0), t)
    assert told != told_other


def _clairvoyant(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make every planner's futures the true one: each live request's true output length, and the requests
    still to arrive (copies), every one of them."""
    current: list[Simulator] = []
    decide = MPCPlanner.decide

    def spy(self: MPCPlanner, sim: Simulator) -> int:
        current[:] = [sim]
        return decide(self, sim)

    def arrivals(self: Forecast, rng: Any, until_s: float, first_id: int) -> list[Request]:
        sim = current[0]
        return [r.copy() for r in sim.requests[len(sim.requests) - sim.num_pending_arrivals :]]

    monkeypatch.setattr(MPCPlanner, "decide", spy)
    monkeypatch.setattr(Forecast, "arrivals", arrivals)
    monkeypatch.setattr(Forecast, "output_len", lambda self, rng, r, produced: r.output_len)


def test_with_the_true_future_it_plays_the_lookahead_of_the_same_horizon(monkeypatch: pytest.MonkeyPatch) -> None:
    """One future, the true one: its choices are the lookahead bound's with k, horizon and tail alike (both
    score rollouts of the candidates by requests met minus missed; the bound's tail stops at the episode's end)."""
    from llmsched_env.decision.planners.bounds import LookaheadPolicy
    from llmsched_env.decision.planners.lookahead import LookaheadConfig

    _clairvoyant(monkeypatch)
    env = _env(120)
    config = MPCConfig(k=16, futures=1, horizon=16, tail=16)
    planned: list[MPCPolicy] = []

    def make(e: gym.Env) -> MPCPolicy:
        planned.append(mpc_on_env(e, config, 0))
        return planned[-1]

    mpc_metrics = run_episode(env, make, 0)
    bound: list[LookaheadPolicy] = []

    def make_bound(e: gym.Env) -> LookaheadPolicy:
        bound.append(LookaheadPolicy(e, LookaheadConfig(k=16, horizon=16, tail=16), 0))
        return bound[-1]

    bound_metrics = run_episode(env, make_bound, 0)
    assert bound[0].kept_plan and planned[0].planner.num_switches > 0
    assert mpc_metrics["slo_attainment"] == bound_metrics["slo_attainment"]
    env.close()


def test_set_output_len_moves_the_finish_and_keeps_the_invariants() -> None:
    env = _env(60)
    env.reset(seed=0)
    u: Any = env.unwrapped
    policy = make_scheduler("fcfs", u.policy_context())
    for _ in range(40):
        env.step(policy.act(np.zeros(1), u.action_masks()))
    sim = u.sim.fork()
    decoding = [r for r in sim.engine.running.values() if r.decoding]
    assert decoding
    r = decoding[0]
    true_len = r.output_len
    produced = r.decode_out0 + sim.engine.num_rounds - r.decode_round0
    with pytest.raises(ValueError, match="must exceed"):
        sim.engine.set_output_len(r, produced)
    sim.engine.set_output_len(r, produced + 3)
    sim.check_invariants()
    while r.status != Status.FINISHED:
        sim.step(make_scheduler("fcfs", u.policy_context()).decision)  # type: ignore[attr-defined]
        sim.check_invariants()
    assert r.num_output_tokens == produced + 3
    assert u.sim.engine.running[r.request_id].output_len == true_len != produced + 3  # the env's own is untouched
    env.close()


def test_with_future_replaces_the_arrivals_and_leaves_the_original_alone() -> None:
    env = _env(80)
    env.reset(seed=0)
    u: Any = env.unwrapped
    sim = u.sim
    pending = sim.num_pending_arrivals
    live = sim.engine.live_requests()
    lens = [r.num_output_tokens + 5 for r in live]
    arrivals = [Request(1 << 40, sim.now_s + 0.5, 100, 7, 0)]
    future = sim.with_future(arrivals, lens)
    assert future.num_pending_arrivals == 1 and sim.num_pending_arrivals == pending
    assert [r.output_len for r in future.engine.live_requests()] == lens
    assert [r.output_len for r in sim.engine.live_requests()] == [r.output_len for r in live]
    with pytest.raises(ValueError, match="output lengths"):
        sim.with_future([], [*lens, 3])
    with pytest.raises(ValueError, match="before the clock"):
        sim.with_future([Request(1 << 40, sim.now_s - 1.0, 10, 2, 0)], lens)
    env.close()


def test_forecaster_fits_the_rate_and_conditions_lengths() -> None:
    rng = np.random.default_rng(0)
    times = np.cumsum(rng.exponential(0.5, size=400))  # 2 req/s, Poisson
    arrived = [Request(i, t, 100, 50 + i % 10, i % 2) for i, t in enumerate(times.tolist())]
    finished = arrived[:300]
    fc = Forecaster(window=256).fit(arrived, finished, float(times[-1]))
    assert 1.6 < fc.rate_rps < 2.4 and 0.6 < fc.cv2 < 1.5
    future = fc.arrivals(np.random.default_rng(1), float(times[-1]) + 100.0, 1 << 40)
    assert 150 < len(future) < 250 and all(r.arrival_s > times[-1] for r in future)
    assert {r.output_len for r in future} <= {50 + k for k in range(10)}
    live = Request(9999, float(times[-1]), 100, 10_000, 1)
    draws = {fc.output_len(np.random.default_rng(s), live, 55) for s in range(50)}
    assert draws and min(draws) > 55 and max(draws) <= 59  # among the finished outputs longer than 55
    past = {fc.output_len(np.random.default_rng(s), live, 80) for s in range(20)}
    assert min(past) > 80  # longer than anything seen: more than it produced
    live.predicted_output_len = 70
    assert fc.output_len(np.random.default_rng(0), live, 55) == 70  # a prediction is what is known of it
    assert Forecaster().fit([], [], 0.0).arrivals(rng, 10.0, 0) == []


def test_policy_spelling_and_refusals() -> None:
    assert parse_mpc("fcfs") is None
    assert parse_mpc("mpc") == MPCConfig()
    assert parse_mpc("mpc:k=32,futures=8,score=worst,margin=1.5").name == "mpc:k=32,futures=8,score=worst,margin=1.5"
    for bad, match in [
        ("mpc:", "give options"),
        ("mpc:k", "key=value"),
        ("mpc:k=1,k=2", "twice"),
        ("mpc:k=x", "integer"),
        ("mpc:score=best", "score"),
        ("mpc:futures=0", "futures"),
        ("mpc:margin=-1", "margin"),
        ("mpc:k=1000000", "at most"),
    ]:
        with pytest.raises(ValueError, match=match):
            parse_mpc(bad)
    assert policy_list("mpc:k=32,futures=2,fcfs") == ["mpc:k=32,futures=2", "fcfs"]
    spec = resolve_policy("mpc:futures=2")
    assert spec.mpc == MPCConfig(futures=2) and spec.name == "mpc:futures=2"
    assert resolve_policy("mpc:futures=2,table=t.json").name == "mpc:futures=2"  # the table is not in the name
    env = _env(20)
    env.reset(seed=0)
    ctx = env.unwrapped.policy_context()  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="which this driver does not give"):
        spec.make_for(ctx, 0)
    with pytest.raises(ValueError, match="only llmsched-evaluate's simulator episodes run candidates=requests"):
        resolve_policy("mpc:candidates=requests").make_for(replace(ctx, planning_state=lambda: None), 0)
    env.close()
    with pytest.raises(ValueError, match="cluster scenarios"):
        EvalConfig(scenarios=["cluster-azure-conv-4"], policies=["mpc"], seeds=[0], num_requests=20)
    with pytest.raises(ValueError, match="torch runtime backend"):
        EvalConfig(policies=["mpc"], num_requests=20, runtime=RuntimeOptions())
    with pytest.raises(ValueError, match=r"--engine vllm: policy 'mpc' plans on the vLLM adapter's state"):
        compare_engines(EvalConfig(policies=["mpc"], num_requests=20))


def test_without_a_tuned_entry_it_asks_for_a_static_base(tmp_path: Any) -> None:
    env = _env(40)
    env.reset(seed=0)
    fcfs = make_scheduler("fcfs", env.unwrapped.policy_context()).decision  # type: ignore[attr-defined]
    table = tmp_path / "tuned.json"
    write_tuned_entries(table, {"bursty": {"settings": settings_of(fcfs), "provenance": {}}})
    with pytest.raises(ValueError, match="mpc:base=fcfs"):
        mpc_on_env(env, MPCConfig(), 0, table=table)
    policy = mpc_on_env(env, replace(SMALL, base="fcfs"), 0)
    assert policy.planner.candidates[0] == fcfs
    env.close()


def test_in_a_grid_same_seed_same_rows() -> None:
    config = EvalConfig(
        scenarios=["mixed-slo"], policies=["mpc:k=16,futures=2,horizon=16,tail=16", "tuned"], seeds=[0],
        num_requests=60, split="val",
    )  # fmt: skip
    first, again = run_grid(config).rows, run_grid(config).rows
    strip = [{k: v for k, v in row.items() if k != "wall_s"} for row in first]
    assert strip == [{k: v for k, v in row.items() if k != "wall_s"} for row in again]
    assert first[0]["policy"] == "mpc:k=16,futures=2,horizon=16,tail=16"


def test_the_headline_and_the_capacity_summary_place_mpc_between_tuned_and_the_bound(tmp_path: Path) -> None:
    """mpc is no named baseline; the headline pairs it with tuned and gives the share of the tuned-to-bound gap it
    closes; llmsched-evaluate's capacity summary gives every policy the same two figures."""
    bound = "lookahead" + BOUND_MARK
    caps = {"agent": (2.4, 2.6), "tuned": (2.2, 2.4), "fcfs": (1.9, 2.1), "mpc": (2.3, 2.5), bound: (2.6, 2.8)}
    write_capacities(tmp_path / "s-capacity", "s", caps)
    headline = bench_script("headline")
    (row,) = headline.collect(tmp_path)
    assert row["best_named"] == "fcfs" and row["planner"] == "mpc" and row["rival"] == "mpc"
    assert row["planner_gap"] == pytest.approx(0.25)
    assert row["planner_vs_tuned"] == pytest.approx([2.3 / 2.2, 2.5 / 2.4])
    text = headline.markdown([row])
    assert "mpc: share of `tuned` → bound" in text and "| `mpc` 2.40 ± " in text and "| 25% |" in text
    rows = [
        {"policy": p, "scenario": "s", "seed": s, "capacity_load": c, "capacity_rps": 2 * c}
        for p, values in caps.items()
        for s, c in enumerate(values)
    ]
    by_policy = {a["policy"]: a for a in summarize_capacity(rows, merge=False)}
    assert by_policy["mpc"]["gap_closed"] == pytest.approx(0.25) and "ratio_to_tuned_mean" not in by_policy["tuned"]
    assert by_policy["fcfs"]["ratio_to_tuned_mean"] == pytest.approx((1.9 / 2.2 + 2.1 / 2.4) / 2)
    table = format_capacity_summary(list(by_policy.values()))
    assert "× tuned" in table and "gap closed" in table and "25%" in table and "100%" in table


def test_the_bench_prints_the_gain_the_planning_share_and_the_advantages(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    bench = bench_script("bench_mpc")
    small = ["--scenarios", "mixed-slo", "--num-requests", "60", "--seeds", "0", "--policy", "mpc:k=16,futures=1"]
    monkeypatch.setattr("sys.argv", ["bench_mpc.py", *small, "--oracle", "both"])
    bench.main()
    out = capsys.readouterr().out
    assert "told the true both" in out and "mixed-slo" in out.splitlines()[-1]
    monkeypatch.setattr("sys.argv", ["bench_mpc.py", *small, "--advantages"])
    bench.main()
    out = capsys.readouterr().out
    assert "decision points along tuned's episode" in out and "token_budget=" in out
    monkeypatch.setattr("sys.argv", ["bench_mpc.py", *small, "--calibration"])
    bench.main()
    assert "tokens still to come of the live requests" in capsys.readouterr().out


def test_output_lengths_count_the_running_requests_as_censored() -> None:
    """Kaplan-Meier: without censored observations the estimate is the finished lengths' empirical distribution;
    requests still running (longer than what they produced) move mass to longer lengths and past the longest."""
    plain = OutputLengths.fit([10, 20, 20, 40])
    assert plain.values.tolist() == [10, 20, 40] and plain.mass.tolist() == [0.25, 0.5, 0.25] and plain.tail == 0
    censored = OutputLengths.fit([10, 20, 20, 40], censored=[15, 15, 50])
    assert censored.mass[0] == pytest.approx(1 / 7)  # seven at risk at 10, one finishes there
    assert censored.mass[1] == pytest.approx(6 / 7 * 2 / 4)  # four at risk at 20 (the two censored at 15 left)
    assert censored.tail > 0 and censored.mass.sum() + censored.tail == pytest.approx(1.0)
    draws = [censored.draw(np.random.default_rng(s), 30) for s in range(200)]
    assert {d for d in draws if d is not None} == {40} and None in draws  # past 30: 40, or past the longest
    assert OutputLengths.fit([]).draw(np.random.default_rng(0), 0) is None


def test_it_plans_where_remote_kv_fetches_draw_from_a_generator() -> None:
    """remote-kv: every rollout's fork carries a generator for its remote KV store's slow fetches."""
    env = _env(80, load=2.0, scenario="remote-kv")
    metrics = run_episode(env, lambda e: mpc_on_env(e, SMALL, 0), 0)
    again = run_episode(env, lambda e: mpc_on_env(e, SMALL, 0), 0)
    assert metrics == again and metrics["num_requests"] > 0
    env.close()


def _replay_requests(n: int = 80, seed: int = 2) -> list[Request]:
    rng = np.random.default_rng(seed)
    out, t = [], 0.0
    for i in range(n):
        t += float(rng.exponential(0.05))
        out.append(Request(i, t, int(rng.integers(50, 700)), int(rng.integers(5, 150)), tenant=int(rng.integers(0, 2))))
    return out


def _replay_setting() -> tuple[Any, Any, Any]:
    from llmsched_env.costs.loader import load_cost_model
    from llmsched_env.engine.config import SLO_CLASSES, EngineConfig, TenantConfig

    cfg = EngineConfig(num_kv_blocks=512, block_size=16, max_num_seqs=16, max_num_batched_tokens=512)
    tenants = (TenantConfig("chat", SLO_CLASSES["chat"]), TenantConfig("code", SLO_CLASSES["code"]))
    return cfg, tenants, load_cost_model("llama3-8b-h100")


def test_the_replays_planning_copy_plans_as_the_simulator_itself() -> None:
    """The in-situ replays (``live.sim.simulate``) give mpc a plain copy of their simulator's state
    (``planning_view``): it decides exactly as mpc planning on the simulator itself (the same rows), and the same
    seed gives the same rows again."""
    from llmsched_env.decision.actions import ActionSpec
    from llmsched_env.decision.observation import make_encoder
    from llmsched_env.decision.planners.mpc import planner_around
    from llmsched_env.decision.planners.space import static_decision
    from llmsched_env.decision.policy import PolicyContext
    from llmsched_env.decision.serve import ServeOptions, serve
    from llmsched_env.live.sim import simulate
    from llmsched_env.sim.setup import SimSetup

    cfg, tenants, cost = _replay_setting()
    entry = "mpc:k=16,futures=2,horizon=16,tail=16,base=fcfs"
    setup = SimSetup(cfg, tenants, cost, policy=entry, seed=3, nominal_rate_rps=20.0)
    replayed = simulate(setup.with_requests(_replay_requests()))
    again = simulate(setup.with_requests(_replay_requests()))
    timed = ("policy_time_mean_s",)  # wall time
    assert {k: v for k, v in replayed.metrics.items() if k not in timed} == {
        k: v for k, v in again.metrics.items() if k not in timed
    }
    spec = ActionSpec.for_engine(cfg, 2)
    encoder = make_encoder(2, cfg, tenants, 20.0)
    ctx = PolicyContext(cfg, tenants, cost, spec, encoder.names)
    sim = Simulator(cfg, tenants, cost, _replay_requests())
    config = replace(SMALL, base="fcfs")
    policy = MPCPolicy(planner_around(static_decision("fcfs", ctx), spec, config, 3), lambda: sim, live=True)
    options = ServeOptions(policy_timeout_s=None)  # as the replay serves a planner: no wall-clock deadline
    metrics, _ = serve(sim, policy, encoder, spec, make_scheduler("fcfs", ctx), options)
    assert policy.planner.num_decisions > 4 and metrics["fallback_share"] == replayed.metrics["fallback_share"] == 0
    for key in ("slo_attainment", "num_iterations", "duration_s", "ttft_p90_s"):
        assert replayed.metrics[key] == metrics[key], key


def test_in_the_background_a_plan_lands_at_the_first_decision_after_it() -> None:
    """``background=True`` (the vLLM adapter's): the k-th act hands the state to the worker thread and plays the
    setting in force meanwhile; the plan's answer is adopted at the first act after it lands, counted with its
    lag; it is the answer an inline planner gives on the same state."""
    from llmsched_env.decision.planners.mpc import planner_around

    env = _env(120)
    env.reset(seed=0)
    u: Any = env.unwrapped
    ctx = u.policy_context()
    fcfs = make_scheduler("fcfs", ctx).decision  # type: ignore[attr-defined]
    config = replace(SMALL, base="fcfs", k=4)
    for _ in range(40):  # a state with work in it
        u.step(u.action_spec.encode(fcfs))
    mask = u.action_spec.mask(u.sim.engine)
    inline = MPCPolicy(planner_around(fcfs, u.action_spec, config, 5), lambda: u.sim, live=True)
    expected = inline.act(np.zeros(1), mask)
    background = MPCPolicy(planner_around(fcfs, u.action_spec, config, 5), lambda: u.sim, background=True)
    first = background.act(np.zeros(1), mask)  # the plan starts; the base plays meanwhile
    assert np.array_equal(first, u.action_spec.project(u.action_spec.encode(fcfs), mask))
    assert background._pending is not None
    background._pending.result(timeout=60)
    adopted = background.act(np.zeros(1), mask)
    assert np.array_equal(adopted, expected)
    assert (background.num_adopted, background.lag_steps, background.num_skipped) == (1, 1, 0)
    assert background.summary().startswith("1 plans, ") and "1 adopted 1.0 decisions late, 0 skipped" in (
        background.summary()
    )
    background.close()
    with pytest.raises(ValueError, match="per-request moves"):
        MPCPolicy(planner_around(fcfs, u.action_spec, replace(config, candidates="requests"), 5), lambda: u.sim,
                  background=True)  # fmt: skip
    env.close()


def test_the_adapter_and_the_live_experiment_name_mpc_around_the_workloads_tuned_table(tmp_path: Path) -> None:
    from llmsched_env.adapters.vllm.config import AdapterConfig
    from llmsched_env.live.experiment import ExperimentConfig, _policy_entries, _wants_tuned, tuned_entry

    env = _env(20)
    env.reset(seed=0)
    fcfs = make_scheduler("fcfs", env.unwrapped.policy_context()).decision  # type: ignore[attr-defined]
    env.close()
    table = tmp_path / "tuned.json"
    write_tuned_entries(table, {"live-chat": {"settings": settings_of(fcfs), "provenance": {}}})
    config = ExperimentConfig(out=tmp_path / "x", policies=("mpc", "mpc:futures=8,z=2", "sjf"))
    assert _wants_tuned(config) and not _wants_tuned(replace(config, policies=("mpc:base=fcfs",)))
    entries = _policy_entries(config, table)
    assert entries == [f"mpc:table={table}", f"mpc:futures=8,z=2,table={table}", "sjf"]
    specs = [resolve_policy(e) for e in entries[:2]]
    assert [s.name for s in specs] == ["mpc", "mpc:futures=8,z=2"] and tuned_entry(specs[0]) == "live-chat"
    resolved = AdapterConfig(policy="fcfs", policies=tuple(entries[:2])).resolve()
    assert [(s.name, scenario) for s, scenario in resolved.more] == [
        ("mpc", "live-chat"),
        ("mpc:futures=8,z=2", "live-chat"),
    ]
    assert AdapterConfig(policy="mpc:base=fcfs").resolve().spec.mpc == MPCConfig(base="fcfs")
