"""Trace loaders on the public traces shipped in the package, their validation errors on small bad files, and Trace
operations."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from llmsched_env.engine.request import Request
from llmsched_env.workloads.public_traces import trace_path
from llmsched_env.workloads.traces import (
    TRACE_FORMATS,
    Trace,
    TraceError,
    clear_trace_cache,
    load_azure,
    load_generic,
    load_lengths,
    load_mooncake,
    load_trace,
)

AZURE_CONV = trace_path("azure-conv")
AZURE_CODE = trace_path("azure-code")
MOONCAKE = trace_path("mooncake-conv")
SHAREGPT = trace_path("sharegpt")
AZURE_HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens\n"


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _mooncake_line(ts: float, inp: object = 600, out: object = 10, ids: object = (1, 2)) -> str:
    return json.dumps({"timestamp": ts, "input_length": inp, "output_length": out, "hash_ids": list(ids)}) + "\n"


def _check_sorted_from_zero(trace: Trace) -> None:
    assert trace.arrival_s is not None
    assert trace.arrival_s[0] == 0.0
    assert np.all(np.diff(trace.arrival_s) >= 0)


# ------------------------------------------------------------------------------------------- shipped traces


def test_azure_conv_trace() -> None:
    trace = load_azure(AZURE_CONV)
    assert len(trace) == 19_366
    assert (trace.prompt_len[0], trace.output_len[0]) == (374, 44)
    assert (trace.prompt_len[-1], trace.output_len[-1]) == (197, 183)
    _check_sorted_from_zero(trace)
    assert trace.arrival_s[1] == pytest.approx(50.9951690 - 46.6805900, abs=1e-6)  # second row, same minute
    assert trace.duration_s() == pytest.approx(3501.72197, abs=1e-4)  # 18:15:46.68 -> 19:14:08.40, about an hour
    assert trace.mean_rate_rps() == pytest.approx(5.5, abs=0.15)
    assert trace.prefix_ids is None and trace.tenant is None
    assert trace.prompt_len.dtype == np.int64 and trace.arrival_s.dtype == np.float64
    for arr in (trace.arrival_s, trace.prompt_len, trace.output_len):
        assert not arr.flags.writeable


def test_azure_code_trace_is_bursty() -> None:
    trace = load_trace(AZURE_CODE, "azure")
    assert len(trace) == 8_819
    assert (trace.prompt_len[0], trace.output_len[0]) == (4808, 10)
    _check_sorted_from_zero(trace)
    stats = trace.describe()
    assert stats["interarrival_cv"] > 5  # the README's CV ~13
    assert stats["output_mean"] < stats["prompt_mean"]


def test_mooncake_trace_values_and_spreading() -> None:
    raw = load_mooncake(MOONCAKE, tick_s=0)  # tick 0: file order, raw timestamps
    assert len(raw) == 12_031
    assert (raw.prompt_len[0], raw.output_len[0]) == (6758, 500)
    assert raw.prefix_ids is not None and raw.prefix_ids[0][:4] == (0, 1, 2, 3)
    assert raw.prefix_ids[0] == tuple(range(14)) and raw.prefix_id_tokens == 512
    ticks = raw.arrival_s
    assert np.all(np.abs(ticks * 1000 / 3000 - np.rint(ticks * 1000 / 3000)) < 0.01)  # ~3 s ticks

    spread = load_mooncake(MOONCAKE)
    _check_sorted_from_zero(spread)
    assert sorted(zip(spread.prompt_len.tolist(), spread.prefix_ids, strict=True)) == sorted(
        zip(raw.prompt_len.tolist(), raw.prefix_ids, strict=True)
    )
    # Sorted spread times are tick-wise sorted raw times plus one shift in [0, 3 s) from the rebasing, and the
    # i-th smallest spread time lies in the i-th smallest tick: find a shift consistent with every request.
    lo = np.max(ticks - spread.arrival_s)
    hi = np.min(ticks + 3.0 - spread.arrival_s)
    assert -1e-9 <= lo <= hi + 1e-9 and lo < 3.0
    assert len(np.unique(spread.arrival_s)) > 0.99 * len(spread)  # no longer stuck on tick boundaries

    clear_trace_cache()  # same seed after a real re-read: the same arrivals
    assert np.array_equal(load_mooncake(MOONCAKE).arrival_s, spread.arrival_s)
    other = load_mooncake(MOONCAKE, seed=1)
    assert not np.array_equal(other.arrival_s, spread.arrival_s)


def test_mooncake_describe() -> None:
    stats = load_mooncake(MOONCAKE).describe()
    assert 0.3 <= stats["prefix_reuse_share"] <= 0.45  # README: about 37% of blocks reused
    assert stats["num_requests"] == 12_031
    assert stats["prompt_mean"] == pytest.approx(12_035, abs=1)  # README's average input length
    assert stats["prompt_p50"] <= stats["prompt_p90"] <= stats["prompt_p99"]
    assert stats["duration_s"] == pytest.approx(3537, abs=5)
    assert 0.5 < stats["interarrival_cv"] < 2
    assert stats["mean_rate_rps"] == pytest.approx(12_030 / stats["duration_s"])


def test_sharegpt_lengths() -> None:
    trace = load_lengths(SHAREGPT)
    assert len(trace) == 30_731
    assert (trace.prompt_len[0], trace.output_len[0]) == (74, 918)
    assert trace.arrival_s is None
    stats = trace.describe()
    assert np.isnan(stats["duration_s"]) and np.isnan(stats["interarrival_cv"])
    assert stats["output_p50"] == pytest.approx(np.median(trace.output_len))
    with pytest.raises(ValueError, match="no arrival times"):
        trace.duration_s()
    with pytest.raises(ValueError, match="no arrival times"):
        trace.to_requests()


def test_cache_returns_the_same_trace_until_the_file_changes(tmp_path: Path) -> None:
    path = _write(tmp_path, "a.csv", AZURE_HEADER + "2023-11-16 18:00:00.0,5,6\n")
    first = load_azure(path)
    assert load_trace(path, "azure") is first
    assert load_azure(path, max_context=100) is not first  # options are part of the key
    path.write_text(AZURE_HEADER + "2023-11-16 18:00:00.0,5,6\n2023-11-16 18:00:01.5,7,8\n")
    second = load_azure(path)
    assert len(second) == 2 and second.arrival_s[1] == pytest.approx(1.5)


# ------------------------------------------------------------------------------------------------ validation

AZ = "bad.csv"
MC = "bad.jsonl"
BAD_FILES = [
    # (file name, content, loader options, line, field)
    (AZ, "", {}, 1, "expected a CSV header"),
    (AZ, AZURE_HEADER, {}, 2, "no data rows"),
    (AZ, "TIMESTAMP,Context,GeneratedTokens\n", {}, 1, "ContextTokens"),
    (AZ, AZURE_HEADER + "2023-11-16 18:00:00.1,5,6\n2023-11-16 18:00:01.0,abc,6\n", {}, 3, "ContextTokens"),
    (AZ, AZURE_HEADER + "2023-11-16 18:00:00.1,5,0\n", {}, 2, "GeneratedTokens"),
    (AZ, AZURE_HEADER + "2023-11-16 18:00:00.1,-5,3\n", {}, 2, "ContextTokens"),
    (AZ, AZURE_HEADER + "2023-11-16 18:00:00.1,5,3\n\n2023-11-16 25:00:00,5,3\n", {}, 4, "TIMESTAMP"),
    (AZ, AZURE_HEADER + "2023-11-16 18:00:02,5,3\n2023-11-16 18:00:01,5,3\n", {}, 3, "TIMESTAMP"),
    (AZ, AZURE_HEADER + "2023-11-16 18:00:02,5\n", {}, 2, "GeneratedTokens"),
    (
        AZ,
        AZURE_HEADER + "2023-11-16 18:00:02,500,600\n",
        {"max_context": 1000, "overlong": "error"},
        2,
        "ContextTokens",
    ),
    (AZ, AZURE_HEADER + "2023-11-16 18:00:02,5,6\n", {"overlong": "drop"}, None, "overlong"),
    (MC, _mooncake_line(0) + "{not json\n", {}, 2, "invalid JSON"),
    (MC, _mooncake_line(0) + _mooncake_line(-3000), {}, 2, "timestamp"),
    (MC, _mooncake_line(3000) + _mooncake_line(0), {}, 2, "timestamp"),
    (MC, _mooncake_line(0) + _mooncake_line(0, ids=[1, "2"]), {}, 2, "hash_ids"),
    (MC, _mooncake_line(0) + _mooncake_line(0, ids=[1.5]), {}, 2, "hash_ids"),
    (MC, _mooncake_line(0, inp=0), {}, 1, "input_length"),
    (MC, _mooncake_line(0, out="ten"), {}, 1, "output_length"),
    (MC, _mooncake_line(0) + '{"timestamp": 0, "input_length": 5, "output_length": 5}\n', {}, 2, "hash_ids"),
    (MC, _mooncake_line(0) + "[1, 2]\n", {}, 2, "JSON object"),
    (MC, "\n\n", {}, 1, "empty"),
    (AZ, AZURE_HEADER.strip() + ",ContextTokens\n2023-11-16 18:00:00,5,3,9\n", {}, 1, "more than once"),
    (AZ, AZURE_HEADER + "2023-11-16 18:00:59.5,5,3\n2023-11-16 18:00:60.5,5,3\n", {}, 3, "seconds 00-59"),
    (MC, _mooncake_line(0) + _mooncake_line(0, ids=[1, -2]), {}, 2, "0 to 2**63 - 1, got -2"),
    (MC, _mooncake_line(0, ids=[2**63]), {}, 1, "0 to 2**63 - 1, got 9223372036854775808"),
    (MC, _mooncake_line(0, inp=600, ids=[1, 2, 3]), {}, 1, "has 3 ids but the prompt of 600 tokens has only 2"),
]


@pytest.mark.parametrize(("name", "text", "options", "line", "field"), BAD_FILES)
def test_validation_errors_name_file_line_and_field(
    tmp_path: Path, name: str, text: str, options: dict, line: int | None, field: str
) -> None:
    path = _write(tmp_path, name, text)
    loader = load_azure if name.endswith(".csv") else load_mooncake
    with pytest.raises(TraceError) as info:
        loader(path, **options)
    message = str(info.value)
    assert name in message and field in message
    if line is not None:
        assert f"{name}:{line}:" in message
    assert "\n" not in message and isinstance(info.value, ValueError)


def test_missing_column_lists_found_and_expected(tmp_path: Path) -> None:
    path = _write(tmp_path, "cols.csv", "num_prefill_tokens,decode\n1,2\n")
    with pytest.raises(TraceError, match=r"cols\.csv:1: .*'num_decode_tokens'.*found columns.*'decode'.*expected"):
        load_lengths(path)


def test_one_column_mapped_to_two_fields_is_refused(tmp_path: Path) -> None:
    """``output_len=prompt_len`` ran every request with its prompt's length as its output, silently."""
    path = _write(tmp_path, "g.csv", "t,p,o\n0,1,2\n")
    with pytest.raises(TraceError, match=r"g\.csv: columns mapping reads the column 'p' as prompt_len and output_len"):
        load_generic(path, {"arrival": "t", "prompt_len": "p", "output_len": "p"})


def test_missing_file_and_unknown_format(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match=r"nope\.csv: trace file not found"):
        load_azure(tmp_path / "nope.csv")
    with pytest.raises(TraceError, match="unknown trace format 'splitwise'") as info:
        load_trace(tmp_path / "x.csv", "splitwise")
    assert all(fmt in str(info.value) for fmt in TRACE_FORMATS)
    path = _write(tmp_path, "x.csv", AZURE_HEADER + "2023-11-16 18:00:00,1,1\n")
    with pytest.raises(TraceError, match="unknown option"):
        load_trace(path, "azure", seed=3)
    with pytest.raises(TraceError, match="needs a columns mapping"):
        load_trace(path, "generic")


def test_generic_option_errors(tmp_path: Path) -> None:
    path = _write(tmp_path, "g.csv", "p,o\n1,2\n")
    with pytest.raises(TraceError, match="unknown field"):
        load_generic(path, {"prompt_len": "p", "output_len": "o", "user": "u"})
    with pytest.raises(TraceError, match="lacks required"):
        load_generic(path, {"prompt_len": "p"})
    with pytest.raises(TraceError, match="time_unit"):
        load_generic(path, {"prompt_len": "p", "output_len": "o"}, time_unit="h")
    with pytest.raises(TraceError, match=r"g\.txt: unknown file type"):
        load_generic(_write(tmp_path, "g.txt", "p,o\n1,2\n"), {"prompt_len": "p", "output_len": "o"})
    bad_ids = _write(tmp_path, "ids.csv", "p,o,ids\n1000,2,1 2\n1,2,1 x\n")
    with pytest.raises(TraceError, match=r"ids\.csv:3: column 'ids' \(prefix_ids\)"):
        load_generic(bad_ids, {"prompt_len": "p", "output_len": "o", "prefix_ids": "ids"})
    no_tenant = _write(tmp_path, "t.jsonl", '{"p": 1, "o": 2, "who": "a"}\n{"p": 1, "o": 2, "who": ""}\n')
    with pytest.raises(TraceError, match=r"t\.jsonl:2: key 'who' \(tenant\)"):
        load_generic(no_tenant, {"prompt_len": "p", "output_len": "o", "tenant": "who"})


# ------------------------------------------------------------------------------------- overlong and sorting


def test_overlong_reject_truncate_error(tmp_path: Path) -> None:
    text = AZURE_HEADER + "2023-11-16 18:00:00,100,20\n2023-11-16 18:00:01,900,300\n2023-11-16 18:00:02,10,2000\n"
    path = _write(tmp_path, "long.csv", text)
    kept = load_azure(path, max_context=1000)  # "reject" is the default: rows unchanged, the engine rejects
    assert kept.prompt_len.tolist() == [100, 900, 10] and kept.output_len.tolist() == [20, 300, 2000]
    cut = load_azure(path, max_context=1000, overlong="truncate")
    assert cut.prompt_len.tolist() == [100, 700, 1] and cut.output_len.tolist() == [20, 300, 999]
    assert np.all(cut.prompt_len + cut.output_len <= 1000)
    with pytest.raises(TraceError, match=r"long\.csv:3: .*ContextTokens.*max_context=1100"):
        load_azure(path, max_context=1100, overlong="error")
    with pytest.raises(TraceError, match="max_context must be"):
        load_azure(path, max_context=1)


def test_truncate_trims_prefix_ids(tmp_path: Path) -> None:
    path = _write(tmp_path, "m.jsonl", _mooncake_line(0, inp=1500, out=100, ids=[7, 8, 9]) + _mooncake_line(0))
    cut = load_mooncake(path, max_context=700, overlong="truncate")
    assert cut.prompt_len.tolist() == [600, 600] and cut.output_len.tolist() == [100, 10]
    assert cut.prefix_ids == ((7, 8), (1, 2))


def test_sort_option_sorts_stably(tmp_path: Path) -> None:
    text = (
        AZURE_HEADER
        + "".join(
            f"2023-11-16 {clock},{p},1\n"
            for clock, p in [("23:59:59.5", 1), ("23:59:58", 2), ("23:59:59.5", 3), ("23:59:58", 4)]
        )
        + "2023-11-17 00:00:00.25,5,1\n"
    )  # crosses midnight
    path = _write(tmp_path, "unsorted.csv", text)
    with pytest.raises(TraceError, match=r"unsorted\.csv:3: column 'TIMESTAMP'.*sort=True"):
        load_azure(path)
    trace = load_azure(path, sort=True)
    assert trace.prompt_len.tolist() == [2, 4, 1, 3, 5]
    assert trace.arrival_s.tolist() == pytest.approx([0, 0, 1.5, 1.5, 2.25])


# --------------------------------------------------------------------------------------------- generic files


def test_generic_csv_with_mapping(tmp_path: Path) -> None:
    text = (
        "t_ms,in,out,blocks,user\n"
        "1700000001000,10,5,1 2 3,alice\n"
        '1700000001500,20,6,"[1, 2, 4]",bob\n'
        "\n"
        "1700000003000,30,7,,alice\n"
    )
    path = _write(tmp_path, "mine.csv", text)
    columns = {"arrival": "t_ms", "prompt_len": "in", "output_len": "out", "prefix_ids": "blocks", "tenant": "user"}
    trace = load_generic(path, columns, time_unit="ms", prefix_id_tokens=4)
    assert trace.arrival_s.tolist() == pytest.approx([0.0, 0.5, 2.0])
    assert trace.prompt_len.tolist() == [10, 20, 30] and trace.output_len.tolist() == [5, 6, 7]
    assert trace.prefix_ids == ((1, 2, 3), (1, 2, 4), ())
    assert trace.prefix_id_tokens == 4
    assert trace.tenant_names == ("alice", "bob") and trace.tenant.tolist() == [0, 1, 0]
    assert trace.describe()["prefix_reuse_share"] == pytest.approx(2 / 6)
    assert load_trace(path, "generic", columns=columns, time_unit="ms", prefix_id_tokens=4) is trace


def test_generic_jsonl_with_tenants_sorted(tmp_path: Path) -> None:
    rows = [
        {"ts": 12.5, "p": 3, "o": 4, "ids": [5, 6], "team": "b"},
        {"ts": 10.0, "p": 1, "o": 2, "ids": [5], "team": "a"},
        {"ts": 11, "p": 2, "o": 3, "ids": [], "team": 7},
    ]
    path = _write(tmp_path, "mine.jsonl", "".join(json.dumps(r) + "\n" for r in rows))
    columns = {"arrival": "ts", "prompt_len": "p", "output_len": "o", "prefix_ids": "ids", "tenant": "team"}
    with pytest.raises(TraceError, match=r"mine\.jsonl:2: key 'ts' \(arrival\)"):
        load_generic(path, columns, prefix_id_tokens=1)
    trace = load_generic(path, columns, sort=True, prefix_id_tokens=1)
    assert trace.arrival_s.tolist() == [0.0, 1.0, 2.5]
    assert trace.prompt_len.tolist() == [1, 2, 3]
    assert trace.prefix_ids == ((5,), (), (5, 6))
    assert trace.tenant_names == ("b", "a", "7")  # codes in order of first appearance in the file
    assert trace.tenant.tolist() == [1, 2, 0]
    lengths_only = load_generic(path, {"prompt_len": "p", "output_len": "o"})
    assert lengths_only.arrival_s is None and lengths_only.tenant is None and len(lengths_only) == 3


# ------------------------------------------------------------------------------------------ Trace operations


def _small_trace() -> Trace:
    return Trace(
        "t",
        "mem",
        np.array([0.0, 1.0, 3.0, 6.0, 10.0]),
        np.array([1, 2, 3, 4, 5]),
        np.array([5, 4, 3, 2, 1]),
        ((1,), (1, 2), (3,), (), (1, 2)),
        16,
        np.array([0, 1, 1, 0, 1]),
        ("x", "y"),
    )


def test_select_slice_window() -> None:
    trace = _small_trace()
    part = trace.slice(1, 4)
    assert part.arrival_s.tolist() == [0.0, 2.0, 5.0] and part.prompt_len.tolist() == [2, 3, 4]
    assert part.prefix_ids == ((1, 2), (3,), ()) and part.tenant.tolist() == [1, 1, 0]
    assert part.tenant_names == ("x", "y") and part.prefix_id_tokens == 16
    win = trace.window(1.0, 6.0)  # [1, 6): rows 1 and 2
    assert win.prompt_len.tolist() == [2, 3] and win.arrival_s.tolist() == [0.0, 2.0]
    assert len(trace.window(10.5, 20)) == 0 and trace.window(10.5, 20).duration_s() == 0.0
    masked = trace.select(trace.prompt_len % 2 == 1)
    assert masked.prompt_len.tolist() == [1, 3, 5] and masked.arrival_s.tolist() == [0.0, 3.0, 10.0]
    assert trace.slice(-2).prompt_len.tolist() == [4, 5]
    with pytest.raises(ValueError, match="out of order"):
        trace.select([3, 1])
    assert not part.prompt_len.flags.writeable and not part.arrival_s.flags.writeable


def test_to_requests_scaling_ids_and_tenants() -> None:
    trace = _small_trace()
    reqs = trace.to_requests(first_id=7, arrival_offset_s=100.0, time_scale=2.0)
    assert all(isinstance(r, Request) for r in reqs)
    assert [r.request_id for r in reqs] == [7, 8, 9, 10, 11]
    assert [r.arrival_s for r in reqs] == [100.0, 100.5, 101.5, 103.0, 105.0]  # gaps halved
    assert [r.tenant for r in reqs] == [0, 1, 1, 0, 1]
    assert reqs[1].prefix_ids == (1, 2) and reqs[1].prefix_id_tokens == 16 and reqs[3].prefix_ids == ()
    assert (reqs[4].prompt_len, reqs[4].output_len) == (5, 1)
    override = trace.to_requests(tenant_of=np.array([2, 2, 0, 1, 3]))
    assert [r.tenant for r in override] == [2, 2, 0, 1, 3]
    with pytest.raises(ValueError, match="tenant_of"):
        trace.to_requests(tenant_of=[0, 1])
    with pytest.raises(ValueError, match="time_scale"):
        trace.to_requests(time_scale=0)


def test_trace_rate_and_contract_checks() -> None:
    trace = _small_trace()
    assert trace.duration_s() == 10.0 and trace.mean_rate_rps() == pytest.approx(0.4)
    stats = trace.describe()
    assert stats["num_tenants"] == 2 and stats["prompt_p50"] == 3
    assert stats["prefix_reuse_share"] == pytest.approx(3 / 6)  # ids 1, 1, 2, 3, 1, 2: three repeat an earlier id
    with pytest.raises(ValueError, match="start at 0"):
        Trace("t", "mem", np.array([1.0, 2.0]), np.array([1, 1]), np.array([1, 1]))
    with pytest.raises(ValueError, match=">= 1"):
        Trace("t", "mem", None, np.array([0, 1]), np.array([1, 1]))
    with pytest.raises(ValueError, match="tenant"):
        Trace("t", "mem", None, np.array([1]), np.array([1]), tenant=np.array([1]), tenant_names=("a",))
    source = np.array([3, 4])
    copied = Trace("t", "mem", None, source, np.array([1, 1]))
    source[0] = 99
    assert copied.prompt_len.tolist() == [3, 4]
