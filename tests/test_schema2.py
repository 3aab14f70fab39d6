"""Observation schema 2 and its action layout: the same observation whatever the tenants are named and in what
order they come; one action layout for every engine, through which every named heuristic and ``tuned`` act;
a policy of another schema refused in one line."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

import baselines
import llmsched_env  # noqa: F401
from llmsched_env.costs.loader import load_cost_model
from llmsched_env.decision import observation
from llmsched_env.decision.actions import FIXED_CHUNK_CAPS, FIXED_TOKEN_BUDGETS, ActionSpec
from llmsched_env.decision.observation import (
    NUM_SLOTS,
    OBS_CLIP,
    GenericObservationEncoder,
    ObservationEncoder,
    make_encoder,
)
from llmsched_env.decision.planners.tuned import load_tuned_table
from llmsched_env.decision.policy import PolicyContext
from llmsched_env.decision.schema import SCHEMAS, check_schema
from llmsched_env.engine.batch import Decision, QueueOrder
from llmsched_env.engine.config import SLO_CLASSES, EngineConfig, TenantConfig
from llmsched_env.engine.request import Request
from llmsched_env.runtime.policy_file import PolicyFileError, load_policy_file
from llmsched_env.sim.simulator import Simulator
from llmsched_env.workloads.library import get_scenario, list_scenarios

POLICIES = Path(__file__).resolve().parent / "data" / "policies"  # schema-1 fixtures
ENGINE = EngineConfig(num_kv_blocks=600, max_num_seqs=24, max_num_batched_tokens=1024)
COST = load_cost_model("llama3-8b-h100")
CLASSES = ["interactive", "chat", "code", "batch", "summarization", "chat"]


def _tenants(order: list[int], names: list[str]) -> list[TenantConfig]:
    """Six tenants of different classes, weights and priorities, listed in ``order`` and named ``names``."""
    base = [TenantConfig("x", SLO_CLASSES[CLASSES[k]], weight=1.0 + k % 3, priority=k % 2) for k in range(len(CLASSES))]
    return [TenantConfig(names[i], base[k].slo, base[k].weight, base[k].priority) for i, k in enumerate(order)]


def _requests(order: list[int], seed: int) -> list[Request]:
    """The same 160 requests (arrivals, lengths, tenant k of the base list) with tenants re-indexed by ``order``."""
    rng = np.random.default_rng(seed)
    where = {k: i for i, k in enumerate(order)}
    arrivals = np.cumsum(rng.exponential(0.02, 160))
    out = []
    for i, a in enumerate(arrivals.tolist()):
        k = int(rng.integers(len(CLASSES)))
        r = Request(i, a, int(rng.integers(20, 900)), int(rng.integers(2, 200)), where[k])
        r.predicted_output_len = int(rng.integers(1, 300))
        out.append(r)
    return out


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("order_", [QueueOrder.EDF, QueueOrder.VTC, QueueOrder.SPRW, QueueOrder.PRIORITY_AGING])
def test_identical_engine_state_gives_identical_observation_whatever_the_tenants_names_and_order(
    seed: int, order_: QueueOrder
) -> None:
    identity = list(range(len(CLASSES)))
    shuffled = [3, 5, 0, 4, 1, 2]
    runs = []
    for order, names in ((identity, [f"t{k}" for k in identity]), (shuffled, ["zeta", "a", "mid", "B", "q", "k"])):
        tenants = _tenants(order, names)
        sim = Simulator(ENGINE, tenants, COST, _requests(order, seed))
        enc = GenericObservationEncoder(ENGINE, tenants, 20.0)
        obs = []
        decision = Decision(order=order_, token_budget=512, chunk_cap=256, max_admit=4, shed=True)
        while not sim.done:
            sim.step(decision)
            sim.check_invariants()
            obs.append(enc.encode(sim.engine, 0.01))
        runs.append(np.array(obs))
    a, b = runs
    assert a.shape == b.shape and a.shape[0] > 50
    np.testing.assert_array_equal(a, b)
    assert (a[:, list(enc.names).index("tenants/active")] > 2 / 16).any()  # several tenants were busy at once


@pytest.mark.filterwarnings("ignore:overflow encountered in cast:RuntimeWarning")  # numpy's cast of 1e300
@pytest.mark.parametrize("tail", [[], [0.0, 1.0, 0.25]])
def test_clipped_gives_numpys_clipped_float32(tail: list[float]) -> None:
    """``_clipped``, the encoders' last step: struct-packed features (and a pre-packed constant tail), clipped in
    place, are the same bits as ``np.clip(np.array(features, float32), -OBS_CLIP, OBS_CLIP)``, in an array the
    caller owns; values past float32's range take numpy's own cast."""
    rng = np.random.default_rng(0)
    packed = np.array(tail, np.float32).tobytes()
    for extreme in ([], [1e300], [-1e300, 3e38, 4e38], [np.inf, -np.inf]):
        feats = [*rng.normal(0.0, 20.0, 30).tolist(), 1e-45, -0.0, *extreme]
        ref = np.clip(np.array(feats + tail, np.float32), -OBS_CLIP, OBS_CLIP)
        obs = observation._clipped(list(feats), packed)
        assert obs.dtype == np.float32 and obs.flags.writeable
        np.testing.assert_array_equal(obs, ref)
        assert np.signbit(obs).tolist() == np.signbit(ref).tolist()  # -0.0 stays -0.0
        obs[:] = 5.0  # the caller owns it: the packed tail is untouched
        np.testing.assert_array_equal(observation._clipped(list(feats), packed), ref)


@pytest.mark.filterwarnings("ignore:overflow encountered in cast:RuntimeWarning")
@pytest.mark.parametrize("num_tenants", [1, 3, NUM_SLOTS, 6])
def test_schema_2_tail_reads_as_empty_slots_and_an_empty_rest(num_tenants: int) -> None:
    """With at most ``NUM_SLOTS`` tenants the slots past the last tenant and the rest are constant (packed
    once): an empty slot reads as an idle tenant, the rest as none; a feature past the bounds is clipped."""
    order = list(range(num_tenants))
    tenants = _tenants(order, [f"t{k}" for k in order])
    requests = [r for r in _requests(list(range(len(CLASSES))), 0) if r.tenant < num_tenants]
    sim = Simulator(ENGINE, tenants, COST, requests)
    decision = Decision(order=QueueOrder.EDF, token_budget=512, chunk_cap=256, max_admit=4, shed=True)
    for _ in range(40):
        sim.step(decision)
    enc = GenericObservationEncoder(ENGINE, tenants, 20.0)
    obs = dict(zip(enc.names, enc.encode(sim.engine, 1e300).tolist(), strict=True))
    assert obs["latency/last_step_over_tpot"] == OBS_CLIP
    assert obs["tenants/count"] == num_tenants / 16
    for i in range(NUM_SLOTS):
        assert obs[f"slot{i}/present"] == (1.0 if i < num_tenants else 0.0)
        if i >= num_tenants:
            assert (obs[f"slot{i}/head_slack"], obs[f"slot{i}/attainment"], obs[f"slot{i}/num_waiting"]) == (1, 1, 0)
    rest = [obs[f"rest/{f}"] for f in ("count", "num_waiting", "num_running", "head_slack", "attainment")]
    if num_tenants <= NUM_SLOTS:
        assert rest == [0.0, 0.0, 0.0, 1.0, 1.0]
    else:
        assert rest[0] == (num_tenants - NUM_SLOTS) / 16


def test_schema_2_names_do_not_depend_on_the_tenants() -> None:
    one = GenericObservationEncoder(ENGINE, [TenantConfig("only")], 1.0)
    many = GenericObservationEncoder(ENGINE, [TenantConfig(f"t{i}") for i in range(16)], 1.0)
    assert one.names == many.names and one.size == many.size
    assert sum(n.startswith("slot") for n in one.names) == NUM_SLOTS * 13
    assert isinstance(make_encoder(1, ENGINE, [TenantConfig("a")], 1.0), ObservationEncoder)
    assert make_encoder(2, ENGINE, [TenantConfig("a")], 1.0).schema == 2
    with pytest.raises(ValueError, match="schema 3 is not supported"):
        make_encoder(3, ENGINE, [TenantConfig("a")], 1.0)
    assert SCHEMAS == (1, 2) and check_schema(2) == 2


@pytest.mark.parametrize("top", [64, 100, 2048, 4096, 6000, 8192, 32768])
def test_schema_2_action_layout_is_fixed_and_capped_at_the_engine(top: int) -> None:
    engine = EngineConfig(max_num_batched_tokens=top, max_num_seqs=min(64, top))
    spec = ActionSpec.for_engine(engine, 2)
    assert spec.nvec == (len(QueueOrder), len(FIXED_TOKEN_BUDGETS), len(FIXED_CHUNK_CAPS), 2, 7, 5, 2)
    assert spec.token_budget_values[-1] == min(top, FIXED_TOKEN_BUDGETS[-1])
    assert all(v <= top for v in (*spec.token_budget_values, *spec.chunk_cap_values))
    env = gym.make("LLMSched-v1", engine=engine, num_requests=30, check_invariants=True)
    env.reset(seed=0)
    mask = env.unwrapped.action_masks()
    budgets = mask[len(QueueOrder) : len(QueueOrder) + len(FIXED_TOKEN_BUDGETS)]
    assert budgets.sum() == len(spec.token_budget_values)  # the options past the engine's limit are masked out
    for b in range(len(FIXED_TOKEN_BUDGETS)):  # any index decodes to a budget the engine allows
        assert spec.decode([0, b, 0, 0, 1, 0, 0]).token_budget <= top


def test_schema_1_layout_is_the_one_the_shipped_policies_were_trained_on() -> None:
    spec = ActionSpec.for_engine(EngineConfig(), 1)
    assert spec.nvec == (6, 5, 6, 2, 7, 5, 2) and spec.max_tokens is None
    with pytest.raises(ValueError, match="SPRW is not in this action space"):
        spec.encode(Decision(order=QueueOrder.SPRW))


@pytest.mark.parametrize("scenario", list_scenarios())
def test_every_named_heuristic_and_tuned_act_exactly_through_the_schema_2_layout(scenario: str) -> None:
    sc = get_scenario(scenario)
    spec = ActionSpec.for_engine(sc.engine, 2)
    tenants = sc.source("val").tenants
    names = GenericObservationEncoder(sc.engine, tenants, 1.0).names
    ctx = PolicyContext(sc.engine, tenants, COST, spec, names, scenario)
    for name in baselines.available():
        policy = baselines.make_for(name, ctx, seed=0)
        decision = getattr(policy, "decision", None)
        if decision is not None:  # a static heuristic: its knobs survive encode/decode unchanged
            assert spec.decode(spec.encode(decision)) == decision, name
    tuned = load_tuned_table(Path(baselines.__file__).with_name("tuned.json")).decision(scenario, spec)
    assert spec.decode(spec.encode(tuned)) == tuned


def _copy_policy(src: Path, dst: Path, **changes: object) -> Path:
    shutil.copytree(src, dst)
    meta = json.loads((dst / "policy.json").read_text())
    meta.update(changes)
    (dst / "policy.json").write_text(json.dumps(meta))
    return dst


@pytest.mark.parametrize("schema", [0, 3, 99])
def test_a_policy_file_of_an_unknown_schema_is_refused_in_one_line(tmp_path: Path, schema: int) -> None:
    path = _copy_policy(POLICIES / "mixed-slo", tmp_path / "p", schema_version=schema)
    with pytest.raises(PolicyFileError) as err:
        load_policy_file(path)
    message = str(err.value)
    assert "\n" not in message and f"observation schema {schema} is not supported" in message
    assert "policy.json" in message


def test_an_old_schema_policy_is_refused_in_one_line_by_a_schema_2_env() -> None:
    policy = load_policy_file(POLICIES / "mixed-slo")
    assert policy.schema_version == 1
    env = gym.make("LLMSched-v1", scenario="mixed-slo", schema=2)
    u = env.unwrapped
    with pytest.raises(PolicyFileError) as err:
        policy.check_compatible(u.obs_names, u.action_spec.nvec, schema_version=u.schema)
    message = str(err.value)
    assert "\n" not in message and "schema 1" in message and "schema 2" in message
    # on its own schema it still fits (per-scenario policies keep working)
    env1 = gym.make("LLMSched-v0", scenario="mixed-slo", schema=1)
    u1 = env1.unwrapped
    policy.check_compatible(u1.obs_names, u1.action_spec.nvec, schema_version=u1.schema)


def test_evaluation_runs_each_policy_on_its_own_schema() -> None:
    from llmsched_env.evaluation.config import EvalConfig
    from llmsched_env.evaluation.grid import run_grid

    config = EvalConfig(
        scenarios=["mixed-slo"], policies=["slo_aware", f"old={POLICIES / 'mixed-slo'}"], num_requests=60
    )
    rows = run_grid(config).rows
    assert [r["policy"] for r in rows] == ["slo_aware", "old"]
    assert all(r["num_finished"] + r["num_rejected"] == 60 for r in rows)
