"""Train one agent from Python: the run folder, the envs, behaviour cloning, the evaluation, learning.

run = train(TrainConfig(scenario="mixed-slo", quick=True, out=Path("runs/quick")))
"""

from __future__ import annotations

import contextlib
import json
import random
import secrets
import shlex
import sys
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
import yaml
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.callbacks import BaseCallback, CallbackList
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.logger import configure
from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv, VecEnv

import llmsched_env  # noqa: F401  (registers LLMSched-v1)
from agents.bc import behaviour_clone
from agents.callbacks import (
    BEST_NAME,
    CLONE_RUN,
    HISTORY_NAME,
    EpisodeMetricsCallback,
    PeriodicEvalCallback,
    ProgressBarCallback,
    UpdateLogCallback,
    read_best,
    read_history,
    write_scalars,
)
from agents.checkpoints import (
    SignedCheckpointCallback,
    check_spaces,
    ensure_key,
    latest_checkpoint,
    model_spaces,
    newest_signed_checkpoint,
    step_of,
)
from agents.config import dotted, finite_json
from agents.generalist import check_init, init_from_policy, init_network, knee_loads
from agents.sb3 import ALGOS, FLAT_ACTION_ALGOS, make_model
from agents.train_config import ACTOR_CRITIC_ALGOS, BC_KEYS, RUN_KEYS, TrainConfig, env_kind, resolve_hyperparams
from agents.wrappers import FlatActions
from llmsched_env.common.checks import clipped, shown
from llmsched_env.common.files import CONFIG_BYTES, parse_json, parse_yaml, read_config, read_text
from llmsched_env.common.lifetime import die_with_parent
from llmsched_env.common.outputs import (
    COMPLETE_NAME,
    LOCK_NAME,
    Written,
    check_output,
    locked_output,
    mark_complete,
    replaced_atomically,
    write_text_atomically,
    written_in,
)
from llmsched_env.evaluation.progress import Progress, status
from llmsched_env.evaluation.resume import file_digest
from llmsched_env.evaluation.sustained import env_windows
from llmsched_env.workloads.library import mixture_scenarios
from llmsched_env.workloads.scenarios import Scenario, TraceSource

BC_EPOCHS = 10  # passes of behaviour cloning over the demonstrations


def make_env_fn(
    scenario: str | Scenario, algo: str, env_kwargs: Mapping[str, Any], split: str = "train", agent: bool = True
) -> Callable[[], gym.Env]:
    """A factory of ``scenario``'s envs (``env_kind``); ``agent``: wrapped for the algorithm."""
    kind = env_kind(scenario)

    def make() -> gym.Env:
        kwargs = {k: v for k, v in env_kwargs.items() if k not in kind.drops}
        if kind.mixture:  # a workload per episode, at the mix's loads
            kwargs.setdefault("knee_loads", knee_loads())
        else:
            kwargs["scenario"] = scenario
        env = gym.make(kind.env_id_for(kwargs.get("schema")), split=split, **kwargs)
        return FlatActions(env) if agent and kind.flat_actions and algo in FLAT_ACTION_ALGOS else env

    return make


def dying_with_parent(make: Callable[[], gym.Env]) -> Callable[[], gym.Env]:
    """``make`` for a ``SubprocVecEnv`` worker, which first arranges to end when its parent ends."""

    def make_in_worker() -> gym.Env:
        die_with_parent()
        return make()

    return make_in_worker


def export_run_policy(
    model: BaseAlgorithm, env: gym.Env, out: Path, scenario: str, seed: int, env_kwargs: Mapping[str, Any]
) -> None:
    """Export ``model`` into ``out`` as a policy file with the run's scenario, seed, steps and iterations per step."""
    from agents.export import export_policy

    extra = {"scenario": scenario, "seed": seed, "timesteps": int(model.num_timesteps)}
    fixed = env_kind(scenario).iterations_per_step
    extra["iterations_per_step"] = fixed or int(env_kwargs.get("iterations_per_step", 1))
    export_policy(model, env, out, extra=extra)


def prepare_run_folder(config: TrainConfig, hp: Mapping[str, Any]) -> Path:
    """Create the run folder and write the resolved hyperparameters, the config and the command line into it."""
    out = check_output(config.run_folder, config.force, files=RUN_FILES, folders=RUN_FOLDERS)
    out.mkdir(parents=True, exist_ok=True)
    write_text_atomically(out / "config.yml", yaml.safe_dump({"algo": config.algo, "scenario": config.scenario, **hp}))
    run_id = read_run_id(out) if config.resume else None  # a resumed run keeps its id; a new one gets its own
    args = {**config.as_dict(), "run_id": run_id or secrets.token_hex(8), **_trace_digest(config)}
    write_text_atomically(out / "args.json", finite_json(args, indent=1))
    write_text_atomically(out / "command.txt", shlex.join(["llmsched-train", *config.to_argv()]) + "\n")
    return out


def _clone(model: BaseAlgorithm, config: TrainConfig, run: dict[str, Any], env_kwargs: dict[str, Any]) -> None:
    """Behaviour-clone ``run["bc_warmstart"]`` into ``model``; its statistics to ``bc.json`` and stdout."""
    baseline, steps = run["bc_warmstart"], int(run.get("bc_steps", 20_000))
    rounds, stride = int(run.get("bc_dagger", 0)), int(run.get("bc_stride", 1))
    dagger = f", then {rounds} DAgger rounds of {steps} steps" if rounds else ""
    dagger += f" (one step in {stride} labelled)" if stride > 1 else ""
    status(f"cloning the baseline {baseline}: {steps} demonstration steps{dagger}", enabled=config.progress)
    t0 = time.perf_counter()
    tb = configure(str(config.run_folder / "tb" / CLONE_RUN), ["tensorboard"])
    bar = Progress(BC_EPOCHS * (1 + rounds), f"cloning {baseline}", enabled=config.progress, unit="epoch")
    with bar, contextlib.closing(tb):
        stats = behaviour_clone(
            model,
            make_env_fn(config.env_scenario, config.algo, env_kwargs, agent=False),
            baseline,
            steps,
            epochs=BC_EPOCHS,
            seed=config.seed,
            smoothing=float(run.get("bc_smoothing", 0.1)),
            on_epoch=lambda done, total: bar.update(),
            dagger_iterations=rounds,
            stride=stride,
            on_log=lambda values, step: write_scalars(tb, values, step),
        )
    stats["bc_seconds"] = time.perf_counter() - t0
    record = {"baseline": baseline, "dagger": rounds, "stride": stride, **stats}
    write_text_atomically(config.run_folder / "bc.json", finite_json(record, indent=1))
    print(f"behaviour cloning from {baseline}: {stats}", flush=True)


def _model(
    config: TrainConfig, hp: dict[str, Any], run: dict[str, Any], vec_env: VecEnv, env_kwargs: dict[str, Any]
) -> tuple[BaseAlgorithm, bool]:
    """The model to train (a resumed checkpoint, an ``--init`` policy's, or fresh and cloned) and whether resumed."""
    tb = str(config.run_folder / "tb")
    resume_from = resume_checkpoint(config, warn=True)
    if config.resume and resume_from is None:
        print(fresh_start_note(config), file=sys.stderr, flush=True)
    if resume_from is not None:
        check_spaces(resume_from, model_spaces(vec_env))  # before anything is unpickled
        model = ALGOS[config.algo].load(str(resume_from), env=vec_env, device="cpu", tensorboard_log=tb)
        status(f"resumed from {resume_from} at {model.num_timesteps} steps", enabled=config.progress)
        return model, True
    if config.init_policy is not None:  # fine-tuning (--init): the exported policy's weights, no cloning
        start, net = init_network(config.init_policy)
        hp = {**hp, "policy_kwargs": {**dict(hp.get("policy_kwargs") or {}), **net}}
        model = make_model(config.algo, vec_env, seed=config.seed, tensorboard_log=tb, **hp)
        probe = make_env_fn(config.env_scenario, config.algo, env_kwargs, agent=False)()
        try:
            init_from_policy(model, start, probe)
        finally:
            probe.close()
        status(f"starting from the weights of {start.path}", enabled=config.progress)
        return model, False
    model = make_model(config.algo, vec_env, seed=config.seed, tensorboard_log=tb, **hp)
    if run.get("bc_warmstart"):
        _clone(model, config, run, env_kwargs)
    return model, False


def read_run_id(out: Path) -> str | None:
    """The id ``args.json`` in the run folder ``out`` gives its run (``prepare_run_folder``), or None."""
    earlier = _read_json(out / "args.json")
    run_id = earlier.get("run_id") if isinstance(earlier, dict) else None
    return run_id if isinstance(run_id, str) else None


def run_binding(config: TrainConfig) -> dict[str, str]:
    """What a checkpoint's signature binds it to: the run's id (``args.json``), the algorithm and the scenario."""
    return {"run": read_run_id(config.run_folder) or "", "algo": config.algo, "scenario": config.scenario}


def resume_checkpoint(config: TrainConfig, warn: bool = False) -> Path | None:
    """The newest checkpoint this user's training signed (newer unsigned ones skipped), or None."""
    if not config.resume:
        return None
    checkpoint, skipped = newest_signed_checkpoint(config.run_folder / "checkpoints", run_binding(config))
    for path, reason in skipped if warn else ():
        print(f"--resume: skipping {path}: {reason}; resuming from {checkpoint}", file=sys.stderr, flush=True)
    return checkpoint


RUN_OUTPUTS = ("args.json", "config.yml", "checkpoints", "model.zip", "best_model.zip", "summary.json")
# every file and folder a training writes in its run folder (anything else at those names is refused first)
RUN_FILES = (
    *("args.json", "config.yml", "command.txt", "bc.json", "model.zip", "best_model.zip", "best.json"),
    *("eval_history.json", "summary.json", "policy.json", "policy.safetensors", COMPLETE_NAME, LOCK_NAME),
)
RUN_FOLDERS = ("checkpoints", "tb")
OWNED_FOLDERS = ("checkpoints",)  # files named by step, so an earlier one may be overwritten (tb: new names only)
# what a training leaves once it has evaluated, cloned or learnt (--resume without a checkpoint: none may be there)
RUN_RESULTS = (
    *("model.zip", "best_model.zip", "best.json", "eval_history.json", "summary.json", "bc.json"),
    *("policy.json", "policy.safetensors", COMPLETE_NAME),
)


def run_outputs(config: TrainConfig) -> list[Written]:
    """Every file a training writes in its run folder: ``RUN_FILES``, and files in ``RUN_FOLDERS``."""
    made = [name for name in RUN_FOLDERS if name not in OWNED_FOLDERS]
    return written_in("--out", config.run_folder, RUN_FILES, OWNED_FOLDERS, made)


# the TrainConfig fields a resumed training must share with its run (args.json); the hyperparameters are compared
# by resumed_hyperparams; the trace's content by its digest (TRACE_DIGEST)
SAME_ON_RESUME = ("algo", "scenario", "trace", "seed", "bc")
TRACE_DIGEST = "trace_sha256"


def _trace_digest(config: TrainConfig) -> dict[str, str]:
    """``{TRACE_DIGEST: ...}`` of the training's ``--trace`` file, or nothing without one (or when it cannot be read:
    its loader names the problem)."""
    path = (config.trace or {}).get("trace")
    if path is None:
        return {}
    try:
        return {TRACE_DIGEST: file_digest(path)}
    except OSError:
        return {}


def _read_json(path: Path) -> Any:
    """``path``'s JSON, or None when it cannot be read."""
    try:
        return parse_json(read_text(path, CONFIG_BYTES))
    except (OSError, UnicodeDecodeError, ValueError):
        return None


def start_records_only(out: Path) -> bool:
    """Whether ``out`` holds only what a training killed before its first checkpoint leaves (all of it at step 0)."""
    if any((out / name).exists() for name in ("model.zip", "summary.json", COMPLETE_NAME)):
        return False
    if (out / BEST_NAME).exists():
        best = _read_json(out / BEST_NAME)
        step = best.get("timesteps") if isinstance(best, dict) else None
        if type(step) is not int or step != 0:
            return False
    elif any((out / name).exists() for name in ("best_model.zip", "policy.json", "policy.safetensors")):
        return False
    if (out / HISTORY_NAME).exists():
        record = _read_json(out / HISTORY_NAME)
        entries = record.get("history") if isinstance(record, dict) else None
        if not isinstance(entries, list) or any(not isinstance(e, list) or e[:1] != [0] for e in entries):
            return False
    return True


def fresh_start_note(config: TrainConfig) -> str:
    """What ``--resume`` without a checkpoint says on stderr as it starts afresh."""
    out = config.run_folder
    note = f"--resume: no checkpoint in {out / 'checkpoints'}; starting afresh"
    results = [name for name in RUN_RESULTS if (out / name).exists()]
    if results:
        note += (
            f", replacing what a training killed before its first checkpoint left ({', '.join(results)}: its "
            "evaluation of the start policy, at step 0)"
        )
    return note


EVALUATION_MARKS = ("evaluation.json", "rows.jsonl")  # what an evaluation's --out holds (llmsched-evaluate)


def check_run_folder(config: TrainConfig) -> None:
    """``ValueError`` (one line) when ``config`` would mix with the training or evaluation already in its run folder."""
    out = config.run_folder
    evaluation = [name for name in EVALUATION_MARKS if (out / name).exists()]
    if evaluation:  # a training would take its completion marker
        raise ValueError(f"--out {out}: holds an evaluation ({', '.join(evaluation)}); choose another --out")
    held = [name for name in RUN_OUTPUTS if (out / name).exists()]
    if held and not config.resume:
        raise ValueError(
            f"--out {out}: holds an earlier training ({', '.join(held)}); pass --resume to continue it, "
            "or choose another --out"
        )
    results = [name for name in RUN_RESULTS if (out / name).exists()]
    if config.resume and results and latest_checkpoint(out / "checkpoints") is None and not start_records_only(out):
        raise ValueError(
            f"--resume: {out / 'checkpoints'} holds no checkpoint, so there is nothing to resume from, and {out} holds "
            f"an earlier training's results ({', '.join(results)}), which starting afresh would replace; they are "
            "kept: choose another --out"
        )
    if not config.resume or not (out / "args.json").is_file():
        return
    try:
        earlier = parse_json(read_text(out / "args.json", CONFIG_BYTES))
    except (OSError, UnicodeDecodeError, ValueError) as exc:  # FileRefusedError and JSONDecodeError among them
        raise ValueError(f"--resume: {out / 'args.json'}: cannot read the run's options: {exc}") from None
    if not isinstance(earlier, dict):
        raise ValueError(
            f"--resume: {out / 'args.json'}: expected a JSON object (the run's options), got "
            f"{type(earlier).__name__}; it was edited or is not a training's: choose another --out"
        )
    checkpointed = latest_checkpoint(out / "checkpoints") is not None  # signed with the run's id in args.json
    if checkpointed and not (isinstance(earlier.get("run_id"), str) and earlier["run_id"]):
        raise ValueError(
            f"--resume: {out / 'args.json'}: no run_id (the run's id, which its checkpoints are signed with), got "
            f"{earlier.get('run_id')!r}; it was edited: choose another --out"
        )
    mine = config.as_dict()
    for key in SAME_ON_RESUME:
        if earlier.get(key) != mine.get(key):
            flag = "--" + key.replace("_", "-")
            theirs, given = ("(not given)" if v is None else repr(v) for v in (earlier.get(key), mine.get(key)))
            raise ValueError(
                f"--resume: {out} was trained with {flag} {theirs}, this command gives {given}; resume with the "
                f"run's own {flag} (its command.txt), or choose another --out"
            )
    recorded, now = earlier.get(TRACE_DIGEST), _trace_digest(config).get(TRACE_DIGEST)
    if recorded is not None and recorded != now:  # the same path, other requests: another training's data
        raise ValueError(
            f"--resume: the --trace file {(config.trace or {}).get('trace')} changed since {out} was trained on it "
            f"(sha256 {now} against {recorded} in its args.json); resume with the trace it was trained on, or choose "
            "another --out"
        )
    lost = [name for name in ("best_model.zip", "policy.json", "policy.safetensors") if not (out / name).exists()]
    if checkpointed and (out / "best.json").exists() and lost:  # exported with each new best, not otherwise
        raise ValueError(
            f"--resume: {out}: the best model's export ({', '.join(lost)}) is gone (best.json records a best), and "
            "a resume writes it only with a new best; restore it, or choose another --out"
        )


def finished_at_budget(config: TrainConfig) -> int | None:
    """The steps a resumed run finished at when they reach its budget (nothing to resume), else None."""
    if not config.resume:
        return None
    finished, budget = _finished_steps(config.run_folder), int(resolve_hyperparams(config)["n_timesteps"])
    return finished if finished is not None and finished >= budget else None


def _finished_steps(out: Path) -> int | None:
    """The steps ``complete.json`` in the run folder ``out`` says the training finished at, or None."""
    record = _read_json(out / COMPLETE_NAME) if (out / COMPLETE_NAME).is_file() else None
    finished = record.get("timesteps") if isinstance(record, dict) else None
    return finished if type(finished) is int else None


def check_budget(config: TrainConfig, hp: Mapping[str, Any]) -> None:
    """``ValueError`` (one line) when ``config`` resumes a run that already reached its budget ``hp["n_timesteps"]``."""
    if not config.resume:
        return
    out, budget = config.run_folder, int(hp["n_timesteps"])
    finished = _finished_steps(out)
    if finished is not None and finished >= budget:
        raise ValueError(
            f"--resume: {out} finished at {finished} steps ({COMPLETE_NAME}); nothing to resume; give --timesteps > "
            f"{finished} to train on, or choose another --out"
        )
    checkpoint = resume_checkpoint(config)
    step = step_of(checkpoint) if checkpoint is not None else None
    if checkpoint is not None and step is not None and step > budget:
        raise ValueError(
            f"--resume: {out} has trained {step} steps (its checkpoint {checkpoint.name}), more than the budget of "
            f"{budget} (--timesteps); give --timesteps >= {step}, or choose another --out"
        )


# hyperparameters a resumed training may change (the budget, the evaluation's, the anchor's: 0 on a resume);
# the cloning's (START_KEYS) act only at the start, and config.yml keeps the run's
MAY_CHANGE_ON_RESUME = ("n_timesteps", "eval_freq", "eval_episodes", "eval_load", "eval_num_requests")
START_KEYS = ("bc_warmstart", *BC_KEYS, "anchor_coef", "anchor_epochs")


def resumed_hyperparams(config: TrainConfig, hp: dict[str, Any]) -> dict[str, Any]:
    """``hp`` with the run's cloning values; ``ValueError`` when another one differs from ``config.yml`` or
    ``config.yml`` is gone (what the run trained with is then unknown: nothing to compare with)."""
    path = config.run_folder / "config.yml"
    if not path.exists():
        raise ValueError(
            f"--resume: {path} is gone: it holds the hyperparameters {config.run_folder} was trained with, which a "
            "resume must keep; restore it (a copy of the run folder has one), or choose another --out"
        )
    try:
        earlier = read_config(path, "the run's hyperparameters", yaml=True)
    except ValueError as exc:  # one line naming the file (and line) already
        raise ValueError(f"--resume: {exc}") from None
    if not isinstance(earlier, dict):
        raise ValueError(f"--resume: {path}: expected a mapping of the run's hyperparameters, got {shown(earlier, 60)}")
    skip = {"algo", "scenario", *MAY_CHANGE_ON_RESUME, *START_KEYS}
    theirs = dotted({k: v for k, v in earlier.items() if k not in skip})
    mine = dotted(parse_yaml(yaml.safe_dump({k: v for k, v in hp.items() if k not in skip}), "the hyperparameters"))
    unset = "(unset)"
    differ = [key for key in sorted({*theirs, *mine}) if theirs.get(key, unset) != mine.get(key, unset)]
    if differ:
        listed = "; ".join(
            f"{clipped(k, 60)} {shown(theirs.get(k, unset), 40)} there, {shown(mine.get(k, unset), 40)} here"
            for k in differ[:4]
        )
        more = f" and {len(differ) - 4} more" if len(differ) > 4 else ""
        raise ValueError(
            f"--resume: {config.run_folder} was trained with other hyperparameters ({path.name}): {listed}{more}; "
            f"resume with the run's own (its command.txt), or choose another --out (only "
            f"{', '.join(MAY_CHANGE_ON_RESUME)} may change on a resume)"
        )
    cloning = ("bc_warmstart", *BC_KEYS)  # what the run cloned, as it did; a resumed run clones nothing
    return {**{k: v for k, v in hp.items() if k not in cloning}, **{k: earlier[k] for k in cloning if k in earlier}}


_BUILT: set[str] = set()  # the (algorithm, env, hyperparameters) check_model_builds has built already


def check_model_builds(config: TrainConfig, hp: Mapping[str, Any]) -> None:
    """``ValueError`` naming the hyperparameters when ``config``'s model does not build with ``hp`` (an unknown or
    ill-typed ``policy_kwargs`` entry, ``optimizer_kwargs``, a buffer's arguments): a model with the layers one unit
    wide and small buffers is built once per distinct setting, before anything is written."""
    model_hp = {k: v for k, v in hp.items() if k not in RUN_KEYS}
    env_kwargs = _env_kwargs(config, dict(hp.get("env_kwargs", {})))
    key = json.dumps([config.algo, config.kind.env_id_for(env_kwargs.get("schema")), model_hp], sort_keys=True,
                     default=repr)  # fmt: skip
    if key in _BUILT:
        return
    small = _small(model_hp)
    if config.init_policy is not None:  # the start policy's network, as _model builds it
        net = init_network(config.init_policy)[1]
        small["policy_kwargs"] = {**dict(small.get("policy_kwargs") or {}), **net, "net_arch": [1]}
    state = (random.getstate(), np.random.get_state())
    env = make_env_fn(config.env_scenario, config.algo, env_kwargs)()
    try:  # unseeded, and every random state as it was: the training's own draws are not moved
        with warnings.catch_warnings(), torch.random.fork_rng(devices=[]):  # the training's own build warns
            warnings.simplefilter("ignore")
            make_model(config.algo, env, seed=None, **small)
    except (TypeError, ValueError, AssertionError, KeyError) as exc:
        where = f"({config.algo}; from the hyperparameter file or --hp)"
        raise ValueError(f"hyperparameters {where}: {config.algo}'s model does not build with them: "
                         f"{type(exc).__name__}: {exc}"[:600]) from None  # fmt: skip
    finally:
        env.close()
        random.setstate(state[0])
        np.random.set_state(state[1])
    _BUILT.add(key)


def _small(model_hp: Mapping[str, Any]) -> dict[str, Any]:
    """``model_hp`` with every size that costs memory cut down (layer widths, LSTM, rollout, replay buffer)."""
    small = dict(model_hp)
    kwargs = dict(small.get("policy_kwargs") or {})
    arch = kwargs.get("net_arch")
    if isinstance(arch, Mapping):
        kwargs["net_arch"] = {name: [1] * len(layers) for name, layers in arch.items()}
    elif isinstance(arch, list):
        kwargs["net_arch"] = [1] * len(arch)
    for name in ("lstm_hidden_size", "n_lstm_layers"):
        if name in kwargs:
            kwargs[name] = 1
    if kwargs:
        small["policy_kwargs"] = kwargs
    if isinstance(small.get("n_steps"), int) and isinstance(small.get("batch_size"), int):
        small["n_steps"] = max(2, min(small["n_steps"], small["batch_size"]))
    elif isinstance(small.get("n_steps"), int):
        small["n_steps"] = max(2, min(small["n_steps"], 64))
    if isinstance(small.get("buffer_size"), int):
        small["buffer_size"] = max(1, min(small["buffer_size"], 64))
    return small


def preflight(config: TrainConfig, warn: bool = True) -> tuple[dict[str, Any], float | None, dict[str, Any]]:
    """Every check that can refuse ``config``, before anything is written: ``(hp, best to beat, eval setup)``."""
    hp = resolve_hyperparams(config)
    check_output(config.run_folder, config.force, files=RUN_FILES, folders=RUN_FOLDERS)
    check_run_folder(config)
    ensure_key()
    setup = eval_setup(config, hp, warn=warn)
    best = resume_best(config, hp, warn=warn, setup=setup)
    check_budget(config, hp)
    if resume_checkpoint(config) is not None:
        read_history(config.run_folder, setup, 0, warn=False)  # an entry no evaluation writes: refused here
        if hp.get("anchor_coef"):  # the start the pull keeps to is gone
            raise ValueError("anchor_coef: a resumed run cannot be anchored to its start; pass --hp anchor_coef=0")
        hp = resumed_hyperparams(config, hp)
    env_kwargs = _env_kwargs(config, dict(hp.get("env_kwargs", {})))
    probe: Any = make_env_fn(config.env_scenario, config.algo, env_kwargs, agent=False)()
    try:
        if config.init_policy is not None:  # never with --resume (TrainConfig refuses the two together)
            start, _ = init_network(config.init_policy)
            check_init(start, probe, config.algo)
    finally:
        probe.close()
    return hp, best, setup


def _env_kwargs(config: TrainConfig, env_kwargs: dict[str, Any]) -> dict[str, Any]:
    """The training envs' arguments: a load span as a tuple, a fine-tuned policy's schema."""
    env_kwargs = dict(env_kwargs)
    if isinstance(env_kwargs.get("load"), list):
        env_kwargs["load"] = tuple(env_kwargs["load"])
    if config.init_policy is not None and config.kind.init_schema is None:  # fine-tune on its own schema
        env_kwargs.setdefault("schema", config.init_policy.schema_version)
    return env_kwargs


def val_seeds(config: TrainConfig, env_kwargs: Mapping[str, Any], seeds: list[int], warn: bool = True) -> list[int]:
    """``seeds``, cut to the disjoint windows a trace's val part holds (said on stderr with ``warn``)."""
    env: Any = make_env_fn(config.env_scenario, config.algo, env_kwargs, split="val", agent=False)()
    u = env.unwrapped
    held = u.source.num_windows(u.num_requests) if isinstance(u.source, TraceSource) else len(seeds)
    env.close()
    if held >= len(seeds) or not warn:
        return seeds[:held]
    print(
        f"periodic evaluation: {u.source.trace.source}: the val part holds {held} window(s) of {u.num_requests} "
        f"requests ({len(u.source.trace)} requests); evaluating on val seeds {list(range(held))}, not the "
        f"{len(seeds)} eval_episodes asks for",
        file=sys.stderr,
    )
    return seeds[:held]


def val_window_note(env: gym.Env, seeds: Sequence[int], load: float) -> str | None:
    """None when the val windows of ``seeds`` are sustained at ``load``, else a line saying which are not."""
    try:
        return env_windows(env).unsustained_note(seeds, load, option="--hp eval_num_requests=")
    finally:
        env.close()


def eval_env_kwargs(env_kwargs: Mapping[str, Any], hp: Mapping[str, Any]) -> dict[str, Any]:
    """The periodic evaluation's env arguments: ``env_kwargs`` without the load, sized by ``eval_num_requests``."""
    kwargs = {k: v for k, v in env_kwargs.items() if k != "load"}
    if hp.get("eval_num_requests") is not None:
        kwargs["num_requests"] = int(hp["eval_num_requests"])
    return kwargs


def eval_setup(config: TrainConfig, hp: Mapping[str, Any], warn: bool = True) -> dict[str, Any]:
    """What the periodic evaluation measures on: scenario, seeds, load and env arguments."""
    env_kwargs = eval_env_kwargs(dict(hp.get("env_kwargs", {})), hp)
    if config.kind.mixture:  # one val episode per library scenario, each at its knee
        seeds = list(range(len(mixture_scenarios())))
    else:
        try:
            seeds = val_seeds(config, env_kwargs, list(range(int(hp["eval_episodes"]))), warn)
        except ValueError as err:
            if hp.get("eval_num_requests") is None:
                raise
            raise ValueError(f"hyperparameter 'eval_num_requests' (the val episodes' size): {err}") from None
    return {"scenario": config.scenario, "eval_seeds": seeds, "eval_load": hp["eval_load"], "eval_env": env_kwargs}


def resume_best(
    config: TrainConfig, hp: Mapping[str, Any] | None = None, warn: bool = True, setup: dict[str, Any] | None = None
) -> float | None:
    """The best evaluation a resumed training must beat (``best.json``), or None."""
    if resume_checkpoint(config) is None:
        return None
    if setup is None:
        setup = eval_setup(config, resolve_hyperparams(config) if hp is None else hp)
    return read_best(config.run_folder, setup, warn=warn)


def named_tenants(config: TrainConfig) -> frozenset[str] | None:
    """The tenants whose figures get tags: every one (None), none for the generalist (they change per episode)."""
    return frozenset() if config.kind.mixture else None


def train(config: TrainConfig) -> Path:
    """Run one training as ``config`` says and return its run folder; a one-line ``ValueError`` for anything refused."""
    torch.set_num_threads(1)
    t_start = time.perf_counter()
    hp, best, setup = preflight(config)  # every refusal before anything is written
    with locked_output(config.run_folder, "llmsched-train"):  # a second training into this folder is refused
        prepare_run_folder(config, hp)
        run = {k: hp.pop(k) for k in RUN_KEYS if k in hp}
        env_kwargs = _env_kwargs(config, dict(run["env_kwargs"]))
        n_envs = int(run["n_envs"])
        env_id = config.kind.env_id_for(env_kwargs.get("schema"))
        where = f"{config.scenario}, train split, {config.vec_env} vec env"
        status(f"building {n_envs} envs of {env_id} ({where})", enabled=config.progress)
        vec_cls = SubprocVecEnv if config.vec_env == "subproc" else DummyVecEnv
        make_train_env = make_env_fn(config.env_scenario, config.algo, env_kwargs)
        if vec_cls is SubprocVecEnv:
            make_train_env = dying_with_parent(make_train_env)
        vec_env = make_vec_env(make_train_env, n_envs=n_envs, seed=config.seed, vec_env_cls=vec_cls)
        try:
            t_model = time.perf_counter()
            model, resumed = _model(config, hp, run, vec_env, env_kwargs)
            phases = {"start": t_start, "clone_s": time.perf_counter() - t_model}  # cloning and DAgger, if any
            out = _learn(config, model, resumed, run, env_kwargs, best if resumed else None, setup, phases)
        finally:
            vec_env.close()
        command = shlex.join(["llmsched-train", *config.to_argv()])
        mark_complete(out, {"command": command, "timesteps": int(model.num_timesteps)})
        return out


def _learn(
    config: TrainConfig,
    model: BaseAlgorithm,
    resumed: bool,
    run: dict[str, Any],
    env_kwargs: dict[str, Any],
    best: float | None,
    setup: dict[str, Any],
    phases: dict[str, float],
) -> Path:
    """Learn with checkpoints and periodic evaluation, export the best policy, write the summary."""
    out, scenario = config.run_folder, config.scenario
    exportable = config.algo in ACTOR_CRITIC_ALGOS
    single = make_env_fn(config.env_scenario, config.algo, env_kwargs, agent=False)()

    def export(m: BaseAlgorithm) -> None:
        if exportable:
            export_run_policy(m, single, out, scenario, config.seed, env_kwargs)

    eval_kwargs = eval_env_kwargs(env_kwargs, run)

    def make_eval_env(agent: bool) -> gym.Env:
        kw = dict(eval_kwargs) if config.kind.mixture else dict(eval_kwargs, load=run["eval_load"])
        if not agent:
            kw["iterations_per_step"] = 1  # baselines decide every iteration
        return make_env_fn(config.env_scenario, config.algo, kw, split="val", agent=agent)()

    if not config.kind.mixture and int(run["eval_freq"]) > 0:  # the generalist's val episodes: each at its knee
        note = val_window_note(make_eval_env(False), setup["eval_seeds"], float(run["eval_load"]))
        if note is not None:
            print(
                f"periodic evaluation at eval_load {float(run['eval_load']):g}: {note}: the checkpoints are compared "
                "on windows too short to hold that load",
                file=sys.stderr,
            )
    every = max(int(run["eval_freq"]) // int(run["n_envs"]), 1)
    evaluator = PeriodicEvalCallback(
        make_eval_env,
        list(config.baselines),
        seeds=setup["eval_seeds"],
        eval_freq=every,
        out_dir=out,
        on_best=export,
        progress=config.progress,
        best_attainment=float("-inf") if best is None else best,
        eval_setup=setup,
        per_scenario=config.kind.mixture,  # one val episode per library scenario
    )
    evaluator.verbose = 1
    steps = int(run["n_timesteps"])  # the whole budget: a resumed run learns what remains of it
    remaining = steps - int(model.num_timesteps) if resumed else steps
    if resumed:
        evaluator.history = read_history(out, setup, int(model.num_timesteps))
    left = f"the {remaining} steps left of {steps}" if resumed else f"{steps} steps"
    message = f"training {config.algo} for {left}; TensorBoard events in {out / 'tb'}"
    parts: list[BaseCallback] = [
        EpisodeMetricsCallback(named_tenants(config)),
        SignedCheckpointCallback(every, str(out / "checkpoints"), name_prefix="model", binding=run_binding(config)),
        evaluator,
        ProgressBarCallback(message, enabled=config.progress),
    ]
    anchor = float(run.get("anchor_coef") or 0.0)
    if anchor > 0:  # preflight refused it on a resumed run: the policy here is the start
        from agents.anchor import AnchorCallback

        batch = int(getattr(model, "batch_size", 0) or 256)
        parts.append(AnchorCallback(anchor, int(run.get("anchor_epochs", 1)), batch, seed=config.seed))
    parts.append(UpdateLogCallback())  # last: after the anchor's pull, which records with the update
    callbacks = CallbackList(parts)
    t0 = time.perf_counter()
    if remaining > 0:
        model.learn(
            total_timesteps=remaining,  # SB3 counts on from the resumed model's steps
            callback=callbacks,
            progress_bar=False,  # ProgressBarCallback: on stderr, as every bar of the commands
            reset_num_timesteps=not resumed,
            tb_log_name="run",
        )
    else:
        done = f"the checkpoint holds {model.num_timesteps} steps of the {steps} asked for: nothing left to learn"
        status(done, enabled=config.progress)
    wall = time.perf_counter() - t0
    with replaced_atomically(out / "model.zip") as tmp:
        model.save(str(tmp))
    if evaluator.best_attainment == float("-inf"):
        export(model)  # never evaluated (a very short run): export the final model
    if resumed and best is not None:
        print(f"resumed with the best evaluation so far {best:.3f}; best now {evaluator.best_attainment:.3f}")
    evaluations = evaluator.baselines_wall_s + evaluator.eval_wall_s
    total = time.perf_counter() - phases["start"]
    summary = {
        "wall_s": wall,  # learning, its evaluations included
        "total_wall_s": total,  # every phase: building the envs, cloning, evaluations, learning, export
        "clone_wall_s": phases["clone_s"],
        "eval_wall_s": evaluations,
        "learn_wall_s": max(wall - evaluations, 0.0),
        "timesteps": int(model.num_timesteps),
        "best_eval_attainment": evaluator.best_attainment,  # -inf (null) when never evaluated
        "baseline_attainment": evaluator.baseline_attainment,
        "eval_history": evaluator.history,
        "exported": exportable,
    }
    write_text_atomically(out / "summary.json", finite_json(summary, indent=1))
    print(
        f"trained {model.num_timesteps} steps in {total:.0f} s: cloning {phases['clone_s']:.0f} s, evaluations "
        f"{evaluations:.0f} s, {config.algo} {max(wall - evaluations, 0.0):.0f} s, the rest "
        f"{max(total - phases['clone_s'] - wall, 0.0):.0f} s (envs, export); run folder {out}",
        flush=True,
    )
    return out
