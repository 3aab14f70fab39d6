"""What ``LLMSchedScheduler`` runs: ``AdapterConfig``, from a YAML/JSON file or the environment, checked in full
before vLLM builds anything (no vLLM imported): string keys, integers that are integers, finite numbers within
their ranges, names that are strings, no NUL in a name or path, at most ``MAX_TENANTS`` tenants. Errors are one line
each naming the file (or ``environment``) and the field path (``tenants[3].priority``), the first ``MAX_PROBLEMS``
reported together.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llmsched_env.common.checks import (
    MAX_POLICY_TIMEOUT_S,
    MAX_RATE_RPS,
    MAX_SLO_S,
    Bound,
    check_int,
    check_positive,
    duplicates,
    listed,
    shown,
)
from llmsched_env.common.fields import check_fields, coerce, field_kinds, field_problems, option
from llmsched_env.common.files import read_config
from llmsched_env.common.tenants import MAX_TENANTS, tenant_name_problem, too_many_tenants
from llmsched_env.costs.base import CostModel
from llmsched_env.costs.loader import load_cost_model
from llmsched_env.decision.decider import DECIDER_MODES
from llmsched_env.decision.policy_spec import PolicySpec, resolve_policy
from llmsched_env.engine.config import SLO_CLASSES, SLOClass, TenantConfig

__all__ = ["CONFIG_ENV", "CONFIG_FIELDS", "AdapterConfig", "ResolvedAdapter"]

CONFIG_ENV = "LLMSCHED_VLLM_CONFIG"  # path of a YAML or JSON file holding AdapterConfig's fields


TENANT_FIELDS = ("name", "slo", "weight", "priority")  # a tenant's mapping's keys, "name" required
SLO_FIELDS = ("ttft_s", "tpot_s")  # an slo's mapping's keys, both required
MAX_PRIORITY = 1_000_000  # a tenant's priority is an integer in [-MAX_PRIORITY, MAX_PRIORITY] (lower runs first)
TENANT_WEIGHT = Bound(1e6, 1e-6)  # a tenant's share weight (VTC)
MAX_ITERATIONS_PER_STEP = 1_000_000  # a decision held past a million engine steps is a mistyped figure
MAX_SEED = 2**63 - 1


def _tenant(entry: Any, at: str) -> TenantConfig:
    """A ``TenantConfig`` from ``{name, slo, weight, priority}`` (``at``: ``FILE: tenants[3]``); one-line
    ``ValueError`` naming ``at`` and the field (``tenants[3].priority``) otherwise. Nothing is converted: a weight
    of ``true``, a priority of 1.7 or a name that is a list are refused, not read as 1.0, 1 or its text."""
    if isinstance(entry, TenantConfig):
        return entry
    if not isinstance(entry, dict) or "name" not in entry:
        raise ValueError(f"{at} must be a mapping with a 'name', got {shown(entry)}")
    check_fields(at, entry, TENANT_FIELDS)
    name = entry["name"]
    problem = tenant_name_problem(name)
    if problem is not None:
        raise ValueError(f"{at}.name {problem}")
    slo = entry.get("slo", "chat")
    if isinstance(slo, str):
        if slo not in SLO_CLASSES:
            raise ValueError(f"{at}.slo: unknown slo {shown(slo)}; one of {', '.join(SLO_CLASSES)}")
        slo_class = SLO_CLASSES[slo]
    elif isinstance(slo, dict):
        check_fields(f"{at}.slo", slo, SLO_FIELDS, SLO_FIELDS)
        for key in SLO_FIELDS:
            check_positive(f"{at}.slo", key, slo[key], maximum=MAX_SLO_S, unit="s")
        slo_class = SLOClass(name, slo["ttft_s"], slo["tpot_s"])
    else:
        raise ValueError(f"{at}.slo must be a class name or {{ttft_s, tpot_s}}, got {shown(slo)}")
    weight = check_positive(at, "weight", entry.get("weight", 1.0), maximum=TENANT_WEIGHT)
    check_int(at, "priority", entry.get("priority", 0), -MAX_PRIORITY, MAX_PRIORITY)
    return TenantConfig(name, slo_class, weight, entry.get("priority", 0))


def _tenants(tenants: Any, w: str, errors: list[str]) -> list[TenantConfig]:
    """The ``TenantConfig``s of ``tenants`` (a list or tuple of at most ``MAX_TENANTS``, names distinct); each
    problem, a line naming ``tenants[i]`` and the field, in ``errors``."""
    if not isinstance(tenants, (list, tuple)):  # a string would read as one tenant per character
        errors.append(f"{w}: tenants must be a list of mappings {{name, slo, weight, priority}}, got {shown(tenants)}")
        return []
    if not tenants:
        errors.append(f"{w}: tenants needs at least one tenant")
        return []
    bound = MAX_TENANTS.value()
    if len(tenants) > bound:
        errors.append(f"{w}: tenants: {too_many_tenants(len(tenants), bound)}")
        return []
    out = []
    for i, entry in enumerate(tenants):
        try:
            out.append(_tenant(entry, f"{w}: tenants[{i}]"))
        except ValueError as exc:
            errors.append(str(exc))
    repeated = duplicates(t.name for t in out)
    if repeated:
        errors.append(f"{w}: tenants: names must be unique; {listed(repeated)} given more than once")
    return out


@dataclass(frozen=True)
class ResolvedAdapter:
    """An ``AdapterConfig`` resolved: ``spec`` (active at start) with its scenario, ``more`` the others."""

    spec: PolicySpec
    cost_model: CostModel
    scenario: str
    more: tuple[tuple[PolicySpec, str], ...] = ()

    @property
    def policies(self) -> tuple[tuple[PolicySpec, str], ...]:
        """Every policy of the set with its scenario, the one that starts active first."""
        return ((self.spec, self.scenario), *self.more)

    @property
    def schema(self) -> int:
        """The observation schema the server encodes: its exported policies' (they agree), else the current one."""
        return next((s.schema for s, _ in self.policies if s.path is not None), self.spec.schema)


@dataclass(frozen=True)
class AdapterConfig:
    """What ``LLMSchedScheduler`` runs. ``policy``: as ``llmsched-evaluate --policies`` names one. ``tenants``:
    ``TenantConfig``s or mappings ``{name, slo, weight, priority}``, the first the default. ``cost_model``: a
    preset name, a JSON path or a ``CostModel`` (it prices shedding). ``iterations_per_step``: each decision held
    this many steps (None: the exported policy's own, 1 for a baseline). ``policy_timeout_s``: past it, the step
    is vLLM's own (a timeout). ``nominal_rate_rps``: the unit of the ``arrival/rate`` feature. ``seed``: random
    policies. ``scenario``: the tuned table's entry ``tuned`` plays. ``log_dir``: where ``steps.jsonl`` and
    ``requests.jsonl`` go ("": none). ``policy_deadline``: how the timeout is enforced (``decision.decider``:
    ``auto``, ``signal``, ``thread``, ``inline``). ``policies``: more policies loaded at start, named as
    ``policy`` is (distinct resolved names). ``control_file``: names the policy to switch to, read when a request
    reaches an idle engine ("": no switching); the outcome goes to ``<control_file>.status``."""

    policy: str = "fcfs"
    tenants: tuple[Any, ...] = (TenantConfig("default"),)
    cost_model: str | CostModel = "llama3-8b-h100"
    iterations_per_step: int | None = option(None, low=1, high=MAX_ITERATIONS_PER_STEP)
    policy_timeout_s: float = option(0.1, low=0, above=True, high=MAX_POLICY_TIMEOUT_S)
    nominal_rate_rps: float = option(1.0, low=0, above=True, high=MAX_RATE_RPS)
    seed: int = option(0, low=0, high=MAX_SEED)
    scenario: str = option("")
    log_dir: str = option("")
    policy_deadline: str = option("auto", choices=DECIDER_MODES)
    policies: tuple[str, ...] = ()
    control_file: str = option("")
    where: str = field(default="AdapterConfig", compare=False)

    def __post_init__(self) -> None:
        w, errors = self.where, []
        if not isinstance(self.policy, str) or not self.policy:
            errors.append(f"{w}: policy must be a scheduler name or a policy path, got {shown(self.policy)}")
        object.__setattr__(self, "tenants", tuple(_tenants(self.tenants, w, errors)))
        errors += field_problems(self, w)
        policies = self.policies
        if not isinstance(policies, (list, tuple)):  # a bare string would read as one policy per character
            errors.append(f"{w}: policies must be a list of scheduler names or policy paths, got {shown(policies)}")
        else:
            object.__setattr__(self, "policies", tuple(policies))
            for i, entry in enumerate(policies):
                if not isinstance(entry, str) or not entry:
                    errors.append(f"{w}: policies[{i}] must be a scheduler name or a policy path, got {shown(entry)}")
            if isinstance(self.control_file, str) and self.control_file and not policies:
                errors.append(
                    f"{w}: control_file: switching needs at least one more policy in policies besides "
                    f"{shown(self.policy)}"
                )
        if not isinstance(self.cost_model, (str, CostModel)) or self.cost_model == "":
            errors.append(
                f"{w}: cost_model must be a preset name, a JSON path or a CostModel, got {shown(self.cost_model)}"
            )
        texts = [(name, getattr(self, name)) for name in TEXT_FIELDS]
        texts += [
            (f"policies[{i}]", p) for i, p in enumerate(self.policies if isinstance(self.policies, tuple) else ())
        ]
        errors += [f"{w}: {name} holds a NUL character, which no name or path can hold, got {shown(text)}"
                   for name, text in texts if isinstance(text, str) and "\0" in text]  # fmt: skip
        if errors:
            raise ValueError(_lines(errors, w))

    def resolve(self) -> ResolvedAdapter:
        """Load every policy, the cost model and tuned entry; ``ValueError`` with one line per problem."""
        w = self.where
        errors: list[str] = []
        cost_model = None
        first = _resolve_entry(self.policy, "policy", self.scenario, w, errors)
        more = [_resolve_entry(entry, "policies", self.scenario, w, errors) for entry in self.policies]
        _check_set([(self.policy, first), *zip(self.policies, more, strict=True)], w, errors)
        if isinstance(self.cost_model, CostModel):
            cost_model = self.cost_model
        else:
            try:
                cost_model = load_cost_model(self.cost_model)
            except ValueError as exc:
                errors.append(f"{w}: cost_model: {exc}")
        if self.log_dir:
            try:
                Path(self.log_dir).mkdir(parents=True, exist_ok=True)
                if not os.access(self.log_dir, os.W_OK):
                    raise OSError("not writable")
            except OSError as exc:
                errors.append(f"{w}: log_dir: cannot write into {self.log_dir}: {exc}")
        if self.control_file:  # the driver writes the control file; the adapter writes its status beside it
            control = Path(self.control_file)
            try:
                if control.is_dir():
                    raise OSError("it is a folder")
                control.parent.mkdir(parents=True, exist_ok=True)
                if not os.access(control.parent, os.W_OK):
                    raise OSError(f"the folder {control.parent} is not writable")
            except (OSError, ValueError) as exc:  # ValueError: a NUL in the path
                reason = getattr(exc, "strerror", None) or str(exc)
                errors.append(f"{w}: control_file: cannot write the status beside {self.control_file}: {reason}")
        if errors:
            raise ValueError(_lines(errors, w))
        assert first is not None and cost_model is not None and all(m is not None for m in more)
        return ResolvedAdapter(first[0], cost_model, first[1], tuple(m for m in more if m is not None))

    @classmethod
    def from_file(cls, path: str | Path) -> AdapterConfig:
        """A YAML or JSON file of ``AdapterConfig``'s fields; ``ValueError`` naming the file and the field,
        ``TypeError`` for a ``path`` that is no path."""
        if not isinstance(path, (str, os.PathLike)):
            raise TypeError(f"AdapterConfig.from_file: path must be a str or os.PathLike, got {shown(path)}")
        p = Path(path)
        data = read_config(p, "the llmsched adapter config")
        if not isinstance(data, dict):
            raise ValueError(f"{p}: expected a mapping of AdapterConfig fields, got {type(data).__name__}")
        check_fields(str(p), data, CONFIG_FIELDS)
        if isinstance(data.get("tenants"), list):  # anything else: refused by __post_init__, naming it
            data["tenants"] = tuple(data["tenants"])
        return cls(**data, where=str(p))

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> AdapterConfig:
        """``LLMSCHED_VLLM_CONFIG`` (a file, ``from_file``), else ``LLMSCHED_<FIELD>`` for the fields of
        ``ENV_FIELDS`` (``LLMSCHED_TENANTS``: ``name:slo_class,...``; ``LLMSCHED_POLICIES``: comma-separated);
        defaults otherwise."""
        env = os.environ if environ is None else environ
        if env.get(CONFIG_ENV):
            return cls.from_file(env[CONFIG_ENV])
        kwargs: dict[str, Any] = {"where": "environment"}
        for name in ENV_FIELDS:
            var = f"LLMSCHED_{name.upper()}"
            if not env.get(var):
                continue
            items = [item.strip() for item in env[var].split(",")]
            if name == "tenants":  # name:slo_class,...
                kwargs[name] = tuple(
                    {"name": n.strip(), "slo": s.strip() or "chat"} for n, _, s in (i.partition(":") for i in items)
                )
            elif name == "policies":
                kwargs[name] = tuple(items)
            else:
                kwargs[name] = coerce(var, env[var], field_kinds(cls)[name][0], where="environment")
        return cls(**kwargs)


CONFIG_FIELDS = tuple(name for name in field_kinds(AdapterConfig) if name != "where")  # a config file's keys
TEXT_FIELDS = ("policy", "cost_model", "scenario", "log_dir", "policy_deadline", "control_file")  # names and paths
MAX_PROBLEMS = 3  # the most problems an AdapterConfig error names, on its one line


def _lines(errors: list[str], w: str) -> str:
    """The first ``MAX_PROBLEMS`` of ``errors`` on one line (``; ``), and a count of the others."""
    more = len(errors) - MAX_PROBLEMS
    return "; ".join(errors[:MAX_PROBLEMS] + ([f"{w}: {more:,} more problems"] if more > 0 else []))


# the fields LLMSCHED_<NAME> sets (AdapterConfig.from_env)
ENV_FIELDS = ("policy", "tenants", "cost_model", "policy_timeout_s", "scenario", "log_dir", "policies", "control_file")


def _resolve_entry(entry: str, name: str, scenario: str, w: str, errors: list[str]) -> tuple[PolicySpec, str] | None:
    """The spec of the policy ``entry`` and its context's scenario; None with the problems in ``errors``."""
    try:
        spec = resolve_policy(entry)
    except ValueError as exc:
        errors.append(f"{w}: {name}: {exc}")
        return None
    if spec.lookahead is not None:
        errors.append(f"{w}: {name}: {shown(spec.name)} replays the requests to come (clairvoyant): vLLM cannot run it")
        return None
    base = spec
    if spec.mpc is not None:
        if spec.mpc.candidates == "requests":
            errors.append(
                f"{w}: {name}: {shown(entry)}: per-request moves (candidates=requests) are made on the engine the "
                "planner drives; vLLM runs mpc over settings only"
            )
            return None
        if spec.mpc.base != "tuned":
            return spec, scenario
        table = Path(spec.mpc.table) if spec.mpc.table else None
        base = PolicySpec("tuned", baseline="tuned", table=table)  # its base: tuned with its table
    elif spec.baseline != "tuned":
        return spec, scenario
    played, problem = _tuned_scenario(base, scenario)
    if problem:
        errors.append(f"{w}: scenario: {problem}" + ("" if name == "policy" else f" (policies: {shown(entry)})"))
        return None
    return spec, played


def _check_set(resolved: list[tuple[str, tuple[PolicySpec, str] | None]], w: str, errors: list[str]) -> None:
    """The policies of one server: distinct names (the control file names them), exported policies of one schema."""
    seen: dict[str, str] = {}  # name -> the entry that took it
    schemas: dict[int, str] = {}  # observation schema -> an exported policy's name
    for entry, found in resolved:
        if found is None:
            continue
        spec = found[0]
        if spec.name in seen:
            errors.append(
                f"{w}: policies: {shown(entry)} is named {shown(spec.name)}, as {shown(seen[spec.name])} is "
                "already; each policy of the set needs a name of its own (NAME=...)"
            )
        seen.setdefault(spec.name, entry)
        if spec.path is not None:
            schemas.setdefault(spec.schema, spec.name)
    if len(schemas) > 1:
        listed = ", ".join(f"{name} (schema {v})" for v, name in sorted(schemas.items()))
        errors.append(
            f"{w}: policies: exported policies of different observation schemas cannot share a server: {listed}"
        )


def _tuned_scenario(spec: PolicySpec, scenario: str) -> tuple[str, str]:
    """The tuned table's entry to play (``scenario``, or a one-entry table's only entry) and a problem ("": none)."""
    from llmsched_env.decision.planners.tuned import TunedTable, load_tuned_table
    from llmsched_env.decision.registry import SCHEDULERS

    try:
        if isinstance(spec.table, TunedTable):
            table = spec.table
        elif spec.table is not None:
            table = load_tuned_table(spec.table)
        else:  # the tuned baseline's own table
            factory: Any = SCHEDULERS.get("tuned")
            table = load_tuned_table(factory.shipped_table, shipped=True)
    except ValueError as exc:
        return scenario, str(exc)
    names = sorted(table.entries)
    if not scenario:
        if len(names) == 1:
            return names[0], ""
        return scenario, f"the tuned table {table.path} has {len(names)} entries; name one of {names}"
    if scenario not in names:
        return scenario, f"{shown(scenario)} is not in the tuned table {table.path}; one of {names}"
    return scenario, ""
