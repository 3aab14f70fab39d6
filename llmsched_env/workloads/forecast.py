"""Forecasts of the traffic to come, from what a scheduler has seen so far: the futures a planner plays.

    forecaster = Forecaster(window=256)
    fc = forecaster.fit(arrived, finished, now_s, live=[(r.tenant, g) for r, g in zip(live, produced)])
    future = fc.arrivals(rng, until_s, first_id)             # requests arriving in (now_s, until_s], sampled
    lens = [fc.output_len(rng, r, g) for r, g in zip(live, produced)]   # a length for each live request

Nothing here reads a request's true output length unless the request has finished (its length is then known),
nor any request that has not arrived: a forecast is fitted on

- **arrivals**: the last ``window`` arrivals; their rate is the count over the time from the first of them to
  now (so a silence since the last arrival lowers it), their burstiness the squared coefficient of variation of
  the gaps between them (``cv2``). The future is a renewal process of Gamma gaps with that mean and ``cv2``
  (Poisson at ``cv2 = 1``; burstier above), started afresh at now;
- **who arrives and with what prompt**: each future request copies one of the last ``window`` arrivals, drawn
  uniformly (its tenant, prompt length and prefix ids together), so the tenant mix and the prompt lengths per
  tenant are the recent ones;
- **output lengths**: a Kaplan-Meier estimate per tenant (``OutputLengths``) from the outputs of its last
  ``window`` finished requests and, as right-censored observations, the tokens produced so far by its live
  requests (each is longer than that; without them the estimate is short, since the long requests are the ones
  still running); of all tenants while a tenant has fewer than ``min_finished`` finished. A live request that has
  produced ``g`` tokens draws from the estimate conditioned on being longer than ``g``; past the longest seen,
  that length plus that length times an exponential draw of mean 1. A request with a length prediction
  (``Request.predicted_output_len``, the scenario's length predictor, as ``sprw`` reads it) longer than ``g``
  takes the prediction instead: it is what the scheduler knows of it (an ``exact`` predictor is an oracle, and
  so is the forecast then). Before any request has finished, a live request's length is ``g`` plus ``g`` times
  an exponential draw (at least 16 tokens).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from llmsched_env.common.checks import check_int
from llmsched_env.engine.request import Request

__all__ = ["Forecast", "Forecaster", "OutputLengths"]

_MIN_GUESS = 16  # tokens: the output length guessed while nothing has finished yet
_CV2_RANGE = (0.05, 20.0)  # burstiness kept to a sane range (a few gaps estimate it poorly)


@dataclass(frozen=True)
class Forecaster:
    """How a ``Forecast`` is fitted (module docstring): ``window`` recent arrivals (and finished requests per
    tenant) it reads; ``min_finished`` finished requests a tenant needs before its own outputs are drawn from."""

    window: int = 256
    min_finished: int = 8

    def __post_init__(self) -> None:
        check_int("forecast", "window", self.window, 2)
        check_int("forecast", "min_finished", self.min_finished, 1)

    def fit(
        self,
        arrived: Sequence[Request],
        finished: Sequence[Request],
        now_s: float,
        max_model_len: int | None = None,
        live: Sequence[tuple[int, int]] = (),
    ) -> Forecast:
        """The forecast from ``arrived`` (every request that has arrived, in arrival order), ``finished`` (the
        finished ones, in finishing order) and ``live`` (``(tenant, tokens produced)`` of every request still
        waiting or running) at clock ``now_s``; ``max_model_len`` caps prompt + output."""
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
        return Forecast(
            now_s=now_s,
            rate_rps=rate,
            cv2=cv2,
            rows=recent,
            outputs=per_tenant,
            pooled=OutputLengths.fit(pooled, [g for v in alive.values() for g in v]),
            max_model_len=max_model_len,
        )


@dataclass(frozen=True, eq=False)
class OutputLengths:
    """A Kaplan-Meier estimate of a distribution of output lengths: ``values`` (sorted, distinct lengths seen to
    finish), ``mass`` (the probability of each) and ``tail`` (of a length past the longest seen). Requests still
    running are right-censored observations (longer than what they have produced): without them the finished
    ones alone under-represent long outputs, which are the ones still running at any moment."""

    values: np.ndarray
    mass: np.ndarray
    tail: float

    @classmethod
    def fit(cls, finished: Sequence[int], censored: Sequence[int] = ()) -> OutputLengths:
        """From the lengths of ``finished`` requests and the produced counts of ``censored`` ones (each longer
        than its count)."""
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
        """A length longer than ``produced``, drawn from the estimate conditioned on it; None when none is seen
        longer (the caller extrapolates)."""
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
    """A fitted forecast (``Forecaster.fit``): ``rate_rps`` and ``cv2`` of the arrivals, the recent arrivals
    ``rows`` the future copies, and the estimates of output lengths per tenant (``outputs``, only tenants with
    enough finished requests) and over all tenants (``pooled``)."""

    now_s: float
    rate_rps: float
    cv2: float
    rows: list[Request]
    outputs: dict[int, OutputLengths]
    pooled: OutputLengths
    max_model_len: int | None = None

    def arrivals(self, rng: np.random.Generator, until_s: float, first_id: int) -> list[Request]:
        """Fresh requests arriving in ``(now_s, until_s]`` (ids from ``first_id`` on), each a copy of a recent
        arrival with a sampled output length; none when no rate could be fitted."""
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
            r = Request(
                first_id + i, t, row.prompt_len, length, row.tenant, row.prefix_ids or None, row.prefix_id_tokens
            )
            r.predicted_output_len = row.predicted_output_len
            out.append(r)
        return out

    def output_len(self, rng: np.random.Generator, r: Request, produced: int) -> int:
        """An output length for live request ``r``, which has produced ``produced`` tokens: its prediction when
        it has one longer than that, else a draw conditioned on ``produced`` (module docstring); always more
        than ``produced``."""
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
