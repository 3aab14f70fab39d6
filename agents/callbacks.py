"""Training callbacks: domain metrics to TensorBoard (tags in docs/training.md) and periodic evaluation against the
best baseline.
"""

from __future__ import annotations

import json
import math
import sys
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeGuard

import gymnasium as gym
import numpy as np
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.logger import Logger
from stable_baselines3.common.on_policy_algorithm import OnPolicyAlgorithm
from tqdm import tqdm

import baselines
from agents.config import finite_json
from agents.sb3 import SB3Policy
from llmsched_env.common.files import CONFIG_BYTES, FileRefusedError, parse_json, read_text
from llmsched_env.common.outputs import replaced_atomically, write_text_atomically
from llmsched_env.envs.episode import run_episode
from llmsched_env.evaluation.progress import Progress, status

BEST_NAME = "best.json"  # the best evaluation so far, next to best_model.zip: what --resume must beat
HISTORY_NAME = "eval_history.json"  # every evaluation so far: what --resume carries on
CLONE_RUN = "clone"  # tb/clone: the cloning's events, on an axis of their own (cloning epochs), beside tb/run_N

# Episode metrics logged under episode/ (training) and eval/ (evaluation), plus every tenant/NAME/... key
# ending in one of TENANT_SUFFIXES.
EPISODE_KEYS = ("slo_attainment", "goodput_rps", "ttft_p50_s", "ttft_p99_s", "tpot_p50_s", "tpot_p99_s",
                "jain_fairness", "kv_usage_mean", "preemptions", "rejection_rate")  # fmt: skip
TENANT_SUFFIXES = ("/slo_attainment", "/service")
# the generalist's evaluation per library scenario: eval_scenario/SCENARIO/KEY
SCENARIO_KEYS = ("slo_attainment", "ttft_p50_s", "ttft_p99_s", "tpot_p50_s", "tpot_p99_s")


def log_metrics(
    record: Callable[[str, float], None],
    prefix: str,
    metrics: Mapping[str, float],
    tenants: Collection[str] | None = None,
) -> None:
    """Record ``metrics``' ``EPISODE_KEYS`` and the figures of ``tenants`` (None: all) under ``prefix/``."""
    for key in EPISODE_KEYS:
        if key in metrics:
            record(f"{prefix}/{key}", float(metrics[key]))
    for key, value in metrics.items():
        tenant_key = key.startswith("tenant/") and key.endswith(TENANT_SUFFIXES)
        if tenant_key and (tenants is None or key.split("/")[1] in tenants):
            record(f"{prefix}/{key}", float(value))


def mean_metrics(runs: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """Per key, the mean over the runs that hold it (a tenant's key is in the runs of its scenario only)."""
    values: dict[str, list[float]] = {}
    for run in runs:
        for key, value in run.items():
            values.setdefault(key, []).append(float(value))
    return {key: float(np.mean(v)) for key, v in values.items()}


def write_scalars(logger: Logger, values: Mapping[str, float], step: int) -> None:
    """Write ``values`` to ``logger``'s outputs at ``step`` now, leaving what SB3 recorded but not dumped pending."""
    if not values:
        return
    scalars = {key: float(value) for key, value in values.items()}
    excluded: dict[str, tuple[str, ...]] = {key: () for key in scalars}
    for output in logger.output_formats:
        output.write(scalars, excluded, int(step))


class EpisodeMetricsCallback(BaseCallback):
    """Log each finished training episode's metrics and the figures of ``tenants`` (None: all)."""

    def __init__(self, tenants: Collection[str] | None = None) -> None:
        super().__init__()
        self.tenants = None if tenants is None else frozenset(tenants)

    def _on_step(self) -> bool:
        for info in self.locals.get("infos", ()):
            metrics = info.get("metrics")
            if metrics is not None:
                log_metrics(self.logger.record_mean, "episode", metrics, self.tenants)
                self.logger.record_mean("episode/load", float(info.get("load", float("nan"))))
        return True


class UpdateLogCallback(BaseCallback):
    """Write what an on-policy update records at the step of the rollout it learnt from, not a dump later."""

    MARK = "llmsched/rollout_not_dumped"  # pending from a rollout's end until SB3 dumps (which clears it)
    _NOWHERE = ("stdout", "log", "json", "csv", "tensorboard")  # the mark is written to no output

    def __init__(self) -> None:
        super().__init__()
        self._before_update: set[str] = set()  # what was pending at the rollout's end, the mark included

    def _on_step(self) -> bool:
        return True

    def _on_rollout_end(self) -> None:
        if isinstance(self.model, OnPolicyAlgorithm):
            self.logger.record(self.MARK, 1, exclude=self._NOWHERE)
            self._before_update = set(self.logger.name_to_value)

    def _on_rollout_start(self) -> None:  # the update on the previous rollout has just been made
        if not isinstance(self.model, OnPolicyAlgorithm):
            return
        if self.MARK in self.logger.name_to_value:  # not dumped: the update's figures have no step to go with
            for key in set(self.logger.name_to_value) - self._before_update:
                self._forget(key)
            self._forget(self.MARK)
        elif self.logger.name_to_value:
            self.logger.dump(self.num_timesteps)

    def _on_training_end(self) -> None:  # the last update, and a last rollout SB3 did not dump
        if isinstance(self.model, OnPolicyAlgorithm):
            self._forget(self.MARK)
            if self.logger.name_to_value:
                self.logger.dump(self.num_timesteps)

    def _forget(self, key: str) -> None:
        for pending in (self.logger.name_to_value, self.logger.name_to_count, self.logger.name_to_excluded):
            pending.pop(key, None)


class PeriodicEvalCallback(BaseCallback):
    """Every ``eval_freq`` calls, evaluate the policy on the val ``seeds`` against the best baseline; keep the best."""

    def __init__(
        self,
        make_env: Callable[[bool], gym.Env],  # (for the agent?) -> evaluation env
        baseline_names: Sequence[str],
        seeds: Sequence[int],
        eval_freq: int,
        out_dir: Path,
        on_best: Callable[[Any], None] | None = None,
        progress: bool = False,
        best_attainment: float = -np.inf,
        eval_setup: dict[str, Any] | None = None,
        per_scenario: bool = False,
    ) -> None:
        super().__init__()
        self.make_env = make_env
        self.baseline_names = list(baseline_names)
        self.seeds = list(seeds)
        self.eval_freq = eval_freq
        self.out_dir = out_dir
        self.on_best = on_best
        self.progress = progress
        self.best_attainment = float(best_attainment)
        self.eval_setup = dict(eval_setup or {})
        self.per_scenario = per_scenario
        self.baseline_attainment: dict[str, float] = {}
        # per_scenario: scenario -> baseline -> its attainment on that scenario's val episodes
        self.baseline_by_scenario: dict[str, dict[str, list[float]]] = {}
        # the latest evaluation's episodes: (scenario, metrics); scenario None unless per_scenario
        self.last_runs: list[tuple[str | None, dict[str, float]]] = []
        self.history: list[tuple[int, float]] = []
        self.baselines_wall_s = 0.0  # the baselines' evaluation, once
        self.eval_wall_s = 0.0  # every evaluation of the policy (the start policy's included)

    def _init_callback(self) -> None:
        t0 = time.perf_counter()
        env = self.make_env(False)  # baselines decide every engine iteration
        names, seeds = ", ".join(self.baseline_names), ", ".join(map(str, self.seeds))
        status(f"evaluating the baselines {names} on val seeds {seeds}", enabled=self.progress)
        total = len(self.baseline_names) * len(self.seeds)
        with Progress(total, "baselines", enabled=self.progress, unit="episode") as bar:
            for name in self.baseline_names:
                policy = baselines.per_workload(name, seed=0)
                runs = []
                for seed in self.seeds:
                    scenario, metrics = self._episode(env, policy, seed)
                    runs.append(metrics["slo_attainment"])
                    if scenario is not None:
                        by_name = self.baseline_by_scenario.setdefault(scenario, {})
                        by_name.setdefault(name, []).append(metrics["slo_attainment"])
                    bar.update()
                self.baseline_attainment[name] = float(np.mean(runs))
        self._agent_env = self.make_env(True)  # the agent's own granularity (iterations_per_step, wrappers)
        self.baselines_wall_s = time.perf_counter() - t0

    def _episode(self, env: gym.Env, policy: Any, seed: int) -> tuple[str | None, dict[str, float]]:
        """One val episode's metrics, and its scenario when ``per_scenario`` (``LLMSchedMix-v0``'s draw)."""
        metrics = run_episode(env, policy, seed)
        workload = getattr(env.unwrapped, "workload", None) if self.per_scenario else None
        return (str(workload["scenario"]) if workload else None), metrics

    @property
    def best_baseline(self) -> tuple[str, float]:
        name = max(self.baseline_attainment, key=self.baseline_attainment.__getitem__)
        return name, self.baseline_attainment[name]

    def evaluate(self) -> float:
        """The policy's mean SLO attainment over the val episodes; their metrics are kept in ``last_runs``."""
        t0 = time.perf_counter()
        agent = SB3Policy(self.model)  # deterministic actions, with masks for MaskablePPO
        runs = []
        with Progress(len(self.seeds), "evaluation", enabled=self.progress, unit="episode") as bar:
            for seed in self.seeds:
                runs.append(self._episode(self._agent_env, agent, seed))
                bar.update()
        self.eval_wall_s += time.perf_counter() - t0
        self.last_runs = runs
        return float(np.mean([m["slo_attainment"] for _, m in runs]))

    def eval_scalars(self, attainment: float) -> dict[str, float]:
        """The TensorBoard scalars of an evaluation that scored ``attainment`` (its episodes: ``last_runs``)."""
        values: dict[str, float] = {}
        tenants: frozenset[str] | None = frozenset() if self.per_scenario else None  # generalist: eval_scenario/ only
        log_metrics(values.__setitem__, "eval", mean_metrics([m for _, m in self.last_runs]), tenants)
        by_scenario: dict[str, list[dict[str, float]]] = {}
        for scenario, metrics in self.last_runs:
            if scenario is not None:
                by_scenario.setdefault(scenario, []).append(metrics)
        for scenario, runs in by_scenario.items():
            mean = mean_metrics(runs)
            prefix = f"eval_scenario/{scenario}"
            values.update({f"{prefix}/{key}": mean[key] for key in SCENARIO_KEYS if key in mean})
            log_metrics(values.__setitem__, prefix, {k: v for k, v in mean.items() if k.startswith("tenant/")})
            theirs = self.baseline_by_scenario.get(scenario)
            if theirs:
                values[f"{prefix}/best_baseline_attainment"] = max(float(np.mean(v)) for v in theirs.values())
        _, base = self.best_baseline
        values["eval/slo_attainment"] = attainment  # what the console, the history and best.json say
        values["eval/best_baseline_attainment"] = base
        values["eval/attainment_over_best_baseline"] = attainment / base if base > 0 else float("nan")
        return values

    def _on_training_start(self) -> None:
        # A fresh run is evaluated before learning too, so a behaviour-cloned start (which acts like its
        # baseline) is a candidate for the best model and RL can only add to it.
        if self.eval_freq > 0 and self.model.num_timesteps == 0:
            seeds = ", ".join(map(str, self.seeds))
            status(f"evaluating the start policy on val seeds {seeds}", enabled=self.progress)
            self._evaluate_and_keep()

    def _on_step(self) -> bool:
        if self.eval_freq <= 0 or self.n_calls % self.eval_freq:
            return True
        self._evaluate_and_keep()
        return True

    def _evaluate_and_keep(self) -> None:
        self.last_runs = []
        attainment = self.evaluate()
        name, base = self.best_baseline
        write_scalars(self.logger, self.eval_scalars(attainment), self.num_timesteps)
        self.history.append((self.num_timesteps, attainment))
        record = {"eval_setup": self.eval_setup, "history": self.history}
        write_text_atomically(self.out_dir / HISTORY_NAME, finite_json(record) + "\n")
        if attainment > self.best_attainment:
            self.best_attainment = attainment
            with replaced_atomically(self.out_dir / "best_model.zip") as tmp:  # a failed save keeps the old best
                self.model.save(str(tmp))
            best = {"best_eval_attainment": attainment, "timesteps": int(self.num_timesteps), **self.eval_setup}
            write_text_atomically(self.out_dir / BEST_NAME, finite_json(best, indent=1) + "\n")
            if self.on_best is not None:
                self.on_best(self.model)
        if self.verbose:
            line = f"eval @ {self.num_timesteps}: attainment {attainment:.3f} (best baseline {name} {base:.3f})"
            tqdm.write(line, file=sys.stdout)  # on stdout, past the training's bar on stderr
            sys.stdout.flush()


def read_best(folder: Path, eval_setup: dict[str, Any], warn: bool = True) -> float | None:
    """The best attainment in ``best.json``; None without one or when measured on another ``eval_setup``."""
    path = folder / BEST_NAME
    if not path.exists():
        return None
    best = _read_record(path, "the best evaluation so far")
    value = best.get("best_eval_attainment") if isinstance(best, dict) else None
    if not _is_share(value):
        raise ValueError(f"{path}: 'best_eval_attainment' must be a finite number in [0, 1], got {value!r:.80}")
    recorded = {k: best.get(k) for k in eval_setup}
    if recorded != json.loads(json.dumps(eval_setup)):  # compared as JSON holds them (tuples are lists)
        if not warn:
            return None
        print(
            f"--resume: {path} was measured on {recorded}, this run evaluates on {eval_setup}; the scores do not "
            "compare, so this run's first evaluation replaces best_model.zip",
            file=sys.stderr,
            flush=True,
        )
        return None
    return float(value)


def _read_record(path: Path, what: str) -> Any:
    """``path``'s JSON; ``ValueError`` (one line naming the file and ``what`` it holds) when it cannot be read."""
    try:
        return parse_json(read_text(path, CONFIG_BYTES))
    except FileRefusedError:  # a FIFO, a device, a file over the limit: one line naming it already
        raise
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ValueError(f"{path}: cannot read {what}: {exc}") from None


def _is_share(value: Any) -> TypeGuard[float]:
    """Whether ``value`` is an attainment an evaluation gives: a finite number in [0, 1]."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and 0 <= value <= 1


def _history_problem(entry: Any, after: int | None) -> str | None:
    """Why ``entry`` is no ``[step, attainment]`` an evaluation writes after step ``after``; None if it is."""
    if not isinstance(entry, list) or len(entry) != 2:
        return "expected [step, attainment]"
    step, value = entry
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        return f"the step must be an integer >= 0, got {step!r:.40}"
    if after is not None and step <= after:
        return f"the steps must increase, and step {step} comes after step {after}"
    if not _is_share(value):
        return f"the attainment must be a finite number in [0, 1], got {value!r:.40}"
    return None


def read_history(folder: Path, eval_setup: dict[str, Any], upto: int, warn: bool = True) -> list[tuple[int, float]]:
    """The evaluations in ``eval_history.json`` up to step ``upto`` (none for another ``eval_setup``)."""
    path = folder / HISTORY_NAME
    if not path.exists():
        if warn and upto > 0:  # a resumed run whose record was removed: its earlier evaluations are gone
            print(
                f"--resume: {path} is missing: the evaluations before step {upto} are lost, and summary.json's "
                f"eval_history starts with this run's; {folder / BEST_NAME} still holds the best so far",
                file=sys.stderr,
                flush=True,
            )
        return []
    record = _read_record(path, "the evaluations so far")
    entries = record.get("history") if isinstance(record, dict) else None
    if not isinstance(entries, list) or not isinstance(record.get("eval_setup"), dict):
        raise ValueError(f"{path}: expected an object with 'eval_setup' and 'history' ([[step, attainment], ...])")
    history: list[tuple[int, float]] = []
    for index, entry in enumerate(entries):
        problem = _history_problem(entry, history[-1][0] if history else None)
        if problem is not None:
            raise ValueError(
                f"{path}: history entry {index} ({json.dumps(entry)[:80]}): {problem}, which no evaluation writes: "
                "the file was changed; restore it, or remove it to resume with a new history"
            )
        history.append((entry[0], float(entry[1])))
    if record["eval_setup"] != json.loads(json.dumps(eval_setup)):
        if warn:
            print(f"--resume: {path} was measured on another evaluation setup; starting a new history", file=sys.stderr)
        return []
    return [(step, value) for step, value in history if step <= upto]


class ProgressBarCallback(BaseCallback):
    """When training starts, a status line and a bar over its steps on stderr (in place of SB3's on stdout)."""

    def __init__(self, message: str = "", enabled: bool = True) -> None:
        super().__init__()
        self.message = message
        self.enabled = enabled
        self._bar: Progress | None = None

    def _on_training_start(self) -> None:
        if self.message:
            status(self.message, enabled=self.enabled)
        total = int(self.locals["total_timesteps"]) - self.model.num_timesteps
        self._bar = Progress(total, "training", enabled=self.enabled, unit="step")

    def _on_step(self) -> bool:
        assert self._bar is not None
        self._bar.update(self.training_env.num_envs)
        return True

    def _on_training_end(self) -> None:
        if self._bar is not None:
            self._bar.close()
