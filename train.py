"""Train a Stable-Baselines3 agent on an llmsched scenario.

    python train.py --scenario mixed-slo --algo maskable_ppo --timesteps 300000 --seed 0 --out runs/mixed0
    python train.py --scenario mixed-slo --quick --out runs/quick     # under 10 minutes on 2 cores
    python train.py --scenarios mixed-slo,bursty --seeds 0,1 --ray --out runs/sweep   # 4 trainings on Ray

Hyperparameters come from ``agents/hyperparams/<algo>.yml`` keyed by scenario, overridable with
``--hp key=value``. The run folder keeps the resolved config (``config.yml``), the arguments, the command
line, TensorBoard events (``tb/``), checkpoints, the final and best models and the exported policy
(``policy.safetensors`` + ``policy.json``) that ``evaluate.py`` and the torch runtime load.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
import torch
import yaml
from stable_baselines3.common.callbacks import CallbackList, CheckpointCallback
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv

import baselines
import llmsched_env  # noqa: F401  (registers LLMSched-v0)
from agents import ALGOS
from agents.bc import behaviour_clone
from agents.callbacks import EpisodeMetricsCallback, PeriodicEvalCallback
from agents.config import load_hyperparams, merge_config, parse_overrides
from agents.sb3 import FLAT_ACTION_ALGOS, make_model
from agents.wrappers import FlatActions
from llmsched_env.cluster.scenarios import list_cluster_scenarios
from llmsched_env.evaluation.distributed import strip_options
from llmsched_env.workloads.library import list_scenarios

EXPORTABLE = {"maskable_ppo", "ppo", "a2c"}
QUICK = {  # the --quick preset: the whole pipeline in a few minutes on a 2-core laptop
    "n_timesteps": 100_000,
    "n_envs": 2,
    "n_steps": 1024,
    "batch_size": 256,
    "bc_steps": 10_000,
    "env_kwargs": {"num_requests": 300},
    "eval_freq": 50_000,
    "eval_episodes": 2,
}
RUN_KEYS = (
    "n_timesteps",
    "n_envs",
    "env_kwargs",
    "eval_load",
    "bc_warmstart",
    "bc_steps",
    "bc_smoothing",
    "eval_freq",
    "eval_episodes",
)
DEFAULT_EVAL_BASELINES = "fcfs,priority_aging,sjf,vtc,kv_guard,sarathi,slo_aware"
DEFAULT_EVAL_ROUTERS = "round_robin,least_outstanding,least_kv_load,prefix_affinity,power_of_two"


def is_cluster(scenario: str) -> bool:
    """Cluster scenarios train routers on ``LLMSchedCluster-v0``; the others schedulers on ``LLMSched-v0``."""
    return scenario in list_cluster_scenarios()


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--scenario",
        default="default",
        help=f"one of {', '.join(list_scenarios())}; or, to train a router, "
        f"{', '.join(list_cluster_scenarios())}",
    )
    p.add_argument("--algo", choices=sorted(ALGOS), default="maskable_ppo")
    p.add_argument("--timesteps", type=int, default=None, help="total environment steps (default: the YAML's)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, required=True, help="run folder")
    p.add_argument("--n-envs", type=int, default=None, help="parallel environments (default: the YAML's)")
    p.add_argument("--vec-env", choices=("dummy", "subproc"), default="dummy")
    p.add_argument("--hp", action="append", default=[], metavar="KEY=VALUE", help="override a hyperparameter")
    p.add_argument("--hyperparams", type=Path, default=None, help="a YAML file instead of agents/hyperparams/")
    p.add_argument("--quick", action="store_true", help="a short run (QUICK: 100k steps, a few minutes)")
    p.add_argument("--resume", action="store_true", help="continue from the run folder's latest checkpoint")
    p.add_argument("--bc", default=None, help="baseline to clone before RL ('none' to skip; default: the YAML's)")
    p.add_argument(
        "--eval-baselines",
        default=None,
        help=f"baselines the evaluation compares to (default: {DEFAULT_EVAL_BASELINES}; routers for a cluster: "
        f"{DEFAULT_EVAL_ROUTERS})",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    sweep = p.add_argument_group("many trainings (each in its own run folder OUT/<scenario>-seed<K>[-key=value])")
    sweep.add_argument("--scenarios", default=None, help="comma list: one training per scenario")
    sweep.add_argument("--seeds", default=None, help="comma list: one training per seed")
    sweep.add_argument(
        "--hp-grid", action="append", default=[], metavar="KEY=V1,V2", help="one training per value (trials)"
    )
    sweep.add_argument(
        "--ray", nargs="?", const="local", default=None, metavar="ADDRESS",
        help="run the trainings as Ray tasks (no ADDRESS: start a local Ray); needs the 'distributed' extra",
    )  # fmt: skip
    sweep.add_argument("--ray-cpus", type=int, default=None, help="CPUs of the local Ray (default: all)")
    args = p.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    args.sweep = bool(args.scenarios or args.seeds or args.hp_grid or args.ray)
    if args.sweep:
        for s in (args.scenarios or "").split(","):
            if s and s not in list_scenarios():
                p.error(f"unknown scenario {s!r} in --scenarios; available: {', '.join(list_scenarios())}")
        try:
            args.seed_list = [int(x) for x in (args.seeds or str(args.seed)).split(",") if x]
        except ValueError:
            p.error(f"--seeds must be a comma list of integers, got {args.seeds!r}")
        for item in args.hp_grid:
            if "=" not in item or not item.split("=", 1)[1]:
                p.error(f"--hp-grid expects KEY=V1,V2,..., got {item!r}")
    known = [*list_scenarios(), *list_cluster_scenarios()]
    if args.scenario not in known:
        p.error(f"unknown scenario {args.scenario!r}; available: {', '.join(known)}")
    if args.timesteps is not None and args.timesteps < 1:
        p.error("--timesteps must be >= 1")
    if args.n_envs is not None and args.n_envs < 1:
        p.error("--n-envs must be >= 1")
    cluster = is_cluster(args.scenario) or any(is_cluster(s) for s in (args.scenarios or "").split(","))
    names = baselines.available_routers() if cluster else baselines.available()
    if args.eval_baselines is None:
        args.eval_baselines = DEFAULT_EVAL_ROUTERS if cluster else DEFAULT_EVAL_BASELINES
    bad = [b for b in args.eval_baselines.split(",") if b and b not in names]
    if bad:
        p.error(f"unknown --eval-baselines {bad}; available: {', '.join(names)}")
    if args.bc not in (None, "none") and args.bc not in names:
        p.error(f"unknown --bc baseline {args.bc!r}; available: {', '.join(names)}")
    try:
        args.overrides = parse_overrides(args.hp)
    except ValueError as exc:
        p.error(str(exc))
    return args


def resolve_config(args: argparse.Namespace) -> dict[str, Any]:
    """The YAML entry for (algo, scenario), then --quick, then --hp, then explicit flags."""
    hp = load_hyperparams(args.algo, args.scenario, path=args.hyperparams)
    if args.quick:
        hp = merge_config(hp, QUICK)
    hp = merge_config(hp, args.overrides)
    if args.timesteps is not None:
        hp["n_timesteps"] = args.timesteps
    if args.n_envs is not None:
        hp["n_envs"] = args.n_envs
    if args.bc is not None:
        hp["bc_warmstart"] = None if args.bc == "none" else args.bc
    if args.algo not in {"maskable_ppo", "ppo", "a2c"}:
        hp["bc_warmstart"] = None  # the warm start fits actor-critic policies
    hp.setdefault("eval_freq", max(hp.get("n_timesteps", 100_000) // 10, 1000))
    hp.setdefault("eval_episodes", 3)
    hp.setdefault("eval_load", 1.2)
    return hp


def make_env_fn(args: argparse.Namespace, env_kwargs: dict[str, Any], split: str = "train", agent: bool = True):  # type: ignore[no-untyped-def]
    """A factory of ``LLMSched-v0`` (or, for a cluster scenario, ``LLMSchedCluster-v0``) envs; ``agent`` wraps
    them for the algorithm (DQN's flat actions)."""

    def make() -> gym.Env:
        if is_cluster(args.scenario):  # one routing decision per arrival: no iterations_per_step
            kwargs = {k: v for k, v in env_kwargs.items() if k != "iterations_per_step"}
            return gym.make("LLMSchedCluster-v0", scenario=args.scenario, split=split, **kwargs)
        env = gym.make("LLMSched-v0", scenario=args.scenario, split=split, **env_kwargs)
        return FlatActions(env) if agent and args.algo in FLAT_ACTION_ALGOS else env

    return make


def latest_checkpoint(folder: Path) -> Path | None:
    ckpts = sorted(folder.glob("model_*_steps.zip"), key=lambda p: int(p.stem.split("_")[1]))
    return ckpts[-1] if ckpts else None


def sweep_runs(args: argparse.Namespace) -> list[tuple[Path, list[str]]]:
    """(run folder, train.py command line) of every training of a sweep: scenarios x seeds x hp-grid values."""
    base = strip_options(
        args.argv,
        with_value=("--scenarios", "--seeds", "--hp-grid", "--ray-cpus", "--out", "--scenario", "--seed"),
        optional_value=("--ray",),
    )
    scenarios = [s for s in (args.scenarios or args.scenario).split(",") if s]
    grid: list[list[tuple[str, str]]] = [[]]
    for item in args.hp_grid:
        key, values = item.split("=", 1)
        grid = [[*g, (key, v)] for g in grid for v in values.split(",")]
    runs = []
    for scenario in scenarios:
        for seed in args.seed_list:
            for trial in grid:
                name = f"{scenario}-seed{seed}" + "".join(f"-{k}={v}" for k, v in trial)
                out = (args.out / name).resolve()
                cmd = [*base, "--scenario", scenario, "--seed", str(seed), "--out", str(out), "--no-progress"]
                cmd += [x for k, v in trial for x in ("--hp", f"{k}={v}")]
                runs.append((out, cmd))
    return runs


def train_task(cmd: list[str], cwd: str) -> dict[str, Any]:
    """One training of a sweep, as a child process (its own run folder, TensorBoard events and log)."""
    import subprocess

    root = cwd if os.path.isfile(os.path.join(cwd, "train.py")) else os.getcwd()  # a remote node: working_dir
    out = Path(cmd[cmd.index("--out") + 1])
    out.mkdir(parents=True, exist_ok=True)
    with (out / "train.log").open("w") as log:
        code = subprocess.run(
            [sys.executable, "train.py", *cmd], cwd=root, stdout=log, stderr=subprocess.STDOUT
        ).returncode
    summary = out / "summary.json"
    return {
        "out": str(out),
        "returncode": code,
        "summary": json.loads(summary.read_text()) if summary.is_file() else None,
    }


def run_sweep(args: argparse.Namespace) -> int:
    runs = sweep_runs(args)
    args.out.mkdir(parents=True, exist_ok=True)
    jobs = [(cmd, os.getcwd()) for _, cmd in runs]
    if args.ray:
        from llmsched_env.evaluation.distributed import ray_map

        print(f"{len(jobs)} trainings on Ray ({args.ray})")
        results = ray_map(train_task, jobs, address=args.ray, num_cpus=args.ray_cpus)
    else:
        results = [train_task(*job) for job in jobs]
    (args.out / "sweep.json").write_text(json.dumps(results, indent=1))
    for r in results:
        best = (r["summary"] or {}).get("best_eval_attainment")
        print(f"{r['out']}: exit {r['returncode']}, best evaluation attainment {best}")
    return 0 if all(r["returncode"] == 0 for r in results) else 1


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.sweep:
        return run_sweep(args)
    torch.set_num_threads(1)  # SB3 on 2 cores runs far slower with more threads
    hp = resolve_config(args)
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.yml").write_text(yaml.safe_dump({"algo": args.algo, "scenario": args.scenario, **hp}))
    (out / "args.json").write_text(json.dumps({k: str(v) for k, v in vars(args).items()}, indent=1))
    (out / "command.txt").write_text(shlex.join([sys.executable, *sys.argv]) + "\n")
    run = {k: hp.pop(k) for k in RUN_KEYS if k in hp}
    env_kwargs = dict(run["env_kwargs"])
    if isinstance(env_kwargs.get("load"), list):
        env_kwargs["load"] = tuple(env_kwargs["load"])
    vec_cls = SubprocVecEnv if args.vec_env == "subproc" else DummyVecEnv
    vec_env = make_vec_env(make_env_fn(args, env_kwargs), n_envs=run["n_envs"], seed=args.seed, vec_env_cls=vec_cls)
    ckpt_dir = out / "checkpoints"
    resume_from = latest_checkpoint(ckpt_dir) if args.resume else None
    if args.resume and resume_from is None:
        print(f"--resume: no checkpoint in {ckpt_dir}; starting fresh")
    if resume_from is not None:
        model = ALGOS[args.algo].load(str(resume_from), env=vec_env, device="cpu", tensorboard_log=str(out / "tb"))
        print(f"resumed from {resume_from} at {model.num_timesteps} steps")
    else:
        model = make_model(args.algo, vec_env, seed=args.seed, tensorboard_log=str(out / "tb"), **hp)
        if run.get("bc_warmstart"):
            t0 = time.perf_counter()
            stats = behaviour_clone(
                model,
                make_env_fn(args, env_kwargs, agent=False),
                run["bc_warmstart"],
                int(run.get("bc_steps", 20_000)),
                seed=args.seed,
                smoothing=float(run.get("bc_smoothing", 0.1)),
            )
            stats["bc_seconds"] = time.perf_counter() - t0
            (out / "bc.json").write_text(json.dumps({"baseline": run["bc_warmstart"], **stats}, indent=1))
            print(f"behaviour cloning from {run['bc_warmstart']}: {stats}")

    exportable = args.algo in EXPORTABLE
    single = make_env_fn(args, env_kwargs, agent=False)()

    def export(m: Any) -> None:
        if exportable:
            from agents.export import export_policy

            extra = {"scenario": args.scenario, "seed": args.seed, "timesteps": int(m.num_timesteps)}
            extra["iterations_per_step"] = (
                1 if is_cluster(args.scenario) else int(env_kwargs.get("iterations_per_step", 1))
            )
            export_policy(m, single, out, extra=extra)

    eval_kwargs = {k: v for k, v in env_kwargs.items() if k != "load"}

    def make_eval_env(agent: bool) -> gym.Env:
        kw = dict(eval_kwargs, load=run["eval_load"])
        if not agent:
            kw["iterations_per_step"] = 1  # baselines decide every iteration
        return make_env_fn(args, kw, split="eval", agent=agent)()

    n_envs = run["n_envs"]
    evaluator = PeriodicEvalCallback(
        make_eval_env,
        [b for b in args.eval_baselines.split(",") if b],
        seeds=list(range(int(run["eval_episodes"]))),
        eval_freq=max(int(run["eval_freq"]) // n_envs, 1),
        out_dir=out,
        on_best=export,
    )
    evaluator.verbose = 1
    callbacks = CallbackList(
        [
            EpisodeMetricsCallback(),
            CheckpointCallback(max(int(run["eval_freq"]) // n_envs, 1), str(ckpt_dir), name_prefix="model"),
            evaluator,
        ]
    )
    t0 = time.perf_counter()
    model.learn(
        total_timesteps=int(run["n_timesteps"]),
        callback=callbacks,
        progress_bar=not args.no_progress,
        reset_num_timesteps=resume_from is None,
        tb_log_name="run",
    )
    wall = time.perf_counter() - t0
    model.save(str(out / "model.zip"))
    if evaluator.best_attainment == float("-inf"):
        export(model)  # never evaluated (a very short run): export the final model
    summary = {
        "wall_s": wall,
        "timesteps": int(model.num_timesteps),
        "best_eval_attainment": evaluator.best_attainment,
        "baseline_attainment": evaluator.baseline_attainment,
        "eval_history": evaluator.history,
        "exported": exportable,
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    print(f"trained {model.num_timesteps} steps in {wall:.0f} s; run folder {out}")
    vec_env.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
