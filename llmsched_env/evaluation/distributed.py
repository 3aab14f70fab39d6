"""Scale-out: map independent jobs over local worker processes or a Ray cluster (the ``distributed`` extra).

Local workers talk to this process through pipes only (no network listener, no local Ray) and end with it
however it ends (``common.lifetime``); results placed by index are what the serial loop gives.
"""

from __future__ import annotations

import multiprocessing
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

from llmsched_env.common.lifetime import die_with_parent, sigterm_raises

__all__ = ["RAY_CONNECT_TIMEOUT_ENV", "RAY_INSTALL_HINT", "check_ray_address", "ray_imap", "use_driver_folder"]

ROOT = Path(__file__).resolve().parents[2]  # the repository: llmsched_env/, baselines/, agents/
RAY_INSTALL_HINT = "Ray is not installed: pip install -e '.[distributed]'"
RAY_CONNECT_TIMEOUT_ENV = "LLMSCHED_RAY_CONNECT_TIMEOUT_S"  # seconds a Ray address has to answer (default 60)
_RAY_CONNECT_TIMEOUT_S = 60.0
_RAY_CONNECT_TIMEOUT_MAX_S = 86_400.0  # a day: longer is no timeout
_EXCLUDES = ["runs/", "results/", ".git/", "docs/", "*.zip", "__pycache__/", ".pytest_cache/", ".ruff_cache/"]


def ray_imap(
    fn: Callable[..., Any],
    jobs: Sequence[Sequence[Any]],
    address: str | None = None,
    num_cpus: int | None = None,
) -> Iterator[tuple[int, Any]]:
    """``(index, fn(*jobs[index]))`` for every job as it ends, on local workers (``address`` None or "local") or Ray.
    ``ValueError`` for a bad ``num_cpus``, ``RuntimeError`` without Ray; a failing job raises here."""
    if num_cpus is not None and (isinstance(num_cpus, bool) or not isinstance(num_cpus, int) or num_cpus < 1):
        raise ValueError(f"num_cpus must be an integer >= 1 or None, got {num_cpus!r}")
    if address in (None, "", "local"):
        return _local_imap(fn, jobs, num_cpus)
    return _ray_imap(fn, jobs, str(address))


def _local_imap(
    fn: Callable[..., Any], jobs: Sequence[Sequence[Any]], num_cpus: int | None
) -> Iterator[tuple[int, Any]]:
    """``ray_imap`` on spawned local workers; ``fn`` and the jobs travel cloudpickled (closures work as on Ray)."""
    import cloudpickle

    workers = max(1, min(num_cpus or os.cpu_count() or 1, len(jobs)))
    context = multiprocessing.get_context("spawn")
    # the workers are started by the submits below, from this thread: they end when this process does
    guard = (os.getpid(), threading.current_thread() is threading.main_thread())
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=context, initializer=die_with_parent, initargs=guard)
    finished = False
    try:
        with sigterm_raises():  # SIGTERM unwinds to the finally below, as Ctrl-C does
            pending = {pool.submit(_run_pickled, cloudpickle.dumps((fn, tuple(job)))): i for i, job in enumerate(jobs)}
            for future in as_completed(pending):
                yield pending[future], future.result()
        finished = True
    finally:
        if not finished:  # a job failed, or the caller stopped or was stopped: the jobs still running are unwanted
            _stop_workers(pool)
        pool.shutdown(wait=True, cancel_futures=True)


def _stop_workers(pool: ProcessPoolExecutor) -> None:
    """SIGTERM ``pool``'s workers rather than wait for their jobs (a sweep's training ends too: ``guarded_command``)."""
    stop = getattr(pool, "terminate_workers", None)  # Python 3.14
    if stop is not None:
        stop()
        return
    for process in list((getattr(pool, "_processes", None) or {}).values()):
        if process.is_alive():
            process.terminate()


def _run_pickled(payload: bytes) -> Any:
    """On a local worker: unpickle ``(fn, job)`` and return ``fn(*job)``."""
    import cloudpickle

    fn, job = cloudpickle.loads(payload)
    return fn(*job)


def _connect_timeout() -> float:
    """``$LLMSCHED_RAY_CONNECT_TIMEOUT_S`` (seconds > 0), default 60; ``ValueError`` naming the variable."""
    text = os.environ.get(RAY_CONNECT_TIMEOUT_ENV, "").strip()
    if not text:
        return _RAY_CONNECT_TIMEOUT_S
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 < value <= _RAY_CONNECT_TIMEOUT_MAX_S:
        raise ValueError(
            f"{RAY_CONNECT_TIMEOUT_ENV}={text!r}: expected a number of seconds > 0 and at most "
            f"{_RAY_CONNECT_TIMEOUT_MAX_S:,.0f} (a day)"
        )
    return value


def _host_port(address: str) -> tuple[str, int] | None:
    """The host and port of a Ray address (``ray://h:10001``, ``h:6379``, ``[::1]:6379``); None for none (``auto``)."""
    rest = address.removeprefix("ray://")
    host, sep, port = rest.rpartition(":")
    if not sep or not port.isdigit() or not host:
        return None
    return host.strip("[]"), int(port)


def check_ray_address(address: str, timeout_s: float | None = None) -> None:
    """One-line ``ValueError`` unless a Ray cluster answers at ``address`` within ``timeout_s``; ``ray.init`` runs in a
    child killed at the deadline (Ray retries a non-Ray address forever)."""
    import importlib.util

    if importlib.util.find_spec("ray") is None:
        raise ValueError(RAY_INSTALL_HINT)
    timeout = _connect_timeout() if timeout_s is None else timeout_s
    where = _host_port(address)
    if where is not None:
        try:
            socket.create_connection(where, timeout=min(timeout, 10.0)).close()
        except OSError as exc:
            reason = "no answer" if isinstance(exc, TimeoutError) else (exc.strerror or str(exc))
            raise ValueError(f"--ray {address}: cannot connect to {where[0]}:{where[1]} ({reason})") from None
    probe = "import ray, sys; ray.init(address=sys.argv[1], log_to_driver=False); ray.shutdown()"
    try:
        done = subprocess.run([sys.executable, "-c", probe, address], capture_output=True, text=True,
                              timeout=timeout, check=False)  # fmt: skip
    except subprocess.TimeoutExpired:
        raise ValueError(
            f"--ray {address}: no Ray cluster answered within {timeout:g} s (is it a Ray head's address and "
            f"port?); set {RAY_CONNECT_TIMEOUT_ENV} to wait longer"
        ) from None
    if done.returncode != 0:
        last = next((line for line in reversed(done.stderr.splitlines()) if line.strip()), "no message")
        raise ValueError(f"--ray {address}: Ray could not connect ({last.strip()[:300]})")


def _ray_imap(fn: Callable[..., Any], jobs: Sequence[Sequence[Any]], address: str) -> Iterator[tuple[int, Any]]:
    """``ray_imap`` on the Ray cluster at ``address``."""
    try:
        import ray
    except ImportError:
        raise RuntimeError(RAY_INSTALL_HINT) from None
    started = False
    if not ray.is_initialized():
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
    """On a local worker, change to the driver's folder ``cwd``; on a remote node stay in the job's working_dir."""
    if os.path.isdir(cwd):
        os.chdir(cwd)
