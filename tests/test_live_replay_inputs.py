"""The live-replay tool's inputs: malformed run files fail naming the file, the line (or entry) and the field;
bad options end in one usage line; requests that failed before the server, or everywhere, are handled."""

from __future__ import annotations

import itertools
import json
import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from llmsched_env.commands.live_replay import PROG, main, parse_engine_config
from llmsched_env.engine.config import EngineConfig
from llmsched_env.live.logs import ServerLogs, ServerLogTail, read_server_logs
from llmsched_env.live.replay import compare, evaluate_runs, frontend_delay_s, load_run, replay
from tests.live_synthetic import ENGINE, EPOCH_S, TENANTS, TRUE_MODEL, write_run


def test_engine_config_option() -> None:
    cfg = parse_engine_config(["num_kv_blocks=100", "victim_rule=lowest_priority", "reserve_full_prefill=false"])
    assert cfg == EngineConfig(num_kv_blocks=100, victim_rule="lowest_priority", reserve_full_prefill=False)
    bad = {"blocks=3": "is not key=value with key one of num_kv_blocks", "max_num_seqs=x": "must be an integer",
           "max_num_seqs=0": "max_num_seqs", "reserve_full_prefill=maybe": "true or false"}  # fmt: skip
    for item, match in bad.items():
        with pytest.raises(ValueError, match=match):
            parse_engine_config([item])


def test_command_line_errors_are_one_usage_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_run(tmp_path / "r", "fcfs", num_requests=20)
    base = [str(tmp_path / "r"), "--engine-config", "num_kv_blocks=96"]
    for extra, message in (
        (["--policy", "fcfs", "--tenants", "chat=chat"], "requests.jsonl:"),  # the run has a tenant 'batch' too
        (["--policy", "nope", "--tenants", "chat=chat,batch=batch"], "unknown policy 'nope'"),
        (["--policy", "fcfs", "--tenants", "chat=fast"], "--tenants: unknown SLO class 'fast'"),
        (["--policy", "fcfs"], "give --adapter-config, or both --policy and --tenants"),
        (["--adapter-config", str(tmp_path / "none.json")], "none.json: cannot read"),
        (["--policy", "fcfs", "--tenants", "chat=chat", "--log-dir", str(tmp_path)], "no server log|cannot read"),
    ):
        with pytest.raises(SystemExit) as exit_info:
            main([*base, *extra])
        assert exit_info.value.code == 2
        assert re.search(message, capsys.readouterr().err), message


@pytest.mark.parametrize("value", ["nan", "-5", "inf", "3601", "1e308", "soon"])
def test_a_frontend_delay_outside_its_range_is_one_usage_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], value: str
) -> None:
    """nan and -5 were taken and gave nan and negative errors: the delay is a finite number of seconds in
    [0, MAX_FRONTEND_DELAY_S], refused before any run is read (docs/reliability.md, "Physical ranges")."""
    with pytest.raises(SystemExit) as exit_info:
        main([str(tmp_path / "none"), "--policy", "fcfs", "--tenants", "chat=chat", f"--frontend-delay-s={value}"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert "Traceback" not in "\n".join(err)
    assert err[-1].startswith(f"{PROG}: error: argument --frontend-delay-s: "), err[-1]
    assert repr(value) in err[-1]
    with pytest.raises(ValueError, match="frontend_delay_s must be a finite number"):
        evaluate_runs([], "fcfs", ENGINE, TENANTS, frontend_delay_s=math.nan)


def test_no_finished_request_has_no_frontend_delay(tmp_path: Path) -> None:
    write_run(tmp_path, "fcfs", num_requests=10)
    result = tmp_path / "bench-result.json"
    data = json.loads(result.read_text())
    data["errors"] = ["timeout"] * 10
    result.write_text(json.dumps(data))
    run = load_run(tmp_path)
    with pytest.raises(ValueError, match="no request with both"):
        frontend_delay_s(run)
    rows = {r["metric"]: r for r in compare(run, replay(run, "fcfs", ENGINE, TENANTS, TRUE_MODEL))}
    assert rows["completed"]["client"] == 0 and math.isnan(rows["ttft_p50_s"]["client"])


Edit = Callable[[Any], Any]


def _set(**fields: Any) -> Edit:
    return lambda record: record.update(fields)


def _drop(name: str) -> Edit:
    def edit(record: dict[str, Any]) -> None:
        del record[name]

    return edit


def _jsonl(name: str, line: int, edit: Edit) -> Callable[[Path], None]:
    """Edit line ``line`` of the JSONL file ``name``: ``edit`` changes its record in place, or returns the text
    to write instead."""

    def apply(folder: Path) -> None:
        lines = (folder / name).read_text().splitlines()
        record = json.loads(lines[line - 1])
        text = edit(record)
        lines[line - 1] = text if isinstance(text, str) else json.dumps(record)
        (folder / name).write_text("\n".join(lines) + "\n")

    return apply


def _json(name: str, edit: Edit) -> Callable[[Path], None]:
    """Edit the JSON file ``name``: ``edit`` changes its data in place, or returns the text to write instead."""

    def apply(folder: Path) -> None:
        data = json.loads((folder / name).read_text())
        text = edit(data)
        (folder / name).write_text(text if isinstance(text, str) else json.dumps(data))

    return apply


def _duplicate_line(folder: Path) -> None:
    path = folder / "requests.jsonl"
    lines = path.read_text().splitlines()
    path.write_text("\n".join([*lines, lines[4]]) + "\n")


RESULT = "bench-result.json"
STEPS, SERVER, PLAN = "steps.jsonl", "requests.jsonl", "requests.json"
BAD_INPUTS = {
    "steps bad JSON": (_jsonl(STEPS, 3, lambda r: "{not json"), r"steps\.jsonl:3: not valid JSON"),
    "steps missing": (_jsonl(STEPS, 2, _drop("busy")), r"steps\.jsonl:2: missing field 'busy'"),
    "steps type": (
        _jsonl(STEPS, 2, _set(prefill_tokens="12")),
        r"steps\.jsonl:2: field 'prefill_tokens' must be an integer >= 0, got '12'",
    ),
    "steps bool": (_jsonl(STEPS, 5, _set(busy=1)), r"steps\.jsonl:5: field 'busy' must be true or false, got 1"),
    "server type": (
        _jsonl(SERVER, 4, _set(arrival="x")),
        r"requests\.jsonl:4: field 'arrival' must be a finite number, got 'x'",
    ),
    "server null": (
        _jsonl(SERVER, 3, _set(finish=None)),
        r"requests\.jsonl:3: field 'finish' must be a finite number, got None",
    ),
    "server label": (_jsonl(SERVER, 3, _drop("label")), r"requests\.jsonl:3: missing field 'label'"),
    "server lacks": (
        _jsonl(SERVER, 6, _set(label="stranger")),
        r"requests\.jsonl: no record with label 'req-\d+' \(.*requests\.json entry \d+\)",
    ),
    "server twice": (_duplicate_line, r"requests\.jsonl:\d+: field 'label' 'req-\d+' was already logged at line 5"),
    "server tenant": (
        _jsonl(SERVER, 7, _set(tenant="gold")),
        r"requests\.jsonl:7: field 'tenant' is 'gold' but .*requests\.json entry \d+",
    ),
    "plan label": (
        _json(PLAN, lambda d: d[1].update(label="req-0")),
        r"requests\.json: entry 1: field 'label' 'req-0' repeats entry 0",
    ),
    "plan missing": (_json(PLAN, lambda d: _drop("send_s")(d[2])), r"requests\.json: entry 2: missing field 'send_s'"),
    "plan type": (
        _json(PLAN, lambda d: d[3].update(output_tokens=2.5)),
        r"requests\.json: entry 3: field 'output_tokens' must be an integer",
    ),
    "plan shape": (
        _json(PLAN, lambda d: json.dumps({"requests": d})),
        r"requests\.json: expected a non-empty JSON list",
    ),
    "result length": (
        _json(RESULT, lambda d: d.update(ttfts=d["ttfts"][:-1])),
        r"bench-result\.json: field 'ttfts' has 19 entries, requests\.json has 20",
    ),
    "result entry": (
        _json(RESULT, lambda d: d["errors"].__setitem__(3, 5)),
        r"bench-result\.json: field 'errors' entry 3 must be a string or null, got 5",
    ),
    "result missing": (_json(RESULT, _drop("latencies")), r"bench-result\.json: missing field 'latencies'"),
    "result scalar": (
        _json(RESULT, _set(duration="long")),
        r"bench-result\.json: field 'duration' must be a finite number >= 0",
    ),
    "result JSON": (_json(RESULT, lambda d: '{\n"duration": 1,\n}'), r"bench-result\.json:3: not valid JSON"),
    "two results": (
        lambda f: (f / "other.json").write_text("{}"),
        r"expected one result JSON .*found bench-result\.json, other\.json",
    ),
    "no steps": (lambda f: (f / STEPS).unlink(), r"steps\.jsonl: cannot read"),
}


@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_bad_input_names_file_line_and_field(tmp_path: Path, case: str) -> None:
    write_run(tmp_path, "fcfs", num_requests=20)
    load_run(tmp_path)  # well-formed before the edit
    edit, message = BAD_INPUTS[case]
    edit(tmp_path)
    with pytest.raises(ValueError, match=message):
        load_run(tmp_path)


def test_a_request_that_failed_before_the_server_is_left_out(tmp_path: Path) -> None:
    write_run(tmp_path, "fcfs", num_requests=20)
    _json(RESULT, lambda d: d["errors"].__setitem__(4, "HTTP 400: prompt too long"))(tmp_path)
    server = tmp_path / SERVER
    server.write_text("".join(line + "\n" for line in server.read_text().splitlines() if '"req-4"' not in line))
    run = load_run(tmp_path)
    assert run.unlogged == ("req-4",) and len(run.plan) == len(run.server) == len(run.client.errors) == 19
    assert "req-4" not in {p.label for p in run.plan} and all(run.client.errors[i] == "" for i in range(19))


def test_a_growing_servers_logs_are_read_as_they_grow_each_line_once(tmp_path: Path) -> None:
    """``ServerLogTail`` over logs written a piece at a time (a piece may end mid-line) gives, after each piece,
    the records of the complete lines so far with their file line numbers, and at the end what reading the
    whole files gives; two runs of one server match as they do from the whole files."""
    whole = tmp_path / "whole"
    write_run(tmp_path / "a", log_dir=whole, prefix="a-")
    write_run(tmp_path / "b", log_dir=whole, prefix="b-", seed=1, epoch_s=EPOCH_S + 100.0)
    growing = tmp_path / "growing"
    growing.mkdir()
    tail = ServerLogTail(growing)
    assert tail.read() == ServerLogs((), ())  # nothing written yet
    texts = {name: (whole / name).read_bytes() for name in (SERVER, STEPS)}
    cuts = [0.0, 0.13, 0.5, 0.77, 1.0]
    for lo, hi in itertools.pairwise(cuts):
        for name, data in texts.items():
            with (growing / name).open("ab") as f:
                f.write(data[int(lo * len(data)) : int(hi * len(data))])
        seen = tail.read()
        done = {n: d[: int(hi * len(d))] for n, d in texts.items()}
        assert len(seen.requests) == done[SERVER].count(b"\n") and len(seen.steps) == done[STEPS].count(b"\n")
    assert tail.read() == read_server_logs(whole)
    assert [r.line for r in tail.read().requests] == list(range(1, len(tail.read().requests) + 1))
    for run in ("a", "b"):
        assert load_run(tmp_path / run, log_dir=growing, server_logs=tail.read()) == load_run(
            tmp_path / run, log_dir=growing
        )
    with (growing / SERVER).open("ab") as f:
        f.write(b'{"id": "x"}\n')  # a malformed record appended: its line is named
    n = texts[SERVER].count(b"\n") + 1
    with pytest.raises(ValueError, match=re.escape(f"{growing / SERVER}:{n}: ")):
        tail.read()


@pytest.mark.parametrize("other", ["r.json", "./r.json", "sub/../r.json"])
def test_one_path_for_the_model_and_the_table_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], other: str
) -> None:
    """``--save-model r.json --out r.json``: the CSV overwrote the fitted model. One usage line, before any run
    is read, nothing written."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sub").mkdir()
    with pytest.raises(SystemExit) as exit_info:
        main(["none", "--policy", "fcfs", "--tenants", "chat=chat", "--save-model", "r.json", "--out", other])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert "--out and --save-model are the same file" in err[-1], err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sub"]
