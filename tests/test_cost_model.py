"""Cost models: presets hit published-scale step times, monotone, fit, JSON round trip, readable errors."""

from __future__ import annotations

import dataclasses
import itertools
import json
import pickle
from pathlib import Path

import numpy as np
import pytest

from llmsched_env.costs.analytic import SHAPE_FACTOR, AnalyticCostModel
from llmsched_env.costs.base import CostModel, prefill_time_s, unloaded_decode_time_s
from llmsched_env.costs.linear import LinearCostModel, fit_report
from llmsched_env.costs.loader import PRESET_DIR, cost_model_of, from_dict, list_presets, load_cost_model

PRESETS = ("llama3-8b-h100", "llama3-8b-a100", "llama2-70b-4xh100")
MS = 1e-3


def test_presets_are_listed_and_load() -> None:
    assert set(PRESETS) <= set(list_presets())
    for name in list_presets():
        model = load_cost_model(name)
        assert isinstance(model, CostModel)
        assert model.name == name
        assert name in repr(model)


def test_llama3_8b_h100_sanity_ranges() -> None:
    model = load_cost_model("llama3-8b-h100")
    assert 6 * MS <= unloaded_decode_time_s(model, 1024) <= 8 * MS
    assert 30 * MS <= prefill_time_s(model, 1024) <= 60 * MS
    assert 8 * MS <= model.step_time_s(0, 64, 64 * 1024, 0.0) <= 12 * MS


def test_a100_slower_than_h100() -> None:
    h100, a100 = load_cost_model("llama3-8b-h100"), load_cost_model("llama3-8b-a100")
    assert unloaded_decode_time_s(a100) > 1.3 * unloaded_decode_time_s(h100)
    assert prefill_time_s(a100, 1024) > 2 * prefill_time_s(h100, 1024)
    assert a100.step_time_s(0, 64, 65536, 0.0) > h100.step_time_s(0, 64, 65536, 0.0)


def test_llama2_70b_tp4_decode_step() -> None:
    model = load_cost_model("llama2-70b-4xh100")
    for batch in (1, 16, 32):
        assert 15 * MS <= model.step_time_s(0, batch, batch * 1024, 0.0) <= 25 * MS


@pytest.mark.parametrize("name", PRESETS)
def test_empty_batch_costs_overhead(name: str) -> None:
    model = load_cost_model(name)
    assert 0 < model.step_time_s(0, 0, 0, 0.0) < unloaded_decode_time_s(model, 0)


def _assert_monotone(model: CostModel) -> None:
    grids = ([0, 1, 16, 512, 4096], [0, 1, 8, 64, 256], [0, 100, 8_000, 256_000], [0.0, 1e3, 5e5, 8e6])
    for point in itertools.product(*grids):
        t = model.step_time_s(*point)
        assert t > 0
        for axis, grid in enumerate(grids):
            bigger = [v for v in grid if v > point[axis]]
            if bigger:
                moved = list(point)
                moved[axis] = bigger[0]
                assert model.step_time_s(*moved) >= t, (point, axis)


@pytest.mark.parametrize("name", PRESETS)
def test_presets_monotone_in_each_argument(name: str) -> None:
    _assert_monotone(load_cost_model(name))


def test_linear_model_monotone_and_formula() -> None:
    model = LinearCostModel([1e-3, 2e-5, 3e-5, 1e-8, 1e-10], name="lin")
    _assert_monotone(model)
    assert model.step_time_s(10, 2, 100, 50.0) == pytest.approx(1e-3 + 2e-4 + 6e-5 + 1e-6 + 5e-9)


def test_prefill_time_chunked_and_cached() -> None:
    model = load_cost_model("llama3-8b-h100")
    whole = prefill_time_s(model, 4096)
    chunked = prefill_time_s(model, 4096, chunk_tokens=512)
    assert chunked > whole  # eight iterations each pay overhead and a weight read
    assert prefill_time_s(model, 4096, num_cached_tokens=3072) < prefill_time_s(model, 1024 + 3072)
    assert prefill_time_s(model, 100, num_cached_tokens=100) == 0.0
    with pytest.raises(ValueError, match="chunk_tokens"):
        prefill_time_s(model, 100, chunk_tokens=0)


def _synthetic_samples(coef: np.ndarray, num: int, noise: float, seed: int = 0) -> list[tuple[float, ...]]:
    rng = np.random.default_rng(seed)
    p = rng.integers(0, 4096, num) * (rng.random(num) < 0.7)
    ctx = rng.integers(0, 8192, num)
    pairs = p * (ctx + (p + 1) / 2)
    d = rng.integers(0, 256, num)
    kv = d * rng.integers(1, 4096, num)
    x = np.column_stack([np.ones(num), p, d, kv, pairs])
    y = (x @ coef) * (1 + noise * rng.standard_normal(num))
    rows = zip(p, d, kv, pairs, y, strict=True)
    return [(int(a), int(b), int(c), float(e), float(t)) for a, b, c, e, t in rows]


def test_linear_fit_recovers_coefficients() -> None:
    true = np.array([5e-3, 3e-5, 4e-5, 2e-8, 1e-10])
    samples = _synthetic_samples(true, 600, noise=0.01)
    model = LinearCostModel.fit(samples, name="fitted")
    np.testing.assert_allclose(model.coef_s[:5], true, rtol=0.05)
    assert model.coef_s[5] == 0.0  # the concave term is only fitted on request
    report = fit_report(model, samples)
    assert report["mean_rel_error"] < 0.02
    assert report["num_samples"] == 600


def test_linear_fit_keeps_coefficients_non_negative() -> None:
    # A true negative slope on decodes: unconstrained least squares goes negative, NNLS must clamp at 0.
    true = np.array([5e-3, 3e-5, -2e-6, 2e-8, 1e-10])
    samples = _synthetic_samples(true, 300, noise=0.0, seed=1)
    model = LinearCostModel.fit(samples, relative=False)
    assert all(c >= 0 for c in model.coef_s)
    assert model.coef_s[2] == 0.0
    arr = np.asarray(samples)
    design = np.column_stack([np.ones(len(arr)), arr[:, :4]])
    unconstrained = np.linalg.lstsq(design, arr[:, 4], rcond=None)[0]
    assert unconstrained[2] < 0


def test_linear_fit_matches_scipy_nnls() -> None:
    optimize = pytest.importorskip("scipy.optimize")
    rng = np.random.default_rng(3)
    samples = [(*rng.integers(0, 1000, 4).tolist(), float(rng.random() + 0.01)) for _ in range(40)]
    model = LinearCostModel.fit(samples, relative=False)
    arr = np.asarray(samples, dtype=float)
    a = np.column_stack([np.ones(len(arr)), arr[:, :4]])
    norms = np.linalg.norm(a, axis=0)
    ref = optimize.nnls(a / norms, arr[:, 4])[0] / norms
    ref[0] = max(ref[0], LinearCostModel.MIN_OVERHEAD_S)
    np.testing.assert_allclose(model.coef_s[:5], ref, rtol=1e-6, atol=1e-12)


def test_linear_fit_with_the_concave_decode_term() -> None:
    """Steps whose cost has a ``log2(1 + d)`` part: the linear fit misses it, the concave fit recovers it."""
    rng = np.random.default_rng(5)
    d = rng.integers(0, 64, 400)
    kv = d * rng.integers(16, 2048, 400)
    true = [2e-3, 0.0, 4e-5, 2e-8, 0.0, 3e-4]
    model = LinearCostModel(true)
    samples = [(0, int(a), int(b), 0.0, model.step_time_s(0, int(a), int(b), 0.0)) for a, b in zip(d, kv, strict=True)]
    concave = LinearCostModel.fit(samples, concave_decodes=True)
    np.testing.assert_allclose(concave.coef_s, true, rtol=1e-6, atol=1e-12)
    assert fit_report(concave, samples)["max_rel_error"] < 1e-9
    assert fit_report(LinearCostModel.fit(samples), samples)["max_rel_error"] > 0.01
    assert model.step_time_s(0, 3, 100, 0.0) == pytest.approx(2e-3 + 1.2e-4 + 2e-6 + 3e-4 * 2)
    doubled = model.scaled(2.0)
    assert doubled.step_time_s(0, 3, 100, 0.0) == pytest.approx(2 * model.step_time_s(0, 3, 100, 0.0))
    with pytest.raises(ValueError, match="factor"):
        model.scaled(0.0)


@pytest.mark.parametrize(
    ("samples", "match"),
    [
        ([(1, 1, 1, 1.0, 1.0)] * 4, "at least 5"),
        ([(1, 1, 1, 1.0, float("nan"))] * 6, "finite"),
        ([(1, -1, 1, 1.0, 1.0)] * 6, "non-negative"),
        ([(1, 1, 1, 1.0, 0.0)] * 6, "> 0"),
        ([(1, 1, 1, 1.0)] * 6, "tuples"),
    ],
)
def test_linear_fit_rejects_bad_samples(samples: list[tuple[float, ...]], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        LinearCostModel.fit(samples)


def test_linear_preset_without_the_concave_term_loads_with_it_zero(tmp_path: Path) -> None:
    path = tmp_path / "old.json"
    fields = {"overhead_s": 1e-3, "prefill_token_s": 1e-5, "decode_seq_s": 1e-5, "kv_token_s": 1e-8}
    path.write_text(json.dumps({"kind": "linear", **fields, "prefill_attn_pair_s": 0.0}))
    model = load_cost_model(path)
    assert isinstance(model, LinearCostModel) and model.coef_s[5] == 0.0
    assert model.step_time_s(0, 4, 100, 0.0) == pytest.approx(1e-3 + 4e-5 + 1e-6)


def test_linear_save_load_round_trip(tmp_path: Path) -> None:
    model = LinearCostModel([1.25e-3, 2.5e-5, 3.1e-5, 1.7e-8, 1.3e-10], name="calibrated", description="x")
    path = tmp_path / "calibrated.json"
    model.save(path)
    loaded = load_cost_model(str(path))
    assert loaded == model
    assert isinstance(loaded, LinearCostModel)
    assert loaded.coef_s == model.coef_s
    assert json.loads(path.read_text())["kind"] == "linear"


@pytest.mark.parametrize("name", PRESETS)
def test_pickle_and_dict_round_trip(name: str, tmp_path: Path) -> None:
    model = load_cost_model(name)
    clone = pickle.loads(pickle.dumps(model))
    assert clone == model
    assert clone.step_time_s(100, 10, 5000, 1e4) == model.step_time_s(100, 10, 5000, 1e4)
    path = tmp_path / "copy.json"
    path.write_text(json.dumps(model.to_dict()))
    assert load_cost_model(path) == model


def _write_bad(tmp_path: Path, change: dict | None = None, drop: str | None = None, text: str | None = None) -> Path:
    path = tmp_path / "bad.json"
    if text is None:
        data = load_cost_model("llama3-8b-h100").to_dict()  # type: ignore[attr-defined]
        data.update(change or {})
        if drop:
            del data[drop]
        text = json.dumps(data)
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"drop": "peak_tflops"}, "peak_tflops"),
        ({"change": {"mem_bandwidth_gbps": "fast"}}, "mem_bandwidth_gbps"),
        ({"change": {"num_layers": -32}}, "num_layers"),
        ({"change": {"num_layers": 32.5}}, "num_layers"),
        ({"change": {"compute_efficiency": 1.5}}, "compute_efficiency"),
        ({"change": {"overhead_s": 0}}, "overhead_s"),
        ({"change": {"tensor_parallel": 2}}, "interconnect_bandwidth_gbps"),
        ({"change": {"kind": "quantum"}}, "kind"),
        ({"drop": "kind"}, "kind"),
        ({"change": {"peak_tflop": 1.0}}, "peak_tflop"),
        ({"change": {"description": 7}}, "description"),
    ],
)
def test_malformed_analytic_file_names_file_and_field(tmp_path: Path, kwargs: dict, field: str) -> None:
    path = _write_bad(tmp_path, **kwargs)
    with pytest.raises(ValueError, match=field) as info:
        load_cost_model(str(path))
    assert str(path) in str(info.value)


@pytest.mark.parametrize(
    ("data", "field"),
    [
        (
            {"kind": "linear", "overhead_s": 1e-3, "prefill_token_s": 1e-5, "decode_seq_s": 1e-5, "kv_token_s": 1e-8},
            "prefill_attn_pair_s",
        ),
        (
            {
                "kind": "linear",
                "overhead_s": 1e-3,
                "prefill_token_s": -1e-5,
                "decode_seq_s": 1e-5,
                "kv_token_s": 1e-8,
                "prefill_attn_pair_s": 0.0,
            },
            "prefill_token_s",
        ),
        (
            {
                "kind": "linear",
                "overhead_s": 0.0,
                "prefill_token_s": 1e-5,
                "decode_seq_s": 1e-5,
                "kv_token_s": 1e-8,
                "prefill_attn_pair_s": 0.0,
            },
            "overhead_s",
        ),
    ],
)
def test_malformed_linear_file_names_file_and_field(tmp_path: Path, data: dict, field: str) -> None:
    path = tmp_path / "lin.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match=field) as info:
        load_cost_model(path)
    assert str(path) in str(info.value)


@pytest.mark.parametrize("text", ["{not json", "[1, 2]", ""])
def test_unparseable_file_names_file(tmp_path: Path, text: str) -> None:
    path = _write_bad(tmp_path, text=text)
    with pytest.raises(ValueError, match=r"bad\.json"):
        load_cost_model(str(path))


def test_missing_file_and_unknown_preset() -> None:
    with pytest.raises(ValueError, match="does not exist"):
        load_cost_model("/nonexistent/model.json")
    with pytest.raises(ValueError, match="llama3-8b-h100") as info:
        load_cost_model("llama9-1t-tpu")
    assert "llama9-1t-tpu" in str(info.value)
    assert all(name in str(info.value) for name in list_presets())


def test_constructors_validate() -> None:
    fields = load_cost_model("llama3-8b-h100").to_dict()  # type: ignore[attr-defined]
    del fields["kind"], fields["num_params"]
    with pytest.raises(ValueError, match=r"missing field\(s\) 'num_params'"):
        AnalyticCostModel.from_dict(fields)
    with pytest.raises(TypeError, match="num_params"):  # a keyword-only dataclass field without a default
        AnalyticCostModel(**fields)
    with pytest.raises(ValueError, match=r"field 'peak_tflops' must be a number in \[0\.001, 1,000,000\] TFLOP/s"):
        AnalyticCostModel(**{**fields, "num_params": 1e9, "peak_tflops": 0.0})
    with pytest.raises(ValueError, match="coef_s needs 5"):
        LinearCostModel([1.0, 2.0])
    with pytest.raises(ValueError, match=r"field 'decode_seq_s' must be a number in \[0, 3,600\] s"):
        LinearCostModel([1e-3, 0.0, -1.0, 0.0, 0.0])
    with pytest.raises(ValueError, match="field 'name' must be a string"):
        LinearCostModel([1e-3, 0.0, 0.0, 0.0, 0.0], name=3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"unknown field\(s\) \['decode_s'\]"):
        LinearCostModel.from_dict({"kind": "linear", "decode_s": 1.0})


def test_the_attention_shape_must_hold_together() -> None:
    """Each field in range is not enough: KV heads must divide the query heads, and the query heads' width
    (heads x head_dim) must be within ``SHAPE_FACTOR`` of hidden_size (docs/reliability.md, "Physical ranges")."""
    fields = load_cost_model("llama3-8b-h100").to_dict()  # type: ignore[attr-defined]
    del fields["kind"]
    for ok in ({"num_kv_heads": 1}, {"num_kv_heads": 32}, {"head_dim": 1024}, {"head_dim": 16}):  # 8x either way
        AnalyticCostModel(**{**fields, **ok})
    for bad, message in (
        ({"num_kv_heads": 64}, r"field 'num_kv_heads' \(64\) must divide 'num_attention_heads' \(32\)"),
        ({"num_kv_heads": 12}, r"field 'num_kv_heads' \(12\) must divide"),
        ({"head_dim": 1048576}, r"\(32 x 1048576 = 33554432\) must be within 8x of 'hidden_size' \(4096\)"),
        ({"head_dim": 8}, r"\(32 x 8 = 256\) must be within 8x of 'hidden_size' \(4096\)"),
    ):
        with pytest.raises(ValueError, match=message):
            AnalyticCostModel(**{**fields, **bad})
    assert SHAPE_FACTOR == 8.0


def test_a_cost_model_of_the_wrong_type_is_a_value_error_naming_the_field() -> None:
    import gymnasium as gym

    import llmsched_env  # noqa: F401  (registers the envs)
    from llmsched_env.evaluation import EvalConfig

    for make, field in (
        (lambda: gym.make("LLMSched-v1", scenario="mixed-slo", cost_model=123), "LLMSchedEnv.cost_model"),
        (lambda: gym.make("LLMSchedCluster-v0", cost_model=123), "LLMSchedClusterEnv.cost_model"),
        (lambda: cost_model_of("owner.cost_model", {"kind": "analytic"}), "owner.cost_model"),
        (lambda: EvalConfig(cost_model=5), "EvalConfig.cost_model"),
    ):
        with pytest.raises(ValueError, match=rf"^{field} must be a cost-model preset name") as info:
            make()
        assert "\n" not in str(info.value)
    model = load_cost_model("llama3-8b-a100")
    assert cost_model_of("c", model) is model and cost_model_of("c", "llama3-8b-a100") == model
    assert EvalConfig(cost_model=PRESET_DIR / "llama3-8b-a100.json").cost_model == str(
        PRESET_DIR / "llama3-8b-a100.json"
    )  # a path is held as its text (what the evaluation's record names)
    env = gym.make("LLMSched-v1", scenario="mixed-slo", cost_model=model)
    assert env.unwrapped.cost_model is model  # type: ignore[attr-defined]
    env.close()


@pytest.mark.parametrize("name", [*PRESETS, "runtime-tiny-cpu"])
def test_cost_models_are_frozen_equal_by_value_hashable_and_pickle(name: str) -> None:
    model = load_cost_model(name)
    for field in ("name", "coef_s" if isinstance(model, LinearCostModel) else "overhead_s"):
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(model, field, getattr(model, field))
    same = type(model).from_dict(model.to_dict())  # type: ignore[attr-defined]
    assert same == model and hash(same) == hash(model) and same is not model
    clone = pickle.loads(pickle.dumps(model))
    assert clone == model and clone.step_time_s(100, 10, 5000, 1e4) == model.step_time_s(100, 10, 5000, 1e4)
    assert dataclasses.replace(model, description="changed") != model
    assert model != LinearCostModel([1e-3, 0.0, 0.0, 0.0, 0.0], name=name)


def test_replace_and_scaled_derive_the_constants_again() -> None:
    model = load_cost_model("llama3-8b-h100")
    assert isinstance(model, AnalyticCostModel)
    faster = dataclasses.replace(
        model, peak_tflops=2 * model.peak_tflops, mem_bandwidth_gbps=2 * model.mem_bandwidth_gbps
    )
    big = (4096, 8, 8 * 1024, 4096 * 2048.0)
    assert faster.step_time_s(*big) - faster.overhead_s == pytest.approx(
        (model.step_time_s(*big) - model.overhead_s) / 2
    )
    linear = LinearCostModel([1e-3, 1e-5, 1e-4, 1e-7, 1e-8])
    assert linear.coef_s == (1e-3, 1e-5, 1e-4, 1e-7, 1e-8, 0.0)
    assert linear.scaled(3.0).step_time_s(*big) == pytest.approx(3 * linear.step_time_s(*big))
    with pytest.raises(ValueError, match="overhead_s"):
        dataclasses.replace(model, overhead_s=0.0)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({}, r"^cost model: field 'kind' must be one of \['analytic', 'linear'\], it is missing$"),
        ({"kind": "cubic"}, r"^cost model: field 'kind' must be one of .*, got 'cubic'$"),
        ({"kind": ["linear"]}, r"field 'kind' must be one of .*, got \['linear'\]$"),
        ([], r"^a cost model must be a mapping of fields \(with 'kind'\), got list$"),
    ],
)
def test_from_dict_without_a_known_kind_is_a_value_error_naming_the_field(data: object, message: str) -> None:
    """``from_dict({})`` was a ``KeyError: 'kind'``."""
    with pytest.raises(ValueError, match=message):
        from_dict(data)  # type: ignore[arg-type]
