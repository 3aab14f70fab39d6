"""Tune a scenario's static knobs on its ``val`` split: the search behind the ``tuned`` baseline (probe load, a race
over paired val windows, a raced local search, a confirmation on fresh val windows, capacity;
docs/baselines-and-metrics.md). Every episode runs on ``val`` (``test`` is never built); scores are deterministic
(ties: goodput, then the earlier candidate).
"""

from __future__ import annotations

import datetime
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from llmsched_env.common.checks import check_int, check_seed, check_seeds
from llmsched_env.decision.actions import ActionSpec
from llmsched_env.decision.planners.space import STATIC_HEURISTICS, neighbours, random_candidates, static_decision
from llmsched_env.decision.planners.tuned import (
    TUNE_COMMAND,
    TunedTable,
    settings_of,
    trace_keys,
    trace_table,
    trace_tune_command,
)
from llmsched_env.decision.policy_spec import PolicySpec, resolve_policy
from llmsched_env.engine.batch import Decision
from llmsched_env.evaluation.capacity import extended_size, find_capacity, sustained_size
from llmsched_env.evaluation.config import EvalConfig, InputError
from llmsched_env.evaluation.grid import run_cell
from llmsched_env.evaluation.racing import paired_margin, ranked, survivors
from llmsched_env.evaluation.sustained import ScenarioWindows, env_windows
from llmsched_env.workloads.scenarios import Scenario, TraceSource

__all__ = ["Pick", "TuneConfig", "TuneResult", "pick_setting", "trace_policies", "tune_scenario"]

SPLIT = "val"  # every choice is made on val (docs/results.md, the protocol); test is for reported figures
MAX_CANDIDATES = 10_000  # random settings per search (the default 48)
MAX_ROUNDS = 100  # local-search rounds (the default 2; a search stops as soon as no move improves)
FIRST_RUNG = 2  # val windows every setting of a race plays before any is dropped; then one more a rung
CONFIRM_TOP = 3  # settings the confirmation plays on fresh val windows (as many as the search's seeds)
Score = tuple[float, float]  # (mean SLO attainment, mean goodput) over the seeds


@dataclass(frozen=True)
class TuneConfig:
    """How to tune (docs/baselines-and-metrics.md) and the episode options; ``ValueError`` naming the field."""

    references: Sequence[str] = ("slo_aware", "sjf")
    seeds: Sequence[int] = (0, 1, 2, 3, 4)
    candidates: int = 48
    seed: int = 0
    rounds: int = 2
    racing: bool = True
    num_requests: int | None = None
    cost_model: str | None = None
    engine_limits: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        for name in ("references", "seeds"):
            value = getattr(self, name)
            if isinstance(value, str) or not value or len(set(value)) != len(value):
                raise ValueError(f"TuneConfig.{name} must be a non-empty list without repeats, got {value!r}")
            object.__setattr__(self, name, tuple(value))
        if not isinstance(self.racing, bool):
            raise ValueError(f"TuneConfig.racing must be True or False, got {self.racing!r}")
        check_seeds("TuneConfig", "seeds", self.seeds)
        check_seed("TuneConfig", "seed", self.seed)
        for name in ("candidates", "rounds"):
            check_int("TuneConfig", name, getattr(self, name), 0)
        for name, most in (("candidates", MAX_CANDIDATES), ("rounds", MAX_ROUNDS)):
            if getattr(self, name) > most:  # every candidate is built up front: a typo must not fill the memory
                raise ValueError(f"TuneConfig.{name} must be at most {most:,}, got {getattr(self, name):,}")

    def eval_config(self, scenario: Scenario | str, seeds: Sequence[int]) -> EvalConfig:
        """The ``EvalConfig`` of ``scenario`` on ``val`` with ``seeds`` and this config's episode options."""
        return EvalConfig(
            scenarios=[scenario],
            policies=list(self.references),
            seeds=list(seeds),
            split=SPLIT,
            num_requests=self.num_requests,
            cost_model=self.cost_model,
            engine_limits=self.engine_limits,
        )

    def command(self, scenario: str) -> str:
        """The command line that tunes ``scenario`` with this config (recorded in the table)."""
        words = [TUNE_COMMAND, "--scenarios", scenario, "--reference", ",".join(self.references)]
        words += ["--seeds", ",".join(map(str, self.seeds)), "--candidates", str(self.candidates)]
        if self.candidates:  # the seed draws the random candidates: llmsched-tune refuses it without any
            words += ["--seed", str(self.seed)]
        words += ["--rounds", str(self.rounds)]
        if not self.racing:
            words += ["--no-racing"]
        if self.num_requests is not None:
            words += ["--num-requests", str(self.num_requests)]
        if self.cost_model is not None:
            words += ["--cost-model", self.cost_model]
        for name, value in sorted((self.engine_limits or {}).items()):
            words += [f"--{name.replace('_', '-')}", str(value)]
        return " ".join(words)


@dataclass(frozen=True)
class TuneResult:
    """One scenario's table ``entry`` (``settings``, ``provenance``), the episodes it ran and its wall time."""

    scenario: str
    entry: dict[str, Any]
    num_episodes: int
    wall_s: float


@dataclass(frozen=True)
class Pick:
    """A search's pick: the ``setting``, its ``label``, the probe ``load``, its val ``score`` there on the search's
    seeds, the ``confirm`` record (its margin to the runner-up on fresh windows) and the settings raced and dropped."""

    setting: Decision
    label: str
    load: float
    score: Score
    confirm: dict[str, Any]
    num_settings: int
    num_dropped: int


@dataclass
class _Search:
    """The steps of one scenario's search; every (setting, seed) episode runs once and is remembered."""

    config: TuneConfig
    scenario: Scenario
    log: Callable[[str], None]
    t0: float
    load: float = 1.0  # the probe load, once ``probe`` has found it
    max_sustained: float = math.inf  # the largest load at which the probe's val windows are sustained
    score_size: int | None = None  # generated traffic: the val windows' size at which the probe load is sustained
    num_episodes: int = 0
    num_dropped: int = 0  # settings a race dropped behind its leader with confidence
    probe_caps: dict[str, float] = field(default_factory=dict)  # the references' val capacities on the probe seeds
    cpu0: float = field(default_factory=time.process_time)  # this process's CPU seconds when the search began
    _results: dict[tuple[Decision, int], tuple[float, float]] = field(default_factory=dict)

    def say(self, text: str) -> None:
        elapsed, cpu = time.perf_counter() - self.t0, time.process_time() - self.cpu0
        self.log(f"{self.scenario.name}: {text}; {self.num_episodes} episodes, {elapsed:.0f} s ({cpu:.0f} s CPU)")

    def spec(self, d: Decision, name: str = "candidate") -> PolicySpec:
        """``d`` as the ``tuned`` baseline with a one-entry table: exactly what the shipped table will run."""
        table = TunedTable("<search>", {self.scenario.name: {"settings": settings_of(d), "provenance": {}}})
        return PolicySpec(name, baseline="tuned", table=table)

    def runs(self, d: Decision, seeds: Sequence[int]) -> list[tuple[float, float]]:
        """(attainment, goodput) of ``d`` at the probe load on the window of each of ``seeds``, in order."""
        missing = [s for s in seeds if (d, s) not in self._results]
        if missing:
            sized = self.config if self.score_size is None else replace(self.config, num_requests=self.score_size)
            cfg = sized.eval_config(self.scenario, missing)
            for row in run_cell(cfg, self.scenario, self.load, self.spec(d)).rows:
                self._results[(d, row["seed"])] = (row["slo_attainment"], row["goodput_rps"])
            self.num_episodes += len(missing)
        return [self._results[(d, s)] for s in seeds]

    def score(self, d: Decision, seeds: Sequence[int]) -> Score:
        """Mean attainment and goodput of ``d`` at the probe load over ``seeds``."""
        runs = self.runs(d, seeds)
        return float(np.mean([r[0] for r in runs])), float(np.mean([r[1] for r in runs]))

    def capacity(self, spec: PolicySpec | str, seeds: Sequence[int]) -> float:
        """The val capacity of ``spec`` on ``seeds`` (a trace's windows searched past their sustained load)."""
        cfg = self.config.eval_config(self.scenario, seeds)

        def count(_remaining: int) -> None:
            self.num_episodes += len(seeds)

        growable = self._val_windows[1] is not None
        row = find_capacity(cfg, self.scenario, spec, on_evaluation=count, sustained_only=growable, latency=False)
        if not growable:
            self.max_sustained = float(row["max_sustained_load"])
        return float(row["capacity_load"])

    @cached_property
    def _val_windows(self) -> tuple[ScenarioWindows, int | None]:
        """The val windows of the search's seeds and the longest they may grow to (None: a trace's)."""
        cfg = self.config.eval_config(self.scenario, self.config.seeds)
        env = cfg.make_env(self.scenario, 1.0)
        windows = env_windows(env, self.scenario.name)
        env.close()
        return windows, extended_size(cfg, self.scenario, windows)

    @cached_property
    def confirm_seeds(self) -> tuple[int, ...]:
        """Fresh val seeds for the confirmation, as many as the search's: the next seeds on generated traffic; on a
        trace, the windows its val part holds beyond the search's (often none: then the search's own)."""
        seeds, top = self.config.seeds, max(self.config.seeds)
        windows, _ = self._val_windows
        held = windows.source.num_windows(windows.num_requests) if isinstance(windows.source, TraceSource) else None
        fresh = (
            range(top + 1, top + 1 + len(seeds)) if held is None else range(top + 1, min(held, top + 1 + len(seeds)))
        )
        return tuple(fresh)

    def size_for_probe(self) -> None:
        """Generated traffic: score on windows grown until sustained at the probe load (``sustained_size``), those of
        the search's seeds and of the confirmation's."""
        windows, longest = self._val_windows
        if longest is None:
            return
        seeds = (*self.config.seeds, *self.confirm_seeds)
        size = sustained_size(windows, self.load, seeds, longest)
        self.max_sustained = replace(windows, num_requests=size).max_load(seeds)
        if size != windows.num_requests:
            self.score_size = size
            self.say(f"val windows of {size} requests, sustained at the probe load (generated traffic)")

    def probe(self) -> dict[str, float]:
        """Set ``load`` to the references' highest val capacity on the first two seeds; those capacities."""
        seeds = self.config.seeds[:2]
        caps = {ref: self.capacity(ref, seeds) for ref in self.config.references}
        self.load = max(caps.values())
        if self.load <= 0.0:  # the trace's SLOs, not a fault of the run: one line
            raise InputError(
                f"scenario {self.scenario.name!r}: no reference ({', '.join(self.config.references)}) meets 90% "
                "attainment on val at any load down to 1/64 of nominal; there is no load to tune at"
            )
        self.say(f"probe load {self.load:.3f} (val capacity on seeds {list(seeds)}: "
                 + ", ".join(f"{k} {v:.3f}" for k, v in caps.items()) + ")")  # fmt: skip
        self.size_for_probe()
        if self.load > self.max_sustained:  # a selection load: a short window's burst still ranks settings
            self.say(f"the probe load is past {self.max_sustained:.3g}, the largest at which these val windows "
                     "are sustained (evaluation.sustained): settings are ranked on bursts; longer val windows "
                     "(--num-requests, a longer trace) rank them on a sustained rate")  # fmt: skip
        return caps

    def race(self, cands: Sequence[Decision], what: str) -> list[int]:
        """The indices of ``cands`` left, ranked, after racing them over the search's seeds: every one plays the first
        ``FIRST_RUNG`` windows, then one more window a rung; one the leader is ahead of with confidence (paired over
        the windows all have played, ``racing.survivors``) plays no more. Without racing, all play every seed."""
        seeds = self.config.seeds
        pool, n = list(range(len(cands))), min(FIRST_RUNG, len(seeds)) if self.config.racing else len(seeds)
        while True:
            runs = {i: self.runs(cands[i], seeds[:n]) for i in pool}
            left = survivors(runs) if self.config.racing else ranked(runs)
            self.num_dropped += len(pool) - len(left)
            top = float(np.mean([r[0] for r in runs[left[0]]]))
            self.say(f"{what}: {len(pool)} settings on {n} window(s), {len(pool) - len(left)} dropped behind the "
                     f"leader (attainment {top:.3f})")  # fmt: skip
            pool = left
            if n >= len(seeds) or len(pool) == 1:
                return pool
            n += 1

    def local_search(self, best: Decision, spec: ActionSpec) -> tuple[Decision, int, list[Decision]]:
        """Race ``best`` against its single-knob moves, up to ``rounds`` times, taking the leader when it is a move:
        the setting, the moves taken, and every setting that played all the search's seeds undropped."""
        seeds, moves, finalists = self.config.seeds, 0, [best]
        for rnd in range(1, self.config.rounds + 1):
            options = [best, *neighbours(best, spec)]
            left = self.race(options, f"local search round {rnd}")
            finalists += [options[i] for i in left if i]
            if left[0] == 0:
                self.say(f"local search round {rnd}: none of {len(options) - 1} moves improves the setting")
                break
            best, moves = options[left[0]], moves + 1
            self.say(f"local search round {rnd}: {settings_of(best)} attainment {self.score(best, seeds)[0]:.3f}")
        return best, moves, finalists

    def confirm(self, finalists: Sequence[tuple[Decision, str]]) -> tuple[int, dict[str, Any]]:
        """The best of ``finalists`` (the search's order) on the fresh val windows, and the record of its margin."""
        seeds = self.confirm_seeds or self.config.seeds
        runs = {i: self.runs(d, seeds) for i, (d, _) in enumerate(finalists)}
        order = ranked(runs)
        record: dict[str, Any] = {"seeds": list(seeds), "fresh": bool(self.confirm_seeds), "num_settings": len(runs)}
        record["attainment"] = float(np.mean([r[0] for r in runs[order[0]]]))
        if len(order) > 1:
            margin = paired_margin(runs[order[0]], runs[order[1]])
            record["runner_up"] = {"settings": settings_of(finalists[order[1]][0]), "found_by": finalists[order[1]][1]}
            record["margin"] = margin.as_dict()
            self.say(f"confirmation on {len(seeds)} {'fresh ' if self.confirm_seeds else ''}val windows: "
                     f"{finalists[order[0]][1]} ahead of {finalists[order[1]][1]} by {margin.mean:+.3f} ± "
                     f"{margin.half_width:.3f} attainment")  # fmt: skip
        if not self.confirm_seeds:
            self.say("no fresh val windows (the trace's val part holds only the search's): confirmed on the search's")
        return order[0], record

    def pick(self, labelled: Sequence[tuple[Decision, str]], spec: ActionSpec) -> Pick:
        """Race ``labelled``, local-search from the leader, confirm the best ``CONFIRM_TOP`` on fresh windows."""
        cands = [d for d, _ in labelled]
        left = self.race(cands, "race")
        labels = {d: label for d, label in labelled}
        best, moves, found = self.local_search(cands[left[0]], spec)
        if moves:
            labels[best] = labels[cands[left[0]]] + f" + {moves} local move(s)"
        for d in found:
            labels.setdefault(d, f"{labels[cands[left[0]]]} + local moves")
        pool = list(dict.fromkeys([best, *found, *(cands[i] for i in left)]))
        finalists = [pool[i] for i in ranked({i: self.runs(d, self.config.seeds) for i, d in enumerate(pool)})]
        chosen = [(d, labels[d]) for d in finalists[:CONFIRM_TOP]]
        k, record = self.confirm(chosen)
        d, label = chosen[k]
        return Pick(d, label, self.load, self.score(d, self.config.seeds), record, len(labelled), self.num_dropped)


def _searched(config: TuneConfig, scenario: Scenario | str, log: Callable[[str], None]) -> tuple[_Search, Pick]:
    """The probe (its capacities in ``probe_caps``) and the pick of ``scenario``'s search."""
    sc = config.eval_config(scenario, config.seeds[:1]).scenarios[0]
    assert isinstance(sc, Scenario)  # EvalConfig takes the references (schedulers) on single-node scenarios only
    search = _Search(config, sc, log, time.perf_counter())
    search.probe_caps = search.probe()
    env: Any = config.eval_config(sc, config.seeds[:1]).make_env(sc, search.load).unwrapped
    spec, ctx = env.action_spec, env.policy_context()
    env.close()
    labelled = [(n, static_decision(n, ctx)) for n in STATIC_HEURISTICS]
    labelled += [(f"random{k}", d) for k, d in enumerate(random_candidates(spec, config.candidates, config.seed))]
    seen: dict[Decision, str] = {}
    for label, d in labelled:
        seen.setdefault(d, label)  # a setting drawn twice keeps its first label
    return search, search.pick(list(seen.items()), spec)


def pick_setting(config: TuneConfig, scenario: Scenario | str, log: Callable[[str], None] = lambda line: None) -> Pick:
    """The search's pick on ``scenario`` without the capacities ``tune_scenario`` records (``bench/bench_tune.py``)."""
    return _searched(config, scenario, log)[1]


def tune_scenario(
    config: TuneConfig,
    scenario: Scenario | str,
    log: Callable[[str], None] = lambda line: None,
    command: str | None = None,
) -> TuneResult:
    """Tune ``scenario``, a ``log`` line per step; ``ValueError`` when no reference meets the target, or bad input."""
    search, pick = _searched(config, scenario, log)
    sc, t0, probe_caps = search.scenario, search.t0, search.probe_caps
    best, score = pick.setting, pick.score
    capacity = search.capacity(search.spec(best, "tuned"), config.seeds)
    ref_caps = probe_caps  # measured by the probe on its seeds: not searched again (they were 2/3 of this step)
    wall_s = time.perf_counter() - t0
    provenance = {
        "split": SPLIT,
        "seeds": list(config.seeds),
        "probe_load": search.load,
        "probe_sustained": bool(search.load <= search.max_sustained),
        "probe_seeds": list(config.seeds[:2]),
        "probe_capacity_load": probe_caps,
        "num_requests": search.score_size or (sc.num_requests if config.num_requests is None else config.num_requests),
        "val_attainment": score[0],
        "val_goodput_rps": score[1],
        "val_capacity_load": capacity,
        "reference_capacity_load": ref_caps,
        "found_by": pick.label,
        "confirm": pick.confirm,
        "cost_model": config.cost_model or sc.cost_model,
        "engine": asdict(sc.engine),
        "search": {
            "references": list(config.references),
            "candidates": config.candidates,
            "seed": config.seed,
            "rounds": config.rounds,
            "racing": config.racing,
            "num_settings": pick.num_settings,
            "num_dropped": pick.num_dropped,
            "num_episodes": search.num_episodes,
        },
        "command": command if command is not None else config.command(sc.name),
        "date": datetime.date.today().isoformat(),
        "wall_s": round(wall_s, 1),
    }
    top = max(ref_caps, key=lambda k: ref_caps[k])
    search.say(f"tuned {settings_of(best)}: val attainment {score[0]:.3f} at load {search.load:.3f}, val capacity "
               f"{capacity:.3f} ({top} {ref_caps[top]:.3f} on the probe's seeds)")  # fmt: skip
    return TuneResult(sc.name, {"settings": settings_of(best), "provenance": provenance}, search.num_episodes, wall_s)


def trace_policies(
    entries: Sequence[str],
    options: Mapping[str, Any],
    scenarios: Sequence[Scenario],
    limits: Mapping[str, int],
    *,
    cost_model: str | None = None,
) -> list[PolicySpec]:
    """``entries`` resolved, every ``tuned`` bound to the entries of ``scenarios``' trace keys. One-line ``ValueError``
    naming the policy, or giving the ``llmsched-tune`` command when no table holds a key."""
    specs = [resolve_policy(entry) for entry in entries]
    if not any(spec.baseline == "tuned" for spec in specs):
        return specs
    keyed = list(zip(scenarios, trace_keys(options, scenarios, cost_model=cost_model), strict=True))
    fitted = any(scenario.traffic for scenario in scenarios)
    out: list[PolicySpec] = []
    for spec in specs:
        if spec.baseline == "tuned":
            table = Path(spec.table) if isinstance(spec.table, (str, Path)) else None
            command = trace_tune_command(options, limits, cost_model=cost_model, out=table, fitted=fitted)
            spec = PolicySpec(spec.name, baseline="tuned", table=trace_table(spec.name, spec.table, keyed, command))
        out.append(spec)
    return out
