"""What one training is: a frozen, validated ``TrainConfig``, the hyperparameters it resolves to (the YAML
entry, then --quick, then --hp, then the explicit fields) and ``to_argv()``, its ``llmsched-train`` command line.
"""

from __future__ import annotations

import difflib
import inspect
import itertools
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agents.config import ALGO_NAMES, HYPERPARAM_DIR, dotted, load_hyperparams, merge_config
from llmsched_env.cluster.scenarios import list_cluster_scenarios
from llmsched_env.common.checks import MAX_LOAD, MIN_LOAD, SEED_LIMIT, check_unique, is_finite_number, shown
from llmsched_env.common.files import retold
from llmsched_env.common.registry import Registry
from llmsched_env.decision.policy_file import PolicyFileError
from llmsched_env.decision.registry import ROUTERS, SCHEDULERS
from llmsched_env.decision.schema import SCHEMA_VERSION
from llmsched_env.decision.schema import env_id as schema_env_id
from llmsched_env.envs.options import MAX_EPISODE_REQUESTS
from llmsched_env.workloads.library import list_scenarios

if TYPE_CHECKING:
    from llmsched_env.runtime.policy_file import ExportedPolicy

ACTOR_CRITIC_ALGOS = frozenset({"maskable_ppo", "ppo", "a2c"})  # behaviour cloning and export fit these
QUICK: dict[str, Any] = {  # the --quick preset: the whole pipeline in a few minutes on a 2-core laptop
    "n_timesteps": 100_000, "n_envs": 2, "n_steps": 1024, "batch_size": 256, "bc_steps": 10_000,
    "env_kwargs": {"num_requests": 300}, "eval_freq": 50_000, "eval_episodes": 2,
}  # fmt: skip
# keys of the resolved hyperparameters that shape the run, not the SB3 model
RUN_KEYS = ("n_timesteps", "n_envs", "env_kwargs", "eval_load", "bc_warmstart", "bc_steps", "bc_smoothing", "bc_dagger",
            "bc_stride", "eval_freq", "eval_episodes", "eval_num_requests", "anchor_coef", "anchor_epochs")  # fmt: skip
DEFAULT_EVAL_BASELINES = ("fcfs", "priority_aging", "sjf", "vtc", "kv_guard", "sarathi", "slo_aware")
DEFAULT_EVAL_ROUTERS = ("round_robin", "least_outstanding", "least_kv_load", "prefix_affinity", "power_of_two")


GENERALIST = "generalist"  # the pseudo-scenario of one policy over every workload (LLMSchedMix-v0)
# TrainConfig's fields that set a hyperparameter, and the hyperparameter: giving both (--n-envs 1 --hp n_envs=8)
# is refused rather than one of them ignored
FIELD_HYPERPARAMS = {"timesteps": "n_timesteps", "n_envs": "n_envs", "bc": "bc_warmstart"}
# the behaviour cloning's hyperparameters: with --bc none or --init nothing is cloned, and giving one is refused
BC_KEYS = ("bc_steps", "bc_smoothing", "bc_dagger", "bc_stride")


@dataclass(frozen=True)
class EnvKind:
    """What a training does differently per kind of scenario (``ENV_KINDS``, ``env_kind``)."""

    name: str
    env_id: str  # the env it trains on
    registry: Registry[Any]  # of its teachers and evaluation baselines
    eval_baselines: tuple[str, ...]  # the default ones
    drops: tuple[str, ...] = ()  # ``env_kwargs`` its env does not take
    mixture: bool = False  # one workload per episode, evaluated on one val episode per library scenario at its knee
    iterations_per_step: int | None = None  # fixed (None: the run's ``env_kwargs``)
    flat_actions: bool = False  # DQN sees a flat action space
    init_schema: int | None = None  # the schema a start policy must have (None: any)
    by_schema: bool = False  # ``env_id`` follows the run's observation schema
    no_init: str | None = None  # why ``init`` is refused (None: allowed)
    no_trace: str | None = None  # why ``trace`` is refused (None: allowed)

    def env_id_for(self, schema: int | None = None) -> str:
        """The env this kind trains on for observation ``schema`` (None: the current one)."""
        return schema_env_id(SCHEMA_VERSION if schema is None else schema) if self.by_schema else self.env_id


ENV_KINDS = {
    "scheduler": EnvKind(
        "scheduler", "LLMSched-v1", SCHEDULERS, DEFAULT_EVAL_BASELINES, flat_actions=True, by_schema=True
    ),
    "router": EnvKind(
        "router", "LLMSchedCluster-v0", ROUTERS, DEFAULT_EVAL_ROUTERS, drops=("iterations_per_step",),
        iterations_per_step=1,  # one routing decision per arrival
        no_init="fine-tuning starts single-node schedulers, not routers",
        no_trace="a trace trains a single-node scheduler, not a router",
    ),
    "generalist": EnvKind(  # the val episodes are library scenarios: tuned has each one's settings
        "generalist", "LLMSchedMix-v0", SCHEDULERS, (*DEFAULT_EVAL_BASELINES, "tuned"), drops=("load",),
        mixture=True, init_schema=2,
        no_trace="the generalist trains on its mix; fine-tune it on a trace with init instead",
    ),
}  # fmt: skip


def env_kind(scenario: str | Any) -> EnvKind:
    """The kind of ``scenario``: ``generalist``, a cluster scenario's ``router``, else ``scheduler``."""
    if scenario == GENERALIST:
        return ENV_KINDS["generalist"]
    return ENV_KINDS["router" if scenario in list_cluster_scenarios() else "scheduler"]


@dataclass(frozen=True)
class TrainConfig:
    """One training; a bad value is a one-line ``ValueError``; ``None`` fields take the hyperparameter file's value."""

    scenario: str = "default"  # ``generalist``: one schema-2 policy on ``LLMSchedMix-v0``
    algo: str = "maskable_ppo"
    seed: int = 0
    out: Path | None = None  # None: runs/<scenario>-seed<seed>
    timesteps: int | None = None
    n_envs: int | None = None
    vec_env: str = "dummy"
    hp: Mapping[str, Any] = field(default_factory=dict)  # nested overrides (``agents.config.parse_overrides``)
    hyperparams: Path | None = None
    quick: bool = False
    resume: bool = False
    bc: str | None = None  # a baseline to clone before RL ("none": no cloning)
    eval_baselines: tuple[str, ...] | None = None  # None: the kind's defaults; a comma string is split
    progress: bool = True
    force: bool = False  # a run folder inside a shipped folder is allowed
    init: Path | None = None  # an exported policy whose weights start the training (its network shape wins)
    # a user's trace instead of ``scenario`` (``llmsched-evaluate --trace`` options by name, ``engine``: engine
    # limits), split in time into train, val and test; ``scenario`` becomes its name
    trace: Mapping[str, Any] | None = None
    # derived once in __post_init__ and handed to the training from here
    _init_policy: ExportedPolicy | None = field(default=None, init=False, repr=False, compare=False)
    _trace_scenario: Any = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.trace is not None:
            self._read_trace()
        known = [*list_scenarios(), GENERALIST, *list_cluster_scenarios()]
        known += [self.scenario] if self.trace is not None else []
        if self.scenario not in known:
            raise ValueError(f"scenario: unknown scenario {shown(self.scenario)}; available: {', '.join(known)}")
        if self.algo not in ALGO_NAMES:
            raise ValueError(f"algo: unknown algorithm {shown(self.algo)}; available: {', '.join(ALGO_NAMES)}")
        for name in ("seed", "timesteps", "n_envs"):
            value, low = getattr(self, name), 0 if name == "seed" else 1
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < low):
                raise ValueError(f"{name}: expected an integer >= {low}, got {shown(value)}")
        if self.seed >= SEED_LIMIT:  # numpy's legacy seeds, which the envs take
            raise ValueError(f"seed: expected an integer in [0, 2**32 - 1 = {SEED_LIMIT - 1}], got {shown(self.seed)}")
        for name, high in (("timesteps", MAX_TIMESTEPS), ("n_envs", MAX_ENVS)):
            if (getattr(self, name) or 0) > high:
                raise ValueError(f"{name}: expected an integer in [1, {high:,}], got {shown(getattr(self, name))}")
        if self.vec_env not in ("dummy", "subproc"):
            raise ValueError(f"vec_env: expected 'dummy' or 'subproc', got {shown(self.vec_env)}")
        if not isinstance(self.hp, Mapping):
            raise ValueError(f"hp: expected a mapping of hyperparameter overrides, got {shown(self.hp)}")
        for name, key in FIELD_HYPERPARAMS.items():  # one value, one place: the field would win without a word
            if getattr(self, name) is not None and key in self.hp:
                flag = "--" + name.replace("_", "-")
                raise ValueError(
                    f"{name}: given twice, as {flag} {getattr(self, name)} and as --hp {key}={shown(self.hp[key])} "
                    f"(the first would override the second); give one of them"
                )
        registry = self.kind.registry
        if self.bc not in (None, "none"):  # a name, or a comma list (the first that builds for each episode)
            from agents.teacher import check_teacher

            try:
                check_teacher(self.bc, registry)
            except ValueError as err:
                raise ValueError(f"bc: {err}") from None
        if self.eval_baselines is not None:
            given = self.eval_baselines
            names = tuple(b for b in given.split(",") if b) if isinstance(given, str) else tuple(given)
            if not names:
                raise ValueError(
                    f"eval_baselines: an empty list; name at least one {registry.kind} ({', '.join(registry)}), "
                    "or leave it out for the default ones"
                )
            bad = [b for b in names if b not in registry]
            if bad:
                raise ValueError(f"eval_baselines: unknown {registry.kind}s {bad}; available: {', '.join(registry)}")
            check_unique("eval_baselines", names)
            object.__setattr__(self, "eval_baselines", names)
        out = Path(self.out) if self.out is not None else Path("runs") / f"{self.scenario}-seed{self.seed}"
        object.__setattr__(self, "out", out)
        if self.hyperparams is not None:
            object.__setattr__(self, "hyperparams", Path(self.hyperparams))
        if self.init is not None:
            object.__setattr__(self, "init", Path(self.init))
            if self.kind.no_init is not None:
                raise ValueError(f"init: {self.kind.no_init}")
            if self.resume:
                raise ValueError("init: give either --init (start from a policy) or --resume (continue a run)")
            if self.bc not in (None, "none"):
                raise ValueError(
                    f"init: give either --init (start from a policy's weights) or --bc {self.bc} (clone a baseline)"
                )
            from llmsched_env.runtime.policy_file import load_policy_file

            try:
                start = load_policy_file(self.init)
            except ValueError as exc:  # the file's checks, not the option: one error line without the usage block
                raise PolicyFileError(f"init: {exc}") from None
            need = self.kind.init_schema
            if need is not None and start.schema_version != need:
                raise ValueError(
                    f"init: {start.path} has observation schema {start.schema_version}; the {self.kind.name} needs "
                    f"schema {need}"
                )
            object.__setattr__(self, "_init_policy", start)  # read once: the training takes it from here

    def _read_trace(self) -> None:
        """Build the trace's scenario once and name the run after it."""
        from llmsched_env.workloads.trace_options import build_trace_scenario

        if not isinstance(self.trace, Mapping):
            raise ValueError(f"trace: expected a mapping of trace options, got {shown(self.trace)}")
        options = {k: v for k, v in self.trace.items() if k != "engine"}
        limits = dict(self.trace.get("engine") or {})
        if self.kind.no_trace is not None:
            raise ValueError(f"trace: {self.kind.no_trace}")
        try:
            scenario = build_trace_scenario(options, limits)
        except ValueError as exc:  # a refusal of the file stays one (a one-line error, not a usage line)
            raise retold(exc, f"trace: {exc}") from None
        object.__setattr__(self, "trace", {**options, **({"engine": limits} if limits else {})})
        object.__setattr__(self, "scenario", scenario.name)
        object.__setattr__(self, "_trace_scenario", scenario)

    @property
    def kind(self) -> EnvKind:
        """The kind of this training's scenario (``env_kind``)."""
        return env_kind(self.scenario)

    @property
    def env_scenario(self) -> Any:
        """What the envs are built on: the trace's ``Scenario``, else the ``scenario`` name."""
        return self._trace_scenario or self.scenario

    @property
    def init_policy(self) -> ExportedPolicy | None:
        """The ``ExportedPolicy`` of ``init`` (read once by ``__post_init__``); None without it."""
        return self._init_policy

    @property
    def run_folder(self) -> Path:
        """The run folder (``out``, defaulted in ``__post_init__``)."""
        assert self.out is not None
        return self.out

    @property
    def baselines(self) -> tuple[str, ...]:
        """The baselines (or routers) the evaluation compares to."""
        return self.eval_baselines if self.eval_baselines is not None else self.kind.eval_baselines

    def to_argv(self) -> list[str]:
        """The ``llmsched-train`` arguments of this training (``hp`` as one ``--hp key=JSON`` per leaf)."""
        argv = ["--scenario", self.scenario] if self.trace is None else []  # a trace replaces --scenario
        argv += ["--algo", self.algo, "--seed", str(self.seed)]
        argv += ["--out", str(self.run_folder), "--vec-env", self.vec_env]
        optional: dict[str, object] = {"--timesteps": self.timesteps, "--n-envs": self.n_envs, "--bc": self.bc}
        optional["--hyperparams"] = self.hyperparams
        optional["--init"] = self.init
        optional["--eval-baselines"] = ",".join(self.eval_baselines) if self.eval_baselines is not None else None
        argv += [x for key, value in optional.items() if value is not None for x in (key, str(value))]
        for key, value in (self.trace or {}).items():  # the trace replaces --scenario
            if key == "engine":
                argv += [x for name, n in value.items() for x in (f"--{name.replace('_', '-')}", str(n))]
            else:
                argv += [f"--{key.replace('_', '-')}", str(value)]
        argv += [x for key, value in dotted(self.hp).items() for x in ("--hp", f"{key}={json.dumps(value)}")]
        flags = {"--quick": self.quick, "--resume": self.resume, "--no-progress": not self.progress}
        return argv + [flag for flag, on in flags.items() if on] + (["--force"] if self.force else [])

    def as_dict(self) -> dict[str, Any]:
        """The fields as JSON-ready values (paths as strings)."""
        return json.loads(json.dumps({f.name: getattr(self, f.name) for f in fields(self) if f.init}, default=str))


def resolve_hyperparams(config: TrainConfig) -> dict[str, Any]:
    """The YAML entry for (algo, scenario), then ``QUICK`` and the entry's own ``quick:`` if ``quick``, then ``hp``,
    then the explicit fields, with the evaluation's defaults; checked (``check_hyperparams``)."""
    hp = load_hyperparams(config.algo, config.scenario, path=config.hyperparams)
    _check_file_keys(config, hp)
    own_quick = hp.pop("quick", None) or {}  # the entry's own --quick preset, over QUICK
    if not isinstance(own_quick, Mapping):
        raise ValueError(f"quick: expected a mapping of hyperparameters for --quick, got {shown(own_quick)}")
    if config.quick:  # the keys this algorithm takes (A2C has no batch_size, DQN no n_steps)
        takes = {*_model_params(config.algo), *RUN_KEYS}
        hp = merge_config(hp, {k: v for k, v in QUICK.items() if k in takes})
        hp = merge_config(hp, own_quick)
    hp = merge_config(hp, config.hp)
    if config.timesteps is not None:
        hp["n_timesteps"] = config.timesteps
    if config.n_envs is not None:
        hp["n_envs"] = config.n_envs
    if config.bc is not None:
        hp["bc_warmstart"] = None if config.bc == "none" else config.bc
    if config.algo not in ACTOR_CRITIC_ALGOS:
        hp["bc_warmstart"] = None  # the warm start fits actor-critic policies
    if config.trace is not None:  # episodes that fit in every part of the trace (val and test are the short ones)
        env_kwargs = dict(hp.get("env_kwargs") or {})
        fits = config.env_scenario.num_requests
        env_kwargs["num_requests"] = min(int(env_kwargs.get("num_requests", fits)), fits)
        hp["env_kwargs"] = env_kwargs
    hp.setdefault("eval_freq", max(hp.get("n_timesteps", 100_000) // 10, 1000))
    hp.setdefault("eval_episodes", 3)
    hp.setdefault("eval_load", 1.2)
    check_hyperparams(config.algo, hp)
    _check_overrides_act(config, hp)
    if hp.get("bc_warmstart"):  # as the training reads it: empty or null clones nothing
        from agents.teacher import check_teacher

        try:
            check_teacher(hp["bc_warmstart"], config.kind.registry)
        except ValueError as err:
            raise ValueError(f"hyperparameter 'bc_warmstart' (from the hyperparameter file or --hp): {err}") from None
    return hp


def _check_file_keys(config: TrainConfig, hp: Mapping[str, Any]) -> None:
    """``ValueError`` naming the file for a key of the entry used that neither the model nor the run takes (it would
    be ignored)."""
    known = sorted({*_model_params(config.algo), *RUN_KEYS, "quick"})
    unknown = [str(key) for key in hp if key not in known]
    if unknown:
        file = config.hyperparams or HYPERPARAM_DIR / f"{config.algo}.yml"
        raise ValueError(
            f"{file}: unknown hyperparameter(s) {', '.join(map(repr, unknown))} for {config.algo} in the entry used "
            f"for scenario {shown(config.scenario)}{_hint(unknown[0], known)}"
        )


def _hint(key: Any, known: list[str]) -> str:
    """``; did you mean 'NAME'?`` with the known name closest to ``key``, else ``; known: ...``."""
    close = difflib.get_close_matches(str(key), known, n=1)
    return f"; did you mean {shown(close[0])}?" if close else f"; known: {', '.join(known)}"


def _check_overrides_act(config: TrainConfig, hp: Mapping[str, Any]) -> None:
    """``ValueError`` for a ``--hp`` override the chosen options leave unused (cloning keys with ``--bc none`` or
    ``--init``, ``anchor_epochs`` without ``anchor_coef``, ``eval_episodes``/``eval_load`` for the generalist)."""
    given = set(config.hp)
    unused: list[tuple[list[str], str]] = []
    cloning = [key for key in (*BC_KEYS, "bc_warmstart") if key in given]
    if cloning and config.bc == "none":
        unused.append((cloning, "--bc none clones nothing"))
    elif cloning and config.init is not None:
        unused.append((cloning, "--init starts from the policy's weights, with no cloning"))
    if "anchor_epochs" in given and not hp.get("anchor_coef"):
        unused.append((["anchor_epochs"], "anchor_coef is 0, so there is no pull to take passes of"))
    evaluation: list[str] = [key for key in ("eval_episodes", "eval_load") if key in given]
    if evaluation and config.kind.mixture:
        why = "the generalist is evaluated on one val episode per library scenario, each at its knee load"
        unused.append((evaluation, why))
    for keys, why in unused[:1]:
        does, it = ("does", "it") if len(keys) == 1 else ("do", "them")
        raise ValueError(f"--hp {', '.join(keys)} {does} nothing here: {why}; drop {it}")


# the model's constructor arguments that the training sets itself, never a hyperparameter
_SET_BY_TRAINING = frozenset({"self", "env", "seed", "tensorboard_log", "verbose", "device", "_init_setup_model"})


def _model_params(algo: str) -> dict[str, Any]:
    """The hyperparameters ``algo``'s model takes, each with its default (``inspect.Parameter.empty``: none)."""
    from agents.sb3 import ALGOS  # SB3 and torch: only once a run's hyperparameters are checked

    return {
        name: p.default
        for name, p in inspect.signature(ALGOS[algo].__init__).parameters.items()
        if name not in _SET_BY_TRAINING and p.kind is not inspect.Parameter.VAR_KEYWORD
    }


# The range of each numeric hyperparameter, checked before anything is written (each cap far above any use).
_INF = float("inf")
MAX_TIMESTEPS = 10**9  # a budget past this is a typo (the library's runs train 10^4 to 3 x 10^5 steps)
MAX_ENVS = 256  # shipped: 4
MAX_LAYER_WIDTH = 1 << 16  # units in one hidden layer
MAX_HIDDEN_WEIGHTS = 10**8  # weights between hidden layers, summed over every network of the policy
MAX_LSTM_LAYERS = 64  # a recurrent policy's LSTM layers (its hidden size is at most MAX_LAYER_WIDTH)
MAX_ROLLOUT = 1 << 24  # n_steps x n_envs transitions held in one rollout (shipped: 2,048 x 4); ~16.7M x the obs
MAX_EVAL_EPISODES = 10_000  # val episodes per evaluation (shipped: 3): each evaluation plays them all
MAX_EVALUATIONS = 10_000  # n_timesteps // eval_freq: each evaluation also writes a checkpoint (shipped: 30)
MAX_EVAL_EPISODES_TOTAL = 100_000  # (evaluations + 1) x eval_episodes (shipped: 31 x 3): hours of episodes
MAX_BC_STEPS = 10**7  # labelled steps per cloning round (shipped: 50,000); each holds an observation in memory
MAX_BC_LABELLED = 10**7  # bc_steps x (1 + bc_dagger): every round's labelled steps are kept, in memory, to the end
MAX_BC_PLAYED = 10**8  # bc_steps x bc_stride: steps a round plays (shipped: 200,000), a reward and a flag each
Bounds = tuple[float, bool, float, bool, bool]  # (low, low included, high, high included, integer)


def _ints(low: int, high: float) -> Bounds:
    return (low, True, high, True, True)


HP_RANGES: dict[str, Bounds] = {
    **dict.fromkeys(("learning_rate", "gamma", "rms_prop_eps", "tau"), (0.0, False, 1.0, True, False)),
    **dict.fromkeys(("gae_lambda", "exploration_fraction", "exploration_initial_eps", "exploration_final_eps"),
                    (0.0, True, 1.0, True, False)),
    **dict.fromkeys(("clip_range", "clip_range_vf", "max_grad_norm", "target_kl"), (0.0, False, _INF, False, False)),
    **dict.fromkeys(("ent_coef", "vf_coef"), (0.0, True, _INF, False, False)),
    **dict.fromkeys(("n_steps", "batch_size", "train_freq"), _ints(1, 1 << 20)),
    "n_epochs": _ints(1, 10_000),
    "buffer_size": _ints(1, 1 << 27),
    "learning_starts": _ints(0, 1 << 40),
    "target_update_interval": _ints(1, 1 << 40),
    "stats_window_size": _ints(1, 1_000_000),  # episodes SB3 averages its rollout/ figures over
    "sde_sample_freq": _ints(-1, 1 << 20),
    "gradient_steps": _ints(-1, 100_000),  # per rollout (-1: as many as steps played)
    "n_timesteps": _ints(1, MAX_TIMESTEPS),
    "n_envs": _ints(1, MAX_ENVS),
    "eval_freq": _ints(1, MAX_TIMESTEPS),  # and at most MAX_EVALUATIONS evaluations in n_timesteps
    "eval_episodes": _ints(1, MAX_EVAL_EPISODES),
    "eval_num_requests": _ints(1, MAX_EPISODE_REQUESTS),  # the env's own cap on an episode
    "eval_load": (MIN_LOAD, True, MAX_LOAD, True, False),  # the env's own range of loads
    "bc_steps": _ints(1, MAX_BC_STEPS),
    "bc_dagger": _ints(0, 100),  # DAgger rounds after cloning (shipped: 6)
    "bc_stride": _ints(1, 1_000),  # one played step in bc_stride labelled (shipped: 4)
    "bc_smoothing": (0.0, True, 1.0, False, False),
    "anchor_epochs": _ints(1, 1_000),  # passes over each rollout per pull (default 1)
}  # fmt: skip
_RUN_INTS = [key for key in RUN_KEYS if HP_RANGES.get(key, (0,))[0] == 1 and HP_RANGES[key][4]]  # ints >= 1


def _range_problem(value: Any, bounds: Bounds) -> str | None:
    """Why ``value`` is outside ``bounds`` (``HP_RANGES``), or None."""
    low, low_in, high, high_in, integer = bounds
    if integer and (isinstance(value, bool) or not isinstance(value, int)):
        return f"must be an integer, got {shown(value)}"
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        return f"must be a number, got {shown(value)}"
    if (value < low or (value == low and not low_in)) or (value > high or (value == high and not high_in)):

        def text(x: float) -> str:
            return "inf" if x == _INF else f"{int(x):,}" if integer else f"{x:g}"

        span = f"{'[' if low_in else '('}{text(low)}, {text(high)}{']' if high_in else ')'}"
        return f"must be {'an integer' if integer else 'a number'} in {span}, got {shown(value)}"
    return None


def _network_problem(policy_kwargs: Any) -> str | None:
    """Why ``policy_kwargs``' hidden layers are malformed or too big (``MAX_LAYER_WIDTH``, ``MAX_HIDDEN_WEIGHTS``),
    or None."""
    if policy_kwargs is None:
        return None
    if not isinstance(policy_kwargs, Mapping):
        return f"must be a mapping (e.g. {{net_arch: [128, 128]}}), got {shown(policy_kwargs)}"
    for key, high in (("lstm_hidden_size", MAX_LAYER_WIDTH), ("n_lstm_layers", MAX_LSTM_LAYERS)):
        value = policy_kwargs.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= high):
            return f"{key} must be an integer in [1, {high:,}], got {shown(value)}"
    arch = policy_kwargs.get("net_arch")
    if arch is None:
        return None
    nets = list(arch.values()) if isinstance(arch, Mapping) else [arch]
    total = 0
    for net in nets:
        if not isinstance(net, (list, tuple)):
            return f"net_arch must be a list of layer widths (or pi/vf lists), got {shown(arch)}"
        for width in net:
            if isinstance(width, bool) or not isinstance(width, int) or not 1 <= width <= MAX_LAYER_WIDTH:
                return f"net_arch widths must be integers in [1, {MAX_LAYER_WIDTH}], got {shown(width)}"
        total += sum(a * b for a, b in itertools.pairwise(net))
    if total > MAX_HIDDEN_WEIGHTS:
        return f"net_arch {shown(arch)} holds {total:,} weights between hidden layers, over {MAX_HIDDEN_WEIGHTS:,}"
    return None


def _class_problem(hp: Mapping[str, Any]) -> tuple[str, str] | None:
    """``(key, why)`` for a hyperparameter that must be a Python class (``*_class``, ``policy_kwargs.*_class``) given a
    value, or a ``policy_kwargs.activation_fn`` that names no activation (``ACTIVATION_NAMES``); else None."""
    from llmsched_env.decision.policy_file import ACTIVATION_NAMES

    policy_kwargs = hp.get("policy_kwargs")
    nested = policy_kwargs if isinstance(policy_kwargs, Mapping) else {}
    activation = nested.get("activation_fn")
    if activation is not None and activation not in ACTIVATION_NAMES:
        why = f"must name an activation, one of {', '.join(ACTIVATION_NAMES)}; got {activation!r}"
        return "policy_kwargs.activation_fn", why
    given = [*((k, v) for k, v in hp.items()), *((f"policy_kwargs.{k}", v) for k, v in nested.items())]
    for key, value in given:
        if str(key).endswith("_class") and value is not None:
            why = "takes a Python class, which the hyperparameter file and --hp cannot give; leave it out"
            return key, f"{why} (got {value!r:.60})"
    return None


def _policy_kwargs_problem(algo: str, policy_kwargs: Any) -> tuple[str, str] | None:
    """``(key, why)`` for a ``policy_kwargs`` entry whose policy default is true or false (a number) given another
    kind of value, which the policy would take without a word (``ortho_init: 7``); else None."""
    from agents.sb3 import ALGOS

    if not isinstance(policy_kwargs, Mapping):
        return None
    aliases = ALGOS[algo].policy_aliases
    policy = aliases.get("MlpPolicy") or aliases.get("MlpLstmPolicy")
    params = inspect.signature(policy.__init__).parameters if policy is not None else {}
    for key, value in policy_kwargs.items():
        default = params[key].default if key in params else None
        if isinstance(default, bool) and not isinstance(value, bool):
            return f"policy_kwargs.{key}", f"must be true or false, got {value!r:.60}"
        if type(default) in (int, float) and not is_finite_number(value):
            return f"policy_kwargs.{key}", f"must be a finite number, got {value!r:.60}"
    return None


def _check_products(hp: Mapping[str, Any], fail: Callable[[str, str], ValueError]) -> None:
    """``fail(key, why)`` for counts each in range but together too many: evaluations and their val episodes, one
    rollout's transitions, cloning's labelled and played steps (the ``MAX_*`` products above)."""

    def count(key: str, default: int) -> int:
        value = hp.get(key, default)
        return value if isinstance(value, int) and not isinstance(value, bool) else default

    steps, freq = count("n_timesteps", 0), count("eval_freq", 1)
    if steps // freq > MAX_EVALUATIONS:
        least = steps // (MAX_EVALUATIONS + 1) + 1
        raise fail(
            "eval_freq",
            f"{freq:,} gives {steps // freq:,} evaluations, each with a checkpoint, in n_timesteps {steps:,}; at most "
            f"{MAX_EVALUATIONS:,}: give eval_freq >= {least:,}",
        )
    episodes = count("eval_episodes", 1)
    evaluations = steps // freq + 1  # and the start policy's, before learning
    if evaluations * episodes > MAX_EVAL_EPISODES_TOTAL:
        most = max(MAX_EVAL_EPISODES_TOTAL // episodes, 1)  # evaluations that fit at this eval_episodes
        raise fail(
            "eval_episodes",
            f"{episodes:,} val episodes x {evaluations:,} evaluations (n_timesteps {steps:,} // eval_freq {freq:,}, "
            f"and the start's) are {evaluations * episodes:,} evaluation episodes, over {MAX_EVAL_EPISODES_TOTAL:,}: "
            f"give eval_freq >= {steps // most + 1:,} or eval_episodes <= {MAX_EVAL_EPISODES_TOTAL // evaluations:,}",
        )
    if "n_steps" in hp and count("n_steps", 1) * count("n_envs", 1) > MAX_ROLLOUT:
        raise fail(
            "n_steps", f"n_steps {hp['n_steps']:,} x n_envs {count('n_envs', 1)} transitions in one rollout are over "
            f"{MAX_ROLLOUT:,}"
        )  # fmt: skip
    bc_steps = count("bc_steps", 0)
    rounds, stride = count("bc_dagger", 0), count("bc_stride", 1)
    if bc_steps * (1 + rounds) > MAX_BC_LABELLED:
        raise fail(
            "bc_steps", f"bc_steps {bc_steps:,} x (1 + bc_dagger {rounds}) labelled steps, all kept in memory, are "
            f"over {MAX_BC_LABELLED:,}"
        )  # fmt: skip
    if bc_steps * stride > MAX_BC_PLAYED:
        raise fail(
            "bc_stride", f"bc_steps {bc_steps:,} x bc_stride {stride} steps played in one round are over "
            f"{MAX_BC_PLAYED:,}"
        )  # fmt: skip


def _check_minibatch(
    algo: str, hp: Mapping[str, Any], params: Mapping[str, Any], fail: Callable[[str, str], ValueError]
) -> None:
    """``fail("batch_size", why)`` for an on-policy algorithm with mini-batches whose ``batch_size`` is over its
    rollout (``n_steps x n_envs``), where it would have no effect."""
    from stable_baselines3.common.on_policy_algorithm import OnPolicyAlgorithm

    from agents.sb3 import ALGOS

    if not issubclass(ALGOS[algo], OnPolicyAlgorithm) or "n_steps" not in params or "batch_size" not in params:
        return
    n_steps, batch = hp.get("n_steps", params["n_steps"]), hp.get("batch_size", params["batch_size"])
    n_envs = hp.get("n_envs", 1)
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (n_steps, batch, n_envs)):
        return  # reported as such
    if batch > n_steps * n_envs:
        raise fail(
            "batch_size", f"{batch:,} is over the rollout its mini-batches are cut from (n_steps {n_steps:,} x n_envs "
            f"{n_envs} = {n_steps * n_envs:,} transitions), so it would have no effect; give batch_size <= "
            f"{n_steps * n_envs:,}"
        )  # fmt: skip


def check_hyperparams(algo: str, hp: Mapping[str, Any]) -> None:
    """``ValueError`` naming the key for a hyperparameter ``algo``'s model does not take (with the closest name), a
    value of the wrong kind or out of range, or an ``env_kwargs`` key the env does not take."""
    from llmsched_env.envs.cluster import LLMSchedClusterEnv
    from llmsched_env.envs.mixture import WorkloadMixEnv
    from llmsched_env.envs.single_node import LLMSchedEnv

    params = _model_params(algo)
    known = sorted({*params, *RUN_KEYS})

    def fail(key: str, problem: str) -> ValueError:
        return ValueError(f"hyperparameter {shown(key)} ({algo}; from the hyperparameter file or --hp): {problem}")

    for key, value in hp.items():
        if key not in params and key not in RUN_KEYS:
            raise fail(key, f"unknown{_hint(key, known)}")
        default = params.get(key, inspect.Parameter.empty)
        if isinstance(default, bool):
            if not isinstance(value, bool):
                raise fail(key, f"must be true or false, got {shown(value)}")
        elif isinstance(default, (int, float)) and not is_finite_number(value):
            raise fail(key, f"must be a finite number, got {shown(value)}")
    for key in _RUN_INTS:
        value = hp.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise fail(key, f"must be an integer >= 1, got {shown(value)}")
    for key, bounds in HP_RANGES.items():
        value = hp.get(key)
        if value is None or (key in params and not isinstance(params[key], (int, float))):
            continue  # unset, or a value SB3 takes in another form here (a schedule, a (n, unit) tuple)
        problem = _range_problem(value, bounds)
        if problem is not None:
            raise fail(key, problem)
    network = _network_problem(hp.get("policy_kwargs"))
    if network is not None:
        raise fail("policy_kwargs", network)
    classes = _class_problem(hp) or _policy_kwargs_problem(algo, hp.get("policy_kwargs"))
    if classes is not None:
        raise fail(*classes)
    _check_products(hp, fail)
    _check_minibatch(algo, hp, params, fail)
    for key, value in dotted({k: v for k, v in hp.items() if k != "env_kwargs"}).items():  # the env checks its own
        if isinstance(value, float) and value != value:
            raise fail(key, "must be a number, got nan")
    anchor = hp.get("anchor_coef")
    if anchor is not None and not (is_finite_number(anchor) and anchor >= 0):
        raise fail("anchor_coef", f"must be a finite number >= 0 (0: no pull towards the start), got {shown(anchor)}")
    if anchor and algo not in ("maskable_ppo", "ppo", "a2c"):
        raise fail("anchor_coef", f"pulls a feed-forward actor-critic policy towards its start; {algo} has none")
    env_kwargs = hp.get("env_kwargs", {})
    if not isinstance(env_kwargs, Mapping):
        raise fail("env_kwargs", f"must be a mapping of env arguments, got {shown(env_kwargs)}")
    env_params = {
        name
        for cls in (LLMSchedEnv, LLMSchedClusterEnv, WorkloadMixEnv)
        for name in inspect.signature(cls.__init__).parameters
        if name not in ("self", "scenario", "split")
    }
    for key in env_kwargs:
        if key not in env_params:
            raise fail(f"env_kwargs.{key}", f"unknown env argument{_hint(key, sorted(env_params))}")
