"""The torch runtime driven by the core engine: every request served, tokens right, fallbacks counted."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import baselines  # noqa: E402
from llmsched_env.costs.linear import LinearCostModel  # noqa: E402
from llmsched_env.costs.loader import load_cost_model  # noqa: E402
from llmsched_env.decision.actions import ActionSpec  # noqa: E402
from llmsched_env.decision.observation import ObservationEncoder  # noqa: E402
from llmsched_env.decision.policy import PolicyContext  # noqa: E402
from llmsched_env.decision.serve import ServeOptions, serve  # noqa: E402
from llmsched_env.engine.config import SLO_CLASSES, EngineConfig, TenantConfig  # noqa: E402
from llmsched_env.engine.request import Request  # noqa: E402
from llmsched_env.runtime import calibrate as cal  # noqa: E402
from llmsched_env.runtime.executor import Runtime  # noqa: E402
from llmsched_env.runtime.model import ModelConfig  # noqa: E402
from llmsched_env.runtime.policy_file import action_options, load_policy_file  # noqa: E402
from llmsched_env.runtime.runner import ModelRunner  # noqa: E402
from llmsched_env.runtime.tokens import PromptTokens  # noqa: E402
from llmsched_env.sim.simulator import Simulator  # noqa: E402
from llmsched_env.workloads.library import get_scenario  # noqa: E402

torch.set_num_threads(1)
ROOT = Path(__file__).resolve().parents[1]
SMALL = ModelConfig("small", 512, 64, 128, 2, 4, 2, 16, rope_theta=10000.0, max_position=2048)
ENGINE = EngineConfig(num_kv_blocks=48, block_size=16, max_num_seqs=8, max_num_batched_tokens=256, max_model_len=1024)
TENANTS = (TenantConfig("chat", SLO_CLASSES["chat"]), TenantConfig("batch", SLO_CLASSES["batch"], priority=1))
COST = load_cost_model("llama3-8b-h100")
SPEC = ActionSpec.for_engine(ENGINE)
ENCODER = ObservationEncoder(ENGINE, TENANTS, 20.0)
CTX = PolicyContext(ENGINE, TENANTS, COST, SPEC, ENCODER.names)


@pytest.fixture(scope="module")
def runner() -> ModelRunner:
    return ModelRunner(SMALL, num_blocks=ENGINE.num_kv_blocks, block_size=ENGINE.block_size)


def make_requests(n: int = 16, seed: int = 0, gap_s: float = 0.004) -> list[Request]:
    """Short requests, a third sharing a two-block system prompt (prefix ids of 32 tokens)."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        prefix = (7, 8) if i % 3 == 0 else None
        out.append(
            Request(
                i,
                gap_s * i,
                int(rng.integers(40, 160)),
                int(rng.integers(2, 40)),
                tenant=i % 2,
                prefix_ids=prefix,
                prefix_id_tokens=32,
            )
        )
    return out


def run(runner: ModelRunner, policy: str | object = "fcfs", requests: list[Request] | None = None, **kw):
    reqs = requests if requests is not None else make_requests()
    rt = Runtime(runner, kw.pop("engine", ENGINE), TENANTS, COST, reqs)
    pol = baselines.make(policy, CTX) if isinstance(policy, str) else policy
    options = ServeOptions(check_invariants=True, **kw)
    metrics, stats = serve(rt, pol, ENCODER, SPEC, baselines.make("fcfs", CTX), options)
    return rt, metrics, stats


def served_all(metrics: dict[str, float], n: int) -> bool:
    return metrics["num_finished"] + metrics["num_rejected"] == n and metrics["num_unfinished"] == 0


@pytest.mark.parametrize("name", [*sorted(set(baselines.available()) - {"random", "tuned"}), "random"])
def test_every_baseline_serves_every_request(runner: ModelRunner, name: str) -> None:
    rt, metrics, stats = run(runner, name)
    assert served_all(metrics, 16)
    assert stats.num_fallbacks == 0 and metrics["fallback_share"] == 0
    for r in rt.requests:
        if r.finish_s is not None and r.reject_reason is None:
            assert len(rt.output_tokens[r.request_id]) == r.output_len


def test_outputs_do_not_depend_on_scheduling_preemption_or_prefix_reuse(runner: ModelRunner) -> None:
    """Greedy tokens are a function of the prompt alone: the same with another order, with KV blocks so
    scarce that requests are preempted and recomputed, and with or without prefix-cache hits."""
    ref, m_ref, _ = run(runner, "fcfs")
    assert m_ref["prefix_cache_hit_rate"] > 0
    tight = EngineConfig(num_kv_blocks=16, block_size=16, max_num_seqs=8, max_num_batched_tokens=256, max_model_len=256)
    for policy, engine in (("sjf", ENGINE), ("prefill_first", ENGINE), ("fcfs", tight)):
        rt, metrics, _ = run(runner, policy, engine=engine)
        assert served_all(metrics, 16)
        if engine is tight:
            assert metrics["preemptions"] > 0
        assert rt.output_tokens == ref.output_tokens
    alone = next(r for r in make_requests() if r.request_id == 3)  # shares request 0's prefix when served with it
    alone.arrival_s = 0.0
    rt, _, _ = run(runner, "fcfs", [alone])
    assert rt.output_tokens[3] == ref.output_tokens[3]


def test_prompt_tokens_are_content_addressed() -> None:
    tok = PromptTokens(100, seed=1)
    a = Request(0, 0.0, 90, 1, prefix_ids=(5, 6, 9), prefix_id_tokens=32)
    b = Request(1, 0.0, 80, 1, prefix_ids=(5, 6, 2), prefix_id_tokens=32)
    c = Request(2, 0.0, 80, 1, prefix_ids=(4, 6), prefix_id_tokens=32)
    pa, pb, pc = tok.prompt(a), tok.prompt(b), tok.prompt(c)
    assert len(pa) == 90 and len(pb) == 80
    assert np.array_equal(pa[:64], pb[:64]) and not np.array_equal(pa[64:80], pb[64:80])
    assert not np.array_equal(pa[32:64], pc[32:64])  # same id, different chain before it
    assert np.array_equal(PromptTokens(100, seed=1).prompt(a), pa)


class Raising:
    def act(self, observation, action_mask):
        raise RuntimeError("boom")


class Returning:
    def __init__(self, action):
        self.action = action

    def act(self, observation, action_mask):
        return self.action


class Slow:
    def act(self, observation, action_mask):
        time.sleep(0.1)  # ten times the timeout: the deadline fires first under any load
        return np.zeros(len(SPEC.nvec), dtype=np.int64)


@pytest.mark.parametrize(
    ("policy", "reason"),
    [
        (Raising(), "error"),
        (Returning(np.zeros(3, dtype=np.int64)), "invalid"),  # wrong shape
        (Returning(np.array(SPEC.nvec)), "invalid"),  # out of range
        (Returning(np.full(len(SPEC.nvec), np.nan)), "invalid"),
        (Returning("fcfs"), "invalid"),
        pytest.param(Slow(), "timeout", marks=pytest.mark.slow),  # a tenth of a second per decision
    ],
)
def test_a_failing_policy_falls_back_to_fcfs_and_loses_nothing(runner, policy, reason) -> None:
    ref, _, _ = run(runner, "fcfs")
    # a deadline the slow policy misses by ten times; the others get one no load can reach, so that a busy
    # machine never turns their error or invalid action into a timeout
    rt, metrics, stats = run(runner, policy, policy_timeout_s=0.01 if reason == "timeout" else 30.0)
    assert served_all(metrics, 16)
    assert stats.num_fallbacks == stats.num_decisions > 0
    assert stats.fallbacks[reason] == stats.num_fallbacks
    assert metrics[f"policy_fallbacks_{reason}"] == stats.num_fallbacks
    assert metrics["fallback_share"] == 1.0  # the share evaluation rows carry and mark (evaluation.fallbacks)
    assert rt.output_tokens == ref.output_tokens


def test_a_masked_choice_is_projected_not_a_fallback(runner: ModelRunner) -> None:
    action = SPEC.encode(baselines.fcfs_decision(CTX))
    action[0], action[-1] = 2, 1  # EDF order and shedding: masked whenever the waiting queue is empty
    _, metrics, stats = run(runner, Returning(action))
    assert served_all(metrics, 16) and stats.num_fallbacks == 0


def test_an_exported_policy_runs_on_the_runtime(runner: ModelRunner) -> None:
    policy = load_policy_file(ROOT / "tests" / "data" / "policies" / "mixed-slo")
    tenants = get_scenario("mixed-slo").source("test", COST).tenants
    engine = EngineConfig(num_kv_blocks=48, max_model_len=1024)  # the scenario's engine, with a small KV pool
    spec = ActionSpec.for_engine(engine, policy.schema_version)  # the layout the policy was trained on (1)
    encoder = ObservationEncoder(engine, tenants, 20.0)
    policy.check_compatible(encoder.names, spec.nvec, action_options=action_options(spec))
    reqs = make_requests()
    for r in reqs:
        r.tenant %= len(tenants)
    rt = Runtime(runner, engine, tenants, COST, reqs)
    ctx = PolicyContext(engine, tenants, COST, spec, encoder.names)
    options = ServeOptions(iterations_per_step=4, check_invariants=True)
    metrics, stats = serve(rt, policy, encoder, spec, baselines.make("fcfs", ctx), options)
    assert served_all(metrics, 16) and stats.num_fallbacks == 0
    for bad, message in (({"iterations_per_step": 0}, "iterations_per_step"), ({"policy_timeout_s": 0}, "timeout")):
        with pytest.raises(ValueError, match=message):
            ServeOptions(**bad)  # type: ignore[arg-type]


def test_same_workload_same_tokens_and_decisions_in_simulator_and_runtime(runner: ModelRunner) -> None:
    """The serving loop drives a Simulator and a Runtime alike; the engine-side counts agree in shape."""
    sim = Simulator(ENGINE, TENANTS, COST, make_requests())
    m_sim, _ = serve(sim, baselines.make("sjf", CTX), ENCODER, SPEC, baselines.make("fcfs", CTX))
    _, m_rt, _ = run(runner, "sjf")
    assert m_sim["num_finished"] == m_rt["num_finished"] == 16
    assert m_rt["model_steps"] > 0 and m_rt["model_time_s"] > 0


def test_runtime_rejects_a_mismatched_engine(runner: ModelRunner) -> None:
    with pytest.raises(ValueError, match="block_size"):
        Runtime(runner, EngineConfig(num_kv_blocks=48, block_size=32), TENANTS, COST, [])
    with pytest.raises(ValueError, match="num_kv_blocks"):
        Runtime(runner, EngineConfig(num_kv_blocks=4096), TENANTS, COST, [])
    with pytest.raises(ValueError, match="max_position"):
        Runtime(runner, EngineConfig(num_kv_blocks=48, max_model_len=4096), TENANTS, COST, [])
    bad = [Request(0, 0.0, 50, 2, prefix_ids=(1,), prefix_id_tokens=24)]
    with pytest.raises(ValueError, match="prefix_id_tokens"):
        Runtime(runner, ENGINE, TENANTS, COST, bad)


def test_a_runtime_on_its_own_kv_blocks_gives_the_same_tokens() -> None:
    """``block_offset`` maps the engine's blocks onto the runner's upper half; the tokens do not change."""
    big = ModelRunner(SMALL, num_blocks=2 * ENGINE.num_kv_blocks, block_size=ENGINE.block_size)
    outs = []
    for offset in (0, ENGINE.num_kv_blocks):
        rt = Runtime(big, ENGINE, TENANTS, COST, make_requests(), block_offset=offset)
        metrics, _ = serve(rt, baselines.make("fcfs", CTX), ENCODER, SPEC, baselines.make("fcfs", CTX))
        assert served_all(metrics, 16)
        outs.append(rt.output_tokens)
    assert outs[0] == outs[1]
    with pytest.raises(ValueError, match="from block 49"):
        Runtime(big, ENGINE, TENANTS, COST, [], block_offset=ENGINE.num_kv_blocks + 1)
    with pytest.raises(ValueError, match="block_offset"):
        Runtime(big, ENGINE, TENANTS, COST, [], block_offset=-1)


class _FakeClock:
    """``time.perf_counter`` that only moves when told: a model step takes exactly ``step_s``."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_lockstep_times_each_runtime_without_the_others_turns(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two runtimes served in lockstep on one runner: each clock is paused during the other's turn, so every
    iteration lasts exactly its own model step, and the measured runtime's tokens equal a solo run's."""
    from llmsched_env.runtime import fidelity

    big = ModelRunner(SMALL, num_blocks=2 * ENGINE.num_kv_blocks, block_size=ENGINE.block_size)
    solo = Runtime(big, ENGINE, TENANTS, COST, make_requests())
    fidelity.drive(solo, lambda c: baselines.make("sjf", c), lambda c: baselines.make("fcfs", c))
    clock = _FakeClock()
    real_run = big.run

    def timed_run(chunks):  # every model step takes 10 ms on the fake clock
        clock.now += 0.010
        return real_run(chunks)

    monkeypatch.setattr(time, "perf_counter", clock)
    monkeypatch.setattr(big, "run", timed_run)
    test = Runtime(big, ENGINE, TENANTS, COST, make_requests(), record=True)
    partners = []

    def episodes():
        for k in range(100):
            partners.append(Runtime(big, ENGINE, TENANTS, COST, make_requests(4, seed=k), record=True, block_offset=48))
            yield partners[-1]

    fcfs = lambda c: baselines.make("fcfs", c)  # noqa: E731
    metrics = fidelity.drive_lockstep(test, lambda c: baselines.make("sjf", c), fcfs, episodes())
    assert served_all(metrics, 16) and len(partners) >= 2  # partners that ended were replaced
    assert test.output_tokens == solo.output_tokens
    for rt in [test, *partners]:
        assert rt.iterations and all(it[4] == pytest.approx(0.010) for it in rt.iterations)
    with pytest.raises(RuntimeError, match="not paused"):
        test.resume()
    test.pause()
    with pytest.raises(RuntimeError, match="already paused"):
        test.pause()


def test_in_situ_fidelity_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    """``compare(in_situ=True)`` adds the lockstep replay and the in-situ model's errors to every row."""
    from llmsched_env.runtime import fidelity

    engine = EngineConfig(
        num_kv_blocks=64, block_size=16, max_num_seqs=8, max_num_batched_tokens=256, max_model_len=1024
    )
    workload = fidelity.FidelityWorkload(num_requests=8, prompt_median=60, output_median=8, max_prompt_len=300)
    monkeypatch.setattr(fidelity, "LOCKSTEP_EPISODE_REQUESTS", 4)
    fcfs = lambda c: baselines.make("fcfs", c)  # noqa: E731
    small = ModelRunner(SMALL, num_blocks=engine.num_kv_blocks, block_size=16)
    with pytest.raises(ValueError, match="2 x 64 KV blocks"):
        fidelity.compare(small, COST, {"fcfs": fcfs}, fcfs, [0.5], [1], workload, engine, in_situ=True)
    big = ModelRunner(SMALL, num_blocks=2 * engine.num_kv_blocks, block_size=16)
    rows = fidelity.compare(big, COST, {"fcfs": fcfs}, fcfs, [0.5], [1], workload, engine, in_situ=True)
    (row,) = rows
    assert row["insitu_fit_iterations"] > 0
    for m in fidelity.FIDELITY_METRICS:
        assert row[f"insitu_real_{m}"] > 0 and row[f"insitu_sim_{m}"] > 0
        assert row[f"err_insitu_{m}"] == pytest.approx(
            abs(row[f"insitu_sim_{m}"] - row[f"insitu_real_{m}"]) / row[f"insitu_real_{m}"]
        )


def test_realtime_mode_serves_everything(runner: ModelRunner) -> None:
    reqs = make_requests(6, gap_s=0.01)
    rt = Runtime(runner, ENGINE, TENANTS, COST, reqs, realtime=True)
    metrics, _ = serve(rt, baselines.make("fcfs", CTX), ENCODER, SPEC, baselines.make("fcfs", CTX))
    assert served_all(metrics, 6)


def test_profile_and_fit_give_a_loadable_preset(runner: ModelRunner, tmp_path: Path) -> None:
    grid = cal.ProfileGrid((0, 16, 64), (0, 32), (0, 1, 4), (32,))
    samples = cal.profile(runner, grid, repeats=1)
    assert len(samples) == len(grid.shapes()) == 14
    assert all(s[-1] > 0 for s in samples)
    p, d, kv, pairs, _ = samples[-1]
    assert (p, d, kv, pairs) == cal.batch_features(64, 32, 4, 32)
    model = cal.fit(samples, loop_overhead_s=1e-4, name="t")
    assert model.coef_s[0] >= 1e-4
    # with recorded iterations, the fit is scaled so its total over them is their measured total
    recorded = [(p, d, kv, q, 1.3 * t) for p, d, kv, q, t in samples[:8]]
    both = cal.fit(samples, 1e-4, iterations=recorded)
    total = sum(both.step_time_s(int(p), int(d), int(kv), q) for p, d, kv, q, _ in recorded)
    assert total == pytest.approx(sum(t for *_, t in recorded))
    path = tmp_path / "t.json"
    model.save(path)
    assert load_cost_model(path) == model
    with pytest.raises(ValueError, match=r"ProfileGrid\.decode_seqs"):
        cal.ProfileGrid(decode_seqs=(-1,))
    assert isinstance(model, LinearCostModel)


def test_residuals_by_decodes_compare_measured_and_predicted_totals() -> None:
    model = LinearCostModel([1e-3, 1e-5, 1e-4, 1e-7, 1e-8])
    shapes = [(0, 1, 100, 0.0), (0, 2, 300, 0.0), (0, 3, 900, 0.0), (0, 12, 5000, 0.0), (64, 2, 200, 2080.0)]
    exact = [(*f, model.step_time_s(*f)) for f in shapes]
    rows = cal.residuals_by_decodes(model, exact)
    assert [r["steps"] for r in rows] == ["decodes 1", "decodes 2", "decodes 3-4", "decodes 9+", "with prefill"]
    assert all(r["measured_over_predicted"] == pytest.approx(1.0) and r["count"] == 1 for r in rows)
    slow = [(*f, 2 * t) if f[1] == 12 else (*f, t) for *f, t in exact]
    by_name = {r["steps"]: r["measured_over_predicted"] for r in cal.residuals_by_decodes(model, slow)}
    assert by_name["decodes 9+"] == pytest.approx(2.0) and by_name["decodes 2"] == pytest.approx(1.0)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_runtime_on_cuda_serves_everything_and_tokens_ignore_scheduling(dtype: str) -> None:
    """Seeded weights differ between CPU and CUDA, so the GPU run is compared with itself: the same greedy
    tokens under another order and under KV pressure with preemption (float32; bf16 may flip near-ties)."""
    gpu = ModelRunner(
        SMALL, num_blocks=ENGINE.num_kv_blocks, block_size=ENGINE.block_size, device="cuda", dtype=getattr(torch, dtype)
    )
    ref, metrics, _ = run(gpu, "fcfs")
    assert served_all(metrics, 16)
    tight = EngineConfig(num_kv_blocks=16, block_size=16, max_num_seqs=8, max_num_batched_tokens=256, max_model_len=256)
    rt, metrics, _ = run(gpu, "sjf", engine=tight)
    assert served_all(metrics, 16) and metrics["preemptions"] > 0
    same = sum(rt.output_tokens[k] == v for k, v in ref.output_tokens.items())
    assert same == 16 if dtype == "float32" else same >= 12


@pytest.mark.slow
def test_evaluate_runs_policies_on_the_runtime_backend(tmp_path: Path) -> None:
    from llmsched_env.commands.evaluate import main

    out = tmp_path / "ev"
    code = main(
        ["--backend", "runtime", "--model", "tiny", "--scenarios", "mixed-slo", "--num-requests", "4",
         "--policies", "fcfs,agent=tests/data/policies/mixed-slo", "--check-invariants", "--out", str(out),
         "--no-plots"]
    )  # fmt: skip
    assert code == 0
    rows = (out / "results.csv").read_text().splitlines()
    header = rows[0].split(",")
    assert len(rows) == 3 and "model_time_s" in header and "policy_fallbacks" in header
    for row in rows[1:]:
        values = dict(zip(header, row.split(","), strict=True))
        assert float(values["num_finished"]) + float(values["num_rejected"]) == 4
        assert float(values["policy_fallbacks"]) == 0


def test_evaluate_runtime_names_a_bad_weights_file(tmp_path: Path) -> None:
    from llmsched_env.commands.evaluate import main

    bad = tmp_path / "bad.safetensors"
    bad.write_text("not safetensors")
    argv = ["--backend", "runtime", "--scenarios", "mixed-slo", "--num-requests", "2", "--weights", str(bad)]
    with pytest.raises(SystemExit, match=r"bad\.safetensors: not a readable safetensors file"):
        main(argv)
