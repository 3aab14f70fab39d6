"""Which policies played the same episodes: a fingerprint per run (``trajectory_fingerprint``), groups of identical
policies (``identical_groups``, ``merge_identical``) and the strict per-seed results reader.

Two policies are identical on a scenario when every run of one has the other's fingerprint at the same load and
seed; rows without a fingerprint are compared on every metric (capacity rows never merge).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from llmsched_env.common.files import RECORD_BYTES, csv_records
from llmsched_env.decision.planners.lookahead import is_bound

__all__ = ["SAME_AS", "TRAJECTORY", "combine_fingerprints", "identical_groups", "merge_identical", "per_seed_values",
           "policy_label", "read_trajectories", "trajectory_fingerprint"]  # fmt: skip

TRAJECTORY = "trajectory"  # the column of a run's (or a capacity search's) fingerprint
SAME_AS = "same_as"  # the summary column naming the policies merged into a row, comma-separated
_NOT_METRICS = ("policy", "wall_s", TRAJECTORY, SAME_AS)
T = TypeVar("T")


def _digest(h: Any) -> str:
    return str(h.hexdigest()[:16])


def trajectory_fingerprint(state: Any) -> str:
    """16 hex digits of a SHA-256 over what a finished episode did (iteration times, each request's fate, placing)."""
    h = hashlib.sha256()
    engines = [state.engine] if hasattr(state, "engine") else [rep.engine for rep in state.replicas]
    for engine in engines:
        h.update(memoryview(engine.round_end_s).cast("B"))
        h.update(b"|")
    for r in state.arrived_requests():
        fields = (r.request_id, int(r.status), r.num_output_tokens, r.num_preemptions, r.first_token_s, r.finish_s,
                  r.prefill_token_s, r.token_segments, r.decoding, r.decode_round0, r.decode_out0)  # fmt: skip
        h.update(repr(fields).encode())
    placed = getattr(state, "placed", None)
    if placed:
        h.update(repr(sorted(placed.items())).encode())
    return _digest(h)


def combine_fingerprints(parts: Iterable[Any]) -> str:
    """One fingerprint of a sequence, in the format of ``trajectory_fingerprint``."""
    h = hashlib.sha256()
    for part in parts:
        h.update(repr(part).encode())
        h.update(b"\n")
    return _digest(h)


def _signature(row: Mapping[str, Any], fallback: bool) -> Any:
    """What must match between two runs: the fingerprint, else (``fallback``) every metric; None: matches no other."""
    if row.get(TRAJECTORY):
        return row[TRAJECTORY]
    if not fallback:
        return None
    return tuple(sorted((k, repr(v)) for k, v in row.items() if k not in _NOT_METRICS))


def identical_groups(rows: Sequence[Mapping[str, Any]], *, fallback: bool = True) -> dict[str, list[list[str]]]:
    """Per scenario, the policies of ``rows`` grouped by identical runs (first-seen order); a bound stays alone."""
    runs: dict[str, dict[str, dict[tuple[Any, Any], Any]]] = {}
    for row in rows:
        key = (row.get("load"), row.get("seed"))
        by_policy = runs.setdefault(str(row["scenario"]), {})
        by_policy.setdefault(str(row["policy"]), {})[key] = _signature(row, fallback)
    out: dict[str, list[list[str]]] = {}
    for scenario, by_policy in runs.items():
        groups: list[tuple[object, list[str]]] = []  # (signature, or a bound's own sentinel; policies)
        for policy, signature in by_policy.items():
            if is_bound(policy):  # a bound (lookahead) keeps a row of its own, even where it played a rule's runs
                groups.append((object(), [policy]))
                continue
            mergeable = all(v is not None for v in signature.values())
            for known, members in groups:
                if mergeable and known == signature:
                    members.append(policy)
                    break
            else:
                groups.append((signature, [policy]))
        out[scenario] = [members for _, members in groups]
    return out


def merge_identical(
    summary: Sequence[Mapping[str, Any]], rows: Sequence[Mapping[str, Any]], *, fallback: bool = True
) -> list[dict[str, Any]]:
    """``summary`` without the rows of policies identical to an earlier one, kept rows naming them in ``same_as``."""
    others = {(scenario, group[0]): group[1:] for scenario, groups in identical_groups(rows, fallback=fallback).items()
              for group in groups}  # fmt: skip
    merged = {(scenario, p) for (scenario, _), rest in others.items() for p in rest}
    out = []
    for agg in summary:
        key = (str(agg["scenario"]), str(agg["policy"]))
        if key in merged:
            continue
        row = {"policy": agg["policy"], SAME_AS: ",".join(others.get(key, []))}
        row.update({k: v for k, v in agg.items() if k not in ("policy", SAME_AS)})
        out.append(row)
    return out


def policy_label(row: Mapping[str, Any]) -> str:
    """The policy of a summary row as the tables show it: ``fcfs (= lpm, vtc)`` when others were merged into it."""
    same = [p for p in str(row.get(SAME_AS) or "").split(",") if p]
    return f"{row['policy']} (= {', '.join(same)})" if same else str(row["policy"])


def per_seed_values(
    files: Iterable[str | Path], column: str, convert: Callable[[str], T], required: bool = True
) -> dict[str, dict[str, dict[int, T]]]:
    """Scenario -> policy -> seed -> ``convert(column)`` from per-seed results files (a later row replaces an earlier).
    ``ValueError`` naming the file when it is missing or lacks a column, or the line of a value ``convert`` refuses."""
    out: dict[str, dict[str, dict[int, T]]] = {}
    for file in map(Path, files):
        if not file.is_file():
            raise ValueError(f"{file}: no such file (a results.csv of llmsched-evaluate --capacity --per-seed)")
        for line, r in csv_records(file, RECORD_BYTES):
            missing = [c for c in ("seed", "scenario", "policy", *([column] if required else [])) if c not in r]
            if missing:
                need = f"no {' or '.join(missing)} column; run llmsched-evaluate --capacity --per-seed"
                raise ValueError(f"{file}: {need}")
            try:
                out.setdefault(r["scenario"], {}).setdefault(r["policy"], {})[int(r["seed"])] = convert(
                    r.get(column) or ""
                )
            except (TypeError, ValueError):
                raise ValueError(f"{file}:{line}: seed or {column} is not a number: {r}") from None
    return out


def read_trajectories(files: Iterable[str | Path]) -> dict[str, dict[str, dict[int, str]]]:
    """Scenario -> policy -> seed -> ``trajectory`` from per-seed results files (runs without one left out)."""
    runs = per_seed_values(files, TRAJECTORY, str, required=False)
    return {s: {p: {k: v for k, v in seeds.items() if v} for p, seeds in ps.items()} for s, ps in runs.items()}
