"""The serving loop: any ``Policy`` decides every iteration of a ``Simulator`` (the simulator itself, or the torch
runtime, a Simulator whose iterations run the model), with a fallback that never fails.

It is a driver of ``decision.loop.DecisionLoop``, which applies every decision exactly as the env's ``step`` does:
the policy sees what it sees in the env (the same encoder and mask on the same engine), a decision holds for
``iterations_per_step`` iterations as the exported policy was trained, and an action the mask forbids is corrected.
What the env would refuse falls back instead: if the policy raises, returns a malformed action (wrong shape, not
integers, out of range, NaN) or misses its deadline (``policy_timeout_s``, counted from the start of the decision),
that decision comes from ``fallback`` (``fcfs`` in ``llmsched-evaluate``), counted by cause; the metrics say what
share of the decisions fell back (``FALLBACK_SHARE``). No request is lost either way: the engine only ever sees a
valid ``Decision``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from llmsched_env.decision.actions import ActionSpec
from llmsched_env.decision.loop import DecisionLoop, DecisionStats
from llmsched_env.decision.observation import ObservationEncoder
from llmsched_env.decision.policy import Policy
from llmsched_env.sim.simulator import Simulator

__all__ = ["FALLBACK_SHARE", "ServeOptions", "decision_loop", "decision_metrics", "serve", "serving"]

FALLBACK_SHARE = "fallback_share"  # the metric: decisions taken from the fallback / all decisions (0 with none)


@dataclass(frozen=True)
class ServeOptions:
    """How the serving loop runs a policy: each decision held for ``iterations_per_step`` iterations (as the
    exported policy was trained), a decision later than ``policy_timeout_s`` replaced by the fallback's
    (``deadline_mode``: how the deadline is enforced, ``decision.decider.TimedDecider``; None: no deadline, for a
    planner whose planning costs no simulated time), the engine and the token
    bookkeeping checked after every iteration with ``check_invariants``, and a ``RuntimeError`` past
    ``max_iterations`` (a loop that does not drain). ``ValueError`` for a bad value."""

    iterations_per_step: int = 1
    policy_timeout_s: float | None = 0.1
    check_invariants: bool = False
    max_iterations: int = 10_000_000
    deadline_mode: str = "auto"

    def __post_init__(self) -> None:
        if self.iterations_per_step < 1:
            raise ValueError(f"iterations_per_step must be >= 1, got {self.iterations_per_step}")
        if self.policy_timeout_s is not None and not self.policy_timeout_s > 0:
            raise ValueError(f"policy_timeout_s must be > 0, got {self.policy_timeout_s}")


def serve(
    runtime: Simulator,
    policy: Policy,
    encoder: ObservationEncoder,
    spec: ActionSpec,
    fallback: Policy,
    options: ServeOptions = ServeOptions(),
) -> tuple[dict[str, float], DecisionStats]:
    """Run ``runtime`` until every request has finished or been rejected; return its metrics (with the decision
    statistics' ``policy_*`` columns and ``fallback_share``: ``decision_metrics``) and the statistics."""
    loop = decision_loop(policy, encoder, spec, fallback, options)
    for _ in serving(runtime, loop, options):
        pass
    metrics = runtime.metrics()
    metrics.update(decision_metrics(loop.stats))
    return metrics, loop.stats


def decision_metrics(stats: DecisionStats) -> dict[str, float]:
    """The metrics columns of a serving loop's ``stats``: ``as_metrics``'s ``policy_*`` counts and
    ``FALLBACK_SHARE``, the share of the decisions that came from the fallback (a policy that raised, was late
    or gave a malformed action)."""
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
    """``serve``'s loop one decision at a time: yields after each decision and the iterations it held, until
    ``runtime`` is done, counting into ``loop.stats``. Lets a caller interleave several serving loops (the
    fidelity report's lockstep calibration). The loop's deadline worker, if any, is stopped at the end."""
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
