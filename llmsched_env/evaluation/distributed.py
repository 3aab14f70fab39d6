"""Scale-out on Ray (the optional ``distributed`` extra): map independent jobs over a Ray cluster.

``evaluate.py --ray`` spreads its grid's (scenario, load, policy) cells and its capacity searches, and
``train.py --ray`` its trainings, with ``ray_imap``: results as they come, each with its job's index, so a
caller reports each at once and keeps the order of its jobs. Without an address it starts a local Ray
(``num_cpus`` workers) whose workers import this repository from its folder; with an address
(``ray://host:10001`` or ``host:6379``) it ships the repository as the job's ``working_dir`` (run folders,
results and .git excluded), so every node runs the same code.
Each job is a plain function of picklable arguments returning picklable results; placed by their indices,
they are exactly what the serial loop gives.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

__all__ = ["RAY_INSTALL_HINT", "ray_imap", "use_driver_folder"]

ROOT = Path(__file__).resolve().parents[2]  # the repository: llmsched_env/, baselines/, agents/
RAY_INSTALL_HINT = "Ray is not installed: pip install -e '.[distributed]'"
_EXCLUDES = ["runs/", "results/", ".git/", "docs/", "*.zip", "__pycache__/", ".pytest_cache/", ".ruff_cache/"]


def ray_imap(
    fn: Callable[..., Any],
    jobs: Sequence[Sequence[Any]],
    address: str | None = None,
    num_cpus: int | None = None,
) -> Iterator[tuple[int, Any]]:
    """``(index, fn(*jobs[index]))`` for every job, each a Ray task of one CPU, yielded as the tasks finish
    (so a caller can report each result at once). ``address`` None or "local" starts a local Ray with
    ``num_cpus`` CPUs (default: all), else connects to that cluster; Ray is shut down when the iterator ends
    or is closed, if this call started it. ``RuntimeError`` with the install hint when Ray is missing; a
    failing job raises its error here."""
    try:
        import ray
    except ImportError:
        raise RuntimeError(RAY_INSTALL_HINT) from None
    started = False
    if not ray.is_initialized():
        pythonpath = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
        if address in (None, "", "local"):
            runtime_env = {"env_vars": {"PYTHONPATH": pythonpath}}
            ray.init(num_cpus=num_cpus, include_dashboard=False, log_to_driver=False, runtime_env=runtime_env)
        else:
            runtime_env = {"working_dir": str(ROOT), "excludes": _EXCLUDES}
            ray.init(address=address, log_to_driver=False, runtime_env=runtime_env)
        started = True
    try:
        task = ray.remote(num_cpus=1)(fn)
        pending = {task.remote(*job): index for index, job in enumerate(jobs)}
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            for ref in done:
                yield pending.pop(ref), ray.get(ref)
    finally:
        if started:
            ray.shutdown()


def use_driver_folder(cwd: str) -> None:
    """On a worker of a local Ray, change to the driver's folder ``cwd`` so that relative paths (policy
    files, cost-model JSON, weights) mean what they meant to the driver; elsewhere (a remote node, where the
    folder does not exist) stay in the job's working_dir, which holds the repository."""
    if os.path.isdir(cwd):
        os.chdir(cwd)

