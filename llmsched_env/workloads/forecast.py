"""Forecasts of the traffic to come, from what a scheduler has seen so far: the futures a planner plays.

    forecaster = Forecaster(window=256)
    fc = forecaster.fit(arrived, finished, now_s)     # the arrivals seen so far, the requests finished so far
    future = fc.arrivals(rng, until_s, first_id)       # requests arriving in (now_s, until_s], sampled
    lens = [fc.output_len(rng, r) for r in live]       # an output length for each live request

Nothing here reads a request's true output length unless the request has finished (its length is then known),
nor any request that has not arrived: a forecast is fitted on

- **arrivals**: the last ``window`` arrivals; their rate is the count over the time from the first of them to
  now (so a silence since the last arrival lowers it), their burstiness the squared coefficient of variation of
  the gaps between them (``cv2``). The future is a renewal process of Gamma gaps with that mean and ``cv2``
  (Poisson at ``cv2 = 1``; burstier above), started afresh at now;
- **who arrives and with what prompt**: each future request copies one of the last ``window`` arrivals, drawn
  uniformly (its tenant, prompt length and prefix ids together), so the tenant mix and the prompt lengths per
  tenant are the recent ones;
- **output lengths**: drawn from the outputs of the last ``window`` finished requests of the same tenant (of
  any tenant while that tenant has fewer than ``min_finished``); a live request that has produced ``g`` tokens
  draws among those longer than ``g`` (the empirical distribution conditioned on what it has produced), and past
  the longest seen, ``g`` plus ``g`` times an exponential draw of mean 1. A request with a length prediction
  (``Request.predicted_output_len``, the scenario's length predictor, as ``sprw`` reads it) longer than ``g``
  takes the prediction instead: it is what the scheduler knows of it (an ``exact`` predictor is an oracle, and
  so is the forecast then). Before any request has finished, a live request's length is ``g`` plus ``g``
  times an exponential draw (at least 16 tokens).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from llmsched_env.common.checks import check_int
from llmsched_env.engine.request import Request

__all__ = ["Forecast", "Forecaster"]

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
    ) -> Forecast:
        """The forecast from ``arrived`` (every request that has arrived, in arrival order) and ``finished`` (the
        finished ones, in finishing order) at clock ``now_s``; ``max_model_len`` caps prompt + output."""
        recent = list(arrived[-self.window :])
        rate, cv2 = 0.0, 1.0
        if len(recent) >= 2:
            span = now_s - recent[0].arrival_s
            rate = (len(recent) - 1) / span if span > 0 else 0.0
            gaps = np.diff([r.arrival_s for r in recent])
            mean = float(gaps.mean())
            if len(gaps) >= 2 and mean > 0:
                cv2 = float(np.clip(gaps.var() / (mean * mean), *_CV2_RANGE))
        outputs: dict[int, list[int]] = {}
        pooled: list[int] = []
        for r in reversed(finished):  # newest first
            if len(pooled) < self.window:
                pooled.append(r.output_len)
            own = outputs.setdefault(r.tenant, [])
            if len(own) < self.window:
                own.append(r.output_len)
        per_tenant = {
            t: np.sort(np.asarray(v, dtype=np.int64)) for t, v in outputs.items() if len(v) >= self.min_finished
        }
        return Forecast(
            now_s=now_s,
            rate_rps=rate,
            cv2=cv2,
            rows=recent,
            outputs=per_tenant,
            pooled=np.sort(np.asarray(pooled, dtype=np.int64)),
            max_model_len=max_model_len,
        )


@dataclass(frozen=True, eq=False)
class Forecast:
    """A fitted forecast (``Forecaster.fit``): ``rate_rps`` and ``cv2`` of the arrivals, the recent arrivals
    ``rows`` the future copies, and the sorted outputs of recent finished requests per tenant (``outputs``, only
    tenants with enough of them) and of all tenants (``pooled``)."""

    now_s: float
    rate_rps: float
    cv2: float
    rows: list[Request]
    outputs: dict[int, np.ndarray]
    pooled: np.ndarray
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
        values = self.outputs.get(tenant, self.pooled)
        longer = values[np.searchsorted(values, produced, side="right") :] if values.size else values
        if longer.size:
            length = int(longer[int(rng.integers(longer.size))])
        else:
            base = max(produced, _MIN_GUESS if not values.size else produced)
            length = produced + max(1, round(base * rng.exponential()))
        return self._cap(length, prompt_len, produced)

    def _cap(self, length: int, prompt_len: int, produced: int) -> int:
        if self.max_model_len is not None:
            length = min(length, self.max_model_len - prompt_len)
        return max(length, produced + 1, 1)
