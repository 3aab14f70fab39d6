"""Sustained windows: an episode measures a sustained rate only if its arrival span at that load is at least
``SUSTAINED_SPAN_FACTOR`` (20) times its requests' mean TTFT target (then the drain after the last arrival
rescues at most about 5% of its requests).

    span = window_span(source, "test", seed=0, num_requests=200, load=4.0)   # .sustained, .span_s, .required_s
    max_sustained_load(source, "test", seed=0, num_requests=200)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from llmsched_env.workloads.scenarios import RequestSource, episode_window

SUSTAINED_SPAN_FACTOR = 20.0  # a sustained window lasts this many times its requests' mean TTFT target
_RELATIVE_TOLERANCE = 1e-9  # a span equal to the requirement up to rounding counts as sustained


@dataclass(frozen=True)
class WindowSpan:
    """The arrival span of the episode of ``seed`` (``num_requests`` requests) at ``load`` and what it needs."""

    seed: int
    load: float
    num_requests: int
    span_s: float  # last arrival minus first, at ``load``
    ttft_s: float  # the mean TTFT target of the window's requests (each its tenant's)

    @property
    def required_s(self) -> float:
        """The span a sustained rate needs: ``SUSTAINED_SPAN_FACTOR`` x ``ttft_s``."""
        return SUSTAINED_SPAN_FACTOR * self.ttft_s

    @property
    def sustained(self) -> bool:
        """Whether the window lasts at least ``required_s`` at ``load``."""
        return self.span_s >= self.required_s * (1.0 - _RELATIVE_TOLERANCE)


def window_span(source: RequestSource, split: str, seed: int, num_requests: int, load: float) -> WindowSpan:
    """The ``WindowSpan`` of the episode ``reset(seed=seed)`` replays from ``source`` at ``load`` (the source's)."""
    rng = np.random.default_rng(seed)  # what gymnasium's reset(seed=seed) seeds the env's stream with
    requests = source.sample(rng, num_requests, load, episode_window(split, seed))
    arrivals = [r.arrival_s for r in requests]
    span = float(max(arrivals) - min(arrivals)) if len(arrivals) > 1 else 0.0
    targets = [source.tenants[r.tenant].slo.ttft_s for r in requests]
    ttft = math.fsum(targets) / len(targets) if targets else 0.0
    return WindowSpan(seed, float(load), len(requests), span, float(ttft))


def max_sustained_load(source: RequestSource, split: str, seed: int, num_requests: int, start: float = 1.0) -> float:
    """The largest load at which the window of ``seed`` is sustained (inf without TTFT targets, 0.0 without a span):
    exact in one step when spans are inverse to the load, else bracketed and bisected to 0.1%."""

    def at(load: float) -> WindowSpan:
        return window_span(source, split, seed, num_requests, load)

    first = at(start)
    if first.required_s <= 0:
        return math.inf
    if first.span_s <= 0:
        return 0.0
    guess = start * first.span_s / first.required_s
    if at(guess).sustained and not at(guess * 1.001).sustained:
        return guess
    lo = hi = guess
    if at(guess).sustained:
        for _ in range(64):
            hi *= 2.0
            if not at(hi).sustained:
                break
        else:
            return math.inf
    else:
        for _ in range(64):
            lo /= 2.0
            if at(lo).sustained:
                break
        else:
            return 0.0
    while hi / lo > 1.001:
        mid = math.sqrt(lo * hi)
        if at(mid).sustained:
            lo = mid
        else:
            hi = mid
    return lo
