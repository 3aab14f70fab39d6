"""A cost model fitted to a live vLLM server's engine steps (``steps.jsonl``), for the simulator to replay with.

Which duration of a step the simulator's clock should advance by (``DURATIONS``):

- ``period`` (the default): from this ``schedule()`` start to the next one, for a step the engine went
  straight on from (``busy``). It is everything the engine loop spends per iteration: scheduling, the model,
  ``update_from_output``, handing the outputs to the API server's queue and taking in new requests. The
  simulator's iterations follow each other back to back, so under load its clock keeps the server's pace
  only if a step is priced at its period. ``step`` leaves out the time between ``t3`` and the next ``t0``, and
  ``model`` makes all but the model a constant, while that time may grow with the batch (one output per
  request to hand over), which a fitted per-sequence coefficient absorbs (``step_breakdown`` measures the
  parts on a log). A step followed by an idle gap (``busy`` false) has no period and is left out, as is the
  last step.
- ``step``: ``t3 - t0``, schedule through update: misses the loop's time between steps.
- ``model``: ``t2 - t1`` plus one constant, the median over busy steps of ``period - (t2 - t1)``: the model
  time with the rest of the loop as a fixed overhead.

Empty steps (no token scheduled) are always left out. ``step_breakdown`` says where a period's time goes.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import cast

import numpy as np

from llmsched_env.costs.linear import LinearCostModel, fit_report
from llmsched_env.live.records import StepRecord

__all__ = [
    "DURATIONS", "Sample", "StepLogs", "fit_live_cost_model", "live_fit_report", "step_breakdown", "step_samples",
]  # fmt: skip

DURATIONS = ("period", "step", "model")
Sample = tuple[int, int, int, float, float]  # prefill tokens, decode seqs, KV tokens, attention pairs, seconds


StepLogs = Sequence[StepRecord] | Sequence[Sequence[StepRecord]]  # one step log, or several (one per run)


def _logs(steps: StepLogs) -> list[Sequence[StepRecord]]:
    """``steps`` as a list of step logs: one log, or each of several."""
    if steps and not isinstance(steps[0], StepRecord):  # so every item is a log
        return list(cast("Sequence[Sequence[StepRecord]]", steps))
    return [cast("Sequence[StepRecord]", steps)]


def _periods(logs: list[Sequence[StepRecord]]) -> list[tuple[StepRecord, StepRecord, float]]:
    """``(step, next step, period_s)`` of every non-empty busy step that has a next step starting after it,
    within each log."""
    out = []
    for log in logs:
        for s, nxt in itertools.pairwise(log):
            period = nxt.t0_s - s.t0_s
            if s.busy and not s.is_empty and period > 0:
                out.append((s, nxt, period))
    return out


def _sample(s: StepRecord, seconds: float) -> Sample:
    return (s.prefill_tokens, s.decode_seqs, s.kv_tokens, s.attn_pairs, seconds)


def step_samples(steps: StepLogs, duration: str = "period") -> list[Sample]:
    """Cost-model samples ``(num_prefill_tokens, num_decode_seqs, num_kv_tokens, prefill_attn_pairs, seconds)``
    of a step log in time order, or of several (a list of logs: no period spans two), each step priced by
    ``duration`` (see the module docstring)."""
    if duration not in DURATIONS:
        raise ValueError(f"duration must be one of {', '.join(DURATIONS)}, got {duration!r}")
    logs = _logs(steps)
    busy = _periods(logs)
    if duration == "period":
        return [_sample(s, p) for s, _, p in busy]
    work = [s for log in logs for s in log if not s.is_empty]
    if duration == "step":
        return [_sample(s, s.t3_s - s.t0_s) for s in work if s.t3_s > s.t0_s]
    rest = [p - (s.t2_s - s.t1_s) for s, _, p in busy]
    if not rest:  # no busy step: the time outside the model within the step is all there is to see
        rest = [(s.t3_s - s.t0_s) - (s.t2_s - s.t1_s) for s in work]
    overhead = float(np.median(rest)) if rest else 0.0
    timed = ((s, s.t2_s - s.t1_s + overhead) for s in work)
    return [_sample(s, t) for s, t in timed if t > 0]


def fit_live_cost_model(
    steps: StepLogs,
    duration: str = "period",
    concave_decodes: bool = False,
    match_total: bool = True,
    name: str = "live",
) -> LinearCostModel:
    """``LinearCostModel.fit`` (non-negative least squares on relative errors) to ``step_samples(steps,
    duration)`` (one step log, or a list of several). A fit on relative errors prices the typical step, while
    latencies add up every step, slow ones too (a collection, another process); so with ``match_total`` the
    model is then scaled so that its total over the samples equals their measured total, and the simulator's
    clock runs at the server's mean speed. ``concave_decodes`` also fits the ``log2(1 + decodes)`` term.
    ``ValueError`` with too few samples."""
    samples = step_samples(steps, duration)
    if len(samples) < 5 + concave_decodes:
        raise ValueError(
            f"only {len(samples)} usable steps to fit ({duration}: non-empty"
            f"{', busy' if duration == 'period' else ''}); a live cost model needs at least {5 + concave_decodes}"
        )
    description = f"fitted to {len(samples)} live vLLM steps ({duration})"
    model = LinearCostModel.fit(samples, name=name, description=description, concave_decodes=concave_decodes)
    if match_total:
        model = model.scaled(_measured_over_predicted(model, samples))
    return model


def _measured_over_predicted(model: LinearCostModel, samples: Sequence[Sample]) -> float:
    predicted = sum(model.step_time_s(int(p), int(d), int(kv), q) for p, d, kv, q, _ in samples)
    return sum(s[4] for s in samples) / predicted


def live_fit_report(model: LinearCostModel, steps: StepLogs, duration: str = "period") -> dict[str, float]:
    """``fit_report``'s relative errors of ``model`` on ``step_samples(steps, duration)``, with the number of
    steps in the log(s) and the samples' measured over predicted total time (1.0 for a ``match_total`` fit on
    the same steps)."""
    samples = step_samples(steps, duration)
    if not samples:
        raise ValueError(f"no usable steps to report on ({duration})")
    report = {"num_steps": float(sum(len(log) for log in _logs(steps))), **fit_report(model, samples)}
    report["measured_over_predicted"] = _measured_over_predicted(model, samples)
    return report


def step_breakdown(steps: StepLogs) -> dict[str, float]:
    """Where the time of a busy step goes, as medians over the non-empty busy steps (seconds): ``schedule_s``
    (``t1 - t0``), ``model_s`` (``t2 - t1``), ``update_s`` (``t3 - t2``), ``between_s`` (``t3`` to the next
    ``t0``) and ``period_s``; with ``num_busy_steps``. Zeros when there is no busy step."""
    busy = _periods(_logs(steps))
    parts = {
        "schedule_s": [s.t1_s - s.t0_s for s, _, _ in busy],
        "model_s": [s.t2_s - s.t1_s for s, _, _ in busy],
        "update_s": [s.t3_s - s.t2_s for s, _, _ in busy],
        "between_s": [nxt.t0_s - s.t3_s for s, nxt, _ in busy],
        "period_s": [p for _, _, p in busy],
    }
    out = {"num_busy_steps": float(len(busy))}
    out.update({k: float(np.median(v)) if v else 0.0 for k, v in parts.items()})
    return out
