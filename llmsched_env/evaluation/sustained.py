"""Sustained windows in an evaluation (the rule: ``workloads.windows``): which (scenario, load) of a config
replays windows too short for its load to be a sustained rate, the largest load a capacity search may report,
and the tenants a part leaves out.

    windows = scenario_windows(config, scenario)   # the episodes' source, size and load scale
    windows.span(seed, load).sustained              # one window at one load
    windows.max_load(seeds)                         # the largest load at which every seed's window is sustained
    unsustained(config)                             # one line per (scenario, load) of the grid that is not
    absent_tenant_notes(config)                     # one line per trace part that leaves tenants out

A window's span is measured on the very requests its episode replays (the env's source, episode size and
load scaling: a cluster's load is a multiple of its own rate, the source's of the base scenario's).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from llmsched_env.cluster.scenarios import ClusterScenario
from llmsched_env.common.tenants import listed_tenants
from llmsched_env.evaluation.config import AnyScenario, EvalConfig
from llmsched_env.workloads.scenarios import RequestSource, TraceSource
from llmsched_env.workloads.windows import SUSTAINED_SPAN_FACTOR, WindowSpan, max_sustained_load, window_span

__all__ = [
    "ScenarioWindows",
    "absent_tenant_notes",
    "env_windows",
    "scenario_windows",
    "unsustained",
]


@dataclass(frozen=True)
class ScenarioWindows:
    """The windows a config's episodes of one scenario replay: ``source`` (of ``split``), ``num_requests`` per
    episode, and ``load_scale``, the source's load per unit of the scenario's (1 but for a cluster)."""

    name: str
    source: RequestSource
    split: str
    num_requests: int
    load_scale: float = 1.0

    def span(self, seed: int, load: float) -> WindowSpan:
        """The window of ``seed`` at the scenario's ``load``."""
        w = window_span(self.source, self.split, seed, self.num_requests, load * self.load_scale)
        return replace(w, load=float(load))

    def max_load(self, seeds: Sequence[int]) -> float:
        """The largest load of the scenario at which the windows of all ``seeds`` are sustained."""
        return min(
            max_sustained_load(self.source, self.split, s, self.num_requests, self.load_scale) / self.load_scale
            for s in seeds
        )

    def requests_for(self, span: WindowSpan, seeds: Sequence[int], option: str = "--num-requests ") -> str:
        """Words for the episode size that would make ``span``'s window sustained at its load (spans grow about
        in proportion to the requests), given as ``option`` followed by the size, and whether the part holds a
        window of that size for every seed."""
        need = math.ceil(self.num_requests * span.required_s / max(span.span_s, 1e-12))
        text = f"about {option}{need}"
        if isinstance(self.source, TraceSource):
            held = len(self.source.trace)
            windows = max(seeds) + 1 if self.split != "train" else 1
            if need * windows > held:
                text += f", more than the {self.split} part's {held} requests hold for {windows} window(s)"
        return text

    def unsustained_note(self, seeds: Sequence[int], load: float, option: str = "--num-requests ") -> str | None:
        """None when the windows of every seed are sustained at ``load``; else one line: how many are not, the
        shortest one's span against the span it needs, the largest load at which every window is sustained and
        the episode size that would make them sustained at this load (as ``option`` and the size)."""
        spans = [self.span(seed, load) for seed in seeds]
        short = [w for w in spans if not w.sustained]
        if not short:
            return None
        worst = min(short, key=lambda w: w.span_s / w.required_s)
        return (
            f"{len(short)} of {len(spans)} {self.split} windows not sustained: seed {worst.seed}'s "
            f"{worst.num_requests} requests arrive in {_seconds(worst.span_s)}, a sustained rate needs "
            f"{_seconds(worst.required_s)} ({SUSTAINED_SPAN_FACTOR:g} x its mean TTFT target, {worst.ttft_s:g} s); "
            f"the windows are sustained up to load {self.max_load(seeds):.3g}, or at load {load:g} with "
            f"{self.requests_for(worst, seeds, option)}"
        )


def env_windows(env: Any, name: str | None = None) -> ScenarioWindows:
    """The ``ScenarioWindows`` of an env (``LLMSched-v1`` or ``LLMSchedCluster-v0``, wrapped or not)."""
    u = env.unwrapped
    scale = u.cluster_rate_rps / u.source.nominal_rate_rps() if hasattr(u, "cluster_rate_rps") else 1.0
    label = name if name is not None else getattr(getattr(u, "scenario", None), "name", "?")
    return ScenarioWindows(label, u.source, u.split, int(u.num_requests), float(scale))


def scenario_windows(config: EvalConfig, scenario: AnyScenario) -> ScenarioWindows:
    """The ``ScenarioWindows`` of ``scenario``'s episodes under ``config`` (its split, size and cost model)."""
    env = config.make_env(scenario, 1.0)
    try:
        return env_windows(env, scenario.name)
    finally:
        env.close()


def _seconds(value: float) -> str:
    return f"{value:.0f} s" if value >= 100 else f"{value:.3g} s"


def unsustained(config: EvalConfig) -> list[str]:
    """One line per (scenario, load) of ``config`` whose window of some seed is not sustained at that load
    (``ScenarioWindows.unsustained_note``)."""
    lines = []
    for scenario in config.scenarios:
        windows = scenario_windows(config, scenario)
        for load in config.loads:
            note = windows.unsustained_note(config.seeds, load)
            if note is not None:
                lines.append(f"scenario {scenario.name!r} at load {load:g}: {note}")
    return lines


def absent_tenant_notes(config: EvalConfig) -> list[str]:
    """One line per (single-node) scenario whose ``config.split`` part has no request of some of its tenants."""
    lines = []
    for scenario in config.scenarios:
        base = scenario.scenario() if isinstance(scenario, ClusterScenario) else scenario
        source = base.make_source(config.split, 1.0)
        if isinstance(source, TraceSource) and source.absent_tenants:
            names = listed_tenants(source.absent_tenants)  # the first 16 and how many
            lines.append(f"{source.trace.source}: the {config.split} part has no request of tenants {names}")
    return lines
