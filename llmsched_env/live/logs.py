"""One live benchmark run's files, read and checked (``load_run``): the client's ``requests.json`` and result JSON,
the server's ``steps.jsonl`` and ``requests.jsonl`` (in the folder or ``server-log`` beside it, ``find_log_dir``),
the server records matched by label and the steps kept within the run's span. Errors name file, line and field.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from llmsched_env.common.files import RECORD_BYTES, read_bytes
from llmsched_env.live.records import (
    ClientResult,
    PlannedRequest,
    ServerRequest,
    StepRecord,
    read_client_result,
    read_plan,
    read_server_requests,
    read_steps,
)  # fmt: skip

__all__ = ["LiveRun", "ServerLogTail", "ServerLogs", "find_log_dir", "find_result_file", "load_run", "read_client",
           "read_server_logs"]  # fmt: skip

_R = TypeVar("_R")

PLAN_FILE = "requests.json"
STEPS_FILE = "steps.jsonl"
SERVER_FILE = "requests.jsonl"
RESULT_FILE = "result.json"
LOG_FOLDER = "server-log"  # beside the run folders, as ``live.server`` lays an experiment out


@dataclass(frozen=True)
class LiveRun:
    """One live run: its requests in send order, engine ``steps``, ``log_dir``, and the ``unlogged`` failed labels."""

    name: str
    plan: tuple[PlannedRequest, ...]
    server: tuple[ServerRequest, ...]
    client: ClientResult
    steps: tuple[StepRecord, ...]
    log_dir: Path = Path(".")
    unlogged: tuple[str, ...] = ()

    @property
    def start_s(self) -> float:
        """The first server-side arrival (``time.time()`` clock)."""
        return min(r.arrival_s for r in self.server)

    @property
    def end_s(self) -> float:
        """The last server-side finish."""
        return max(r.finish_s for r in self.server)


def find_result_file(run_dir: Path) -> Path:
    """The client's result JSON in ``run_dir``; ``ValueError`` naming the folder when there is none or more than one."""
    preferred = run_dir / RESULT_FILE
    if preferred.is_file():
        return preferred
    others = sorted(p for p in run_dir.glob("*.json") if p.name != PLAN_FILE)
    if len(others) != 1:
        found = ", ".join(p.name for p in others) or "none"
        raise ValueError(
            f"{run_dir}: expected one result JSON of vllm bench serve ({RESULT_FILE}, or a single *.json "
            f"besides {PLAN_FILE}), found {found}"
        )
    return others[0]


def find_log_dir(run_dir: Path) -> Path:
    """``run_dir`` if it holds ``requests.jsonl``, else its sibling ``server-log``; else ``ValueError``."""
    for folder in (run_dir, run_dir.parent / LOG_FOLDER):
        if (folder / SERVER_FILE).is_file():
            return folder
    raise ValueError(
        f"{run_dir}: no server log: neither {run_dir / SERVER_FILE} nor {run_dir.parent / LOG_FOLDER / SERVER_FILE}"
    )


@dataclass(frozen=True)
class ServerLogs:
    """A server's two logs read once (``read_server_logs``), for ``load_run`` over the many runs it served."""

    requests: tuple[ServerRequest, ...]
    steps: tuple[StepRecord, ...]


def read_server_logs(log_dir: str | Path) -> ServerLogs:
    """``requests.jsonl`` and ``steps.jsonl`` of ``log_dir``, every record in file order."""
    logs = Path(log_dir)
    return ServerLogs(tuple(read_server_requests(logs / SERVER_FILE)), tuple(read_steps(logs / STEPS_FILE)))


class ServerLogTail:
    """The logs of a server still writing them: each ``read()`` parses only the complete lines added since."""

    def __init__(self, log_dir: str | Path) -> None:
        self.log_dir = Path(log_dir)
        self._at = {SERVER_FILE: (0, 1), STEPS_FILE: (0, 1)}  # per file: bytes and lines read so far
        self._requests: list[ServerRequest] = []
        self._steps: list[StepRecord] = []

    def read(self) -> ServerLogs:
        """Both logs as they stand now (a missing file reads as empty; a partial line waits for the next call)."""
        self._requests += self._new_lines(SERVER_FILE, read_server_requests)
        self._steps += self._new_lines(STEPS_FILE, read_steps)
        return ServerLogs(tuple(self._requests), tuple(self._steps))

    def _new_lines(self, name: str, parse: Callable[[Path, str, int], list[_R]]) -> list[_R]:
        path = self.log_dir / name
        offset, line = self._at[name]
        try:
            data = read_bytes(path, RECORD_BYTES, offset)
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise ValueError(f"{path}: cannot read: {exc.strerror}") from None
        end = data.rfind(b"\n") + 1
        try:
            text = data[:end].decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ValueError(f"{path}: not UTF-8 after byte {offset + exc.start}") from None
        records = parse(path, text, line)
        self._at[name] = (offset + end, line + text.count("\n"))
        return records


def read_client(run_dir: Path) -> tuple[list[PlannedRequest], ClientResult]:
    """The client's files of ``run_dir``: ``requests.json`` and the result JSON (``find_result_file``)."""
    plan = read_plan(run_dir / PLAN_FILE)
    return plan, read_client_result(find_result_file(run_dir), len(plan))


def load_run(
    run_dir: str | Path, name: str | None = None, log_dir: str | Path | None = None,
    server_logs: ServerLogs | None = None,
) -> LiveRun:  # fmt: skip
    """Read and cross-check ``run_dir`` and the server's logs; ``ValueError`` naming the file for a missing file, a
    label logged twice or not at all, or a tenant that differs."""
    folder = Path(run_dir)
    if not folder.is_dir():
        raise ValueError(f"{folder}: not a run folder")
    logs = Path(log_dir) if log_dir is not None else find_log_dir(folder)
    plan_path, server_path = folder / PLAN_FILE, logs / SERVER_FILE
    plan, client = read_client(folder)
    wanted = {p.label: i for i, p in enumerate(plan)}
    matched: list[ServerRequest | None] = [None] * len(plan)
    lines: dict[str, int] = {}
    records = server_logs.requests if server_logs is not None else read_server_requests(server_path)
    for record in records:
        label, line = record.label, record.line
        if label is None or label not in wanted:
            continue  # another run's request, or vLLM's unlabelled ready check and warm-ups
        i = wanted[label]
        if label in lines:
            raise ValueError(
                f"{server_path}:{line}: field 'label' {label!r} was already logged at line {lines[label]}; "
                "give each request of a run its own label"
            )
        lines[label] = line
        if record.tenant != plan[i].tenant:
            raise ValueError(
                f"{server_path}:{line}: field 'tenant' is {record.tenant!r} but {plan_path} entry {i} "
                f"(label {plan[i].label!r}) has {plan[i].tenant!r}"
            )
        matched[i] = record
    for i, found in enumerate(matched):
        if found is None and client.succeeded(i):
            raise ValueError(
                f"{server_path}: no record with label {plan[i].label!r} ({plan_path} entry {i}); the server's "
                "request log must cover every request of the run that reached it"
            )
    keep = [i for i, record in enumerate(matched) if record is not None]
    if not keep:
        raise ValueError(f"{server_path}: no request of {plan_path} reached the server")
    unlogged = tuple(plan[i].label for i, record in enumerate(matched) if record is None)
    plan, client = [plan[i] for i in keep], client.subset(keep)
    server = tuple(r for r in matched if r is not None)
    start = min(r.arrival_s for r in server)
    end = max(r.finish_s for r in server)
    all_steps = server_logs.steps if server_logs is not None else read_steps(logs / STEPS_FILE)
    steps = tuple(s for s in all_steps if start <= s.t0_s <= end)
    return LiveRun(name or folder.name, tuple(plan), server, client, steps, logs, unlogged)
