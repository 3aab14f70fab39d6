"""llmsched-tune's race: settings compared paired on the same val windows, one clearly behind the leader dropped, a
tie kept to the confirmation on fresh windows, the margin of the pick recorded, the same result every time."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pytest

from llmsched_env.engine.batch import Decision
from llmsched_env.evaluation.racing import MIN_WINDOWS, TIE_BAND, paired_margin, ranked, survivors
from llmsched_env.evaluation.tuning import TuneConfig, _Search
from llmsched_env.workloads.library import get_scenario

LEADER = [(0.91, 2.0), (0.93, 2.1), (0.90, 1.9), (0.92, 2.0), (0.94, 2.2)]
WORSE = [(0.55, 1.0), (0.58, 1.3), (0.62, 1.1), (0.60, 1.2), (0.66, 1.2)]
TIE = [(0.91, 2.0), (0.92, 2.1), (0.91, 1.9), (0.92, 2.0), (0.93, 2.2)]  # 0.002 behind: inside the tie band
NOISY = [(0.99, 2.0), (0.60, 1.0), (0.98, 2.0), (0.70, 1.0), (0.97, 2.0)]  # behind on average, but not for sure


def test_a_setting_clearly_behind_is_dropped_and_a_tie_is_kept() -> None:
    runs = {0: LEADER[:2], 1: WORSE[:2], 2: TIE[:2]}
    assert survivors(runs) == [0, 2]
    margin = paired_margin(LEADER[:2], WORSE[:2])
    assert margin.ahead_with_confidence and margin.num_windows == 2 and margin.half_width > 0
    assert margin.mean == pytest.approx((0.36 + 0.35) / 2)
    # on every window, a tie stays: the tie band, whatever the spread (an identical gap has none)
    assert survivors({0: LEADER, 2: TIE}) == [0, 2]
    assert survivors({0: [(1.0, 1.0)] * 5, 1: [(1.0 - TIE_BAND / 2, 1.0)] * 5}) == [0, 1]
    # a noisy setting behind on average is kept: its interval reaches 0
    assert survivors({0: LEADER, 3: NOISY}) == [0, 3] and not paired_margin(LEADER, NOISY).ahead_with_confidence


def test_one_window_drops_nothing_and_ranks_by_goodput_then_order() -> None:
    assert MIN_WINDOWS >= 2
    assert survivors({0: [(0.95, 1.0)], 1: [(0.05, 0.1)]}) == [0, 1]  # one window has no spread to judge by
    assert ranked({3: [(0.9, 1.0)], 1: [(0.9, 1.0)], 2: [(0.9, 2.0)], 0: [(0.5, 9.0)]}) == [2, 1, 3, 0]
    with pytest.raises(ValueError, match="same non-empty windows"):
        paired_margin(LEADER, LEADER[:3])


def fake_search(table: Mapping[Decision, Sequence[tuple[float, float]]], **config: object) -> _Search:
    """A search of ``default`` whose episodes are read from ``table`` (setting -> (attainment, goodput) per seed)."""
    search = _Search(TuneConfig(**config), get_scenario("default"), log=lambda line: None, t0=0.0)  # type: ignore[arg-type]
    played: list[tuple[Decision, int]] = []

    def runs(d: Decision, seeds: Sequence[int]) -> list[tuple[float, float]]:
        for s in seeds:
            if (d, s) not in played:
                played.append((d, s))
                search.num_episodes += 1
        return [table[d][s] for s in seeds]

    search.runs = runs  # type: ignore[method-assign]
    search.played = played  # type: ignore[attr-defined]
    return search


SETTINGS = [Decision(token_budget=b) for b in (512, 1024, 2048)]


def test_the_race_stops_playing_a_dropped_setting_and_confirms_the_tie_on_fresh_windows() -> None:
    fresh = [(0.90, 2.0), (0.92, 2.0), (0.91, 2.0), (0.93, 2.0), (0.90, 2.0)]
    fresh_tie = [(0.91, 2.0), (0.92, 2.0), (0.92, 2.0), (0.93, 2.0), (0.91, 2.0)]
    table = {SETTINGS[0]: LEADER + fresh, SETTINGS[1]: WORSE + fresh, SETTINGS[2]: TIE + fresh_tie}
    search = fake_search(table)
    left = search.race(SETTINGS, "race")
    assert left == [0, 2] and search.num_dropped == 1
    played = search.played  # type: ignore[attr-defined]
    assert sorted(s for d, s in played if d == SETTINGS[1]) == [0, 1]  # dropped after the first two windows
    assert sorted(s for d, s in played if d == SETTINGS[2]) == [0, 1, 2, 3, 4]  # the tie played them all
    assert search.confirm_seeds == (5, 6, 7, 8, 9)  # generated traffic: as many fresh seeds as the search's
    k, record = search.confirm([(SETTINGS[0], "a"), (SETTINGS[2], "c")])
    assert k == 1 and record["fresh"] and record["seeds"] == [5, 6, 7, 8, 9] and record["num_settings"] == 2
    margin = record["margin"]
    assert margin["num_windows"] == 5 and margin["attainment_diff"] == pytest.approx(0.006)
    assert 0 < margin["half_width"] < 0.05 and record["runner_up"]["found_by"] == "a"
    assert record["attainment"] == pytest.approx(0.918)


def test_without_racing_every_setting_plays_every_seed_and_the_result_repeats() -> None:
    table = {d: LEADER if i == 0 else WORSE if i == 1 else TIE for i, d in enumerate(SETTINGS)}
    search = fake_search(table, racing=False)
    assert search.race(SETTINGS, "race") == [0, 2, 1] and search.num_episodes == 15 and search.num_dropped == 0
    again = fake_search(table)
    assert again.race(SETTINGS, "race") == fake_search(table).race(SETTINGS, "race") == [0, 2]
    assert TuneConfig(racing=False).command("x").endswith("--no-racing")
    with pytest.raises(ValueError, match=r"TuneConfig\.racing"):
        TuneConfig(racing="no")  # type: ignore[arg-type]
