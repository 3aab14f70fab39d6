"""The records of a live run's files and their readers; each checks every field (``ValueError`` naming the file,
the line or entry, and the field). Times in seconds.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from llmsched_env.common.checks import shown
from llmsched_env.common.files import RECORD_BYTES, parse_json, read_text

__all__ = [
    "FINISHED_STATUSES", "ClientResult", "PlannedRequest", "ServerRequest", "StepRecord", "jsonl_records",
    "read_client_result", "read_plan", "read_server_requests", "read_steps",
]  # fmt: skip

_V = TypeVar("_V")

FINISHED_STATUSES = ("stopped", "length_capped")  # a request that produced its tokens; others were aborted or failed


@dataclass(frozen=True)
class StepRecord:
    """One engine iteration: ``schedule()`` from ``t0_s`` to ``t1_s``, the model to ``t2_s``, the update to
    ``t3_s``; ``busy``: requests left after it; its ``policy`` and ``fallback`` cause (None: not logged)."""

    t0_s: float
    t1_s: float
    t2_s: float
    t3_s: float
    prefill_tokens: int
    decode_seqs: int
    kv_tokens: int
    attn_pairs: float
    num_prefill_seqs: int
    busy: bool
    policy: str | None = None
    fallback: str | None = None

    @property
    def is_empty(self) -> bool:
        return self.prefill_tokens == 0 and self.decode_seqs == 0


@dataclass(frozen=True)
class ServerRequest:
    """The server's record of one finished request, ``line`` in ``requests.jsonl``; ``policy`` None if unlogged."""

    id: str
    label: str | None
    tenant: str
    arrival_s: float
    first_scheduled_s: float | None
    first_token_s: float | None
    finish_s: float
    prompt_tokens: int
    output_tokens: int
    status: str
    preemptions: int
    cached_tokens: int = 0  # prompt tokens vLLM's prefix cache held when the request was first scheduled
    policy: str | None = None
    line: int = field(default=0, compare=False)

    @property
    def finished(self) -> bool:
        """It produced its tokens (``status`` in ``FINISHED_STATUSES``)."""
        return self.status in FINISHED_STATUSES


@dataclass(frozen=True)
class PlannedRequest:
    """One request the client sent; ``offset_s`` None when the client drew it as it went (Poisson arrivals)."""

    label: str
    tenant: str
    prompt_tokens: int
    output_tokens: int
    send_s: float | None


@dataclass(frozen=True)
class ClientResult:
    """What ``vllm bench serve`` measured: the run's duration and throughput, and per request in send order its
    lengths, TTFT, latency, error ("": none) and send time from the first send (``start_s``, empty: unknown)."""

    duration_s: float
    request_throughput_rps: float
    input_lens: tuple[int, ...]
    output_lens: tuple[int, ...]
    ttft_s: tuple[float, ...]
    latency_s: tuple[float, ...]
    errors: tuple[str, ...]
    start_s: tuple[float, ...] = ()

    def succeeded(self, i: int) -> bool:
        return not self.errors[i]

    def subset(self, indices: Sequence[int]) -> ClientResult:
        """The per-request lists of the requests at ``indices`` only (the run's figures unchanged)."""

        def pick(values: tuple[_V, ...]) -> tuple[_V, ...]:
            return tuple(values[i] for i in indices)

        return ClientResult(
            self.duration_s, self.request_throughput_rps, pick(self.input_lens), pick(self.output_lens),
            pick(self.ttft_s), pick(self.latency_s), pick(self.errors), pick(self.start_s) if self.start_s else (),
        )  # fmt: skip


_STEP_FIELDS = {"t0": "time", "t1": "time", "t2": "time", "t3": "time", "prefill_tokens": "count",
                "decode_seqs": "count", "kv_tokens": "count", "attn_pairs": "number", "num_prefill_seqs": "count",
                "busy": "bool"}  # fmt: skip
_SERVER_FIELDS = {"id": "str", "label": "str?", "tenant": "str", "arrival": "time", "first_scheduled": "time?",
                  "first_token": "time?", "finish": "time", "prompt_tokens": "count", "output_tokens": "count",
                  "status": "str", "preemptions": "count", "cached_tokens": "count"}  # fmt: skip
# fields a record may lack (logs written before the adapter recorded them): None when absent
_STEP_OPTIONAL = {"policy": "str?", "fallback": "str?"}
_SERVER_OPTIONAL = {"policy": "str?"}
_PLAN_FIELDS = {"label": "str", "tenant": "str", "prompt_tokens": "count", "output_tokens": "count", "send_s": "time?"}
_KINDS = {
    "time": "a finite number", "number": "a finite number >= 0", "count": "an integer >= 0", "bool": "true or false",
    "str": "a string",
}  # fmt: skip


def _kind_text(kind: str) -> str:
    return _KINDS[kind.rstrip("?")] + (" or null" if kind.endswith("?") else "")


def _ok(kind: str, v: Any) -> bool:
    if kind.endswith("?"):
        return v is None or _ok(kind[:-1], v)
    if kind == "bool" or kind == "str":
        return isinstance(v, bool if kind == "bool" else str)
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return False
    if kind == "count":
        return isinstance(v, int) and v >= 0
    return math.isfinite(v) and (kind == "time" or v >= 0)


def _fields(
    where: str, data: Any, spec: Mapping[str, str], optional: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """``data``'s fields of ``spec`` and ``optional`` (None if absent); ``ValueError`` starting ``where``."""
    if not isinstance(data, dict):
        raise ValueError(f"{where}: expected a JSON object, got {type(data).__name__}")
    for name, kind in spec.items():
        if name not in data:
            raise ValueError(f"{where}: missing field '{name}'")
        if not _ok(kind, data[name]):
            raise ValueError(f"{where}: field '{name}' must be {_kind_text(kind)}, got {shown(data[name])}")
    out = {name: data[name] for name in spec}
    for name, kind in (optional or {}).items():
        out[name] = data.get(name)
        if not _ok(kind, out[name]):
            raise ValueError(f"{where}: field '{name}' must be {_kind_text(kind)}, got {shown(out[name])}")
    return out


def jsonl_records(path: Path, text: str | None = None, first_line: int = 1) -> Iterator[tuple[int, Any]]:
    """``(line number, parsed object)`` per non-blank line of ``path`` (or ``text``, from ``first_line``)."""
    if text is None:
        try:
            text = read_text(path, RECORD_BYTES)
        except OSError as exc:
            raise ValueError(f"{path}: cannot read: {exc.strerror}") from None
    for n, line in enumerate(text.splitlines(), start=first_line):
        if line.strip():
            try:
                yield n, parse_json(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}:{n}: not valid JSON: {exc.msg} (column {exc.colno})") from None


def _json(path: Path) -> Any:
    try:
        text = read_text(path, RECORD_BYTES)
    except OSError as exc:
        raise ValueError(f"{path}: cannot read: {exc.strerror}") from None
    try:
        return parse_json(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}:{exc.lineno}: not valid JSON: {exc.msg} (column {exc.colno})") from None


def read_steps(path: str | Path, text: str | None = None, first_line: int = 1) -> list[StepRecord]:
    """Every record of a ``steps.jsonl`` in file order (of ``text``, its lines from ``first_line`` on, if given)."""
    p = Path(path)
    out = []
    for n, data in jsonl_records(p, text, first_line):
        f = _fields(f"{p}:{n}", data, _STEP_FIELDS, _STEP_OPTIONAL)
        out.append(StepRecord(float(f["t0"]), float(f["t1"]), float(f["t2"]), float(f["t3"]), f["prefill_tokens"],
                              f["decode_seqs"], f["kv_tokens"], float(f["attn_pairs"]), f["num_prefill_seqs"],
                              f["busy"], f["policy"], f["fallback"]))  # fmt: skip
    return out


def read_server_requests(path: str | Path, text: str | None = None, first_line: int = 1) -> list[ServerRequest]:
    """Every record of a server's ``requests.jsonl`` in file order, each with its ``line``."""
    p = Path(path)
    out = []
    for n, data in jsonl_records(p, text, first_line):
        f = _fields(f"{p}:{n}", data, _SERVER_FIELDS, _SERVER_OPTIONAL)
        opt = {k: None if f[k] is None else float(f[k]) for k in ("first_scheduled", "first_token")}
        out.append(ServerRequest(f["id"], f["label"], f["tenant"], float(f["arrival"]), opt["first_scheduled"],
                                 opt["first_token"], float(f["finish"]), f["prompt_tokens"], f["output_tokens"],
                                 f["status"], f["preemptions"], f["cached_tokens"], f["policy"],
                                 line=n))  # fmt: skip
    return out


def read_plan(path: str | Path) -> list[PlannedRequest]:
    """The client's ``requests.json``: a non-empty list of requests with unique labels, in send order."""
    p = Path(path)
    data = _json(p)
    if not isinstance(data, list) or not data:
        raise ValueError(f"{p}: expected a non-empty JSON list of requests")
    out: list[PlannedRequest] = []
    seen: dict[str, int] = {}  # label -> entry
    for i, entry in enumerate(data):
        f = _fields(f"{p}: entry {i}", entry, _PLAN_FIELDS)
        if f["label"] in seen:
            raise ValueError(f"{p}: entry {i}: field 'label' {shown(f['label'])} repeats entry {seen[f['label']]}")
        seen[f["label"]] = i
        send_s = None if f["send_s"] is None else float(f["send_s"])
        out.append(PlannedRequest(f["label"], f["tenant"], f["prompt_tokens"], f["output_tokens"], send_s))
    return out


def read_client_result(path: str | Path, num_requests: int) -> ClientResult:
    """The result JSON of ``vllm bench serve --save-result --save-detailed`` for ``num_requests`` requests."""
    p = Path(path)
    raw = _json(p)
    data = _fields(f"{p}", raw, {"duration": "number", "request_throughput": "number"})
    lists: dict[str, list[Any]] = {}
    for name, kind in (("input_lens", "count"), ("output_lens", "count"), ("ttfts", "number"),
                       ("latencies", "number"), ("errors", "str?")):  # fmt: skip
        values = raw.get(name)
        if not isinstance(values, list):
            raise ValueError(f"{p}: missing field '{name}' (a list per request: run with --save-detailed)")
        if len(values) != num_requests:
            raise ValueError(f"{p}: field '{name}' has {len(values)} entries, requests.json has {num_requests}")
        for i, v in enumerate(values):
            if not _ok(kind, v):
                raise ValueError(f"{p}: field '{name}' entry {i} must be {_kind_text(kind)}, got {shown(v)}")
        lists[name] = values
    starts = raw.get("start_times")
    if starts is not None and (
        not isinstance(starts, list) or len(starts) != num_requests or not all(_ok("number", v) for v in starts)
    ):
        raise ValueError(f"{p}: field 'start_times' must be a list of {num_requests} numbers (one per request)")
    return ClientResult(
        float(data["duration"]), float(data["request_throughput"]), tuple(lists["input_lens"]),
        tuple(lists["output_lens"]), tuple(float(v) for v in lists["ttfts"]),
        tuple(float(v) for v in lists["latencies"]), tuple(v or "" for v in lists["errors"]),
        tuple(float(v) - float(starts[0]) for v in starts) if starts else (),
    )  # fmt: skip
