"""Sustained windows in an evaluation (the rule: ``workloads.windows``): the (scenario, load) cells whose windows are
too short for a sustained rate, the largest load a capacity search may report, and notes on tenants a part leaves
out and requests that overrun ``max_model_len``. Spans are measured on the very requests the episodes replay.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from llmsched_env.cluster.scenarios import ClusterScenario
from llmsched_env.common.tenants import listed_tenants
from llmsched_env.engine.request import Request
from llmsched_env.evaluation.config import AnyScenario, EvalConfig
from llmsched_env.workloads.scenarios import RequestSource, TraceSource, episode_window
from llmsched_env.workloads.windows import SUSTAINED_SPAN_FACTOR, WindowSpan, max_sustained_load, window_span

__all__ = ["OVERLONG_NOTE_SHARE", "ScenarioWindows", "absent_tenant_notes", "env_windows", "overlong_notes",
           "scenario_windows", "unsustained"]  # fmt: skip


# The share of a scenario's requests longer than max_model_len from which evaluate says so (``overlong_notes``):
# a few over-long requests are a scenario's tail, rejected as vLLM rejects them; a tenth or more is a setting.
OVERLONG_NOTE_SHARE = 0.1


@dataclass(frozen=True)
class ScenarioWindows:
    """A scenario's episode windows: ``source``, ``num_requests`` and ``load_scale`` (1 but for a cluster)."""

    name: str
    source: RequestSource
    split: str
    num_requests: int
    load_scale: float = 1.0
    # max_load per set of seeds; not an init field, so each replace() (another episode size) starts it afresh
    _max_loads: dict[tuple[int, ...], float] = field(default_factory=dict, init=False, compare=False, repr=False)

    def span(self, seed: int, load: float) -> WindowSpan:
        """The window of ``seed`` at the scenario's ``load``."""
        w = window_span(self.source, self.split, seed, self.num_requests, load * self.load_scale)
        return replace(w, load=float(load))

    def requests(self, seed: int, load: float = 1.0) -> list[Request]:
        """The requests of the window of ``seed`` at the scenario's ``load``, as ``reset(seed=seed)`` draws them."""
        rng = np.random.default_rng(seed)  # what gymnasium's reset(seed=seed) seeds the env's stream with
        return list(
            self.source.sample(rng, self.num_requests, load * self.load_scale, episode_window(self.split, seed))
        )

    def max_load(self, seeds: Sequence[int]) -> float:
        """The largest load at which the windows of all ``seeds`` are sustained (cached per set of seeds)."""
        key = tuple(seeds)
        if key not in self._max_loads:
            self._max_loads[key] = min(
                max_sustained_load(self.source, self.split, s, self.num_requests, self.load_scale) / self.load_scale
                for s in seeds
            )
        return self._max_loads[key]

    def requests_for(self, span: WindowSpan, seeds: Sequence[int], option: str = "--num-requests ") -> str:
        """Words for the episode size at which ``span``'s window is sustained, and whether the part has one per seed."""
        need = math.ceil(self.num_requests * span.required_s / max(span.span_s, 1e-12))
        text = f"about {option}{need}"
        if isinstance(self.source, TraceSource):
            held = len(self.source.trace)
            windows = max(seeds) + 1 if self.split != "train" else 1
            if need * windows > held:
                text += f", more than the {self.split} part's {held} requests hold for {windows} window(s)"
        return text

    def unsustained_note(self, seeds: Sequence[int], load: float, option: str = "--num-requests ") -> str | None:
        """None when every seed's window is sustained at ``load``; else one line saying what would do."""
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
    """One line per (scenario, load) of ``config`` whose window of some seed is not sustained."""
    lines = []
    for scenario in config.scenarios:
        windows = scenario_windows(config, scenario)
        for load in config.loads:
            note = windows.unsustained_note(config.seeds, load)
            if note is not None:
                lines.append(f"scenario {scenario.name!r} at load {load:g}: {note}")
    return lines


def absent_tenant_notes(config: EvalConfig) -> list[str]:
    """One line per single-node scenario whose ``config.split`` part lacks some of its tenants."""
    lines = []
    for scenario in config.scenarios:
        base = scenario.scenario() if isinstance(scenario, ClusterScenario) else scenario
        source = base.make_source(config.split, 1.0)
        if isinstance(source, TraceSource) and source.absent_tenants:
            names = listed_tenants(source.absent_tenants)  # the first 16 and how many
            lines.append(f"{source.trace.source}: the {config.split} part has no request of tenants {names}")
    return lines


def overlong_notes(config: EvalConfig) -> list[str]:
    """One line per scenario where ``OVERLONG_NOTE_SHARE`` of its requests exceed the longest its engine serves."""
    lines = []
    for scenario in config.scenarios:
        env = config.make_env(scenario, 1.0)
        try:
            found = _max_model_len(env.unwrapped)
            windows = env_windows(env, scenario.name)
        finally:
            env.close()
        if found is None:
            continue
        limit, what = found
        lengths = [r.total_len for seed in config.seeds for r in windows.requests(seed)]
        over = sum(n > limit for n in lengths)
        if not lengths or over < OVERLONG_NOTE_SHARE * len(lengths):
            continue
        share = "all" if over == len(lengths) else f"{over / len(lengths):.0%} ({over} of"
        lines.append(
            f"scenario {scenario.name!r}: {share} {len(lengths)}{')' if over < len(lengths) else ''} requests of its "
            f"{config.split} windows are longer than {what} {limit} (prompt + output; the longest "
            f"{max(lengths)} tokens): the engine rejects each unserved, whatever the policy; raise "
            f"{'max_model_len (--max-model-len)' if what == 'max_model_len' else 'the KV pool'} if that is not the "
            "point"
        )
    return lines


def _max_model_len(env: Any) -> tuple[int, str] | None:
    """The longest request ``env`` serves and what sets it; None without an engine."""
    engine = getattr(env, "engine_config", None)
    specs = getattr(env, "specs", None)
    engines = [engine] if engine is not None else [s.engine for s in specs] if specs else []
    if not engines:
        return None
    limits = [
        (int(e.max_model_len), "max_model_len")
        if e.max_model_len <= e.num_kv_blocks * e.block_size
        else (int(e.num_kv_blocks * e.block_size), "the KV pool's tokens (--num-kv-blocks x --block-size)")
        for e in engines
    ]
    return max(limits)
