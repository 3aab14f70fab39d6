"""The serving loop: a ``Policy`` decides every iteration of a ``Simulator`` (or the torch runtime) through
``DecisionLoop`` as the env's ``step``, except that a raising, malformed or late policy falls back to
``fallback``'s decision, counted by cause (``FALLBACK_SHARE``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from llmsched_env.common.checks import MAX_POLICY_TIMEOUT_S, check_positive
from llmsched_env.decision.actions import ActionSpec
from llmsched_env.decision.loop import DecisionLoop, DecisionStats
from llmsched_env.decision.observation import ObservationEncoder
from llmsched_env.decision.policy import Policy
from llmsched_env.sim.simulator import Simulator

FALLBACK_SHARE = "fallback_share"  # the metric: decisions taken from the fallback / all decisions (0 with none)


@dataclass(frozen=True)
class ServeOptions:
    """How the serving loop runs a policy."""

    iterations_per_step: int = 1  # each decision held this many iterations
    policy_timeout_s: float | None = 0.1  # a later decision is replaced by the fallback's (None: no deadline)
    check_invariants: bool = False  # every iteration
    max_iterations: int = 10_000_000  # RuntimeError past it
    deadline_mode: str = "auto"  # how the deadline is enforced (``decision.decider``)

    def __post_init__(self) -> None:
        if self.iterations_per_step < 1:
            raise ValueError(f"iterations_per_step must be >= 1, got {self.iterations_per_step}")
        if self.policy_timeout_s is not None:
            check_positive("ServeOptions", "policy_timeout_s", self.policy_timeout_s, maximum=MAX_POLICY_TIMEOUT_S)


def serve(
    runtime: Simulator,
    policy: Policy,
    encoder: ObservationEncoder,
    spec: ActionSpec,
    fallback: Policy,
    options: ServeOptions = ServeOptions(),
) -> tuple[dict[str, float], DecisionStats]:
    """Run ``runtime`` until it drains: its metrics (with ``decision_metrics``) and the decision statistics."""
    loop = decision_loop(policy, encoder, spec, fallback, options)
    for _ in serving(runtime, loop, options):
        pass
    metrics = runtime.metrics()
    metrics.update(decision_metrics(loop.stats))
    return metrics, loop.stats


def decision_metrics(stats: DecisionStats) -> dict[str, float]:
    """``stats``' ``policy_*`` metrics columns and ``FALLBACK_SHARE`` (decisions from the fallback / all)."""
    share = stats.num_fallbacks / stats.num_decisions if stats.num_decisions else 0.0
    return {**stats.as_metrics(), FALLBACK_SHARE: share}


def decision_loop(
    policy: Policy, encoder: ObservationEncoder, spec: ActionSpec, fallback: Policy, options: ServeOptions
) -> DecisionLoop:
    """The ``DecisionLoop`` the serving loop drives for ``policy`` under ``options``."""
    return DecisionLoop(
        spec,
        encoder,
        policy,
        hold=options.iterations_per_step,
        fallback=fallback,
        timeout_s=options.policy_timeout_s,
        deadline_mode=options.deadline_mode,
    )


def serving(runtime: Simulator, loop: DecisionLoop, options: ServeOptions = ServeOptions()) -> Iterator[None]:
    """``serve``'s loop, yielding after each decision and the iterations it held (callers may interleave several
    loops); stops the loop's deadline worker at the end."""
    engine = runtime.engine
    stats = loop.stats
    try:
        while not runtime.done:
            if stats.num_iterations >= options.max_iterations:
                raise RuntimeError(f"serve: not drained after {options.max_iterations} iterations")
            for _ in range(loop.hold):
                decision = loop.next(engine)
                assert decision is not None  # the fallback is a policy, never the engine's default
                runtime.step(decision)
                if options.check_invariants:
                    runtime.check_invariants()
                if runtime.done:
                    break
            yield
    finally:
        loop.close()
