"""Policy specs: one resolver for every place a user names a policy (``llmsched-evaluate --policies``, the vLLM
adapter's ``policy``).

    resolve_policy("slo_aware")                  # a baseline (the registry)
    resolve_policy("mine=runs/ppo0")             # an exported policy (folder or policy.json), named "mine"
    resolve_policy("tuned=my_table.json")        # ``tuned`` with a table of your own
    resolve_policy("learned")                    # the shipped generalist, policies/generalist
    resolve_policy("mpc:futures=8")              # a planner with options (also ``lookahead:k=32``)
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llmsched_env.common.checks import clipped, cut_middle, shown
from llmsched_env.common.files import link_problem, retold
from llmsched_env.common.outputs import package_dir
from llmsched_env.decision.planners.lookahead import LOOKAHEAD, LookaheadConfig, parse_lookahead
from llmsched_env.decision.planners.mpc import MPC, MPCConfig, mpc_for, parse_mpc
from llmsched_env.decision.planners.tuned import TunedTable, is_tuned_table, load_tuned_table
from llmsched_env.decision.policy import Policy
from llmsched_env.decision.policy_file import ExportedPolicy, load_policy_file, torch_forward
from llmsched_env.decision.registry import ROUTERS, SCHEDULERS, make_policy
from llmsched_env.decision.schema import SCHEMA_VERSION

LEARNED = "learned"  # the name of the shipped generalist policy
TUNED_PREFIX = "tuned:"  # a teacher candidate's spelling (agents/teacher.py), refused here with a pointer
SHIPPED_POLICIES_PREFIX = "policies/"  # how the docs name a shipped policy: policies/generalist, policies/S


def shipped_policies() -> Path:
    """The folder of the shipped trained policies: ``policies/`` of the ``agents`` package (found, not imported),
    installed or in a checkout."""
    return (package_dir("agents") or Path(__file__).resolve().parents[2] / "agents") / "policies"


GENERALIST_PATH = shipped_policies() / "generalist"


def baseline_names() -> list[str]:
    """Every registered scheduler, then every registered router (a name both use, once)."""
    return list(dict.fromkeys([*SCHEDULERS.names(), *ROUTERS.names()]))


@dataclass
class PolicySpec:
    """One policy of an evaluation: the ``policy`` column's ``name`` and one of the others."""

    name: str
    baseline: str | None = None  # a registered name
    path: Path | None = None  # an exported policy file, loaded once and not pickled (a Ray task loads it again)
    table: Path | TunedTable | None = None  # ``tuned``'s tuned-settings table
    lookahead: LookaheadConfig | None = None  # the clairvoyant bound: simulator episodes only (``make_for`` refuses)
    mpc: MPCConfig | None = None  # the planner, built where the context's driver gives a planning state
    _exported: ExportedPolicy | None = field(default=None, repr=False, compare=False)  # loaded on demand

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("a policy needs a non-empty name")
        if sum(x is not None for x in (self.baseline, self.path, self.lookahead, self.mpc)) != 1:
            raise ValueError(
                f"policy {self.name!r}: give either a baseline name, a policy file path, a lookahead or an mpc"
            )
        if self.table is not None and self.baseline is None:
            raise ValueError(f"policy {self.name!r}: a tuned-settings table goes with a baseline (tuned)")

    @property
    def exported(self) -> ExportedPolicy | None:
        """The exported policy, or None for a baseline."""
        return self.load() if self.path is not None else None

    def load(self) -> ExportedPolicy:
        """Load (once) and return the exported policy file; ``PolicyFileError`` (a ``ValueError``) if bad."""
        if self._exported is None:
            assert self.path is not None, f"policy {self.name!r} is not a policy file"
            self._exported = load_policy_file(self.path, forward=torch_forward)
        return self._exported

    @property
    def schema(self) -> int:
        """The observation schema it runs on: the file's for an exported policy, the current one for a baseline."""
        return SCHEMA_VERSION if self.path is None else int(self.load().schema_version)

    @property
    def iterations_per_step(self) -> int:
        """Engine iterations each decision holds: 1 for baselines, the training setting for a trained policy."""
        if self.path is None:
            return 1
        return int(self.load().meta.get("iterations_per_step", 1))

    def make(self, env: Any, seed: int) -> Policy:
        """The policy acting on ``env`` (``LLMSched-v1`` or ``LLMSchedCluster-v0``) for the episode of ``seed``."""
        return self.make_for(env.unwrapped.policy_context(), seed)

    def make_for(self, ctx: Any, seed: int) -> Policy:
        """The policy acting in ``ctx`` (a ``PolicyContext`` or a router's context) with ``seed``; an exported policy
        is the loaded file itself."""
        if self.baseline is not None:
            if self.table is not None:  # the tuned baseline takes its table as a keyword
                factory: Any = SCHEDULERS.get(self.baseline)
                return factory(ctx, seed, table=self.table)
            return make_policy(self.baseline, ctx, seed=seed)
        if self.lookahead is not None:
            raise ValueError(
                f"policy {self.name!r} is a clairvoyant bound that plays the simulator forward, not a policy of "
                "observations: it runs only in llmsched-evaluate's simulator episodes (not on the torch runtime, "
                "vLLM, or as a cluster's router or local policy)"
            )
        if self.mpc is not None:  # it plans on the state the context's driver gives
            return mpc_for(self.mpc, ctx, seed)
        return self.load()

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_exported": None}


def resolve_policy(entry: str) -> PolicySpec:
    """The ``PolicySpec`` of ``entry``: a baseline name, ``learned``, a lookahead or mpc spelling, or
    ``[alias=]path`` of an exported policy (loaded and verified now) or of a tuned-settings table. One-line
    ``ValueError`` naming ``entry`` or the file otherwise, and when its name is another policy's; ``TypeError`` unless
    ``entry`` is a string or a path."""
    if isinstance(entry, os.PathLike):
        entry = os.fspath(entry)
    if not isinstance(entry, str):
        raise TypeError(f"resolve_policy: entry must be a policy name or path (str), got {type(entry).__name__}")
    try:
        spec = _resolve(entry)
    except ValueError as exc:  # bounded, whatever the entry quotes
        raise retold(exc, cut_middle(str(exc))) from None
    _check_label(entry, spec)
    return spec


def _check_label(entry: str, spec: PolicySpec) -> None:
    """``ValueError`` when ``spec``'s name is one the resolver gives another policy (a baseline's, ``learned``,
    ``lookahead``, ``mpc``), unless it denotes that policy (``fcfs=fcfs``, ``tuned=TABLE.json``, ``learned``)."""
    name = spec.name
    if spec.lookahead is not None or spec.mpc is not None:
        return
    if name in baseline_names():
        if spec.baseline == name:
            return
        what = f"the baseline {name!r}"
    elif name == LEARNED:
        if spec.path is not None and _same_path(spec.path, GENERALIST_PATH):
            return
        what = f"the shipped generalist ({LEARNED!r})"
    elif name == LOOKAHEAD or name.startswith(LOOKAHEAD + ":"):
        what = "the lookahead bound"
    elif name == MPC or name.startswith(MPC + ":"):
        what = "the mpc planner"
    else:
        return
    denotes = f"the baseline {spec.baseline!r}" if spec.baseline is not None else f"the policy file {spec.path}"
    if spec.table is not None:
        denotes += f" with the table {spec.table}"
    raise ValueError(
        f"policy {entry!r} is named {name!r}, the name of {what}, but is {denotes}: its rows would be credited to "
        f"{name!r}; name it otherwise (NAME=PATH with another NAME)"
    )


def _exists(path: Path) -> bool:
    """Whether ``path`` names something, False for a name no file can have (too long: ``ENAMETOOLONG``)."""
    try:
        return path.exists()
    except OSError:
        return False


def _same_path(a: Path, b: Path) -> bool:
    """Whether ``a`` is ``b`` or the ``policy.json`` inside folder ``b``."""
    try:
        ra, rb = a.resolve(), b.resolve()
    except (OSError, RuntimeError):  # a link loop (RuntimeError before Python 3.13)
        return False
    return ra == rb or ra == rb / "policy.json"


def _resolve(entry: str) -> PolicySpec:
    """``resolve_policy`` before the check of the name it gives."""
    names = baseline_names()
    if entry in names:
        return PolicySpec(entry, baseline=entry)
    lookahead = parse_lookahead(entry)
    if lookahead is not None:
        return PolicySpec(lookahead.name, lookahead=lookahead)
    mpc = parse_mpc(entry)
    if mpc is not None:
        return PolicySpec(mpc.name, mpc=mpc)
    if entry == LEARNED:
        if not (GENERALIST_PATH / "policy.json").is_file():
            raise ValueError(
                f"policy 'learned' is the generalist in {GENERALIST_PATH}, which is not there; train one with: "
                "llmsched-train --scenario generalist --out policies/generalist"
            )
        entry = f"{LEARNED}={GENERALIST_PATH}"
    alias, sep, target = entry.partition("=")
    if not sep:
        alias, target = "", entry
    elif not alias or not target:
        raise ValueError(f"policy {shown(entry)}: expected name=path")
    if target in names:
        return PolicySpec(alias, baseline=target)
    path = Path(target).expanduser()
    if not _exists(path) and target.startswith(SHIPPED_POLICIES_PREFIX):  # outside a checkout: the shipped copy
        shipped = shipped_policies() / target[len(SHIPPED_POLICIES_PREFIX) :]
        path = shipped if _exists(shipped) else path
    if not _exists(path) and target.startswith(TUNED_PREFIX):
        raise ValueError(
            f"policy {shown(entry)}: tuned:SCENARIO (another scenario's settings) is a training teacher's candidate, "
            "not a policy to judge; evaluate with --policies tuned, the settings tuned for the scenario or trace at "
            "hand (llmsched-tune --scenarios NAME, or llmsched-tune --trace FILE with its trace options) or "
            "tuned=TABLE.json"
        )
    if not _exists(path):
        problem = link_problem(path)
        if problem is not None:  # a link loop, a link to nothing
            raise ValueError(f"policy {shown(entry)}: {clipped(str(path))} {problem}")
        raise ValueError(
            f"unknown policy {shown(entry)}: not a baseline ({', '.join(names)}) and no file or folder "
            f"{clipped(str(path))}"
        )
    if is_tuned_table(path) or (alias == "tuned" and not path.is_dir()):  # a FIFO or device too: refused there
        load_tuned_table(path)  # a malformed table fails now, naming the file
        return PolicySpec(alias or path.stem, baseline="tuned", table=path)
    folder = path if path.is_dir() else path.parent
    spec = PolicySpec(alias or folder.resolve().name, path=path)
    try:
        spec.load()  # verify the file now, not in the middle of a grid
    except ImportError as exc:
        raise ValueError(f"policy {path}: cannot load exported policies here: {exc}") from None
    except (ValueError, OSError, RuntimeError) as exc:  # PolicyFileError is a ValueError
        raise ValueError(f"policy {path} is not a loadable exported policy: {exc}") from None
    return spec
