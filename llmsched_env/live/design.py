"""The design of a paired live experiment: each round's arm order (a Williams square, ``williams_rounds``) and the
rounds a paired-t 95% interval needs to exclude 0 with a given power (``rounds_needed``, ``plan_rounds``).
Differences in the verdict's units (``paired_difference``): ``arm - control``, latencies ``log(arm / control)``.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any

from llmsched_env.evaluation.tables import format_table

__all__ = [
    "DEFAULT_POWERED", "MIN_AA_PAIRS", "RATIO_METRICS", "OrderBalance", "RoundPlan", "binomial_sd",
    "detectable_effect", "floored_sd", "format_difference", "order_balance", "paired_difference", "plan_rounds",
    "rounds_needed", "t_cdf", "t_quantile", "williams_rounds",
]  # fmt: skip

# latency metrics: compared as ratios (log ratio), every other metric as a difference
RATIO_METRICS = frozenset(
    {"ttft_p50_s", "ttft_p90_s", "ttft_p99_s", "tpot_p50_s", "tpot_p99_s", "e2e_p50_s", "e2e_p99_s"}
)
# the differences the plan powers by default (metric -> smallest |difference| worth detecting): the issue's
# targets judge attainment (5 points) and TTFT p99 (20%)
DEFAULT_POWERED: Mapping[str, float] = {"slo_attainment": 0.05, "ttft_p99_s": math.log(1.2)}
MIN_AA_PAIRS = 6  # the A/A pairs a power calculation's noise rests on (fewer: a smoke test, confirming nothing)
_HILL_DF = 200  # above this the Cornish-Fisher expansion of the t quantile is exact to about 1e-10


# ---------------------------------------------------------------------------------------------- the order


def _williams_square(n: int) -> list[list[int]]:
    """Rows of a Williams square on 0..n-1: n rows for even n, 2n for odd n (with the mirror images)."""
    first = [0]
    lo, hi = 1, n - 1
    while len(first) < n:  # 0, 1, n-1, 2, n-2, ...: the successive differences are all distinct mod n
        first.append(lo)
        lo += 1
        if len(first) < n:
            first.append(hi)
            hi -= 1
    rows = [[(v + i) % n for v in first] for i in range(n)]
    if n % 2 == 0:
        return rows
    return rows + _mirror_order(rows, [row[::-1] for row in rows])


def _mirror_order(rows: list[list[int]], mirrors: list[list[int]]) -> list[list[int]]:
    """``mirrors`` ordered (depth-first search) so that no value repeats across the cycle's row boundaries."""
    found: list[list[int]] = []

    def extend(prev: list[int], left: list[list[int]]) -> bool:
        if not left:
            return prev[-1] != rows[0][0]
        for k, m in enumerate(left):
            if m[0] != prev[-1]:
                found.append(m)
                if extend(m, left[:k] + left[k + 1 :]):
                    return True
                found.pop()
        return False

    return found if extend(rows[-1], mirrors) else mirrors


def williams_rounds(arms: Sequence[str], num_rounds: int) -> list[list[str]]:
    """The order of ``arms`` (distinct) in each of ``num_rounds`` rounds: the rows of a Williams square, cycled;
    balanced over whole cycles only, and no arm follows itself across rounds (n >= 3)."""
    names = list(arms)
    if not names:
        raise ValueError("williams_rounds needs at least one arm")
    if len(set(names)) != len(names):
        raise ValueError(f"arms must be distinct, got {names}")
    if num_rounds < 0:
        raise ValueError(f"num_rounds must be >= 0, got {num_rounds}")
    square = _williams_square(len(names))
    return [[names[v] for v in square[r % len(square)]] for r in range(num_rounds)]


@dataclass(frozen=True)
class OrderBalance:
    """How often ``a`` precedes ``b`` in a round (``within``) or across two (``across``), and its positions."""

    arms: tuple[str, ...]
    within: dict[tuple[str, str], int]
    across: dict[tuple[str, str], int]
    position: dict[str, list[int]]

    @property
    def carryover_balanced(self) -> bool:
        """Every ordered pair of distinct arms is adjacent within rounds equally often."""
        return len(set(self.within.values())) <= 1

    @property
    def position_balanced(self) -> bool:
        """Every arm stands at every position equally often."""
        return len({c for counts in self.position.values() for c in counts}) <= 1


def order_balance(rounds: Sequence[Sequence[str]]) -> OrderBalance:
    """The carry-over and position counts of ``rounds`` (permutations of the same arms)."""
    if not rounds:
        raise ValueError("order_balance needs at least one round")
    arms = tuple(rounds[0])
    for k, r in enumerate(rounds):
        if sorted(r) != sorted(arms) or len(set(r)) != len(r):
            raise ValueError(f"round {k} {list(r)} is not a permutation of {list(arms)}")
    within = {(a, b): 0 for a in arms for b in arms if a != b}
    across: dict[tuple[str, str], int] = dict(within)
    position = {a: [0] * len(arms) for a in arms}
    for k, r in enumerate(rounds):
        for i, a in enumerate(r):
            position[a][i] += 1
        for a, b in itertools.pairwise(r):
            within[(a, b)] += 1
        if k > 0:
            pair = (rounds[k - 1][-1], r[0])
            across[pair] = across.get(pair, 0) + 1
    return OrderBalance(arms, within, across, position)


# ------------------------------------------------------------------------------------- the t distribution


def t_cdf(t: float, df: int) -> float:
    """P(T <= t) for Student's t with integer ``df`` >= 1, exact (Abramowitz and Stegun 26.7.3 and 26.7.4)."""
    if df < 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {df}")
    if math.isnan(t):
        return math.nan
    if math.isinf(t):
        return 1.0 if t > 0 else 0.0
    theta = math.atan(abs(t) / math.sqrt(df))
    s, c2 = math.sin(theta), math.cos(theta) ** 2
    # odd df: A(t|df) = 2/pi (theta + sin cos (1 + 2/3 cos^2 + 2*4/(3*5) cos^4 + ...)), df - 3 powers;
    # even df: A(t|df) = sin (1 + 1/2 cos^2 + 1*3/(2*4) cos^4 + ...), df - 2 powers
    odd = df % 2 == 1
    term, total = 1.0, 0.0 if odd and df == 1 else 1.0
    for k in range(2, df - 1, 2) if odd else range(1, df - 2, 2):
        term *= c2 * k / (k + 1)
        total += term
    a = 2 / math.pi * (theta + s * math.cos(theta) * total) if odd else s * total
    a = min(a, 1.0)  # rounding; A is P(|T| <= |t|)
    return 0.5 + a / 2 if t >= 0 else 0.5 - a / 2


def t_quantile(p: float, df: int) -> float:
    """The ``p`` quantile of Student's t: ``t_cdf`` bisected (df <= 200), else the Cornish-Fisher expansion."""
    if not 0 < p < 1:
        raise ValueError(f"p must lie in (0, 1), got {p}")
    if df < 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {df}")
    if p < 0.5:
        return -t_quantile(1 - p, df)
    if p == 0.5:
        return 0.0
    if df > _HILL_DF:
        z = NormalDist().inv_cdf(p)
        g1 = (z**3 + z) / 4
        g2 = (5 * z**5 + 16 * z**3 + 3 * z) / 96
        g3 = (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / 384
        g4 = (79 * z**9 + 776 * z**7 + 1482 * z**5 - 1920 * z**3 - 945 * z) / 92160
        return z + g1 / df + g2 / df**2 + g3 / df**3 + g4 / df**4
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < p:
        lo, hi = hi, 2 * hi
    while hi - lo > 1e-12 * hi:
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if t_cdf(mid, df) < p else (lo, mid)
    return (lo + hi) / 2


# --------------------------------------------------------------------------------------------- the power


def _check_levels(alpha: float, power: float) -> None:
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must lie in (0, 1), got {alpha}")
    if not 0 < power < 1:
        raise ValueError(f"power must lie in (0, 1), got {power}")


def _t_sum(rounds: int, alpha: float, power: float) -> float:
    df = rounds - 1
    return t_quantile(1 - alpha / 2, df) + t_quantile(power, df)


def detectable_effect(sd_diff: float, rounds: int, alpha: float = 0.05, power: float = 0.8) -> float:
    """The smallest true difference ``rounds`` paired rounds detect with probability ``power`` (their 1 - ``alpha``
    paired-t interval excludes 0), per-round SD ``sd_diff``: ``(t_{1-alpha/2} + t_{power}) sd / sqrt(n)``."""
    _check_levels(alpha, power)
    if rounds < 2:
        raise ValueError(f"a paired interval needs >= 2 rounds, got {rounds}")
    if not sd_diff >= 0:
        raise ValueError(f"sd_diff must be >= 0, got {sd_diff}")
    return _t_sum(rounds, alpha, power) * sd_diff / math.sqrt(rounds)


def rounds_needed(sd_diff: float, delta: float, alpha: float = 0.05, power: float = 0.8, minimum: int = 2,
                  maximum: int = 100_000) -> int | None:  # fmt: skip
    """The fewest paired rounds n >= ``minimum`` that detect a true difference ``delta`` (``detectable_effect``);
    None when none up to ``maximum`` does."""
    _check_levels(alpha, power)
    if minimum < 2:
        raise ValueError(f"a paired interval needs >= 2 rounds, got minimum {minimum}")
    if not sd_diff >= 0:
        raise ValueError(f"sd_diff must be >= 0, got {sd_diff}")
    if math.isnan(delta):
        raise ValueError("delta is NaN")
    effect = abs(delta)
    if sd_diff == 0:
        return minimum if effect > 0 else None
    if effect == 0 or math.isinf(sd_diff):
        return None
    ratio = sd_diff / effect

    def enough(n: int) -> bool:  # monotone: the required size falls as n grows
        return n >= (_t_sum(n, alpha, power) * ratio) ** 2

    z = NormalDist().inv_cdf(1 - alpha / 2) + NormalDist().inv_cdf(power)
    normal = (z * ratio) ** 2  # t > z: no n below the normal size can suffice
    if normal > maximum or not enough(maximum):
        return None
    lo = max(minimum, math.ceil(normal))
    if enough(lo):
        return lo
    hi = maximum
    while hi - lo > 1:  # enough(hi), not enough(lo)
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if enough(mid) else (mid, hi)
    return hi


def paired_difference(metric: str, arm: float, control: float) -> float:
    """``log(arm / control)`` for a latency (``RATIO_METRICS``; NaN unless both > 0), else ``arm - control``."""
    if metric in RATIO_METRICS:
        return math.log(arm / control) if arm > 0 and control > 0 else math.nan
    return arm - control


def format_difference(metric: str, d: float) -> str:
    """A ``paired_difference`` as reports show it: ``+3.1 pp`` (attainment), ``×0.82`` (latency), ``+0.5``."""
    if math.isnan(d):
        return "n/a"
    if metric in RATIO_METRICS:
        return f"×{math.exp(d):.3g}"
    if metric == "slo_attainment":
        return f"{100 * d:+.1f} pp"
    return f"{d:+.4g}"


@dataclass(frozen=True)
class RoundPlan:
    """The rounds to play, the budget ``allowed``, the powered ``wanted``, a row per (cell, arm, metric)."""

    rounds: int
    allowed: int
    wanted: int | None
    rows: list[dict[str, Any]]
    round_s: float
    minimum: int
    maximum: int | None
    alpha: float = 0.05
    power: float = 0.8

    @property
    def confirmable(self) -> list[dict[str, Any]]:
        """The rows of powered differences (predicted material) that the rounds chosen detect."""
        return [r for r in self.rows if r["powered"] and r["detected"]]

    @property
    def note(self) -> str:
        """What the design can confirm, in one line: the powered differences it detects, or why none."""
        powered = [r for r in self.rows if r["powered"]]
        if not powered:
            return "the simulator predicts no material difference here (>= the powered sizes), so nothing to confirm"
        ok = self.confirmable
        if not ok:
            return (f"none of the {len(powered)} material differences predicted is detectable in {self.rounds} rounds "
                    "under the A/A noise")  # fmt: skip
        return f"{len(ok)} of the {len(powered)} material differences predicted are detectable in {self.rounds} rounds"

    @property
    def total_s(self) -> float:
        """The time of the rounds chosen."""
        return self.rounds * self.round_s

    @property
    def table(self) -> str:
        """The power calculation as a fixed-width table, then a line on the choice."""
        shown = [
            {
                "cell": r["cell"], "arm": r["arm"], "metric": r["metric"],
                "predicted": format_difference(r["metric"], r["predicted"]), "aa sd": f"{r['aa_sd']:.3g}",
                "needed": "never" if r["needed"] is None else str(r["needed"]),
                "powered": "yes" if r["powered"] else "no", "detectable": _format_effect(r["metric"], r["detectable"]),
                "detected": "yes" if r["detected"] else "no",
            }
            for r in self.rows
        ]  # fmt: skip
        columns = ("cell", "arm", "metric", "predicted", "aa sd", "needed", "powered", "detectable", "detected")
        cap = "" if self.maximum is None else f", at most {self.maximum}"
        need = "nothing powered" if self.wanted is None else f"the powered differences need {self.wanted}"
        over = "; OVER BUDGET: the minimum is played" if self.allowed < self.minimum else ""
        line = (
            f"{self.rounds} rounds of {self.round_s / 60:.1f} min ({self.total_s / 60:.1f} min): {need}, the budget "
            f"allows {self.allowed}, at least {self.minimum}{cap}{over}; detectable: the smallest true difference "
            f"whose {1 - self.alpha:.0%} interval excludes 0 with probability {self.power:.0%} at {self.rounds} rounds"
        )
        return format_table(shown, columns) + "\n" + line


def _format_effect(metric: str, d: float) -> str:
    """A detectable effect (magnitude, either sign): ``±2.3 pp``, ``×/÷1.15``."""
    return format_difference(metric, d).replace("+", "±").replace("×", "×/÷")


def binomial_sd(attainment: float, requests: float) -> float:
    """The SD of the difference of two independent blocks' attainments, each ``requests`` requests meeting their SLO
    with probability ``attainment``: ``sqrt(2 p (1 - p) / n)``, ``p`` shrunk to ``(p n + 1/2) / (n + 1)`` so that a
    block all met (or all missed) still has a spread; NaN without a finite attainment or requests."""
    if not (math.isfinite(attainment) and math.isfinite(requests) and requests >= 1):
        return math.nan
    p = (min(max(attainment, 0.0), 1.0) * requests + 0.5) / (requests + 1)
    return math.sqrt(2 * p * (1 - p) / requests)


def floored_sd(metric: str, aa_sd: float, attainment: float, requests: float, rate_rps: float) -> float:
    """The A/A SD a power calculation uses: never below a block's sampling noise. Attainment: at least
    ``binomial_sd``; goodput (met requests per second): at least ``binomial_sd`` x the block's rate; a latency: the
    A/A SD itself (NaN when it is 0: two identical latencies say nothing of the spread)."""
    floor = binomial_sd(attainment, requests)
    if metric == "slo_attainment":
        return max(aa_sd, floor) if math.isfinite(aa_sd) else floor
    if metric == "goodput_rps":
        floor *= rate_rps
        return max(aa_sd, floor) if math.isfinite(aa_sd) else floor
    return aa_sd if math.isfinite(aa_sd) and aa_sd > 0 else math.nan


def plan_rounds(
    predicted: Mapping[str, Mapping[str, Mapping[str, float]]], aa_sd: Mapping[str, Mapping[str, float]],
    round_s: float, budget_s: float, minimum: int = 10, maximum: int | None = None, *, control: str = "fcfs",
    alpha: float = 0.05, power: float = 0.8, powered: Mapping[str, float] = DEFAULT_POWERED,
) -> RoundPlan:  # fmt: skip
    """The rounds the ``powered`` predicted differences need under the A/A noise, within ``maximum`` and the budget."""
    if minimum < 2:
        raise ValueError(f"minimum must be >= 2 rounds, got {minimum}")
    if maximum is not None and maximum < minimum:
        raise ValueError(f"maximum {maximum} is below minimum {minimum}")
    if not round_s > 0:
        raise ValueError(f"round_s must be > 0, got {round_s}")
    if not budget_s >= 0:
        raise ValueError(f"budget_s must be >= 0, got {budget_s}")
    allowed = int(budget_s // round_s)
    needs: list[tuple[dict[str, Any], float]] = []  # (row, SD) before the rounds are known
    for cell, sds in aa_sd.items():
        arms = predicted.get(cell, {})
        if control not in arms:
            raise ValueError(f"no prediction of the control {control!r} for cell {cell!r}")
        for arm, values in arms.items():
            if arm == control:
                continue
            for metric, sd in sds.items():
                d = paired_difference(metric, values.get(metric, math.nan), arms[control].get(metric, math.nan))
                sd = float(sd)
                n = rounds_needed(sd, d, alpha, power) if math.isfinite(sd) and sd >= 0 and math.isfinite(d) else None
                drives = metric in powered and math.isfinite(d) and abs(d) >= powered[metric]
                row: dict[str, Any] = {"cell": cell, "arm": arm, "metric": metric, "predicted": d, "aa_sd": sd}
                row.update(needed=n, powered=drives)
                needs.append((row, sd))
    wanted = max((r["needed"] for r, _ in needs if r["powered"] and r["needed"] is not None), default=None)
    rounds = min(wanted if wanted is not None else minimum, allowed, maximum if maximum is not None else allowed)
    rounds = max(rounds, minimum)
    rows = []
    for row, sd in needs:
        known = math.isfinite(sd) and sd >= 0
        row["detectable"] = detectable_effect(sd, rounds, alpha, power) if known else math.nan
        row["detected"] = row["needed"] is not None and row["needed"] <= rounds
        rows.append(row)
    return RoundPlan(rounds, allowed, wanted, rows, float(round_s), minimum, maximum, alpha, power)
