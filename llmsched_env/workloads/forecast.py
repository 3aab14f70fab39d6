"""Forecasts of the traffic to come from what a scheduler has seen (the futures a planner plays), never a true
output length of an unfinished request nor a request not yet arrived:

- arrivals: Gamma renewal gaps with the rate and squared CV of the last ``window`` arrivals;
- each future request copies one of the last ``window`` arrivals (tenant, prompt);
- output lengths: a Kaplan-Meier estimate per tenant (``OutputLengths``), live requests right-censored; a live
  request that produced ``g`` tokens draws conditioned on being longer.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from llmsched_env.common.checks import check_int
from llmsched_env.engine.request import Request

_MIN_GUESS = 16  # tokens: the output length guessed while nothing has finished yet
_CV2_RANGE = (0.05, 20.0)  # burstiness kept to a sane range (a few gaps estimate it poorly)


@dataclass(frozen=True)
class Forecaster:
    """How a ``Forecast`` is fitted: from ``window`` recent requests, own estimates past ``min_finished``."""

    window: int = 256
    min_finished: int = 8

    def __post_init__(self) -> None:
        check_int("forecast", "window", self.window, 2)
        check_int("forecast", "min_finished", self.min_finished, 1)

    def fit(self, arrived: Sequence[Request], finished: Sequence[Request], now_s: float,
            max_model_len: int | None = None, live: Sequence[tuple[int, int]] = ()) -> Forecast:  # fmt: skip
        """The forecast at ``now_s`` from ``arrived`` (arrival order), ``finished`` (finishing order) and ``live``
        (``(tenant, tokens produced)`` of each waiting or running request); ``max_model_len`` caps lengths."""
        recent = list(arrived[-self.window :])
        rate, cv2 = 0.0, 1.0
        if len(recent) >= 2:
            span = now_s - recent[0].arrival_s
            rate = (len(recent) - 1) / span if span > 0 else 0.0
            gaps = np.diff([r.arrival_s for r in recent])
            mean = float(gaps.mean())
            if len(gaps) >= 2 and mean > 0:
                cv2 = float(np.clip(gaps.var() / (mean * mean), *_CV2_RANGE))
        events: dict[int, list[int]] = {}
        pooled: list[int] = []
        for r in reversed(finished):  # newest first
            if len(pooled) < self.window:
                pooled.append(r.output_len)
            own = events.setdefault(r.tenant, [])
            if len(own) < self.window:
                own.append(r.output_len)
        alive: dict[int, list[int]] = {}
        for tenant, produced in live:
            if produced > 0:
                alive.setdefault(tenant, []).append(produced)
        per_tenant = {
            t: OutputLengths.fit(v, alive.get(t, ())) for t, v in events.items() if len(v) >= self.min_finished
        }
        pooled_lengths = OutputLengths.fit(pooled, [g for v in alive.values() for g in v])
        return Forecast(now_s, rate, cv2, recent, per_tenant, pooled_lengths, max_model_len)


@dataclass(frozen=True, eq=False)
class OutputLengths:
    """A Kaplan-Meier estimate of output lengths: ``values`` (sorted distinct finished lengths), ``mass`` (their
    probabilities) and ``tail`` (of a length past the longest seen), running requests right-censored."""

    values: np.ndarray
    mass: np.ndarray
    tail: float

    @classmethod
    def fit(cls, finished: Sequence[int], censored: Sequence[int] = ()) -> OutputLengths:
        """From ``finished`` lengths and ``censored`` produced counts (each request longer than its count)."""
        done = np.asarray(finished, dtype=np.int64)
        if not done.size:
            return cls(np.zeros(0, dtype=np.int64), np.zeros(0), 1.0)
        values, deaths = np.unique(done, return_counts=True)
        cens = np.sort(np.asarray(censored, dtype=np.int64))
        # at risk at length v: every finished length >= v (all but those that finished shorter), and every
        # censored count >= v (it outlived v)
        shorter = np.concatenate(([0], np.cumsum(deaths)[:-1]))
        at_risk = (done.size - shorter) + (cens.size - np.searchsorted(cens, values, side="left"))
        survive = np.cumprod(1.0 - deaths / at_risk)
        before = np.concatenate(([1.0], survive[:-1]))
        return cls(values, before - survive, float(survive[-1]))

    @property
    def size(self) -> int:
        return int(self.values.size)

    def draw(self, rng: np.random.Generator, produced: int) -> int | None:
        """A length longer than ``produced`` drawn from the estimate; None past the longest seen."""
        start = int(np.searchsorted(self.values, produced, side="right"))
        mass = self.mass[start:]
        total = float(mass.sum()) + self.tail
        if not mass.size or total <= 0:
            return None
        u = rng.random() * total
        if u >= total - self.tail:
            return None  # past the longest seen
        return int(self.values[start + int(np.searchsorted(np.cumsum(mass), u, side="right"))])


@dataclass(frozen=True, eq=False)
class Forecast:
    """A fitted forecast: the arrivals' ``rate_rps`` and ``cv2``, the recent arrivals ``rows`` the future copies,
    output-length estimates per tenant (``outputs``) and over all (``pooled``)."""

    now_s: float
    rate_rps: float
    cv2: float
    rows: list[Request]
    outputs: dict[int, OutputLengths]
    pooled: OutputLengths
    max_model_len: int | None = None

    def arrivals(self, rng: np.random.Generator, until_s: float, first_id: int) -> list[Request]:
        """Requests arriving in ``(now_s, until_s]`` (ids from ``first_id``), copies of recent arrivals with sampled
        output lengths."""
        if self.rate_rps <= 0 or until_s <= self.now_s or not self.rows:
            return []
        mean_gap = 1.0 / self.rate_rps
        shape = 1.0 / self.cv2
        expected = (until_s - self.now_s) * self.rate_rps
        n = int(expected + 4.0 * math.sqrt(expected * max(self.cv2, 1.0)) + 8)
        times = self.now_s + np.cumsum(rng.gamma(shape, mean_gap / shape, size=n))
        times = times[times <= until_s]
        picks = rng.integers(len(self.rows), size=times.size)
        out: list[Request] = []
        for i, (t, k) in enumerate(zip(times.tolist(), picks.tolist(), strict=True)):
            row = self.rows[k]
            length = self._draw(rng, row.tenant, 0, row.prompt_len)
            ids = row.prefix_ids or None
            r = Request(first_id + i, t, row.prompt_len, length, row.tenant, ids, row.prefix_id_tokens)
            r.predicted_output_len = row.predicted_output_len
            out.append(r)
        return out

    def output_len(self, rng: np.random.Generator, r: Request, produced: int) -> int:
        """An output length for live ``r`` longer than ``produced``: its prediction if longer, else a draw."""
        pred = r.predicted_output_len
        if pred is not None and pred > produced:
            return self._cap(pred, r.prompt_len, produced)
        return self._draw(rng, r.tenant, produced, r.prompt_len)

    def _draw(self, rng: np.random.Generator, tenant: int, produced: int, prompt_len: int) -> int:
        lengths = self.outputs.get(tenant, self.pooled)
        length = lengths.draw(rng, produced)
        if length is None:  # nothing seen longer: extrapolate
            longest = int(lengths.values[-1]) if lengths.size else 0
            base = max(produced, longest, _MIN_GUESS if not lengths.size else 1)
            length = max(produced, longest) + max(1, round(base * rng.exponential()))
        return self._cap(length, prompt_len, produced)

    def _cap(self, length: int, prompt_len: int, produced: int) -> int:
        if self.max_model_len is not None:
            length = min(length, self.max_model_len - prompt_len)
        return max(length, produced + 1, 1)
