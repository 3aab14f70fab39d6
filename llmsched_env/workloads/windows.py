"""Sustained windows: when an episode's arrivals last long enough for its load to be a sustained rate.

An episode replays a window of ``num_requests`` requests. At a high load a short window arrives in a few
seconds, and a scheduler that meets its SLOs there has only cleared one burst, not sustained the rate. The
rule: a window judged at a load measures a sustained rate only if its **arrival span at that load** (last
arrival minus first, simulated seconds, after the load's scaling) is at least ``SUSTAINED_SPAN_FACTOR`` (20)
times the mean TTFT target of its requests (each request counts its tenant's target). Why: a request
arriving less than its TTFT target before the window's last arrival can meet the target in the drain that
follows, however far the engine fell behind; with steady arrivals the share of such requests is about the
mean target over the span, so at 20 mean targets at most about 5% of the window's requests can be rescued by
the drain, less than the 10 points between full attainment and the 90% a capacity needs, and a backlog that
grows through the window has time to show. The mean over requests, not the largest target: a lax tenant with
a small share of the traffic (a batch tenant at 60 s) adds its share of rescued requests, not 20 minutes of
arrivals for every other tenant; a lax tenant with a large share lengthens the span in proportion.

    span = window_span(source, "test", seed=0, num_requests=200, load=4.0)
    span.sustained, span.span_s, span.required_s
    max_sustained_load(source, "test", seed=0, num_requests=200)   # the largest load at which it holds

Spans are exact: each is measured on the very requests the episode of that seed replays (the same random
stream as ``reset(seed=seed)``, the same trace window: ``scenarios.episode_window``). A trace window's span is
inversely proportional to the load, so its largest sustained load is exact in one step; a generated workload
whose process keeps periods of its own (on/off, diurnal, ramp) is bracketed and bisected.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from llmsched_env.workloads.scenarios import RequestSource, episode_window

__all__ = ["SUSTAINED_SPAN_FACTOR", "WindowSpan", "max_sustained_load", "window_span"]

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
    """The ``WindowSpan`` of the episode that ``reset(seed=seed)`` replays from ``source`` (of ``split``) at
    ``load`` (the source's own load: a cluster's is its load times its rate over the source's)."""
    rng = np.random.default_rng(seed)  # what gymnasium's reset(seed=seed) seeds the env's stream with
    requests = source.sample(rng, num_requests, load, episode_window(split, seed))
    arrivals = [r.arrival_s for r in requests]
    span = float(max(arrivals) - min(arrivals)) if len(arrivals) > 1 else 0.0
    targets = [source.tenants[r.tenant].slo.ttft_s for r in requests]
    ttft = math.fsum(targets) / len(targets) if targets else 0.0
    return WindowSpan(seed, float(load), len(requests), span, float(ttft))


def max_sustained_load(source: RequestSource, split: str, seed: int, num_requests: int, start: float = 1.0) -> float:
    """The largest load at which the window of ``seed`` is sustained (``WindowSpan.sustained``): inf when its
    tenants have no TTFT target, 0.0 when it has no span. Spans shrink as the load grows. The first guess,
    ``start x span(start) / required``, is exact when spans are inverse to the load (a trace, a Poisson or
    Gamma process) and is returned when it is sustained and 0.1% more is not; otherwise (a process with
    periods of its own: on/off, diurnal, ramp) the load is bracketed by doubling or halving from there and
    bisected to 0.1%, and the sustained end of the bracket is returned."""

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
