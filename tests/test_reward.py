"""The reward bookkeeping both envs share: ``RewardConfig`` (weights, parsing) and ``RewardTracker`` (deltas of
running counts, unresolved requests as misses at the end)."""

from __future__ import annotations

import pytest

from llmsched_env.envs.reward import RewardConfig, RewardTracker


def test_tracker_prices_what_changed_since_the_last_step() -> None:
    tracker = RewardTracker(RewardConfig(preempt=0.5), num_requests=10)
    total, terms = tracker.step(num_arrived=4, num_good=1, num_missed=0, num_preempted=2, ended=False)
    assert terms == pytest.approx({"good": 0.1, "miss": 0.0, "preempt": -0.1})
    assert total == pytest.approx(0.0)
    total, terms = tracker.step(num_arrived=6, num_good=3, num_missed=1, num_preempted=2, ended=False)
    assert terms == pytest.approx({"good": 0.2, "miss": -0.1, "preempt": 0.0})
    assert total == pytest.approx(0.1)


def test_unresolved_requests_count_as_misses_only_at_the_end() -> None:
    tracker = RewardTracker(RewardConfig(), num_requests=8)
    _, terms = tracker.step(num_arrived=8, num_good=2, num_missed=1, num_preempted=0, ended=False)
    assert terms["miss"] == pytest.approx(-1 / 8)  # five unresolved requests are not charged yet
    _, terms = tracker.step(num_arrived=8, num_good=3, num_missed=1, num_preempted=0, ended=True)
    assert terms["good"] == pytest.approx(1 / 8)
    assert terms["miss"] == pytest.approx(-4 / 8)  # 8 arrived - 3 met - 1 missed, still unresolved


def test_a_drained_episode_returns_two_attainment_minus_one() -> None:
    tracker = RewardTracker(RewardConfig(preempt=0.0), num_requests=5)
    counts = [(1, 0, 0, 0), (3, 1, 0, 1), (5, 1, 1, 1), (5, 2, 2, 3)]  # arrived, met, missed, preempted
    rewards = [tracker.step(*c, ended=i == len(counts) - 1)[0] for i, c in enumerate(counts)]
    # at the end 5 arrived, 2 met, 2 missed and 1 unresolved (a miss): 2 * 2/5 - 1
    assert sum(rewards) == pytest.approx(2 * 2 / 5 - 1)


def test_empty_episode_is_priced_over_one_request() -> None:
    tracker = RewardTracker(RewardConfig(), num_requests=0)
    assert tracker.norm == 1.0
    assert tracker.step(0, 0, 0, 0, ended=True) == (0.0, {"good": 0.0, "miss": -0.0, "preempt": -0.0})


@pytest.mark.parametrize("bad", [-1, 2.5, True])
def test_tracker_rejects_a_bad_request_count(bad: object) -> None:
    with pytest.raises(ValueError, match="num_requests"):
        RewardTracker(RewardConfig(), num_requests=bad)  # type: ignore[arg-type]


def test_reward_config_of_parses_none_config_and_dict() -> None:
    assert RewardConfig.of(None) == RewardConfig()
    config = RewardConfig(good=2.0)
    assert RewardConfig.of(config) is config
    assert RewardConfig.of({"preempt": 0.25}) == RewardConfig(preempt=0.25)
    with pytest.raises(ValueError, match=r"reward: unknown field.*'bonus'"):
        RewardConfig.of({"bonus": 1.0})
    with pytest.raises(ValueError, match=r"RewardConfig\.miss"):
        RewardConfig.of({"miss": -1.0})
    with pytest.raises(ValueError, match=r"reward must be a RewardConfig or a dict of its fields, got 3\.0"):
        RewardConfig.of(3.0)  # type: ignore[arg-type]


def test_all_zero_reward_weights_are_refused() -> None:
    """A reward that is 0 at every step trains nothing: refused, naming the weights; one weight > 0 is enough."""
    for zero in (RewardConfig.of, lambda w: RewardConfig(**w)):
        with pytest.raises(ValueError, match=r"^RewardConfig: the reward weights good, miss and preempt are all 0"):
            zero({"good": 0.0, "miss": 0.0, "preempt": 0.0})
    assert RewardConfig(good=0.0, miss=0.0, preempt=0.5).preempt == 0.5
    assert RewardConfig(good=0.0, miss=1.0).good == 0.0
