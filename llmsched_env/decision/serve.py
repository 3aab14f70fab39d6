"""The serving loop: any ``Policy`` decides every iteration of a ``Runtime``, with a fallback that never fails.

The loop drives any ``sim.Simulator``, so the same code replays a workload in the simulator (for the fidelity
report) and on the real model (``Runtime`` is a Simulator whose iterations run the model).

The policy sees what it sees in the env (``ObservationEncoder.encode`` and ``ActionSpec.mask`` on the same
engine), and its action is decoded the same way: a choice the mask forbids is projected onto the nearest
allowed one, exactly as ``LLMSchedEnv.step`` does, and a decision is held for ``iterations_per_step``
iterations as the exported policy was trained. What the env would reject instead falls back: if the policy
raises, returns something that is not a valid action (wrong shape, not integers, out of range, NaN), or takes
longer than ``policy_timeout_s`` (its late answer is discarded), that decision comes from ``fallback`` (the
``fcfs`` baseline in ``evaluate.py``) and is counted by reason. The fallback must not fail. No request is lost
either way: the engine only ever sees a valid ``Decision``.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

from llmsched_env.decision.actions import ActionSpec
from llmsched_env.decision.observation import ObservationEncoder
from llmsched_env.decision.policy import Policy
from llmsched_env.sim.simulator import Simulator

__all__ = ["FALLBACK_REASONS", "ServeOptions", "ServeStats", "serve", "serving"]

FALLBACK_REASONS = ("error", "invalid", "timeout")


@dataclass
class ServeStats:
    """What the serving loop counted."""

    num_decisions: int = 0
    num_iterations: int = 0
    num_fallbacks: int = 0
    fallbacks: Counter[str] = field(default_factory=Counter)  # by reason, FALLBACK_REASONS
    policy_time_s: float = 0.0  # observation encoding, mask and the policy's act()
    last_error: str = ""

    def as_metrics(self) -> dict[str, float]:
        out = {
            "policy_decisions": float(self.num_decisions),
            "policy_fallbacks": float(self.num_fallbacks),
            "policy_time_mean_s": self.policy_time_s / self.num_decisions if self.num_decisions else 0.0,
        }
        for reason in FALLBACK_REASONS:
            out[f"policy_fallbacks_{reason}"] = float(self.fallbacks[reason])
        return out


@dataclass(frozen=True)
class ServeOptions:
    """How the serving loop runs a policy: each decision held for ``iterations_per_step`` iterations (as the
    exported policy was trained), a decision slower than ``policy_timeout_s`` replaced by the fallback's,
    the engine and the token bookkeeping checked after every iteration with ``check_invariants``, and a
    ``RuntimeError`` past ``max_iterations`` (a loop that does not drain). ``ValueError`` for a bad value."""

    iterations_per_step: int = 1
    policy_timeout_s: float = 0.1
    check_invariants: bool = False
    max_iterations: int = 10_000_000

    def __post_init__(self) -> None:
        if self.iterations_per_step < 1:
            raise ValueError(f"iterations_per_step must be >= 1, got {self.iterations_per_step}")
        if not self.policy_timeout_s > 0:
            raise ValueError(f"policy_timeout_s must be > 0, got {self.policy_timeout_s}")


def serve(
    runtime: Simulator,
    policy: Policy,
    encoder: ObservationEncoder,
    spec: ActionSpec,
    fallback: Policy,
    options: ServeOptions = ServeOptions(),
) -> tuple[dict[str, float], ServeStats]:
    """Run ``runtime`` until every request has finished or been rejected; return its metrics and the loop's
    counts."""
    stats = ServeStats()
    for _ in serving(runtime, policy, encoder, spec, fallback, stats, options):
        pass
    metrics = runtime.metrics()
    metrics.update(stats.as_metrics())
    return metrics, stats


def serving(
    runtime: Simulator,
    policy: Policy,
    encoder: ObservationEncoder,
    spec: ActionSpec,
    fallback: Policy,
    stats: ServeStats,
    options: ServeOptions = ServeOptions(),
) -> Iterator[None]:
    """``serve``'s loop one decision at a time: yields after each decision and the iterations it ran, until
    ``runtime`` is done, counting into ``stats``. Lets a caller interleave several serving loops (the
    fidelity report's lockstep calibration)."""
    iterations_per_step, policy_timeout_s = options.iterations_per_step, options.policy_timeout_s
    engine = runtime.engine
    last_step_s = 0.0
    while not runtime.done:
        if stats.num_iterations >= options.max_iterations:
            raise RuntimeError(f"serve: not drained after {options.max_iterations} iterations")
        t0 = time.perf_counter()
        obs = encoder.encode(engine, last_step_s)
        mask = spec.mask(engine)
        reason = None
        action: np.ndarray | None = None
        try:
            raw = policy.act(obs, mask)
        except Exception as exc:  # a failing policy must not stop serving
            reason, stats.last_error = "error", f"{type(exc).__name__}: {exc}"
        else:
            try:
                spec.decode(raw)  # the env's own check: shape, integers, range (ValueError naming the component)
                action = np.asarray(raw, dtype=np.int64)
            except ValueError as exc:
                reason, stats.last_error = "invalid", f"invalid action {raw!r}: {exc}"
            else:
                if time.perf_counter() - t0 > policy_timeout_s:
                    reason, stats.last_error = "timeout", f"policy took over {policy_timeout_s} s"
        if reason is not None:
            stats.num_fallbacks += 1
            stats.fallbacks[reason] += 1
            action = np.asarray(fallback.act(obs, mask), dtype=np.int64)
        assert action is not None
        stats.policy_time_s += time.perf_counter() - t0
        stats.num_decisions += 1
        start_s = runtime.now_s
        for i in range(iterations_per_step):
            if i:
                mask = spec.mask(engine)
            ok = spec.allows(action, mask)
            runtime.step(spec.decode(action if ok else spec.project(action, mask)))
            stats.num_iterations += 1
            if options.check_invariants:
                runtime.check_invariants()
            if runtime.done:
                break
        last_step_s = runtime.now_s - start_s
        yield
