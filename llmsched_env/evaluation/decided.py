"""Capacity probes that stop once decided: the runs of one (scenario, load, policy) cell, played a step at a time
side by side until their mean SLO attainment is certainly at or above the target, or certainly below it.

A request's outcome, once known, never changes (``EnvBase.slo_tally``: met when it finishes within its SLO,
missed when it is rejected, finishes late, or passes its TTFT deadline without a first token), so a window of
``n`` requests of which ``met`` have met and ``missed`` have missed ends with an attainment in
``[met / n, (n - missed) / n]``. The cell stops when the mean of the lower ends reaches the target or the mean of
the upper ends falls below it: the same verdict the whole runs would give (the search compares the mean with the
target in the same floating-point operations, which are monotone), so a search's capacities do not change.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from llmsched_env.decision.policy_spec import PolicySpec
from llmsched_env.envs.episode import DirectEpisode
from llmsched_env.evaluation.config import AnyScenario, EvalConfig, Row
from llmsched_env.evaluation.grid import cell_row, start_episode
from llmsched_env.evaluation.identity import TRAJECTORY, trajectory_fingerprint
from llmsched_env.evaluation.sustained import env_windows

__all__ = ["HIGH", "LOW", "ProbeCell", "attainment_bounds"]

LOW, HIGH = "slo_attainment_low", "slo_attainment_high"  # a stopped run's bounds on its attainment


def attainment_bounds(row: Row) -> tuple[float, float]:
    """A probe run's attainment as an interval: its bounds if it stopped early, else its attainment twice."""
    if LOW in row:
        return float(row[LOW]), float(row[HIGH])
    value = float(row["slo_attainment"])
    return value, value


class ProbeCell:
    """The simulated runs of one (scenario, load, policy) cell over ``seeds`` (not the runtime's), started now:
    ``decide(target)`` plays them side by side until their mean attainment is decided against ``target``;
    ``finish()`` plays each on to its end. ``close()`` when done with it."""

    def __init__(
        self, config: EvalConfig, scenario: AnyScenario, load: float, policy: PolicySpec, seeds: Sequence[int]
    ) -> None:
        self.scenario, self.load, self.policy, self.seeds = scenario, load, policy, tuple(seeds)
        self.envs = [config.make_env(scenario, load, policy.iterations_per_step, policy.schema) for _ in seeds]
        try:
            self.windows = env_windows(self.envs[0], scenario.name)
            self.runs = [start_episode(config, policy, env, seed) for env, seed in zip(self.envs, seeds, strict=True)]
        except BaseException:
            self.close()
            raise
        self.walls = [0.0] * len(self.runs)
        k = len(self.runs)
        self.low, self.high = [0.0] * k, [1.0] * k

    def _advance(self, i: int) -> bool:
        """Run ``i`` on until one more request's outcome is known (or its end); whether it has ended."""
        t0 = time.perf_counter()
        ended = self.runs[i].advance()
        self.walls[i] += time.perf_counter() - t0
        if ended:
            metrics = self.runs[i].metrics
            assert metrics is not None
            self.low[i] = self.high[i] = float(metrics["slo_attainment"])
        else:
            n, met, missed = self.runs[i].tally()
            self.low[i], self.high[i] = met / n, (n - missed) / n
        return ended

    def decide(self, target: float) -> list[Row]:
        """Play until the mean attainment is certainly ``>= target`` or ``< target`` (or every run has ended); the
        rows: a run that ended has its full row, one stopped early only what it determines (``num_requests``,
        ``num_met``, ``num_missed``, ``slo_attainment_low`` / ``_high``, ``stopped_early``)."""
        active = [i for i, run in enumerate(self.runs) if not run.done]
        while active:
            for i in tuple(active):
                if self._advance(i):
                    active.remove(i)
                if _mean_at_least(self.low, target) or not _mean_at_least(self.high, target):
                    return self.rows()
        return self.rows()

    def finish(self) -> list[Row]:
        """Play every run to its end; their full rows."""
        for i, run in enumerate(self.runs):
            while not run.done:
                self._advance(i)
        return self.rows()

    def rows(self) -> list[Row]:
        """Each run's row as it stands (``decide``)."""
        out = []
        for i, (run, seed) in enumerate(zip(self.runs, self.seeds, strict=True)):
            u: Any = run.env.unwrapped
            core = u.sim if getattr(u, "sim", None) is not None else u.cluster
            if run.metrics is not None:
                measured: dict[str, Any] = run.metrics
            else:  # stopped early: only what the run determines
                n, met, missed = run.tally()
                measured = {"num_requests": float(n), "num_met": float(met), "num_missed": float(missed),
                            LOW: self.low[i], HIGH: self.high[i], "stopped_early": True}  # fmt: skip
            row = cell_row(self.scenario, self.load, self.policy, seed, self.windows, measured, self.walls[i])
            row[TRAJECTORY] = trajectory_fingerprint(core)
            out.append(row)
        return out

    def close(self) -> None:
        for run in getattr(self, "runs", ()):
            if isinstance(run, DirectEpisode):
                run.loop.close()
        for env in self.envs:
            env.close()


def _mean_at_least(values: list[float], target: float) -> bool:
    """``float(np.mean(values)) >= target``, as the search compares; a plain sum settles the clear cases."""
    rough = sum(values) / len(values)  # within a few ulps of np.mean's
    if abs(rough - target) > 1e-9:
        return rough > target
    return float(np.mean(values)) >= target
