"""Output-length prediction: its error is what it is configured to be, it changes nothing else of an episode,
and the SPRW order (and the ``sprw`` baseline) serves the shortest predicted work first, with its guard."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest

import baselines
import llmsched_env  # noqa: F401
from llmsched_env.engine.batch import QueueOrder
from llmsched_env.engine.config import SLO_CLASSES, TenantConfig
from llmsched_env.engine.queues import WaitingQueues
from llmsched_env.engine.request import Request
from llmsched_env.envs.episode import run_episode
from llmsched_env.workloads.lengths import LengthDist
from llmsched_env.workloads.prediction import LengthPredictor
from llmsched_env.workloads.workload import TenantWorkload, WorkloadConfig


@pytest.mark.parametrize("sigma", [0.25, 0.5, 1.0])
def test_lognormal_prediction_error_has_the_configured_spread(sigma: float) -> None:
    rng = np.random.default_rng(123)
    true = rng.integers(50, 2000, size=20_000)
    pred = LengthPredictor("lognormal", sigma).predict(true, np.random.default_rng(7))
    assert pred.dtype == np.int64 and pred.min() >= 1
    err = np.log(pred / true)
    # rounding to whole tokens adds < 1% relative error at these lengths; 20k draws: se(std) ~ sigma / 200
    assert abs(err.mean()) < 0.03
    assert err.std() == pytest.approx(sigma, rel=0.03)
    # the log-error is normal: its quartiles sit at -/+ 0.674 sigma
    q1, q3 = np.quantile(err, [0.25, 0.75])
    assert q1 == pytest.approx(-0.6745 * sigma, abs=0.04 * sigma + 0.01)
    assert q3 == pytest.approx(0.6745 * sigma, abs=0.04 * sigma + 0.01)


def test_exact_and_none_predictions() -> None:
    true = np.array([1, 5, 300])
    assert LengthPredictor.of("exact").predict(true, np.random.default_rng(0)).tolist() == [1, 5, 300]
    reqs = [Request(i, 0.1 * i, 10, n) for i, n in enumerate(true.tolist())]
    LengthPredictor.of("none").apply(reqs, np.random.default_rng(0))
    assert all(r.predicted_output_len is None and r.predicted_remaining_output == 0 for r in reqs)
    LengthPredictor.of("exact").apply(reqs, np.random.default_rng(0))
    assert [r.predicted_output_len for r in reqs] == [1, 5, 300]


@pytest.mark.parametrize(
    ("spec", "match"),
    [("oracle", "kind must be one of"), ("lognormal:x", "must be a number"), ("lognormal:-1", "sigma must be >= 0"),
     ("exact:0.5", "0 unless kind is lognormal"), ({"kind": "exact", "bias": 1}, "unknown field")],
)  # fmt: skip
def test_bad_predictor_specs_are_refused(spec: object, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        LengthPredictor.of(spec)  # type: ignore[arg-type]


def test_the_env_draws_predictions_from_their_own_stream_and_reports_them() -> None:
    def requests(prediction: str | None) -> list[Request]:
        env = gym.make("LLMSched-v1", scenario="sharegpt-poisson", num_requests=300, length_prediction=prediction)
        return env.unwrapped.episode_requests(seed=3)

    plain, exact, noisy = requests(None), requests("exact"), requests("lognormal:0.5")
    key = [(r.arrival_s, r.prompt_len, r.output_len, r.tenant) for r in plain]
    assert key == [(r.arrival_s, r.prompt_len, r.output_len, r.tenant) for r in exact]
    assert key == [(r.arrival_s, r.prompt_len, r.output_len, r.tenant) for r in noisy]
    assert all(r.predicted_output_len == r.output_len for r in exact)
    err = np.log([r.predicted_output_len / r.output_len for r in noisy])
    assert 0.35 < err.std() < 0.65 and len(set(err.tolist())) > 10
    assert requests("lognormal:0.5")[5].predicted_output_len == noisy[5].predicted_output_len  # same seed, same


def test_sprw_serves_the_shortest_predicted_work_first_with_a_starvation_guard() -> None:
    q = WaitingQueues([1.0, 1.0], [0.0, 0.0], [0.0, 0.0])
    starving = Request(2, -20.0, 50, 50, 0)
    starving.predicted_output_len = 10_000
    q.push(starving)
    long_prompt_short_output = Request(0, 0.0, 900, 900, 0)
    long_prompt_short_output.predicted_output_len = 5  # work 900 + 5
    short_prompt_long_output = Request(1, 0.1, 10, 10, 1)
    short_prompt_long_output.predicted_output_len = 1500  # work 10 + 1500
    for r in (long_prompt_short_output, short_prompt_long_output):
        q.push(r)
    assert q.waiting_predicted == [10_005, 1500]
    assert q.best(QueueOrder.SPRW, 1.0, 10.0) is starving  # waited 21 s, past the 10 s guard: goes first
    assert q.best(QueueOrder.SPRW, -15.0, 10.0) is long_prompt_short_output  # 5 s: by predicted work
    assert q.best(QueueOrder.SJF, -15.0, 10.0) is short_prompt_long_output  # by prefill
    q.remove(starving)
    assert q.waiting_predicted == [5, 1500]
    assert q.best(QueueOrder.SPRW, 1.0, 10.0) is long_prompt_short_output
    q.check_invariants()


@pytest.mark.slow
def test_sprw_baseline_gains_from_the_prediction() -> None:
    # equal prompts, outputs of 16 or 1,024 tokens, 16 sequence slots: which request goes first matters only
    # through its output length, which only a prediction tells
    lengths = LengthDist.empirical(np.array([200, 200]), np.array([16, 1024]))
    wl = WorkloadConfig((TenantWorkload(TenantConfig("a", SLO_CLASSES["chat"]), 6.0, lengths),), 300)
    got = {}
    for prediction in ("none", "exact"):
        env = gym.make(
            "LLMSched-v1", workload=wl, length_prediction=prediction,
            engine={"num_kv_blocks": 4096, "max_num_seqs": 16},
        )  # fmt: skip
        policy = baselines.make("sprw", env.unwrapped.policy_context())
        got[prediction] = np.mean([run_episode(env, policy, s)["e2el_mean_s"] for s in (0, 1)])
    # shortest job first by its true length: requests finish sooner on average
    assert math.isfinite(got["none"]) and got["exact"] < 0.9 * got["none"], got
