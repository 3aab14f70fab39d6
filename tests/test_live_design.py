"""The design of the paired live experiment (``llmsched_env.live.design``): the Williams order's balance, the t
distribution, the rounds a paired-t interval needs, and the plan of rounds under a budget."""

from __future__ import annotations

import itertools
import math

import pytest

from llmsched_env.evaluation.stats import t_quantile_975
from llmsched_env.live.design import (
    binomial_sd,
    detectable_effect,
    floored_sd,
    format_difference,
    order_balance,
    paired_difference,
    plan_rounds,
    rounds_needed,
    t_cdf,
    t_quantile,
    williams_rounds,
)
from llmsched_env.live.regimes import choose_regimes

ARMS = ("fcfs", "fcfs/aa", "slo_aware", "learned", "tuned", "sjf")


@pytest.mark.parametrize("n", [2, 3, 4, 5, 6])
def test_a_whole_williams_square_is_carryover_and_position_balanced(n: int) -> None:
    arms = ARMS[:n]
    height = n if n % 2 == 0 else 2 * n
    rounds = williams_rounds(arms, height)
    assert all(sorted(r) == sorted(arms) for r in rounds)
    balance = order_balance(rounds)
    # each ordered pair of distinct arms directly in sequence within a round: once (even n) or twice (odd n)
    assert set(balance.within.values()) == {height // n}, balance.within
    assert len(balance.within) == n * (n - 1)
    assert balance.carryover_balanced and balance.position_balanced
    assert all(counts == [height // n] * n for counts in balance.position.values())
    # two whole cycles: balanced again, and no arm follows itself across a round boundary (n >= 3)
    twice = order_balance(williams_rounds(arms, 2 * height))
    assert set(twice.within.values()) == {2 * height // n}
    if n >= 3:
        assert all(twice.across.get((a, a), 0) == 0 for a in arms), twice.across


def test_a_partial_cycle_is_reported_unbalanced() -> None:
    """The docstring's caveat: 6 rounds of a 4-arm square (height 4) leave some pairs more often adjacent."""
    balance = order_balance(williams_rounds(ARMS[:4], 6))
    assert not balance.carryover_balanced and not balance.position_balanced
    assert sum(balance.within.values()) == 6 * 3
    assert order_balance(williams_rounds(ARMS[:4], 8)).carryover_balanced


def test_order_balance_counts_within_and_across_rounds() -> None:
    balance = order_balance([["a", "b", "c"], ["c", "a", "b"], ["b", "c", "a"]])
    assert balance.within == {("a", "b"): 2, ("a", "c"): 0, ("b", "a"): 0, ("b", "c"): 2, ("c", "a"): 2,
                              ("c", "b"): 0}  # fmt: skip
    assert balance.across == {**dict.fromkeys(balance.within, 0), ("c", "c"): 1, ("b", "b"): 1}
    assert balance.position == {"a": [1, 1, 1], "b": [1, 1, 1], "c": [1, 1, 1]}
    assert balance.position_balanced and not balance.carryover_balanced
    with pytest.raises(ValueError, match="not a permutation"):
        order_balance([["a", "b"], ["a", "a"]])


def test_williams_rounds_refuses_bad_arms() -> None:
    with pytest.raises(ValueError, match="distinct"):
        williams_rounds(["a", "a"], 2)
    with pytest.raises(ValueError, match="at least one"):
        williams_rounds([], 2)
    assert williams_rounds(["a"], 3) == [["a"], ["a"], ["a"]]


def test_t_quantile_agrees_with_the_table_and_inverts_the_cdf() -> None:
    for df in range(1, 41):
        assert t_quantile(0.975, df) == pytest.approx(t_quantile_975(df), abs=1e-4), df
        for p in (0.6, 0.8, 0.9, 0.999):
            assert t_cdf(t_quantile(p, df), df) == pytest.approx(p, abs=1e-10)
            assert t_quantile(1 - p, df) == -t_quantile(p, df)
    assert t_quantile(0.5, 7) == 0.0
    assert t_quantile(0.975, 10_000) == pytest.approx(1.96020, abs=1e-5)  # the expansion's range
    assert t_cdf(1.0, 1) == pytest.approx(0.75)  # Cauchy: 1/2 + atan(1)/pi
    assert t_cdf(math.inf, 3) == 1.0 and t_cdf(-math.inf, 3) == 0.0
    with pytest.raises(ValueError):
        t_quantile(1.0, 3)


def test_t_quantile_against_scipy() -> None:
    stats = pytest.importorskip("scipy.stats")
    for df, p in itertools.product((1, 2, 3, 5, 9, 30, 199, 200, 201, 5000), (0.55, 0.8, 0.95, 0.975, 0.9995)):
        assert t_quantile(p, df) == pytest.approx(float(stats.t.ppf(p, df)), rel=1e-8), (df, p)


def test_rounds_needed_against_the_normal_approximation() -> None:
    """sd / delta = 10 at alpha 0.05 and power 0.8: the normal sample size ((1.96 + 0.8416) 10)^2 = 784.9; with t
    quantiles a couple of rounds more. sd = delta: the classic 10 rounds of a paired t test."""
    normal = ((1.959964 + 0.841621) * 10) ** 2
    n = rounds_needed(1.0, 0.1)
    assert n is not None and math.ceil(normal) <= n <= math.ceil(normal) + 3
    assert rounds_needed(1.0, 1.0) == 10
    assert rounds_needed(1.0, -1.0) == 10  # either sign
    assert rounds_needed(0.5, 1.0, minimum=10) == 10


def test_rounds_needed_reaches_the_power_of_the_noncentral_t() -> None:
    """The exact power of a two-sided paired t test at the rounds given is at least 0.8, and below it with one
    round fewer."""
    stats = pytest.importorskip("scipy.stats")

    def power(n: int, ratio: float) -> float:
        df, nc = n - 1, math.sqrt(n) / ratio
        crit = stats.t.ppf(0.975, df)
        return float(1 - stats.nct.cdf(crit, df, nc) + stats.nct.cdf(-crit, df, nc))

    for ratio in (0.5, 1.0, 2.0, 3.0, 5.0):
        n = rounds_needed(ratio, 1.0)
        assert n is not None and power(n, ratio) >= 0.8 > power(n - 1, ratio), (ratio, n)


def test_rounds_needed_is_monotone_and_safe_at_the_edges() -> None:
    sds = [0.1, 0.3, 1.0, 2.0, 4.0]
    by_sd = [rounds_needed(sd, 1.0) for sd in sds]
    assert all(a is not None and b is not None and a <= b for a, b in itertools.pairwise(by_sd)), by_sd
    assert by_sd[0] != by_sd[-1]
    by_delta = [rounds_needed(1.0, d) for d in (0.2, 0.5, 1.0, 3.0)]
    assert all(a is not None and b is not None and a >= b for a, b in itertools.pairwise(by_delta)), by_delta
    assert rounds_needed(1.0, 0.0) is None
    assert rounds_needed(math.inf, 1.0) is None
    assert rounds_needed(1.0, 1e-9) is None  # beyond the cap
    assert rounds_needed(0.0, 0.5) == 2 and rounds_needed(0.0, 0.0) is None
    assert rounds_needed(1.0, 0.05, maximum=100) is None
    for bad in (-1.0, math.nan):
        with pytest.raises(ValueError):
            rounds_needed(bad, 1.0)
    with pytest.raises(ValueError):
        rounds_needed(1.0, math.nan)
    with pytest.raises(ValueError):
        rounds_needed(1.0, 1.0, minimum=1)


def test_detectable_effect_is_what_rounds_needed_inverts() -> None:
    for n in (5, 10, 24, 100):
        effect = detectable_effect(0.3, n)
        assert rounds_needed(0.3, effect * 1.0001) == n
        fewer = rounds_needed(0.3, effect * 0.99)
        assert fewer is not None and fewer > n
    assert detectable_effect(0.3, 10) > detectable_effect(0.3, 20)


def test_paired_difference_and_its_format() -> None:
    assert paired_difference("slo_attainment", 0.93, 0.9) == pytest.approx(0.03)
    assert paired_difference("ttft_p99_s", 2.0, 1.0) == pytest.approx(math.log(2))
    assert math.isnan(paired_difference("ttft_p99_s", 0.0, 1.0))
    assert format_difference("slo_attainment", 0.031) == "+3.1 pp"
    assert format_difference("ttft_p90_s", math.log(0.8)) == "×0.8"
    assert format_difference("goodput_rps", -0.25) == "-0.25"
    assert format_difference("goodput_rps", math.nan) == "n/a"


def _predicted(att: float, p99: float, good: float = 5.0) -> dict[str, float]:
    return {"slo_attainment": att, "ttft_p99_s": p99, "goodput_rps": good}


PREDICTED = {
    "c1": {"fcfs": _predicted(0.90, 1.0), "fcfs/aa": _predicted(0.90, 1.0), "slo_aware": _predicted(0.97, 0.7),
           "sjf": _predicted(0.91, 0.98, 5.3)},
    "c2": {"fcfs": _predicted(0.80, 2.0), "fcfs/aa": _predicted(0.80, 2.0), "slo_aware": _predicted(0.86, 1.5),
           "sjf": _predicted(0.80, 2.0)},
}  # fmt: skip
SDS = {"c1": {"slo_attainment": 0.05, "ttft_p99_s": 0.2, "goodput_rps": 0.3},
       "c2": {"slo_attainment": 0.08, "ttft_p99_s": 0.2, "goodput_rps": 0.3}}  # fmt: skip


def test_plan_rounds_powers_the_material_differences_within_the_budget() -> None:
    big = plan_rounds(PREDICTED, SDS, round_s=300.0, budget_s=100 * 300.0, minimum=10)
    # c2's slo_aware: 6 points with SD 8 points needs the most; sjf's 1 point (c1) is below the 5-point mark
    need = rounds_needed(0.08, 0.06)
    assert need is not None and need > 10
    assert big.wanted == need and big.rounds == need and big.allowed == 100
    rows = {(r["cell"], r["arm"], r["metric"]): r for r in big.rows}
    assert len(rows) == 2 * 3 * 3  # every (cell, arm but the control, metric with an SD)
    assert not rows[("c1", "sjf", "slo_attainment")]["powered"]
    assert not rows[("c1", "slo_aware", "goodput_rps")]["powered"]  # not a powered metric
    driver = rows[("c2", "slo_aware", "slo_attainment")]
    assert driver["powered"] and driver["detected"] and driver["needed"] == need
    assert rows[("c1", "fcfs/aa", "slo_attainment")]["needed"] is None  # predicted identical
    assert rows[("c1", "slo_aware", "ttft_p99_s")]["predicted"] == pytest.approx(math.log(0.7))
    for r in big.rows:
        assert r["detectable"] == pytest.approx(detectable_effect(r["aa_sd"], big.rounds))
    # the budget caps it, the maximum caps it, the minimum floors it even over the budget
    assert plan_rounds(PREDICTED, SDS, 300.0, 15 * 300.0, minimum=10).rounds == 15
    assert plan_rounds(PREDICTED, SDS, 300.0, 100 * 300.0, minimum=10, maximum=12).rounds == 12
    tight = plan_rounds(PREDICTED, SDS, 300.0, 3 * 300.0, minimum=10)
    assert tight.rounds == 10 and tight.allowed == 3 and "OVER BUDGET" in tight.table
    # nothing material: the minimum
    calm = plan_rounds({"c1": PREDICTED["c1"]}, {"c1": SDS["c1"]}, 300.0, 1e6, minimum=10)
    assert calm.rounds == 10 and calm.wanted is not None and calm.wanted <= 10
    table = big.table
    assert "c2    slo_aware  slo_attainment  +6.0 pp" in table and f"{need} rounds of 5.0 min" in table


def test_plan_rounds_lists_an_unknown_noise_and_refuses_bad_input() -> None:
    sds = {"c1": {"slo_attainment": math.nan, "ttft_p99_s": 0.2}}
    plan = plan_rounds({"c1": PREDICTED["c1"]}, sds, 60.0, 3600.0, minimum=4)
    att = [r for r in plan.rows if r["metric"] == "slo_attainment"]
    assert all(r["needed"] is None and math.isnan(r["detectable"]) for r in att)
    assert "never" in plan.table
    with pytest.raises(ValueError, match="control"):
        plan_rounds({"c1": {"sjf": _predicted(0.9, 1.0)}}, {"c1": SDS["c1"]}, 60.0, 3600.0)
    with pytest.raises(ValueError, match="maximum"):
        plan_rounds(PREDICTED, SDS, 60.0, 3600.0, minimum=10, maximum=5)
    with pytest.raises(ValueError, match="round_s"):
        plan_rounds(PREDICTED, SDS, 0.0, 3600.0)


def test_the_aa_noise_is_floored_at_a_blocks_sampling_noise() -> None:
    # 20 requests at 90%: sqrt(2 p (1 - p) / n) with p shrunk to (18 + 0.5) / 21
    p = 18.5 / 21
    assert binomial_sd(0.9, 20) == pytest.approx(math.sqrt(2 * p * (1 - p) / 20))
    assert binomial_sd(1.0, 20) > 0 and binomial_sd(0.0, 20) > 0  # all met: still a spread
    assert math.isnan(binomial_sd(math.nan, 20)) and math.isnan(binomial_sd(0.9, 0))
    assert floored_sd("slo_attainment", 0.0, 0.9, 20, 2.0) == binomial_sd(0.9, 20)  # 3 identical A/A pairs: not 0
    assert floored_sd("slo_attainment", 0.5, 0.9, 20, 2.0) == 0.5  # a measured spread above the floor stands
    assert floored_sd("slo_attainment", math.nan, 0.9, 20, 2.0) == binomial_sd(0.9, 20)
    assert floored_sd("goodput_rps", 0.0, 0.9, 20, 2.0) == pytest.approx(2.0 * binomial_sd(0.9, 20))
    assert math.isnan(floored_sd("ttft_p90_s", 0.0, 0.9, 20, 2.0)) and floored_sd("ttft_p90_s", 0.1, 0.9, 20, 2) == 0.1


def test_a_plan_says_what_it_can_confirm() -> None:
    big = plan_rounds(PREDICTED, SDS, round_s=300.0, budget_s=100 * 300.0, minimum=10)
    assert big.confirmable and all(r["powered"] and r["detected"] for r in big.confirmable)
    assert big.note.endswith(f"detectable in {big.rounds} rounds")
    calm = plan_rounds({"c1": {"fcfs": _predicted(0.9, 1.0), "sjf": _predicted(0.91, 1.0)}}, {"c1": SDS["c1"]},
                       300.0, 1e6, minimum=10)  # fmt: skip
    assert not calm.confirmable and "no material difference" in calm.note
    noisy = plan_rounds(PREDICTED, {c: {**v, "slo_attainment": 5.0, "ttft_p99_s": 5.0} for c, v in SDS.items()},
                        300.0, 10 * 300.0, minimum=3, maximum=10)  # fmt: skip
    assert not noisy.confirmable and "none of the" in noisy.note


def test_regimes_are_the_loads_with_the_most_material_predicted_differences() -> None:
    def predict(load: float, arm: str) -> dict[str, float]:
        gap = {"fcfs": 0.0, "slo_aware": 0.08 if load in (1.3, 1.5) else 0.01, "sjf": 0.06 if load == 1.5 else 0.0}
        return {"slo_attainment": 0.9 - 0.1 * load + gap[arm], "ttft_p99_s": 1.0}

    r = choose_regimes(predict, ["fcfs", "slo_aware", "sjf"], 2, candidates=(0.8, 1.0, 1.3, 1.5, 2.0))
    assert r.loads == (1.3, 1.5) and r.material  # 1.5: two material differences, 1.3: one
    assert len(r.rows) == 5 * 2 * 2 and "loads chosen (x the knee): 1.3, 1.5" in r.table
    one = choose_regimes(predict, ["fcfs", "sjf"], 2, candidates=(0.8, 1.5))
    assert one.loads == (1.5,)  # only material loads are played
    flat = choose_regimes(lambda load, arm: {"slo_attainment": 0.9, "ttft_p99_s": 1.0}, ["fcfs", "sjf"], 2,
                          fallback=(1.0, 1.3))  # fmt: skip
    assert flat.loads == (1.0, 1.3) and not flat.material and "can confirm nothing" in flat.table
    with pytest.raises(ValueError, match="count"):
        choose_regimes(predict, ["fcfs"], 0)
