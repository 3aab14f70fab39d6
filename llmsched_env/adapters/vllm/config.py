"""What ``LLMSchedScheduler`` runs: ``AdapterConfig``, read from a YAML/JSON file or the environment, and checked
in full before vLLM builds anything. Imports no vLLM, so the configuration is tested and checked where vLLM is
absent (the default suite, a launcher validating before it starts a server).

Every error is one line naming the file (or ``environment``) and the field; all the errors found are reported
together, one line each. The policy is named as ``llmsched-evaluate --policies`` names it (the same resolver,
``decision.policy_spec.resolve_policy``): a registered scheduler, ``learned`` (the shipped generalist),
``[name=]FOLDER`` or ``policy.json`` of an exported policy, ``tuned`` or ``tuned=TABLE.json`` (with ``scenario``
naming the table's entry; a table of one entry needs none).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llmsched_env.common.files import CONFIG_BYTES, FileRefusedError, parse_json, read_text
from llmsched_env.costs.base import CostModel
from llmsched_env.costs.loader import load_cost_model
from llmsched_env.decision.decider import DECIDER_MODES
from llmsched_env.decision.policy_spec import PolicySpec, resolve_policy
from llmsched_env.engine.config import SLO_CLASSES, SLOClass, TenantConfig

__all__ = ["CONFIG_ENV", "CONFIG_FIELDS", "AdapterConfig", "ResolvedAdapter"]

CONFIG_ENV = "LLMSCHED_VLLM_CONFIG"  # path of a YAML or JSON file holding AdapterConfig's fields
CONFIG_FIELDS = (
    "policy",
    "tenants",
    "cost_model",
    "iterations_per_step",
    "policy_timeout_s",
    "nominal_rate_rps",
    "seed",
    "scenario",
    "log_dir",
    "policy_deadline",
)


def _tenant(entry: Any, where: str, errors: list[str]) -> TenantConfig | None:
    """A ``TenantConfig`` from ``{name, slo, weight, priority}`` (``slo`` a class name or ``{ttft_s, tpot_s}``);
    None with the problem appended to ``errors``."""
    if isinstance(entry, TenantConfig):
        return entry
    if not isinstance(entry, dict) or "name" not in entry:
        errors.append(f"{where}: tenants: each tenant must be a mapping with a 'name', got {entry!r}")
        return None
    name = entry["name"]
    unknown = set(entry) - {"name", "slo", "weight", "priority"}
    if unknown:
        errors.append(f"{where}: tenants: tenant {name!r} has unknown field(s) {sorted(unknown)}")
        return None
    slo = entry.get("slo", "chat")
    if isinstance(slo, str):
        if slo not in SLO_CLASSES:
            errors.append(f"{where}: tenants: tenant {name!r}: unknown slo {slo!r}; one of {', '.join(SLO_CLASSES)}")
            return None
        slo_class = SLO_CLASSES[slo]
    elif isinstance(slo, dict) and set(slo) == {"ttft_s", "tpot_s"}:
        try:
            slo_class = SLOClass(str(name), float(slo["ttft_s"]), float(slo["tpot_s"]))
        except (TypeError, ValueError) as exc:
            errors.append(f"{where}: tenants: tenant {name!r}: slo: {exc}")
            return None
    else:
        errors.append(f"{where}: tenants: tenant {name!r}: slo must be a class name or {{ttft_s, tpot_s}}")
        return None
    try:
        return TenantConfig(str(name), slo_class, float(entry.get("weight", 1.0)), int(entry.get("priority", 0)))
    except (TypeError, ValueError) as exc:
        errors.append(f"{where}: tenants: tenant {name!r}: {exc}")
        return None


@dataclass(frozen=True)
class ResolvedAdapter:
    """An ``AdapterConfig``'s policy and cost model, loaded and checked (``AdapterConfig.resolve``)."""

    spec: PolicySpec
    cost_model: CostModel
    scenario: str


@dataclass(frozen=True)
class AdapterConfig:
    """What ``LLMSchedScheduler`` runs.

    ``policy``: as ``llmsched-evaluate --policies`` names one (see the module docstring). ``tenants``: with their
    SLO classes (``TenantConfig``s or mappings ``{name, slo, weight, priority}``); the first is the default for
    a request that names none. ``cost_model``: a preset name, a JSON path or a ``CostModel`` (it prices
    shedding). ``iterations_per_step``: each decision held this many steps (None: the exported policy's own, 1
    for a baseline). ``policy_timeout_s``: past it, the step is vLLM's own and the decision counts as a
    timeout. ``nominal_rate_rps``: the unit of the ``arrival/rate`` feature. ``seed``: random policies.
    ``scenario``: the entry of a tuned-settings table the ``tuned`` baseline plays. ``log_dir``: where the
    scheduler appends its step and request logs (``steps.jsonl``, ``requests.jsonl``; "" for none).
    ``policy_deadline``: how ``policy_timeout_s`` is enforced (``decision.decider``): ``auto`` (a ``SIGALRM`` timer
    interrupting the policy where vLLM schedules on the main thread, else a worker thread), ``signal``,
    ``thread``, or ``inline`` (no hard deadline: a late answer is only dropped).
    """

    policy: str = "fcfs"
    tenants: tuple[Any, ...] = (TenantConfig("default"),)
    cost_model: str | CostModel = "llama3-8b-h100"
    iterations_per_step: int | None = None
    policy_timeout_s: float = 0.1
    nominal_rate_rps: float = 1.0
    seed: int = 0
    scenario: str = ""
    log_dir: str = ""
    policy_deadline: str = "auto"
    where: str = field(default="AdapterConfig", compare=False)

    def __post_init__(self) -> None:
        w, errors = self.where, []
        if not isinstance(self.policy, str) or not self.policy:
            errors.append(f"{w}: policy must be a scheduler name or a policy path, got {self.policy!r}")
        tenants = [_tenant(t, w, errors) for t in self.tenants]
        names = [t.name for t in tenants if t is not None]
        if not self.tenants:
            errors.append(f"{w}: tenants needs at least one tenant")
        elif len(set(names)) != len(names):
            errors.append(f"{w}: tenants: names must be unique, got {names}")
        object.__setattr__(self, "tenants", tuple(t for t in tenants if t is not None))
        ips = self.iterations_per_step
        if ips is not None and (isinstance(ips, bool) or not isinstance(ips, int) or ips < 1):
            errors.append(f"{w}: iterations_per_step must be an integer >= 1, got {ips!r}")
        for name in ("policy_timeout_s", "nominal_rate_rps"):
            v = getattr(self, name)
            if isinstance(v, bool) or not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
                errors.append(f"{w}: {name} must be a number > 0, got {v!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            errors.append(f"{w}: seed must be an integer, got {self.seed!r}")
        if self.policy_deadline not in DECIDER_MODES:
            modes = ", ".join(DECIDER_MODES)
            errors.append(f"{w}: policy_deadline must be one of {modes}, got {self.policy_deadline!r}")
        for name in ("scenario", "log_dir"):
            if not isinstance(getattr(self, name), str):
                errors.append(f"{w}: {name} must be a string, got {getattr(self, name)!r}")
        if not isinstance(self.cost_model, (str, CostModel)) or self.cost_model == "":
            errors.append(f"{w}: cost_model must be a preset name, a JSON path or a CostModel")
        if errors:
            raise ValueError("\n".join(errors))

    def resolve(self) -> ResolvedAdapter:
        """Load the policy spec (an exported policy's file read and verified), the cost model and, for a tuned
        table, its scenario entry; ``ValueError`` with one line per problem, naming the config and the field."""
        w, errors = self.where, []
        spec = cost_model = None
        scenario = self.scenario
        try:
            spec = resolve_policy(self.policy)
        except ValueError as exc:
            errors.append(f"{w}: policy: {exc}")
        if spec is not None and spec.lookahead is not None:
            errors.append(f"{w}: policy: {spec.name!r} plays the simulator forward on snapshots; vLLM cannot run it")
            spec = None
        if spec is not None and spec.baseline == "tuned":
            scenario, problem = _tuned_scenario(spec, scenario)
            if problem:
                errors.append(f"{w}: scenario: {problem}")
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
        if errors:
            raise ValueError("\n".join(errors))
        assert spec is not None and cost_model is not None
        return ResolvedAdapter(spec, cost_model, scenario)

    @classmethod
    def from_file(cls, path: str | Path) -> AdapterConfig:
        """Read a YAML (``.yaml``/``.yml``) or JSON file of ``AdapterConfig``'s fields; ``ValueError`` naming the
        file and the field for anything wrong."""
        p = Path(path)
        try:
            text = read_text(p, CONFIG_BYTES)
        except FileRefusedError:  # a FIFO, a device, a file over the limit: one line naming it already
            raise
        except (OSError, UnicodeDecodeError) as exc:
            raise ValueError(f"{p}: cannot read the llmsched adapter config: {exc}") from None
        yaml_file = p.suffix in (".yaml", ".yml")
        try:
            if yaml_file:
                import yaml

                data = yaml.safe_load(text)
            else:
                data = parse_json(text)
        except Exception as exc:
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise ValueError(f"{p}: not valid {'YAML' if yaml_file else 'JSON'}: {first}") from None
        if not isinstance(data, dict):
            raise ValueError(f"{p}: expected a mapping of AdapterConfig fields, got {type(data).__name__}")
        unknown = set(data) - set(CONFIG_FIELDS)
        if unknown:
            raise ValueError(f"{p}: unknown field(s) {sorted(unknown)}; known: {sorted(CONFIG_FIELDS)}")
        if "tenants" in data:
            if not isinstance(data["tenants"], list):
                raise ValueError(f"{p}: tenants must be a list of mappings")
            data["tenants"] = tuple(data["tenants"])
        return cls(**data, where=str(p))

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> AdapterConfig:
        """``LLMSCHED_VLLM_CONFIG`` (a file, see ``from_file``), else ``LLMSCHED_POLICY``, ``LLMSCHED_TENANTS``
        (``name:slo_class,...``), ``LLMSCHED_COST_MODEL``, ``LLMSCHED_POLICY_TIMEOUT_S``,
        ``LLMSCHED_SCENARIO``, ``LLMSCHED_LOG_DIR``; defaults otherwise."""
        env = os.environ if environ is None else environ
        if env.get(CONFIG_ENV):
            return cls.from_file(env[CONFIG_ENV])
        kwargs: dict[str, Any] = {"where": "environment"}
        for var, name in (
            ("LLMSCHED_POLICY", "policy"),
            ("LLMSCHED_COST_MODEL", "cost_model"),
            ("LLMSCHED_SCENARIO", "scenario"),
            ("LLMSCHED_LOG_DIR", "log_dir"),
        ):
            if env.get(var):
                kwargs[name] = env[var]
        if env.get("LLMSCHED_POLICY_TIMEOUT_S"):
            try:
                kwargs["policy_timeout_s"] = float(env["LLMSCHED_POLICY_TIMEOUT_S"])
            except ValueError:
                raise ValueError(
                    f"environment: LLMSCHED_POLICY_TIMEOUT_S must be a number, got {env['LLMSCHED_POLICY_TIMEOUT_S']!r}"
                ) from None
        if env.get("LLMSCHED_TENANTS"):
            tenants = []
            for item in env["LLMSCHED_TENANTS"].split(","):
                name, _, slo = item.partition(":")
                tenants.append({"name": name.strip(), "slo": slo.strip() or "chat"})
            kwargs["tenants"] = tuple(tenants)
        return cls(**kwargs)


def _tuned_scenario(spec: PolicySpec, scenario: str) -> tuple[str, str]:
    """The tuned table's entry to play, and a problem ("" if none): ``scenario`` if the table has it, the only
    entry of a one-entry table when ``scenario`` is empty."""
    from llmsched_env.decision.registry import SCHEDULERS
    from llmsched_env.decision.tuned_table import TunedTable, load_tuned_table

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
        return scenario, f"{scenario!r} is not in the tuned table {table.path}; one of {names}"
    return scenario, ""
