"""Training callbacks: domain metrics to TensorBoard, periodic evaluation against the best baseline."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from stable_baselines3.common.callbacks import BaseCallback

import baselines
from agents.sb3 import SB3Policy
from llmsched_env.envs.episode import run_episode

__all__ = ["EPISODE_KEYS", "EpisodeMetricsCallback", "PeriodicEvalCallback"]

# Episode metrics logged under episode/ (training) and eval/ (evaluation), plus every tenant/NAME/... key
# ending in one of TENANT_SUFFIXES.
EPISODE_KEYS = (
    "slo_attainment",
    "goodput_rps",
    "ttft_p99_s",
    "tpot_p99_s",
    "jain_fairness",
    "kv_usage_mean",
    "preemptions",
    "rejection_rate",
)
TENANT_SUFFIXES = ("/slo_attainment", "/service")


def log_metrics(record: Callable[[str, float], None], prefix: str, metrics: dict[str, float]) -> None:
    for key in EPISODE_KEYS:
        if key in metrics:
            record(f"{prefix}/{key}", float(metrics[key]))
    for key, value in metrics.items():
        if key.startswith("tenant/") and key.endswith(TENANT_SUFFIXES):
            record(f"{prefix}/{key}", float(value))


class EpisodeMetricsCallback(BaseCallback):
    """At each finished training episode, log its SLO attainment, goodput, TTFT/TPOT p99, Jain's index, KV
    usage, preemptions, rejections and per-tenant figures (averaged over the episodes of a rollout)."""

    def _on_step(self) -> bool:
        for info in self.locals.get("infos", ()):
            metrics = info.get("metrics")
            if metrics is not None:
                log_metrics(self.logger.record_mean, "episode", metrics)
                self.logger.record_mean("episode/load", float(info.get("load", float("nan"))))
        return True


class PeriodicEvalCallback(BaseCallback):
    """Every ``eval_freq`` calls, run the deterministic policy on ``seeds`` episodes of the evaluation split,
    log ``eval/*`` and the ratio to the best baseline's attainment on the same episodes, and keep the best
    model (``best_model.zip``, and ``on_best(model)`` e.g. to export it)."""

    def __init__(
        self,
        make_env: Callable[[bool], gym.Env],  # (for the agent?) -> evaluation env
        baseline_names: Sequence[str],
        seeds: Sequence[int],
        eval_freq: int,
        out_dir: Path,
        on_best: Callable[[Any], None] | None = None,
    ) -> None:
        super().__init__()
        self.make_env = make_env
        self.baseline_names = list(baseline_names)
        self.seeds = list(seeds)
        self.eval_freq = eval_freq
        self.out_dir = out_dir
        self.on_best = on_best
        self.best_attainment = -np.inf
        self.baseline_attainment: dict[str, float] = {}
        self.history: list[tuple[int, float]] = []

    def _init_callback(self) -> None:
        env = self.make_env(False)  # baselines decide every engine iteration
        ctx = env.unwrapped.policy_context()  # type: ignore[attr-defined]
        for name in self.baseline_names:
            policy = baselines.make_for(name, ctx, seed=0)
            runs = [run_episode(env, policy, seed)["slo_attainment"] for seed in self.seeds]
            self.baseline_attainment[name] = float(np.mean(runs))
        self._agent_env = self.make_env(True)  # the agent's own granularity (iterations_per_step, wrappers)

    @property
    def best_baseline(self) -> tuple[str, float]:
        name = max(self.baseline_attainment, key=self.baseline_attainment.__getitem__)
        return name, self.baseline_attainment[name]

    def evaluate(self) -> float:
        agent = SB3Policy(self.model)  # deterministic actions, with masks for MaskablePPO
        runs = [run_episode(self._agent_env, agent, seed) for seed in self.seeds]
        for m in runs:
            log_metrics(self.logger.record_mean, "eval", m)
        return float(np.mean([m["slo_attainment"] for m in runs]))

    def _on_training_start(self) -> None:
        # A fresh run is evaluated before learning too, so a behaviour-cloned start (which acts like its
        # baseline) is a candidate for the best model and RL can only add to it.
        if self.eval_freq > 0 and self.model.num_timesteps == 0:
            self._evaluate_and_keep()

    def _on_step(self) -> bool:
        if self.eval_freq <= 0 or self.n_calls % self.eval_freq:
            return True
        self._evaluate_and_keep()
        return True

    def _evaluate_and_keep(self) -> None:
        attainment = self.evaluate()
        name, base = self.best_baseline
        self.logger.record("eval/mean_slo_attainment", attainment)
        self.logger.record("eval/best_baseline_attainment", base)
        self.logger.record("eval/attainment_over_best_baseline", attainment / base if base > 0 else float("nan"))
        self.history.append((self.num_timesteps, attainment))
        if attainment > self.best_attainment:
            self.best_attainment = attainment
            self.model.save(str(self.out_dir / "best_model.zip"))
            if self.on_best is not None:
                self.on_best(self.model)
        if self.verbose:
            print(f"eval @ {self.num_timesteps}: attainment {attainment:.3f} (best baseline {name} {base:.3f})")
