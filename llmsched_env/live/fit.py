"""A cost model fitted to a live vLLM server's engine steps (``steps.jsonl``). What a step costs (``DURATIONS``):
``period`` (default: from one ``schedule()`` start to the next, for a busy step), ``step`` (``t3 - t0``) or
``model`` (``t2 - t1`` plus the median rest); empty steps left out. ``step_breakdown``: where a period goes.
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
    """``(step, next step, period_s)`` of every non-empty busy step followed by one, within each log."""
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
    """Cost-model samples of one step log or several (no period spans two), each step priced by ``duration``."""
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


def fit_live_cost_model(steps: StepLogs, duration: str = "period", concave_decodes: bool = False,
                        match_total: bool = True, name: str = "live") -> LinearCostModel:  # fmt: skip
    """``LinearCostModel.fit`` to ``step_samples(steps, duration)``; ``match_total`` scales it to the samples' total.
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
    """``fit_report``'s errors of ``model`` on the steps, their number, measured over predicted time."""
    samples = step_samples(steps, duration)
    if not samples:
        raise ValueError(f"no usable steps to report on ({duration})")
    report = {"num_steps": float(sum(len(log) for log in _logs(steps))), **fit_report(model, samples)}
    report["measured_over_predicted"] = _measured_over_predicted(model, samples)
    return report


def step_breakdown(steps: StepLogs) -> dict[str, float]:
    """Medians of each part of a busy step and of its period, with ``num_busy_steps``; zeros without one."""
    busy = _periods(_logs(steps))
    parts = {
        "schedule_s": [s.t1_s - s.t0_s for s, _, _ in busy], "model_s": [s.t2_s - s.t1_s for s, _, _ in busy],
        "update_s": [s.t3_s - s.t2_s for s, _, _ in busy], "between_s": [nxt.t0_s - s.t3_s for s, nxt, _ in busy],
        "period_s": [p for _, _, p in busy],
    }  # fmt: skip
    out = {"num_busy_steps": float(len(busy))}
    out.update({k: float(np.median(v)) if v else 0.0 for k, v in parts.items()})
    return out
