"""Fuzzing the public inputs: trace files, engine and env arguments, policy files. The only allowed outcomes
are success or the project's own one-line error (``TraceError``/``PolicyFileError``/``ValueError`` with a
message on one line); anything else (``TypeError``, ``OverflowError``, ``RecursionError``, a numpy error, an
``AssertionError`` from an invariant) fails the test."""

from __future__ import annotations

import json
import math
import tempfile
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import llmsched_env  # noqa: F401
from llmsched_env.runtime.policy_file import PolicyFileError, load_policy_file
from llmsched_env.workloads.scenarios import scenario_from_trace
from llmsched_env.workloads.traces import TraceError, clear_trace_cache, load_trace

# derandomize: the same 60 examples every run, so CI cannot turn red on a draw (run with a random seed by hand:
# pytest --hypothesis-seed=N tests/test_fuzz.py)
FUZZ = settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])

_numbers = st.one_of(
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0, 1, -1, 2**63, 0.5, 1e300]),
)
_text_cells = st.one_of(
    _numbers.map(str),
    st.text(alphabet='0123456789-:. T,"[]abcxyz', max_size=30),
    st.sampled_from(["2023-11-16 18:15:46.1", "2023-11-16 18:15:60", "2023-02-30 01:00:00", "", "1 2 3", "[1, -2]"]),
)


def _one_line(exc: BaseException) -> None:
    assert isinstance(exc, ValueError), f"{type(exc).__name__}: {exc}"
    assert str(exc) and "\n" not in str(exc), repr(str(exc))


_FOLDER = tempfile.TemporaryDirectory(prefix="llmsched-fuzz-")  # removed when the test process ends


def _write(text: str | bytes, name: str) -> Path:
    folder = Path(tempfile.mkdtemp(dir=_FOLDER.name))
    path = folder / name
    path.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8", "surrogatepass"))
    return path


@st.composite
def _csv_text(draw: st.DrawFn) -> tuple[str, str]:
    fmt = draw(st.sampled_from(["azure", "lengths", "generic"]))
    columns = {
        "azure": ["TIMESTAMP", "ContextTokens", "GeneratedTokens"],
        "lengths": ["num_prefill_tokens", "num_decode_tokens"],
        "generic": ["t", "in", "out", "ids"],
    }[fmt]
    header = (
        draw(st.lists(st.sampled_from([*columns, "x"]), min_size=0, max_size=5)) if draw(st.booleans()) else columns
    )
    rows = draw(st.lists(st.lists(_text_cells, min_size=0, max_size=5), max_size=6))
    return fmt, "\n".join([",".join(header), *(",".join(r) for r in rows)]) + "\n"


@st.composite
def _jsonl_text(draw: st.DrawFn) -> str:
    value = st.one_of(_numbers, st.text(max_size=5), st.lists(st.integers(-(2**66), 2**66), max_size=5), st.none())
    keys = st.sampled_from(["timestamp", "input_length", "output_length", "hash_ids", "other"])
    objects = st.one_of(st.dictionaries(keys, value, max_size=5), value)
    lines = draw(st.lists(objects.map(lambda o: json.dumps(o, allow_nan=True)), max_size=6))
    if draw(st.booleans()):
        lines.append(draw(st.text(max_size=20)))
    return "\n".join(lines) + "\n"


@FUZZ
@given(case=_csv_text(), rate=st.one_of(st.none(), _numbers))
def test_csv_trace_files_load_or_fail_in_one_line(case: tuple[str, str], rate: Any) -> None:
    fmt, text = case
    path = _write(text, "trace.csv")
    options = {"columns": {"arrival": "t", "prompt_len": "in", "output_len": "out", "prefix_ids": "ids"}}
    try:
        trace = load_trace(path, fmt, **(options if fmt == "generic" else {}))
        assert len(trace) >= 1 and np.all(trace.prompt_len >= 1)
        if trace.arrival_s is not None:
            assert np.all(np.isfinite(trace.arrival_s)) and np.all(np.diff(trace.arrival_s) >= 0)
        scenario_from_trace(path, fmt, rate, **(options if fmt == "generic" else {}))
    except ValueError as exc:
        _one_line(exc)
    finally:
        clear_trace_cache()


@FUZZ
@given(text=_jsonl_text(), tick=st.one_of(st.none(), _numbers))
@example(text='{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, 2, 3]}\n', tick=None)
@example(text='{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [-1]}\n', tick=None)
def test_mooncake_files_load_or_fail_in_one_line(text: str, tick: Any) -> None:
    path = _write(text, "trace.jsonl")
    try:
        trace = load_trace(path, "mooncake", tick_s=tick)
        for ids, prompt in zip(trace.prefix_ids or (), trace.prompt_len.tolist(), strict=False):
            assert len(ids) <= math.ceil(prompt / trace.prefix_id_tokens)
            assert all(0 <= h < 2**63 for h in ids)
    except TraceError as exc:
        _one_line(exc)
    finally:
        clear_trace_cache()


_ENGINE_FIELDS = ["num_kv_blocks", "block_size", "max_num_seqs", "max_num_batched_tokens", "max_model_len", "nope"]


@FUZZ
@given(
    engine=st.one_of(
        st.none(),
        st.dictionaries(st.sampled_from(_ENGINE_FIELDS), st.one_of(_numbers, st.text(max_size=3)), max_size=3),
    ),
    load=st.one_of(_numbers, st.tuples(_numbers, _numbers), st.lists(_numbers, max_size=3)),
    max_steps=st.one_of(_numbers, st.booleans()),
    horizon=st.one_of(_numbers, st.none()),
    num_requests=st.one_of(st.none(), _numbers),
    cluster=st.booleans(),
)
@example(engine=None, load=(0.5, math.inf), max_steps=10, horizon=None, num_requests=None, cluster=False)
@example(engine=None, load=1.0, max_steps=math.nan, horizon=None, num_requests=None, cluster=True)
@example(engine=None, load=5e-324, max_steps=10, horizon=None, num_requests=None, cluster=False)
@example(engine=None, load=1.2e307, max_steps=10, horizon=None, num_requests=None, cluster=True)
def test_env_arguments_build_or_fail_in_one_line(
    engine: Any, load: Any, max_steps: Any, horizon: Any, num_requests: Any, cluster: bool
) -> None:
    kwargs: dict[str, Any] = {"engine": engine, "load": load, "max_steps": max_steps, "num_requests": num_requests}
    if horizon is not None:
        kwargs["horizon_s"] = horizon
    try:
        if cluster:
            env = gym.make("LLMSchedCluster-v0", scenario="cluster-azure-conv-4", num_replicas=2, **kwargs)
        else:
            env = gym.make("LLMSched-v1", scenario="bursty", **kwargs)
    except ValueError as exc:
        _one_line(exc)
        return
    env.reset(seed=0)
    env.step(env.action_space.sample())
    env.close()


@FUZZ
@given(action=st.one_of(
    st.lists(st.one_of(_numbers, st.booleans(), st.complex_numbers()), max_size=8),
    st.lists(st.integers(-3, 10), min_size=7, max_size=7).flatmap(
        lambda a: st.sampled_from([np.array(a), np.array(a, dtype=bool), np.array(a, dtype=complex), np.array(a) + 0.5])
    ),
))  # fmt: skip
@example(action=np.zeros(7, dtype=bool))
@example(action=np.zeros(7, dtype=complex))
def test_actions_step_or_fail_in_one_line(action: Any) -> None:
    env = _ENV.unwrapped
    env.reset(seed=0)
    env.step(np.zeros(7, dtype=np.int64))  # the cache holds an integer action
    try:
        env.step(action)
    except ValueError as exc:
        _one_line(exc)


_ENV = gym.make("LLMSched-v1", scenario="bursty", num_requests=20)
_FIXTURE = Path(__file__).resolve().parent / "data" / "policies" / "mixed-slo"  # a schema-1 policy
_GOOD_META = json.loads((_FIXTURE / "policy.json").read_text())


def _mutations() -> st.SearchStrategy[Any]:
    leaf = st.one_of(_numbers, st.text(max_size=4), st.booleans(), st.none())
    return st.recursive(
        leaf,
        lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=4), inner, max_size=3)),
        max_leaves=8,
    )


@FUZZ
@given(key=st.sampled_from(sorted(_GOOD_META)), value=_mutations(), raw=st.one_of(st.none(), st.binary(max_size=40)))
@example(key="algo", value=None, raw=b"[" * 100_000)
@example(key="algo", value=None, raw=b'{"format_version": ' + b"9" * 5000 + b"}")
def test_policy_files_load_or_fail_in_one_line(key: str, value: Any, raw: bytes | None) -> None:
    folder = _write(b"", "placeholder").parent
    source = _FIXTURE / "policy.safetensors"
    (folder / "policy.safetensors").write_bytes(source.read_bytes())
    meta = dict(_GOOD_META, **{key: value})
    (folder / "policy.json").write_bytes(raw if raw is not None else json.dumps(meta, allow_nan=True).encode())
    try:
        load_policy_file(folder)
    except PolicyFileError as exc:
        _one_line(exc)
