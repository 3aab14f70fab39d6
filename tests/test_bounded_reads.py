"""Bounded reads (docs/reliability.md, "Bounded reads"): a file a user names that is not a regular file (a FIFO, a
link to ``/dev/zero``), larger than the limit of its kind (a sparse file: its full size counts), or a gzip trace
that decompresses past its cap is refused in one line naming the file and the limit, before it can hang the
process or take the host's memory; engine sizes past their bounds are refused the same way.

Every test runs under an alarm: a reader that opens a FIFO before checking it blocks forever, and the alarm turns
that regression into a failure instead of a hung suite.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import shutil
import signal
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path

import gymnasium as gym
import pytest

import llmsched_env  # noqa: F401  (registers LLMSched-v0)
from agents import checkpoints
from agents.checkpoints import CheckpointError, sign_checkpoint, verify_checkpoint
from llmsched_env.commands.evaluate import parse
from llmsched_env.common.files import (
    CHECKPOINT_BYTES,
    CONFIG_BYTES,
    LIMITS,
    POLICY_BYTES,
    SIGNATURE_BYTES,
    TRACE_BYTES,
    ByteLimit,
    FileRefusedError,
    csv_records,
    read_bytes,
)
from llmsched_env.costs.loader import load_cost_model
from llmsched_env.decision.planners.tuned import TUNED_FORMAT, load_tuned_table
from llmsched_env.decision.policy_file import PolicyFileError, load_policy_file
from llmsched_env.engine.block_pool import BlockPool
from llmsched_env.engine.config import ENGINE_BOUNDS, EngineConfig
from llmsched_env.workloads.lengths import load_length_file
from llmsched_env.workloads.traces import TraceError, clear_trace_cache, load_trace

ROOT = Path(__file__).resolve().parents[1]
POLICY = ROOT / "tests" / "data" / "policies" / "mixed-slo"
AZURE_HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
AZURE_ROW = "2023-11-16 18:15:46.6805900,374,44\n"
KINDS = ("zero", "fifo", "sparse")
# what each kind's message says
SAYS = {"zero": "a character device, reached through a link to /dev/zero", "fifo": "a FIFO", "sparse": "over the"}


@pytest.fixture(autouse=True)
def _never_hang(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """An alarm that fails a test which blocks (a FIFO opened before it was checked); the default limits (no
    LLMSCHED_MAX_* from the caller's shell); a key folder of the test's own for the checkpoint tests."""
    for limit in LIMITS:
        if limit.env:
            monkeypatch.delenv(limit.env, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    clear_trace_cache()

    def hung(signum: int, frame: object) -> None:
        raise TimeoutError("a read blocked: was a FIFO opened before it was checked?")

    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(60)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def _bad(path: Path, kind: str, limit: ByteLimit) -> Path:
    """``path`` made a link to /dev/zero, a FIFO, or a sparse file one byte over ``limit`` (no disk used)."""
    path.unlink(missing_ok=True)
    if kind == "zero":
        path.symlink_to("/dev/zero")
    elif kind == "fifo":
        os.mkfifo(path)
    else:
        with path.open("wb") as f:
            f.truncate(limit.value() + 1)
    return path


def _refused(call: Callable[[], object], error: type[Exception], path: Path, kind: str) -> str:
    """``call()`` raises ``error`` in one line naming ``path`` and what is wrong with it; the message."""
    with pytest.raises(error) as info:
        call()
    message = str(info.value)
    assert "\n" not in message and str(path) in message and SAYS[kind] in message, message
    if kind == "sparse":
        assert re.search(r"over the [\d,]+-byte limit", message), message
    return message


def _policy(tmp_path: Path) -> Path:
    folder = tmp_path / "policy"
    folder.mkdir()
    for name in ("policy.json", "policy.safetensors"):
        shutil.copy(POLICY / name, folder / name)
    return folder


def _usage_error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """The error line ``llmsched-evaluate`` exits with (status 2) for ``argv``."""
    with pytest.raises(SystemExit) as info:
        parse(argv)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err.strip().splitlines()[-1]


# ------------------------------------------------------------------------------------ not regular, too large
@pytest.mark.parametrize("kind", KINDS)
def test_policy_weights(kind: str, tmp_path: Path) -> None:
    folder = _policy(tmp_path)
    bad = _bad(folder / "policy.safetensors", kind, POLICY_BYTES)
    message = _refused(lambda: load_policy_file(folder), PolicyFileError, bad, kind)
    assert kind != "sparse" or "LLMSCHED_MAX_POLICY_BYTES" in message


@pytest.mark.parametrize("kind", KINDS)
def test_policy_description(kind: str, tmp_path: Path) -> None:
    folder = _policy(tmp_path)
    bad = _bad(folder / "policy.json", kind, CONFIG_BYTES)
    message = _refused(lambda: load_policy_file(folder), PolicyFileError, bad, kind)
    assert kind != "sparse" or "LLMSCHED_MAX_CONFIG_BYTES" in message


def test_a_policy_through_a_link_to_a_regular_file_loads(tmp_path: Path) -> None:
    folder = _policy(tmp_path)
    link = tmp_path / "linked"
    link.mkdir()
    for name in ("policy.json", "policy.safetensors"):
        (link / name).symlink_to(folder / name)
    assert load_policy_file(link).obs_names == load_policy_file(POLICY).obs_names


@pytest.mark.parametrize("kind", KINDS)
def test_checkpoint_signature(kind: str, tmp_path: Path) -> None:
    checkpoint = tmp_path / "model_64_steps.zip"
    checkpoint.write_bytes(b"PK\x03\x04 a checkpoint")
    sig = sign_checkpoint(checkpoint)
    _bad(sig, kind, SIGNATURE_BYTES)
    _refused(lambda: verify_checkpoint(checkpoint), CheckpointError, sig, kind)


@pytest.mark.parametrize("kind", KINDS)
def test_checkpoint_itself_before_it_is_unpickled(kind: str, tmp_path: Path) -> None:
    checkpoint = tmp_path / "model_64_steps.zip"
    checkpoint.write_bytes(b"PK\x03\x04 a checkpoint")
    sign_checkpoint(checkpoint)
    _bad(checkpoint, kind, CHECKPOINT_BYTES)
    message = _refused(lambda: verify_checkpoint(checkpoint), CheckpointError, checkpoint, kind)
    assert message.startswith("--resume: ")


def test_checkpoint_key(tmp_path: Path) -> None:
    checkpoint = tmp_path / "model_64_steps.zip"
    checkpoint.write_bytes(b"PK\x03\x04 a checkpoint")
    sign_checkpoint(checkpoint)
    key = checkpoints.key_path()
    key.unlink()
    os.mkfifo(key)
    _refused(lambda: verify_checkpoint(checkpoint), CheckpointError, key, "fifo")


@pytest.mark.parametrize("kind", KINDS)
def test_trace(kind: str, tmp_path: Path) -> None:
    bad = _bad(tmp_path / "trace.csv", kind, TRACE_BYTES)
    message = _refused(lambda: load_trace(bad, "azure"), TraceError, bad, kind)
    assert kind != "sparse" or "LLMSCHED_MAX_TRACE_BYTES" in message


@pytest.mark.parametrize("kind", KINDS)
def test_length_file(kind: str, tmp_path: Path) -> None:
    bad = _bad(tmp_path / "lengths.csv", kind, TRACE_BYTES)
    _refused(lambda: load_length_file(bad), ValueError, bad, kind)


@pytest.mark.parametrize("kind", KINDS)
def test_cost_model(kind: str, tmp_path: Path) -> None:
    bad = _bad(tmp_path / "cost.json", kind, CONFIG_BYTES)
    _refused(lambda: load_cost_model(bad), ValueError, bad, kind)


@pytest.mark.parametrize("kind", KINDS)
def test_tuned_table(kind: str, tmp_path: Path) -> None:
    bad = _bad(tmp_path / "tuned.json", kind, CONFIG_BYTES)
    _refused(lambda: load_tuned_table(bad), ValueError, bad, kind)


def test_a_limit_is_raised_by_its_variable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    trace = tmp_path / "trace.csv"
    trace.write_text(AZURE_HEADER + AZURE_ROW * 10)
    monkeypatch.setenv("LLMSCHED_MAX_TRACE_BYTES", "100")
    says = r"trace\.csv: 390 bytes, over the 100-byte limit for a trace; set LLMSCHED_MAX_TRACE_BYTES to a larger"
    with pytest.raises(TraceError, match=says):
        load_trace(trace, "azure")
    monkeypatch.setenv("LLMSCHED_MAX_TRACE_BYTES", "1_000")
    assert len(load_trace(trace, "azure")) == 10
    monkeypatch.setenv("LLMSCHED_MAX_TRACE_BYTES", "lots")
    with pytest.raises(ValueError, match="LLMSCHED_MAX_TRACE_BYTES='lots': expected a whole number of bytes > 0"):
        read_bytes(trace, TRACE_BYTES)



def test_a_read_from_a_later_byte_counts_the_bytes_before_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``read_bytes(..., start)`` (a log read again as it grows) gives the bytes from ``start`` on, and the
    limit holds for the whole file, not the part read."""
    log = tmp_path / "steps.jsonl"
    log.write_bytes(b"x" * 60 + b"y" * 40)
    monkeypatch.setenv("LLMSCHED_MAX_TRACE_BYTES", "100")
    assert read_bytes(log, TRACE_BYTES, 60) == b"y" * 40
    with log.open("ab") as f:
        f.write(b"z")
    with pytest.raises(FileRefusedError, match=r"steps\.jsonl: 101 bytes, over the 100-byte limit"):
        read_bytes(log, TRACE_BYTES, 90)

# ------------------------------------------------------------------------------------------ gzip and lines
def _bomb(path: Path, member: bytes, copies: int, head: bytes = b"") -> Path:
    """A gzip file of ``head`` and ``copies`` identical members of ``member`` (a multi-member file decompresses
    to their concatenation): gigabytes out of a few megabytes, built in milliseconds."""
    packed = gzip.compress(member, mtime=0)
    with path.open("wb") as f:
        f.write(gzip.compress(head, mtime=0))
        for _ in range(copies):
            f.write(packed)
    return path


def test_a_gzip_bomb_of_one_4gb_line_stops_at_the_line_cap(tmp_path: Path) -> None:
    """The tester's bomb at the default limits: 4 GiB of zeros without a line end, refused after about 1 MiB of
    it, the memory traced meanwhile a few MiB."""
    bomb = _bomb(tmp_path / "bomb.csv.gz", bytes(1 << 20), 4096)
    tracemalloc.start()
    try:
        with pytest.raises(TraceError) as info:
            load_trace(bomb, "azure")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    message = str(info.value)
    assert "\n" not in message and re.search(r"bomb\.csv\.gz:1: a line longer than 1,048,576 bytes", message)
    assert "LLMSCHED_MAX_TRACE_LINE_BYTES" in message
    assert peak < 64 << 20, peak


def test_a_gzip_bomb_of_short_lines_stops_at_the_decompressed_cap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("LLMSCHED_MAX_TRACE_BYTES", str(1 << 20))
    bomb = _bomb(tmp_path / "bomb.csv.gz", (AZURE_ROW * 20_000).encode(), 4, AZURE_HEADER.encode())  # 2.8 MB
    assert bomb.stat().st_size < 1 << 20  # the file itself is under the cap
    says = r"bomb\.csv\.gz: decompresses to more than 1,048,576 bytes, the limit for a trace; set LLMSCHED_MAX_TRACE_B"
    with pytest.raises(TraceError, match=says):
        load_trace(bomb, "azure")
    with pytest.raises(ValueError, match=says):
        load_length_file(bomb)
    assert re.search(says, _usage_error(["--trace", str(bomb), "--trace-format", "azure"], capsys))


def test_one_giant_line_in_a_plain_trace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLMSCHED_MAX_TRACE_LINE_BYTES", "1000")
    trace = tmp_path / "trace.jsonl"
    trace.write_text('{"timestamp": 0, "input_length": 5, "output_length": 5}\n' * 3 + "x" * 5000 + "\n")
    with pytest.raises(TraceError, match=r"trace\.jsonl:4: a line longer than 1,000 bytes, the limit for a trace line"):
        load_trace(trace, "mooncake")


# ----------------------------------------------------------------------------------------- command lines
def test_trace_dev_zero_on_the_command_line(capsys: pytest.CaptureFixture[str]) -> None:
    line = _usage_error(["--trace", "/dev/zero", "--trace-format", "azure"], capsys)
    assert "/dev/zero: a character device; a trace must be a regular file" in line


def test_fifos_on_the_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for argv, name in (
        (["--trace", "{}", "--trace-format", "mooncake"], "trace.jsonl"),
        (["--cost-model", "{}"], "cost.json"),
        (["--policies", "tuned={}"], "tuned.json"),
        (["--policies", "fcfs,{}"], "policy.json"),
    ):
        fifo = tmp_path / name
        os.mkfifo(fifo)
        line = _usage_error([a.format(fifo) for a in argv], capsys)
        assert f"{fifo}: a FIFO (named pipe);" in line, line


def test_engine_sizes_past_their_bounds(capsys: pytest.CaptureFixture[str]) -> None:
    line = _usage_error(["--num-kv-blocks", "100000000"], capsys)
    assert line.endswith("argument --num-kv-blocks: must be at most 4,000,000, got 100000000"), line
    for name, bound in ENGINE_BOUNDS.items():
        option = "--" + name.replace("_", "-")
        assert f"{option}: must be at most {bound:,}" in _usage_error([option, str(bound + 1)], capsys)
        with pytest.raises(ValueError, match=rf"^EngineConfig\.{name} must be at most {bound:,}"):
            EngineConfig(**{name: bound + 1})
    with pytest.raises(ValueError, match=r"EngineConfig\.num_kv_blocks must be at most 4,000,000 \(") as info:
        gym.make("LLMSched-v1", engine={"num_kv_blocks": 100_000_000})
    assert "\n" not in str(info.value)


def test_the_block_pool_takes_the_documented_bytes_per_block() -> None:
    """docs/reliability.md and ENGINE_BOUNDS quote about 96 bytes per block (so 4,000,000 blocks stay under
    400 MiB): traced here on a pool of 100,000 blocks."""
    tracemalloc.start()
    try:
        pool = BlockPool(100_000, 16)
        per_block = tracemalloc.get_traced_memory()[0] / pool.num_blocks
    finally:
        tracemalloc.stop()
    assert 80 < per_block < 105, per_block
    assert per_block * ENGINE_BOUNDS["num_kv_blocks"] < 400 << 20


# -------------------------------------------------------------------------------------- extra CSV fields
def test_an_extra_csv_field_is_an_error_naming_file_and_line(tmp_path: Path) -> None:
    trace = tmp_path / "trace.csv"
    trace.write_text(AZURE_HEADER + AZURE_ROW + "2023-11-16 18:15:47.0,10,20,99\n")
    with pytest.raises(TraceError, match=r"trace\.csv:3: the row has 4 fields but the header 3; \['99'\]"):
        load_trace(trace, "azure")
    trace.write_text(AZURE_HEADER + AZURE_ROW + "2023-11-16 18:15:47.0,10,20,\n")  # an empty one drops nothing
    clear_trace_cache()
    assert len(load_trace(trace, "azure")) == 2
    lengths = tmp_path / "lengths.csv"
    lengths.write_text("num_prefill_tokens,num_decode_tokens\n10,20\n30,40,7\n")
    with pytest.raises(ValueError, match=r"lengths\.csv:3: the row has 3 fields but the header 2"):
        load_length_file(lengths)
    results = tmp_path / "results.csv"
    results.write_text("scenario,policy,seed\ndefault,fcfs,0\ndefault,fcfs,1,oops\n")
    with pytest.raises(ValueError, match=r"results\.csv:3: the row has 4 fields but the header 3"):
        csv_records(results, TRACE_BYTES)


def test_a_tuned_table_through_a_link_is_read(tmp_path: Path) -> None:
    table = tmp_path / "table.json"
    table.write_text(json.dumps({"format": TUNED_FORMAT, "version": 1, "scenarios": {}}))
    link = tmp_path / "link.json"
    link.symlink_to(table)
    assert load_tuned_table(link).entries == {}
    with pytest.raises(FileRefusedError, match="a folder"):
        read_bytes(tmp_path, CONFIG_BYTES)


# ------------------------------------------------------------------------------------ nested too deeply
DEEP = "[" * 100_000  # 100 kB: past Python's recursion limit in json and yaml


def test_deep_json_and_yaml_are_one_line_naming_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from agents.config import parse_overrides, read_hyperparam_file

    deep = tmp_path / "deep.json"
    deep.write_text(DEEP)
    with pytest.raises(ValueError, match=r"deep\.json: not readable JSON \(nested too deeply to parse"):
        load_cost_model(str(deep))
    with pytest.raises(ValueError, match=r"deep\.json: not a readable JSON tuned-settings table: nested too deeply"):
        load_tuned_table(deep)
    folder = _policy(tmp_path)
    (folder / "policy.json").write_text(DEEP)
    with pytest.raises(PolicyFileError, match=r"policy\.json: cannot read the policy description: nested too deep"):
        load_policy_file(folder)
    yml = tmp_path / "deep.yml"
    yml.write_text("default: " + DEEP)
    with pytest.raises(ValueError, match=r"deep\.yml: invalid YAML \(nested too deeply to parse\)"):
        read_hyperparam_file("maskable_ppo", yml)
    with pytest.raises(ValueError, match=r"^--hp x=\[\[.*: invalid YAML \(nested too deeply to parse\)$"):
        parse_overrides(["x=" + DEEP])
    line = _usage_error(["--policies", f"tuned={deep}", "--scenarios", "default"], capsys)
    assert "nested too deeply to parse" in line
