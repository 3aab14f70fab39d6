"""Several policies on one vLLM server (issue 44): ``AdapterConfig.policies`` and ``control_file``, checked in full
without vLLM (the default suite), the step and request records' ``policy`` and ``fallback`` fields read back by
``live.records``, and, in the ``vllm`` tier (vLLM's real scheduler, fake model outputs), the switch rule: a switch
happens only when a request reaches an engine holding none, an unknown name is refused, and each policy holds its
own decisions for its own number of steps."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import pytest

from llmsched_env.adapters.vllm.config import AdapterConfig
from llmsched_env.engine.config import TenantConfig
from llmsched_env.engine.request import Request
from llmsched_env.live.records import read_server_requests, read_steps
from tests.test_vllm_adapter import _add, _make, _Raises

ROOT = Path(__file__).resolve().parents[1]
SCHEMA1 = ROOT / "tests" / "data" / "policies" / "mixed-slo"  # an exported policy of observation schema 1
TUNED_TABLE = ROOT / "baselines" / "tuned.json"


# -- the configuration (no vLLM) -------------------------------------------------------------------------------
def test_policies_and_control_file_from_kwargs_a_file_and_the_environment(tmp_path: Path) -> None:
    control = str(tmp_path / "ctl" / "control")
    cfg = AdapterConfig(policy="fcfs", policies=["slo_aware", "learned"], control_file=control)
    assert cfg.policies == ("slo_aware", "learned")  # a list given: kept as a tuple (the config is frozen)
    resolved = cfg.resolve()
    assert [spec.name for spec, _ in resolved.policies] == ["fcfs", "slo_aware", "learned"]
    assert resolved.schema == resolved.more[1][0].schema  # the exported policy's schema, for the whole set
    assert (tmp_path / "ctl").is_dir()  # made for the status file, as log_dir is
    yaml_file = tmp_path / "a.yaml"
    yaml_file.write_text(f"policy: fcfs\npolicies: [slo_aware, tuned]\nscenario: default\ncontrol_file: {control}\n")
    json_file = tmp_path / "a.json"
    json_file.write_text(json.dumps({"policy": "fcfs", "policies": ["slo_aware", "tuned"], "scenario": "default",
                                     "control_file": control}))  # fmt: skip
    for path in (yaml_file, json_file):
        cfg = AdapterConfig.from_env({"LLMSCHED_VLLM_CONFIG": str(path)})
        assert cfg.policies == ("slo_aware", "tuned") and cfg.control_file == control
        assert [spec.name for spec, _ in cfg.resolve().policies] == ["fcfs", "slo_aware", "tuned"]
        assert cfg.resolve().more[1][1] == "default"  # the tuned table's entry each tuned policy plays
    cfg = AdapterConfig.from_env(
        {"LLMSCHED_POLICY": "sjf", "LLMSCHED_POLICIES": "slo_aware, learned", "LLMSCHED_CONTROL_FILE": control}
    )
    assert cfg.policy == "sjf" and cfg.policies == ("slo_aware", "learned") and cfg.control_file == control
    assert AdapterConfig().policies == () and AdapterConfig().control_file == ""  # no switching by default
    assert AdapterConfig(policies=("slo_aware",)).resolve().more[0][0].name == "slo_aware"  # loaded, no control


BAD_CONFIGS: dict[str, tuple[dict[str, Any], str]] = {
    "unknown": ({"policies": ["fcfs_plus"]}, r"^AdapterConfig: policies: unknown policy 'fcfs_plus'"),
    "duplicate": ({"policies": ["slo_aware", "fcfs"]}, r"^AdapterConfig: policies: 'fcfs' is named 'fcfs', as 'fcfs'"),
    "same alias": (
        {"policies": ["tuned", f"tuned={TUNED_TABLE}"], "scenario": "default"},
        r"^AdapterConfig: policies: 'tuned=.*tuned\.json' is named 'tuned', as 'tuned' is already.*NAME=",
    ),
    "alone": ({"control_file": "c"}, r"^AdapterConfig: control_file: switching needs at least one more policy"),
    "string": ({"policies": "slo_aware"}, r"^AdapterConfig: policies must be a list .*got 'slo_aware'"),
    "entry type": ({"policies": ["slo_aware", 3]}, r"^AdapterConfig: policies\[1\] must be .*got 3$"),
    "empty entry": ({"policies": [""]}, r"^AdapterConfig: policies\[0\] must be .*got ''$"),
    "control type": ({"policies": ["sjf"], "control_file": 5}, r"^AdapterConfig: control_file must be a string"),
    "schemas": (
        {"policies": ["learned", str(SCHEMA1)]},
        r"^AdapterConfig: policies: exported policies of different observation schemas cannot share a server: "
        r"mixed-slo \(schema 1\), learned \(schema 2\)$",
    ),
    "bound": ({"policies": ["lookahead"]}, r"^AdapterConfig: policies: 'lookahead .*vLLM cannot run it"),
    "planner moves": (
        {"policies": ["mpc:candidates=requests"]},
        r"^AdapterConfig: policies: 'mpc:candidates=requests': per-request moves .*vLLM runs mpc over settings only$",
    ),
    "planner entry": ({"policies": ["mpc"]}, r"^AdapterConfig: scenario: the tuned table .* \(policies: 'mpc'\)$"),
    "tuned entry": ({"policies": ["tuned"]}, r"^AdapterConfig: scenario: the tuned table .* \(policies: 'tuned'\)$"),
}


@pytest.mark.parametrize("case", list(BAD_CONFIGS))
def test_a_bad_policy_set_is_refused_in_one_line_naming_the_field_and_entry(case: str) -> None:
    kwargs, message = BAD_CONFIGS[case]
    with pytest.raises(ValueError, match=message) as err:
        AdapterConfig(**kwargs).resolve()
    assert "\n" not in str(err.value)


def test_a_bad_policy_set_in_a_file_names_the_file_and_the_control_folder_is_checked(tmp_path: Path) -> None:
    f = tmp_path / "a.yaml"
    f.write_text("policies: [slo_aware, nope]\n")
    with pytest.raises(ValueError, match=rf"^{f}: policies: unknown policy 'nope'") as err:
        AdapterConfig.from_file(f).resolve()
    assert "\n" not in str(err.value)
    f.write_text("policies: 1\n")
    with pytest.raises(ValueError, match=rf"^{f}: policies must be a list"):
        AdapterConfig.from_file(f)
    with pytest.raises(ValueError, match=r"^environment: policies\[1\] must be"):
        AdapterConfig.from_env({"LLMSCHED_POLICIES": "sjf,,lpm"})
    with pytest.raises(ValueError, match=r"^AdapterConfig: control_file: cannot write the status beside .*folder"):
        AdapterConfig(policies=("sjf",), control_file=str(tmp_path)).resolve()
    (tmp_path / "file").write_text("")
    with pytest.raises(ValueError, match=r"^AdapterConfig: control_file: cannot write the status beside"):
        AdapterConfig(policies=("sjf",), control_file=str(tmp_path / "file" / "control")).resolve()
    f.write_text("policies: [sjf, nope]\ncontrol_file: c\npolicy: fcfs_plus\n")  # every problem, on one line
    with pytest.raises(ValueError) as err:
        AdapterConfig.from_file(f).resolve()
    message = str(err.value)
    assert "\n" not in message and message.startswith(f"{f}: policy: ") and f"; {f}: policies: " in message


def test_the_records_read_the_policy_and_fallback_fields_and_older_logs_without_them(tmp_path: Path) -> None:
    step = {"t0": 1.0, "t1": 1.1, "t2": 1.2, "t3": 1.3, "prefill_tokens": 10, "decode_seqs": 2, "kv_tokens": 40,
            "attn_pairs": 55.0, "num_prefill_seqs": 1, "busy": True}  # fmt: skip
    steps = tmp_path / "steps.jsonl"
    rows = [step, {**step, "policy": "fcfs", "fallback": None}, {**step, "policy": "slo_aware", "fallback": "timeout"}]
    steps.write_text("".join(json.dumps(r) + "\n" for r in rows))
    read = [(s.policy, s.fallback) for s in read_steps(steps)]
    assert read == [(None, None), ("fcfs", None), ("slo_aware", "timeout")]
    steps.write_text(json.dumps({**step, "policy": 3}) + "\n")
    with pytest.raises(ValueError, match=r"steps\.jsonl:1: field 'policy' must be a string or null, got 3"):
        read_steps(steps)
    request = {"id": "1", "label": None, "tenant": "a", "arrival": 0.0, "first_scheduled": 0.1, "first_token": 0.2,
               "finish": 0.5, "prompt_tokens": 10, "output_tokens": 3, "status": "length", "preemptions": 0,
               "cached_tokens": 0}  # fmt: skip
    server = tmp_path / "requests.jsonl"
    server.write_text(json.dumps(request) + "\n" + json.dumps({**request, "id": "2", "policy": "learned"}) + "\n")
    assert [r.policy for r in read_server_requests(server)] == [None, "learned"]
    server.write_text(json.dumps({**request, "policy": ["fcfs"]}) + "\n")
    with pytest.raises(ValueError, match=r"requests\.jsonl:1: field 'policy' must be a string or null"):
        read_server_requests(server)


# -- the switch rule (vLLM's scheduler) -------------------------------------------------------------------------
def _block(
    s: Any, clock: Any, first_id: int, n: int, served: list[list[str]], tenants: tuple[str, ...] = ("a", "b")
) -> None:
    """Add ``n`` requests (ids from ``first_id``, tenants in turn) to the empty engine and run it empty; each
    step's scheduled request ids appended to ``served``, in step order."""
    for i in range(first_id, first_id + n):
        _add(s, Request(i, clock.now_s, 50 + 37 * (i % 7), 1 + i % 9), tenants[i % len(tenants)])
    _run(s, clock, served)


def _run(s: Any, clock: Any, served: list[list[str]], max_steps: int | None = None) -> None:
    """Step the scheduler (until it holds no request, or ``max_steps``), logging each step's request ids."""
    from llmsched_env.adapters.vllm.offline import fake_output

    for _ in range(5000 if max_steps is None else max_steps):
        if not s.has_requests():
            return
        out = s.schedule()
        served.append(list(out.num_scheduled_tokens))
        clock.now_s += 0.01
        s.update_from_output(out, fake_output(s, out))
    assert max_steps is not None, "not drained"


def _status(control: Path) -> dict[str, Any]:
    return json.loads(Path(f"{control}.status").read_text())


def _switching(tmp_path: Path, policies: tuple[str, ...] = ("slo_aware",), **kw: Any) -> tuple[Any, Any, Path, Path]:
    control, logs = tmp_path / "control", tmp_path / "log"
    tenants = kw.pop("tenants", (TenantConfig("a"), TenantConfig("b", weight=2.0)))
    s, clock = _make(kw.pop("policy", "fcfs"), tenants=tenants, log_dir=str(logs), policies=policies,
                     control_file=str(control), **kw)  # fmt: skip
    return s, clock, control, logs


@pytest.mark.vllm
def test_blocks_run_under_the_policy_the_control_file_names_and_every_record_says_which(tmp_path: Path) -> None:
    s, clock, control, logs = _switching(tmp_path)
    status = _status(control)  # written at start: a status of an earlier server answers for none
    assert (status["active"], status["loaded"], status["switches"]) == ("fcfs", ["fcfs", "slo_aware"], 0)
    served: list[list[str]] = []
    block_of: dict[str, int] = {}  # request id -> block
    steps_per_block = []
    for b, name in enumerate(["fcfs", "slo_aware", "fcfs"]):
        if b:  # between blocks: the server is drained
            control.write_text(f"{name}\n")
        before = len(served)
        _block(s, clock, 100 * b, 24, served)
        assert s.active_policy == name and s.decisions.policy is s.loaded_policies[name]
        block_of.update({str(i): b for i in range(100 * b, 100 * b + 24)})
        steps_per_block.append(len(served) - before)
    s.log.flush()
    steps = read_steps(logs / "steps.jsonl")
    assert len(steps) == len(served) == sum(steps_per_block)
    names = ["fcfs", "slo_aware", "fcfs"]
    assert [st.policy for st in steps] == [names[b] for b, n in enumerate(steps_per_block) for _ in range(n)]
    assert all(st.fallback is None for st in steps)
    requests = {r.id: r for r in read_server_requests(logs / "requests.jsonl")}
    assert set(requests) == set(block_of)
    assert all(r.policy == names[block_of[r.id]] for r in requests.values())
    for st, ids in zip(steps, served, strict=True):  # no step served a request of another policy's block
        assert all(requests[rid].policy == st.policy for rid in ids)
    status = _status(control)
    assert status["switches"] == 2 and status["active"] == "fcfs" and status["refused"] is None
    assert status["loaded"] == ["fcfs", "slo_aware"] and math.isfinite(status["at"])
    engine = json.loads((logs / "engine.json").read_text())
    assert engine["policies"] == ["fcfs", "slo_aware"] and engine["control_file"] == str(control)


@pytest.mark.vllm
def test_a_control_file_change_while_the_engine_is_busy_waits_for_the_next_request_to_an_empty_engine(
    tmp_path: Path,
) -> None:
    s, clock, control, logs = _switching(tmp_path)
    served: list[list[str]] = []
    for i in range(8):
        _add(s, Request(i, 0.0, 300, 20), "ab"[i % 2])
    _run(s, clock, served, max_steps=3)
    control.write_text("slo_aware")
    _add(s, Request(8, clock.now_s, 300, 20), "a")  # arrives mid-block: the engine holds requests
    assert s.active_policy == "fcfs" and _status(control)["switches"] == 0
    _run(s, clock, served)
    assert s.active_policy == "fcfs"  # drained, but no request has arrived since
    n_first = len(served)
    _add(s, Request(9, clock.now_s, 300, 5), "b")  # the first request to the empty engine: switched before it
    assert s.active_policy == "slo_aware" and _status(control)["switches"] == 1
    _run(s, clock, served)
    s.log.flush()
    steps = read_steps(logs / "steps.jsonl")
    assert [st.policy for st in steps] == ["fcfs"] * n_first + ["slo_aware"] * (len(served) - n_first)
    policy_of = {r.id: r.policy for r in read_server_requests(logs / "requests.jsonl")}
    assert policy_of == {**{str(i): "fcfs" for i in range(9)}, "9": "slo_aware"}


@pytest.mark.vllm
def test_a_name_not_loaded_is_refused_once_and_the_policy_stays(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    s, clock, control, logs = _switching(tmp_path)
    served: list[list[str]] = []
    control.write_text("sjf\n")  # a baseline, but not one this server loaded
    _block(s, clock, 0, 6, served)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "'sjf', which is not loaded" in err[0] and "(loaded: fcfs, slo_aware)" in err[0]
    assert "stays 'fcfs'" in err[0] and s.active_policy == "fcfs"
    status = _status(control)
    assert status["refused"] == err[0] and status["active"] == "fcfs" and status["switches"] == 0
    assert status["loaded"] == ["fcfs", "slo_aware"]
    tmp = tmp_path / "control.new"
    tmp.write_text("sjf\n")
    os.replace(tmp, control)  # the same content again, as a driver writes it: answered, but not said twice
    _block(s, clock, 10, 4, served)
    assert capsys.readouterr().err == "" and s.active_policy == "fcfs"
    assert _status(control)["at"] > status["at"] and _status(control)["refused"] == err[0]
    control.write_text("slo_aware")
    _block(s, clock, 20, 4, served)
    assert s.active_policy == "slo_aware" and _status(control)["refused"] is None
    assert _status(control)["switches"] == 1
    s.log.flush()
    assert {st.policy for st in read_steps(logs / "steps.jsonl")[-len(served) :]} <= {"fcfs", "slo_aware"}


@pytest.mark.vllm
def test_an_exported_policy_holds_its_own_steps_after_a_switch_and_a_baseline_one(tmp_path: Path) -> None:
    import gymnasium as gym

    env = gym.make("LLMSched-v1", scenario="mixed-slo").unwrapped
    s, clock, control, _ = _switching(
        tmp_path, policies=("learned",), cfg=env.engine_config, tenants=env.tenants, policy_timeout_s=5.0
    )
    assert s._holds == {"fcfs": 1, "learned": 4}
    holds = []
    for b, name in enumerate(["fcfs", "learned", "fcfs"]):
        if b:
            control.write_text(name)
        served: list[list[str]] = []
        decisions = s.stats.num_decisions
        _block(s, clock, 100 * b, 20, served, tuple(t.name for t in env.tenants))
        assert s.active_policy == name and len(served) > 8
        holds.append((s.decisions.hold, s.stats.num_decisions - decisions, len(served)))
    assert [h[0] for h in holds] == [1, 4, 1]
    for hold, decided, steps in holds:  # a new decision every `hold` steps, the first at the block's first step
        assert decided == math.ceil(steps / hold)
    assert s.stats.num_fallbacks == 0
    s2, _, _, _ = _switching(
        tmp_path / "fixed", policies=("learned",), cfg=env.engine_config, tenants=env.tenants, iterations_per_step=2
    )
    assert s2.decisions.hold == 2
    s2._switch("learned")
    assert s2.decisions.hold == 2  # the config's setting holds for every policy of the set


@pytest.mark.vllm
def test_each_step_record_names_the_cause_of_a_fallback_decided_at_it(tmp_path: Path) -> None:
    s, clock = _make(_Raises(), log_dir=str(tmp_path), iterations_per_step=2)
    served: list[list[str]] = []
    for i in range(4):
        _add(s, Request(i, 0.0, 400, 6))
    _run(s, clock, served)
    s.log.flush()
    steps = read_steps(tmp_path / "steps.jsonl")
    assert len(steps) == len(served) > 4 and {st.policy for st in steps} == {"fcfs"}
    assert [st.fallback for st in steps] == [("error" if k % 2 == 0 else None) for k in range(len(steps))]
