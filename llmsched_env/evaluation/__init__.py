"""Judging schedulers: episodes, grids over policies, scenarios, loads and seeds, capacity search, statistics over
seeds, result files, plots and scale-out on Ray (docs/evaluation.md; live vLLM servers: ``llmsched_env.live``).

Nothing here imports torch, matplotlib or Ray until a policy file, the runtime backend, a plot or ``ray=``
needs it; schedulers and routers come from ``llmsched_env.decision.registry``, never from ``baselines``.
"""

from __future__ import annotations

import importlib
from typing import Any

_MODULES = {  # module -> the names it gives: imported on first use, so one submodule does not load them all
    "evaluation.capacity": "CAPACITY_TARGET capacity_grid find_capacity search_capacity summarize_capacity",
    "evaluation.grid": "KEY_COLUMNS GridResult episode_details run_cell run_grid",
    "evaluation.stats": "SUMMARY_METRICS mean_ci95 summarize t_quantile_975",
    "evaluation.outputs": "TABLE_COLUMNS LiveTable capacity_table format_capacity_summary format_summary "
    "results_table write_results write_tensorboard",
    "evaluation.config": "EvalConfig InputError Row",
    "decision.policy_spec": "PolicySpec resolve_policy",
    "evaluation.runtime_options": "RuntimeOptions",
    "evaluation.tuning": "TuneConfig TuneResult tune_scenario",
    "workloads.describe": "format_description",
    "evaluation.tables": "format_table",
    "evaluation.identity": "identical_groups merge_identical policy_label",
    "common.outputs": "write_csv",
}
_LAZY = {name: f"llmsched_env.{module}" for module, names in _MODULES.items() for name in names.split()}

__all__ = list(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value  # once
        return value
    raise AttributeError(f"module 'llmsched_env.evaluation' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
