"""``LLMSched-v1`` (and the schema-1 ``LLMSched-v0``): versioned ids, API checkers, masks, invariants under random
masked actions, rewards, determinism, bad input."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env as gym_check_env
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from stable_baselines3.common.env_checker import check_env as sb3_check_env

import llmsched_env  # noqa: F401
from llmsched_env.decision.actions import ACTION_COMPONENTS
from llmsched_env.decision.schema import SCHEMA_VERSION, env_id


def make(**kwargs) -> gym.Env:
    kwargs.setdefault("num_requests", 80)
    return gym.make(env_id(kwargs.pop("schema", SCHEMA_VERSION)), **kwargs)


def random_masked_action(env: gym.Env, rng: np.random.Generator) -> np.ndarray:
    mask = env.unwrapped.action_masks()
    action, start = [], 0
    for n in env.unwrapped.action_spec.nvec:
        valid = np.flatnonzero(mask[start : start + n])
        action.append(int(rng.choice(valid)))
        start += n
    return np.array(action)


def test_gymnasium_and_sb3_env_checkers_pass() -> None:
    gym_check_env(make().unwrapped, skip_render_check=True)
    sb3_check_env(make().unwrapped, warn=True)


@pytest.mark.parametrize("schema", [1, 2])
def test_spaces_names_and_observation_bounds(schema: int) -> None:
    env = make(schema=schema)
    obs, _ = env.reset(seed=0)
    names = env.unwrapped.obs_names
    assert obs.shape == (len(names),) and obs.dtype == np.float32 and len(set(names)) == len(names)
    assert "kv/reserve_demand" in names
    assert ("tenant/chat/vtc_gap" in names) == (schema == 1) and ("slot0/vtc_gap" in names) == (schema == 2)
    assert len(env.action_space.nvec) == len(ACTION_COMPONENTS)
    assert env.unwrapped.action_masks().shape == (int(env.action_space.nvec.sum()),)
    assert env.observation_space.contains(obs)


CONFIGS = [
    {"num_kv_blocks": 64, "block_size": 16, "max_num_seqs": 8, "max_num_batched_tokens": 512},
    {"num_kv_blocks": 400, "block_size": 16, "max_num_seqs": 32, "max_num_batched_tokens": 2048},
    {"num_kv_blocks": 4096, "block_size": 16, "max_num_seqs": 128, "max_num_batched_tokens": 4096},
]


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 1000), engine=st.sampled_from(CONFIGS), load=st.sampled_from([0.5, 2.0, 8.0]))
def test_invariants_every_step_under_random_masked_actions(seed: int, engine: dict, load: float) -> None:
    env = make(engine=engine, load=load, check_invariants=True, num_requests=60)  # the env checks every step
    rng = np.random.default_rng(seed)
    obs, _ = env.reset(seed=seed)
    steps = 0
    while True:
        obs, reward, term, trunc, info = env.step(random_masked_action(env, rng))
        assert env.observation_space.contains(obs) and np.isfinite(reward)
        assert not info["action_projected"]
        steps += 1
        if term or trunc:
            break
    m = info["metrics"]
    assert m["num_requests"] == 60 and m["num_finished"] + m["num_rejected"] + m["num_unfinished"] == 60


def test_return_equals_two_attainment_minus_one() -> None:
    env = make(num_requests=200, load=3.0, engine=CONFIGS[1])
    rng = np.random.default_rng(1)
    env.reset(seed=1)
    total, terms = 0.0, {"good": 0.0, "miss": 0.0, "preempt": 0.0}
    while True:
        _, r, term, trunc, info = env.step(random_masked_action(env, rng))
        total += r
        for k, v in info["rewards"].items():
            terms[k] += v
        if term or trunc:
            break
    att = info["metrics"]["slo_attainment"]
    assert 0.0 < att < 1.0
    assert total == pytest.approx(2 * att - 1)
    assert terms["good"] == pytest.approx(att)


def test_truncation_counts_unresolved_requests_as_misses() -> None:
    env = make(num_requests=300, load=4.0, horizon_s=3.0)
    env.reset(seed=0)
    total = 0.0
    while True:
        _, r, term, trunc, info = env.step(np.array([0, 3, 4, 0, 6, 0, 0]))
        total += r
        if term or trunc:
            break
    assert trunc and not term
    m = info["metrics"]
    assert m["num_unfinished"] > 0
    n = 300
    assert total == pytest.approx((2 * m["slo_attainment"] - 1) * m["num_requests"] / n)


def test_same_seed_same_observations_and_metrics() -> None:
    def run(seed: int) -> tuple[list[np.ndarray], dict]:
        env = make(num_requests=100, load=2.0)
        rng = np.random.default_rng(seed)
        obs, _ = env.reset(seed=seed)
        seen = [obs]
        while True:
            obs, _, term, trunc, info = env.step(random_masked_action(env, rng))
            seen.append(obs)
            if term or trunc:
                return seen, info["metrics"]

    a, ma = run(3)
    b, mb = run(3)
    assert len(a) == len(b) and all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    assert ma == mb
    c, _ = run(4)
    assert len(c) != len(a) or not all(np.array_equal(x, y) for x, y in zip(a, c, strict=False))


def test_masks_forbid_admission_from_an_empty_queue_and_masked_actions_are_projected() -> None:
    env = make(num_requests=5, load=0.01)
    env.reset(seed=0)
    env.step(np.array([0, 3, 4, 0, 6, 0, 0]))  # admits the only waiting request
    u = env.unwrapped
    if not any(u.sim.engine.num_waiting):
        mask = u.action_masks()
        spec = u.action_spec
        offsets = np.cumsum((0, *spec.nvec))
        assert mask[offsets[4] : offsets[5]].tolist() == [True] + [False] * (spec.nvec[4] - 1)
        _, _, _, _, info = env.step(np.array([2, 3, 4, 0, 6, 0, 1]))
        assert info["action_projected"]


def test_a_held_action_is_checked_against_every_iteration_s_mask() -> None:
    # an env holding each action for 4 iterations plays exactly as one that is given it 4 times, one iteration at a
    # time (each projected onto that iteration's mask): the held env re-checks the action whenever the mask changes.
    # Admitting none is allowed while a request runs and refused once the engine is idle with requests waiting,
    # so a held "admit none" must turn into an admission in the iteration where the last running request ends.
    held, single = make(num_requests=60, load=3.0, iterations_per_step=4), make(num_requests=60, load=3.0)
    held.reset(seed=2)
    single.reset(seed=2)
    rng = np.random.default_rng(0)
    nvec = held.unwrapped.action_spec.nvec
    projected = done = False
    while not done:
        action = np.array([int(rng.integers(n)) for n in nvec])  # unmasked: often invalid
        action[ACTION_COMPONENTS.index("admission_cap")] = 0
        _, _, term, trunc, info = held.step(action)
        projected |= info["action_projected"]
        done = term or trunc
        for _ in range(4):
            _, _, s_term, s_trunc, _ = single.step(action)
            if s_term or s_trunc:
                break
        a, b = held.unwrapped.sim, single.unwrapped.sim
        assert (a.num_steps, a.now_s, a.engine.num_good, a.engine.num_missed) == (
            b.num_steps,
            b.now_s,
            b.engine.num_good,
            b.engine.num_missed,
        )
    assert projected
    assert held.unwrapped.sim.metrics() == single.unwrapped.sim.metrics()


@pytest.mark.parametrize(
    ("action", "component"),
    [
        (np.array([7, 0, 0, 0, 0, 0, 0]), "queue_order"),
        (np.array([0, -1, 0, 0, 0, 0, 0]), "token_budget"),
        (np.array([0, 0, 0, 2, 0, 0, 0]), "batch_mix"),
        (np.array([0, 0, 0, 0, 0, 0, float("nan")]), "shed"),
        (np.array([0, 0, 0, 0, 0, 0.5, 0]), "kv_reserve"),
    ],
)
def test_bad_actions_name_the_component(action: np.ndarray, component: str) -> None:
    env = make()
    env.reset(seed=0)
    with pytest.raises(ValueError, match=component):
        env.unwrapped.step(action)


@pytest.mark.parametrize("kind", [bool, complex, float])
def test_a_non_integer_action_is_refused_after_an_equal_integer_one(kind: type) -> None:
    env = make()
    env.reset(seed=0)
    ints = np.array([0, 1, 1, 1, 0, 0, 0])
    env.unwrapped.step(ints)  # the integer action is decoded (and cached) first
    odd = ints.astype(kind)
    if kind is float:  # an integral float is an integer action; a fractional one is not
        env.unwrapped.step(odd)
        odd = odd + 0.5
    with pytest.raises(ValueError, match="must be an integer"):
        env.unwrapped.step(odd)
    with pytest.raises(ValueError, match="must be an integer"):
        env.unwrapped.step(odd.tolist())


def test_wrong_action_shape_is_a_clear_error() -> None:
    env = make()
    env.reset(seed=0)
    with pytest.raises(ValueError, match="7 components"):
        env.unwrapped.step(np.array([0, 0, 0]))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"engine": {"num_kv_blocks": 0}}, "num_kv_blocks"),
        ({"engine": {"kv_blocks": 10}}, "unknown field"),
        ({"load": -1.0}, "load"),
        ({"cost_model": "no-such-preset"}, "llama3-8b-h100"),
        ({"reward": {"good": -1.0}}, "good"),
        ({"render_mode": "bogus"}, "render_mode"),
        ({"horizon_s": 0.0}, "horizon_s"),
        ({"max_steps": 2.5}, r"LLMSchedEnv\.max_steps"),
        ({"max_steps": float("nan")}, r"LLMSchedEnv\.max_steps"),
        ({"load": (0.5, float("inf"))}, r"load range must be \(low, high\) with"),
        ({"load": (float("nan"), 1.0)}, r"load range must be \(low, high\) with"),
        ({"num_requests": 0}, r"LLMSchedEnv\.num_requests"),
        ({"split": "dev"}, "split"),
    ],
)
def test_invalid_env_arguments(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        make(**kwargs)


def test_iterations_per_step_holds_the_action_and_sums_rewards() -> None:
    def run(k: int) -> tuple[int, float, dict]:
        env = make(num_requests=100, load=2.0, iterations_per_step=k, check_invariants=True)
        env.reset(seed=5)
        steps, total = 0, 0.0
        while True:
            _, r, term, trunc, info = env.step(np.array([2, 3, 4, 0, 6, 0, 1]))
            steps, total = steps + 1, total + r
            if term or trunc:
                return steps, total, info["metrics"]

    s1, r1, m1 = run(1)
    s4, r4, m4 = run(4)
    assert s4 < s1 / 3  # four engine iterations per step
    assert m1 == m4 and r1 == pytest.approx(r4)  # a held action is the same schedule
    with pytest.raises(ValueError, match="iterations_per_step"):
        make(iterations_per_step=0)


def test_load_range_draws_a_load_per_episode() -> None:
    env = make(num_requests=50, load=(0.5, 2.0))
    loads = set()
    for seed in range(4):
        env.reset(seed=seed)
        loads.add(round(env.unwrapped.load, 6))
        assert 0.5 <= env.unwrapped.load <= 2.0
    assert len(loads) == 4
    with pytest.raises(ValueError, match="load range"):
        make(load=(2.0, 1.0))


@pytest.mark.parametrize("env_id", ["LLMSched-v0", "LLMSched-v1", "LLMSchedCluster-v0", "LLMSchedMix-v0"])
def test_gym_make_gives_the_env_itself_which_refuses_to_step_before_reset(env_id: str) -> None:
    """No OrderEnforcing or PassiveEnvChecker wrapper (two Python calls a step): the env's own checks stand in."""
    env = gym.make(env_id)
    assert env.unwrapped is env
    assert env.render() is None
    with pytest.raises(RuntimeError, match=r"call reset\(\) before step\(\)"):
        env.step(env.action_space.sample())
    with pytest.raises(RuntimeError, match=r"call reset\(\) before action_masks\(\)"):
        env.unwrapped.action_masks()  # type: ignore[attr-defined]
    env.close()


def test_each_env_id_has_one_observation_schema_and_refuses_the_other_naming_its_id() -> None:
    """A new id when the spaces change (Gymnasium's convention): LLMSched-v1 is schema 2, LLMSched-v0 schema 1."""
    v0, v1 = gym.make("LLMSched-v0").unwrapped, gym.make("LLMSched-v1").unwrapped
    assert (v0.schema, v1.schema) == (1, 2) and SCHEMA_VERSION == 2
    assert v0.observation_space.shape != v1.observation_space.shape
    assert "tenant/chat/num_waiting" in v0.obs_names and "slot0/num_waiting" in v1.obs_names
    assert gym.make("LLMSched-v0", schema=1).unwrapped.schema == 1  # repeating the id's own schema is fine
    with pytest.raises(ValueError, match=r"LLMSched-v0 is the env of observation schema 1, not 2: "
                                         r"gym.make\('LLMSched-v1'\) is the env of schema 2"):  # fmt: skip
        gym.make("LLMSched-v0", schema=2)
    with pytest.raises(ValueError, match=r"LLMSched-v1 is the env of observation schema 2, not 1: "
                                         r"gym.make\('LLMSched-v0'\)"):  # fmt: skip
        gym.make("LLMSched-v1", schema=1)
    with pytest.raises(ValueError, match=r"not 3 \(schemas: \[1, 2\]\)"):
        gym.make("LLMSched-v1", schema=3)
    assert (env_id(1), env_id(2)) == ("LLMSched-v0", "LLMSched-v1")


@pytest.mark.parametrize("scenario", ["", "  ", "nope", 3])
def test_an_empty_or_unknown_scenario_name_is_a_value_error_naming_the_field(scenario: object) -> None:
    """``scenario=""`` was taken for ``default`` without a word; None still is the default."""
    with pytest.raises(ValueError, match=r"^LLMSchedEnv\.scenario[: ].*default, ") as info:
        gym.make("LLMSched-v1", scenario=scenario)
    assert "\n" not in str(info.value)
    assert gym.make("LLMSched-v1", scenario=None).unwrapped.scenario.name == "default"


@pytest.mark.parametrize("env_id", ["LLMSched-v1", "LLMSchedCluster-v0"])
def test_reset_names_a_seed_that_is_no_integer(env_id: str) -> None:
    """``reset(seed=1.5)`` ended in gymnasium's own error class; the envs name the argument in a ValueError."""
    env = gym.make(env_id, num_requests=20)
    for seed in (1.5, -1, "1"):
        with pytest.raises(ValueError, match=r"\.reset\.seed must be an integer >= 0"):
            env.reset(seed=seed)
    env.reset(seed=3)
    env.close()


@pytest.mark.parametrize("env_id", ["LLMSched-v1", "LLMSchedCluster-v0", "LLMSchedMix-v0"])
def test_reset_takes_a_numpy_seed_as_its_int_and_refuses_unknown_options(env_id: str) -> None:
    """``reset(seed=np.int64(3))`` ended in gymnasium's error; ``options={"bogus": 1}`` was ignored."""
    env = gym.make(env_id, num_requests=20)
    first, _ = env.reset(seed=np.int64(3))
    again, _ = env.reset(seed=3)
    assert np.array_equal(first, again)
    with pytest.raises(ValueError, match=r"\.reset: unknown option 'bogus' \(reset takes"):
        env.reset(seed=0, options={"bogus": 1})
    with pytest.raises(TypeError, match=r"\.reset: options must be a dict or None, got list"):
        env.reset(seed=0, options=["window"])
    env.close()


@pytest.mark.parametrize(
    ("env_id", "kwargs", "error", "match"),
    [
        ("LLMSched-v1", {"action_spec": object()}, TypeError, r"LLMSchedEnv\.action_spec must be an ActionSpec"),
        ("LLMSched-v1", {"remote_kv": object()}, TypeError, r"LLMSchedEnv\.remote_kv must be a RemoteKVConfig"),
        ("LLMSchedMix-v0", {"knee_loads": 5}, ValueError, r"WorkloadMixEnv\.knee_loads must map"),
        ("LLMSchedMix-v0", {"knee_loads": {"azure-conv": float("nan")}}, ValueError, r"knee_loads\['azure-conv'\]"),
        ("LLMSchedMix-v0", {"scenarios": object()}, ValueError, r"WorkloadMixEnv\.scenarios must be a list"),
        ("LLMSchedMix-v0", {"knee_loads": {"defualt": 5}}, ValueError, r"knee_loads: unknown scenario 'defualt'"),
        ("LLMSched-v1", {"horizon_s": True}, ValueError, r"LLMSchedEnv\.horizon_s must be > 0"),
        ("LLMSchedMix-v0", {"length_predictions": 7}, ValueError, r"WorkloadMixEnv\.length_predictions must be a"),
        ("LLMSchedMix-v0", {"random_space": 3}, ValueError, r"WorkloadMixEnv\.random_space must be a Randomized"),
        ("LLMSchedMix-v0", {"iterations_per_step": 0}, ValueError, r"WorkloadMixEnv\.iterations_per_step"),
        ("LLMSchedMix-v0", {"check_invariants": 1}, ValueError, r"WorkloadMixEnv\.check_invariants"),
    ],
)
def test_arguments_of_the_wrong_type_name_the_argument(env_id: str, kwargs: dict, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        gym.make(env_id, **kwargs)


def test_a_typed_config_builds_the_env_its_keywords_build() -> None:
    """Each env takes one config dataclass; its keywords are a thin layer that builds it (and its signature)."""
    import inspect

    from llmsched_env.envs import ClusterEnvConfig, LLMSchedClusterEnv, LLMSchedEnv, SingleNodeConfig

    for cls, config, keywords in (
        (LLMSchedEnv, SingleNodeConfig(scenario="mixed-slo", num_requests=20, load=1.2), {"scenario": "mixed-slo",
         "num_requests": 20, "load": 1.2}),
        (LLMSchedClusterEnv, ClusterEnvConfig(scenario="azure-conv", num_replicas=2, num_requests=20),
         {"scenario": "azure-conv", "num_replicas": 2, "num_requests": 20}),
    ):  # fmt: skip
        typed, spelled = cls(config), cls(**keywords)
        assert typed.config == spelled.config and typed._signature == spelled._signature
        assert np.array_equal(typed.reset(seed=1)[0], spelled.reset(seed=1)[0])
        assert set(keywords) < set(inspect.signature(cls.__init__).parameters)
        with pytest.raises(ValueError, match="or keywords, not both"):
            cls(config, load=2.0)
    with pytest.raises(TypeError, match="lod"):
        LLMSchedEnv(lod=2.0)
    config = SingleNodeConfig(num_requests=20, schema=1)
    assert gym.make("LLMSched-v0", config=config).unwrapped.schema == 1
    with pytest.raises(ValueError, match="LLMSched-v1 is the env of observation schema 2, not 1"):
        gym.make("LLMSched-v1", config=config)
