"""``tuned`` on a trace of the user's own, from the command line: the ``llmsched-tune`` command that makes the
entry of ``--trace`` and its options (keyed by ``llmsched_env.evaluation.trace_tuned.trace_key``), and the
``--policies`` of ``llmsched-evaluate --trace`` with every ``tuned`` among them bound to that entry.

``options`` below are the ``--trace`` options by name (``evaluate_args.trace_options``), ``limits`` the engine
limits given (``evaluate_args.engine_limits``), in the order the command line lists them.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from llmsched_env.decision.policy_spec import PolicySpec, resolve_policy
from llmsched_env.evaluation.trace_tuned import trace_keys, trace_tuned_policy
from llmsched_env.workloads.scenarios import Scenario

__all__ = ["TUNE_PROG", "trace_policies", "trace_tune_command"]

TUNE_PROG = "llmsched-tune"
# trace option -> its default on the command line (add_trace_options): left out of a command at that value
_TRACE_FLAGS = {
    "trace_format": None,
    "trace_columns": None,
    "trace_time_unit": "s",
    "trace_rate": None,
    "trace_slo": "chat",
    "tenant_slo": None,
}


def trace_tune_command(
    options: Mapping[str, Any],
    limits: Mapping[str, int],
    *,
    cost_model: str | None = None,
    out: Path | None = None,
    fitted: bool = False,
) -> str:
    """The ``llmsched-tune --trace ...`` command whose entry has the key of these ``options``, cost model and
    engine ``limits`` (each option left out at its default), with ``--out`` when the entry goes to a table of
    the user's choosing (``tuned=TABLE.json``), with ``--fitted-traffic`` when ``fitted`` (the entries of the
    trace's fitted traffic as well). No ``--num-requests``: the search picks the size its val
    windows allow (``val_episode_size``), whatever size the evaluation's test windows have."""
    words = [TUNE_PROG, "--trace", str(options["trace"])]
    for name, default in _TRACE_FLAGS.items():
        value = options.get(name)
        if name == "trace_time_unit" and options.get("trace_format") != "generic":
            continue  # only the generic format reads it, and only there is it part of the key
        if value is not None and value != default:
            words += [f"--{name.replace('_', '-')}", str(value)]
    if cost_model is not None:
        words += ["--cost-model", str(cost_model)]
    for name, value in limits.items():
        words += [f"--{name.replace('_', '-')}", str(value)]
    if fitted:
        words.append("--fitted-traffic")
    if out is not None:
        words += ["--out", str(out)]
    return shlex.join(words)


def trace_policies(
    entries: Sequence[str],
    options: Mapping[str, Any],
    scenarios: Sequence[Scenario],
    limits: Mapping[str, int],
    *,
    cost_model: str | None = None,
) -> list[PolicySpec]:
    """``entries`` (``--policies``) resolved, every ``tuned`` among them (``tuned``, ``NAME=TABLE.json``) bound
    to the entries of the trace's keys (``trace_tuned_policy``) on ``scenarios`` (the trace built from
    ``options`` with ``limits``, and its fitted traffic when asked for: ``evaluate_args.trace_scenarios``), under
    ``cost_model`` (default: the scenario's). ``ValueError`` in one line naming the policy, or giving the
    ``llmsched-tune`` command when no table holds a key."""
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
            spec = trace_tuned_policy(spec, keyed, command)
        out.append(spec)
    return out
