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
| ``grid`` | ``run_grid``, ``run_cell``: the episodes, serially or on Ray |
| ``details`` | per-request latencies and the KV series of an episode, for plots |
| ``capacity`` | ``search_capacity``, ``find_capacity``, ``capacity_grid`` (capped at the largest sustained load) |
| ``sustained`` | ``unsustained``, ``scenario_windows``: whether windows last long enough to measure a sustained rate |
| ``stats`` | ``summarize``, ``mean_ci95``, ``t_quantile_975`` |
| ``identity`` | a fingerprint per run; ``identical_groups``, ``merge_identical``: identical policies as one row |
| ``fallbacks`` | ``FALLBACK_LIMIT``, ``fallback_mark``, ``fallback_warning``: runs whose policy fell back, marked |
| ``tuning`` | ``TuneConfig``, ``tune_scenario``: the val search behind ``tuned``; ``trace_policies`` on a trace |
| ``outputs`` | live and summary tables, ``write_results``, ``write_tensorboard`` (CSV: ``common.outputs.write_csv``) |
| ``tables`` | ``format_table``: the fixed-width text tables the commands print |
| ``describe`` | a scenario described in words |
| ``plots`` | PNG plots (matplotlib) |
| ``distributed`` | ``ray_imap`` over Ray (results as the tasks finish) |
| ``progress`` | progress bars and status lines on stderr |

Nothing here imports torch, matplotlib or Ray until a policy file, the runtime backend, a plot or ``ray=``
needs it; schedulers and routers come from ``llmsched_env.decision.registry``, never from ``baselines``.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {  # name -> its module: imported on first use, so one submodule does not load them all
    "CAPACITY_TARGET": "llmsched_env.evaluation.capacity",
    "KEY_COLUMNS": "llmsched_env.evaluation.grid",
    "SUMMARY_METRICS": "llmsched_env.evaluation.stats",
    "TABLE_COLUMNS": "llmsched_env.evaluation.outputs",
    "EvalConfig": "llmsched_env.evaluation.config",
    "GridResult": "llmsched_env.evaluation.grid",
    "InputError": "llmsched_env.evaluation.config",
    "LiveTable": "llmsched_env.evaluation.outputs",
    "PolicySpec": "llmsched_env.decision.policy_spec",
    "Row": "llmsched_env.evaluation.config",
    "RuntimeOptions": "llmsched_env.evaluation.runtime_options",
    "TuneConfig": "llmsched_env.evaluation.tuning",
    "TuneResult": "llmsched_env.evaluation.tuning",
    "capacity_grid": "llmsched_env.evaluation.capacity",
    "capacity_table": "llmsched_env.evaluation.outputs",
    "episode_details": "llmsched_env.evaluation.details",
    "find_capacity": "llmsched_env.evaluation.capacity",
    "format_capacity_summary": "llmsched_env.evaluation.outputs",
    "format_description": "llmsched_env.evaluation.describe",
    "format_table": "llmsched_env.evaluation.tables",
    "format_summary": "llmsched_env.evaluation.outputs",
    "identical_groups": "llmsched_env.evaluation.identity",
    "mean_ci95": "llmsched_env.evaluation.stats",
    "merge_identical": "llmsched_env.evaluation.identity",
    "policy_label": "llmsched_env.evaluation.identity",
    "resolve_policy": "llmsched_env.decision.policy_spec",
    "results_table": "llmsched_env.evaluation.outputs",
    "run_cell": "llmsched_env.evaluation.grid",
    "run_grid": "llmsched_env.evaluation.grid",
    "search_capacity": "llmsched_env.evaluation.capacity",
    "summarize": "llmsched_env.evaluation.stats",
    "summarize_capacity": "llmsched_env.evaluation.capacity",
    "t_quantile_975": "llmsched_env.evaluation.stats",
    "tune_scenario": "llmsched_env.evaluation.tuning",
    "write_csv": "llmsched_env.common.outputs",
    "write_results": "llmsched_env.evaluation.outputs",
    "write_tensorboard": "llmsched_env.evaluation.outputs",
}

__all__ = list(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value  # once
        return value
    raise AttributeError(f"module 'llmsched_env.evaluation' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
