"""Judging schedulers: episodes, grids over policies, scenarios, loads and seeds, capacity search,
statistics over seeds, result files, plots and scale-out on Ray. (Live vLLM servers are measured in
``llmsched_env.live``.)

    from llmsched_env.evaluation import EvalConfig, run_grid, summarize, write_results

    config = EvalConfig(scenarios=["mixed-slo"], policies=["fcfs", "slo_aware"], seeds=[0, 1, 2])
    result = run_grid(config, details=True)             # one row of metrics per run
    summary = summarize(result.rows)                    # mean and 95% CI over seeds
    write_results(Path("results"), result.rows, summary=summary, details=result.details, plots=True)
    find_capacity(config, config.scenarios[0], "fcfs")  # the highest load with attainment >= 90%

| module | what |
|---|---|
| ``config`` | ``EvalConfig``: the runs, checked once; ``InputError`` |
| (``decision.policy_spec``) | ``PolicySpec``, ``resolve_policy``: a baseline by name or an exported policy file |
| (``decision.planners``) | the ``lookahead`` bounds, ``mpc``, their candidates, the tuned table and trace keys |
| ``runtime_options`` / ``runtime_backend`` | the torch runtime as a backend (imports torch) |
| ``grid`` | ``run_grid``, ``run_cell``: the episodes, serially or on Ray; ``episode_details`` for plots |
| ``capacity`` | ``search_capacity``, ``find_capacity``, ``capacity_grid`` (capped at the largest sustained load) |
| ``sustained`` | ``unsustained``, ``scenario_windows``: whether windows last long enough to measure a sustained rate |
| ``stats`` | ``summarize``, ``mean_ci95``, ``t_quantile_975`` |
| ``identity`` | a fingerprint per run; ``identical_groups``, ``merge_identical``: identical policies as one row |
| ``fallbacks`` | ``FALLBACK_LIMIT``, ``fallback_mark``, ``fallback_warning``: runs whose policy fell back, marked |
| ``tuning`` | ``TuneConfig``, ``tune_scenario``: the val search behind ``tuned``; ``trace_policies`` on a trace |
| ``outputs`` | live and summary tables, ``write_results``, ``write_tensorboard`` (CSV: ``common.outputs.write_csv``) |
| ``tables`` | ``format_table``: the fixed-width text tables the commands print |
| (``workloads.describe``) | ``format_description``: a scenario described in words |
| ``plots`` | PNG plots (matplotlib) |
| ``distributed`` | ``ray_imap`` over Ray (results as the tasks finish) |
| ``progress`` | progress bars and status lines on stderr |

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
