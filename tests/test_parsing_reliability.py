"""Bounded parsing (docs/reliability.md): a YAML document is bounded by its size with every alias written out, so an
alias bomb is refused in one line naming the file and line after one visit of each node; an error quotes at most an
excerpt of a value and says its size; the vLLM adapter's config is checked like every other input, each refusal a
line naming the file and the field path (``tenants[3].priority``); JSON that Python refuses to read (nested too
deeply, an integer of over 4,300 digits) is one line naming the file wherever it is read."""

from __future__ import annotations

import json
import re
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
import yaml

from agents.checkpoints import CheckpointError, verify_checkpoint
from agents.config import parse_overrides, read_hyperparam_file
from llmsched_env.adapters.vllm.config import AdapterConfig
from llmsched_env.common.checks import check_positive, shown
from llmsched_env.common.files import LIMITS, parse_json, parse_yaml, read_config
from llmsched_env.costs.loader import load_cost_model
from llmsched_env.live.experiment import replication_config
from llmsched_env.workloads.traces import TraceError, clear_trace_cache, load_trace
from tests.test_bounded_reads import _usage_error
from tests.test_training_reliability import _refused

ROOT = Path(__file__).resolve().parents[1]
MAX_LINE = 1000  # the most characters a refusal of this file's inputs may take


@pytest.fixture(autouse=True)
def _default_limits(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The default limits (no LLMSCHED_MAX_* from the caller's shell); a key folder of the test's own."""
    for limit in LIMITS:
        if limit.env:
            monkeypatch.delenv(limit.env, raising=False)
    monkeypatch.delenv("LLMSCHED_MAX_TENANTS", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))


def _bomb(levels: int, leaf: str = "xxxxxxxx") -> list[str]:
    """YAML lines ``a0`` .. ``a<levels>``, each a list of nine aliases of the one before: 9**levels leaves."""
    lines = [f"a0: &a0 [{leaf}]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, levels + 1)]
    return lines


BOMB_LIST = "[" + ", ".join(line.split(": ", 1)[1] for line in _bomb(6)) + "]"  # the bomb as one flow list


# ------------------------------------------------------------------------------------ YAML alias bombs
def test_an_alias_bomb_in_the_hyperparameters_is_one_short_line_naming_the_file_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    hp = tmp_path / "hp.yml"  # 9**6 leaves: before, a 7.5 MB error line quoting them all
    hp.write_text("\n".join(["default: {learning_rate: 0.0003}", *_bomb(6), "mixed-slo: {n_envs: *a6}"]) + "\n")
    line = _refused(["--scenario", "mixed-slo", "--hyperparams", str(hp), "--out", str(tmp_path / "r")], capsys)
    assert len(line) < MAX_LINE
    assert f"{hp}:7: the YAML document holds more than 100,000 nodes with its aliases written out" in line
    assert "LLMSCHED_MAX_YAML_NODES" in line


def test_an_alias_bomb_in_an_hp_value_is_one_short_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    line = _refused(["--scenario", "mixed-slo", "--hp", f"n_envs={BOMB_LIST}", "--out", str(tmp_path / "r")], capsys)
    assert len(line) < MAX_LINE
    assert line.startswith("llmsched-train: error: --hp n_envs=[&a0 [xxxxxxxx]")
    assert "holds more than 100,000 nodes" in line


def test_parsing_a_bomb_visits_each_node_of_the_file_once(monkeypatch: pytest.MonkeyPatch) -> None:
    composed = 0
    compose = yaml.composer.Composer.compose_node

    def counted(self: Any, parent: Any, index: Any) -> Any:
        nonlocal composed
        composed += 1
        return compose(self, parent, index)

    monkeypatch.setattr(yaml.composer.Composer, "compose_node", counted)
    text = "\n".join(_bomb(40))  # 9**40 leaves written out
    tracemalloc.start()
    try:
        with pytest.raises(ValueError, match=r"^bomb:6: the YAML document holds more than 100,000 nodes"):
            parse_yaml(text, "bomb")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert composed <= 70  # refused at line 6 (a5: 9**5 leaves, past the bound): about 11 nodes a line
    assert peak < 5 * 2**20


def test_the_expanded_bound_counts_characters_and_refuses_a_recursive_alias(monkeypatch: pytest.MonkeyPatch) -> None:
    big = 'a: &a "' + "x" * 1_000_000 + '"\nb: [' + ", ".join(["*a"] * 20) + "]\n"  # 20 MB written out
    with pytest.raises(
        ValueError,
        match=r"^w:2: the YAML document's values hold more than 16,777,216 characters .*"
        r"LLMSCHED_MAX_CONFIG_BYTES",
    ):
        parse_yaml(big, "w")
    for text in ("a: &a [1, *a]", "a: &a {b: *a}"):
        with pytest.raises(ValueError, match=r"^w:1: the alias \*a is inside the node it names \(a recursive alias"):
            parse_yaml(text, "w")
    monkeypatch.setenv("LLMSCHED_MAX_YAML_NODES", "1000000")  # raised: 9**5 leaves fit
    assert len(parse_yaml("\n".join(_bomb(5)), "w")["a5"]) == 9


def test_anchors_and_merge_keys_read_as_pyyaml_reads_them() -> None:
    for path in sorted((ROOT / "agents" / "hyperparams").glob("*.yml")):
        assert read_config(path, "the hyperparameter file") == yaml.safe_load(path.read_text()), path
    text = "base: &b {lr: 1, n: 2}\nx: {<<: *b, n: 3}\ny: [*b, *b]\n"
    assert parse_yaml(text, "w") == {"base": {"lr": 1, "n": 2}, "x": {"lr": 1, "n": 3}, "y": [{"lr": 1, "n": 2}] * 2}


def test_a_flat_document_past_the_node_bound_is_refused(tmp_path: Path) -> None:
    hp = tmp_path / "flat.yml"  # 150,001 nodes, no alias
    hp.write_text("default: {x: [" + ",".join(["0"] * 150_000) + "]}\n")
    with pytest.raises(ValueError, match=rf"^{hp}:1: the YAML document holds more than 100,000 nodes") as err:
        read_hyperparam_file("maskable_ppo", hp)
    assert len(str(err.value)) < MAX_LINE


# ------------------------------------------------------------------------------------ quoting values
def test_shown_cuts_a_value_and_says_its_size() -> None:
    assert shown("abc") == "'abc'" and shown(1.5) == "1.5" and shown([1, 2]) == "[1, 2]"
    assert shown("x" * 2_340_112) == "'" + "x" * 79 + "… (2,340,112 characters)"
    assert shown(10**5000) == "an integer of about 5,001 digits"  # repr() refuses past 4,300 digits
    shared: list[Any] = ["x"]
    for _ in range(60):  # 9**60 leaves: its repr would never end
        shared = [shared] * 9
    text = shown(shared)
    assert len(text) < 120 and text.endswith("… (a list of 9 items)")
    with pytest.raises(ValueError) as err:
        check_positive("Owner", "rate", "9" * 1_000_000)
    assert len(str(err.value)) < MAX_LINE and str(err.value).endswith("(1,000,000 characters)")


def test_an_error_quoting_a_huge_value_is_one_short_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    line = _refused(["--scenario", "mixed-slo", "--hp", "n_envs=" + "x" * 100_000, "--out", str(tmp_path)], capsys)
    assert len(line) < MAX_LINE and line.endswith("… (100,000 characters)")
    config = tmp_path / "a.yaml"
    config.write_text("scenario: [" + "y" * 200_000 + "]\n")
    with pytest.raises(ValueError) as err:
        AdapterConfig.from_file(config)
    assert str(err.value).startswith(f"{config}: scenario must be a string, got ['yyy")
    assert len(str(err.value)) < MAX_LINE and str(err.value).endswith("… (a list of 1 items)")
    trace = tmp_path / "t.csv"  # a header of 60,000 columns, none of those the format needs
    trace.write_text(",".join(f"column{i}" for i in range(60_000)) + "\n1,2\n")
    clear_trace_cache()
    with pytest.raises(TraceError, match=r"found columns \['column0', .*\(a list of 60,000 items\), expected") as err:
        load_trace(trace, format="azure")
    assert len(str(err.value)) < MAX_LINE


# ------------------------------------------------------------------------------------ the adapter's config
TENANTS_2000 = "tenants:\n" + "".join(f"  - {{name: t{i}}}\n" for i in range(2000))
T = "tenants: [{name: a}, {name: b, %s}]\n"  # the second tenant given the field
ADAPTER_FAULTS: dict[str, tuple[str, str]] = {  # the config's text -> what its error says after the file's name
    "integer key": ("1: fcfs\npolcy: x\n", r": field names are strings, got the int 1; known fields: \['control_file'"),
    "timeout": ("policy_timeout_s: 1.0e+300\n", r": policy_timeout_s must be a number in \(0, 3,600\], got 1e\+300$"),
    "timeout int": (f"policy_timeout_s: 1{'0' * 400}\n", r": policy_timeout_s must .* got 10000.*… \(401 digits\)$"),
    "rate": ("nominal_rate_rps: 1.0e+300\n", r": nominal_rate_rps must be a number in \(0, 10,000,000\], got 1e\+300$"),
    "seed": ("seed: -1\n", r": seed must be an integer in \[0, 9,223,372,036,854,775,807\], got -1$"),
    "hold": (f"iterations_per_step: 1{'0' * 30}\n", r": iterations_per_step must be an integer in \[1, 1,000,000\]"),
    "priority 1.7": (T % "priority: 1.7", r": tenants\[1\]\.priority must be an integer in \[-1,000,000, 1,000,000\]"),
    "priority true": (T % "priority: true", r": tenants\[1\]\.priority must be an integer .*got True$"),
    "priority text": (T % "priority: '3'", r": tenants\[1\]\.priority must be an integer .*got '3'$"),
    "name list": ("tenants: [{name: [b, c]}]\n", r": tenants\[0\]\.name must be a non-empty string, got \['b', 'c'\]$"),
    "name null": ("tenants: [{name: null}]\n", r": tenants\[0\]\.name must be a non-empty string, got None$"),
    "ttft true": (T % "slo: {ttft_s: true, tpot_s: 0.1}", r": tenants\[1\]\.slo\.ttft_s must be a number, got True$"),
    "slo missing": (T % "slo: {ttft_s: 1.0}", r": tenants\[1\]\.slo: missing field\(s\) 'tpot_s'$"),
    "weight text": (T % "weight: '2'", r": tenants\[1\]\.weight must be a number, got '2'$"),
    "weight true": (T % "weight: true", r": tenants\[1\]\.weight must be a number, got True$"),
    "tenant key": (T % "3: x, zz: 1", r": tenants\[1\]: field names are strings, got the int 3"),
    "tenants text": (
        "tenants: abc\n",
        r": tenants must be a list of mappings \{name, slo, weight, priority\}, got 'abc'$",
    ),
    "too many tenants": (TENANTS_2000, r": tenants: 2,000 tenants, over the limit of 1,024 .* LLMSCHED_MAX_TENANTS"),
    "NUL control file": ('policies: [sjf]\ncontrol_file: "c\\0d"\n', r": control_file holds a NUL character"),
    "NUL log folder": ('log_dir: "l\\0g"\n', r": log_dir holds a NUL character"),
    "NUL policy path": ('policies: [sjf, "p\\0q"]\n', r": policies\[1\] holds a NUL character"),
    "policy entry": ("policies: [sjf, 3]\n", r": policies\[1\] must be a scheduler name or a policy path, got 3$"),
    "bomb": (f"policies: {BOMB_LIST}\n", r":1: the YAML document holds more than 100,000 nodes"),
}


@pytest.mark.parametrize("case", list(ADAPTER_FAULTS))
def test_the_adapter_config_refuses_each_bad_field_in_one_line_naming_the_file_and_field(
    case: str, tmp_path: Path
) -> None:
    text, message = ADAPTER_FAULTS[case]
    config = tmp_path / "adapter.yaml"
    config.write_text(text)
    with pytest.raises(ValueError) as err:
        AdapterConfig.from_file(config)
    line = str(err.value)
    assert "\n" not in line and len(line) < MAX_LINE
    assert re.match(re.escape(str(config)) + message, line), line


def test_a_config_of_many_problems_names_the_first_three_on_one_line(tmp_path: Path) -> None:
    config = tmp_path / "adapter.yaml"
    config.write_text("tenants:\n" + "".join(f"  - {{name: t{i}, priority: 0.5}}\n" for i in range(500)))
    with pytest.raises(ValueError) as err:
        AdapterConfig.from_file(config)
    message = str(err.value)
    parts = message.split("; ")
    assert "\n" not in message and len(message) < 1_000 and parts[-1] == f"{config}: 497 more problems", message
    assert all(part.startswith(f"{config}: tenants[") for part in parts[:3])


def test_a_good_adapter_config_reads_as_before(tmp_path: Path) -> None:
    config = tmp_path / "adapter.yaml"
    config.write_text(
        "policy: fcfs\npolicy_timeout_s: 1\nseed: 7\ntenants:\n  - {name: a, slo: {ttft_s: 2, tpot_s: 0.2}, "
        "weight: 2, priority: -1}\n  - {name: b, slo: batch}\n"
    )
    cfg = AdapterConfig.from_file(config)
    assert [(t.name, t.slo.ttft_s, t.weight, t.priority) for t in cfg.tenants] == [("a", 2, 2, -1), ("b", 60.0, 1.0, 0)]
    assert cfg.policy_timeout_s == 1 and cfg.seed == 7


# ------------------------------------------------------------------------------------ JSON Python refuses to read
def test_json_python_refuses_to_read_is_one_line_naming_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(json.JSONDecodeError, match="Exceeds the limit"):
        parse_json('{"a": ' + "1" * 5000 + "}")  # a ValueError of int(), not a JSONDecodeError, before
    cost = tmp_path / "cost.json"
    cost.write_text('{"kind": "linear", "a": ' + "1" * 5000 + "}")
    with pytest.raises(ValueError, match=rf"^cost model file {cost}: not readable JSON \(Exceeds the limit"):
        load_cost_model(str(cost))
    checkpoint = tmp_path / "ckpt_100_steps.zip"
    checkpoint.write_bytes(b"PK")
    Path(f"{checkpoint}.sig").write_text('{"binding": ' + "[" * 3000)  # a RecursionError, before
    with pytest.raises(CheckpointError, match="its signature does not match its bytes"):
        verify_checkpoint(checkpoint)
    old = tmp_path / "old"
    old.mkdir()
    (old / "experiment.json").write_text("[" * 100_000)
    with pytest.raises(ValueError, match=r"^--replicate: .*experiment\.json is not a finished experiment's record"):
        replication_config(old, tmp_path / "new", 5)


def test_a_policy_name_too_long_for_a_file_is_one_usage_line(capsys: pytest.CaptureFixture[str]) -> None:
    line = _usage_error(["--policies", "x" * 5000, "--scenarios", "default"], capsys)  # an OSError traceback, before
    assert len(line) < MAX_LINE and "unknown policy 'xxx" in line and "(5,000 characters)" in line
    with pytest.raises(ValueError, match=r"^AdapterConfig: policy: unknown policy 'xxx.*\(5,000 characters\)"):
        AdapterConfig(policy="x" * 5000).resolve()


def test_hp_values_still_read_as_yaml() -> None:
    assert parse_overrides(["a.b=[1, 2]", "lr=1e-4", "c={x: &k 1, y: *k}"]) == {
        "a": {"b": [1, 2]},
        "lr": 1e-4,
        "c": {"x": 1, "y": 1},
    }


@pytest.mark.parametrize(
    ("text", "yaml", "says"),
    [
        ('{"policy": "fcfs", "policy": "slo_aware"}', False, "the key 'policy' appears twice in one object"),
        ('{"a": {"n_steps": 8, "n_steps": 16}}', False, "the key 'n_steps' appears twice in one object"),
        ("policy: fcfs\npolicy_timeout_s: 1\npolicy_timeout_s: 2\n", True, ":3: the key 'policy_timeout_s' appears"),
        ("{a: 1, a: 2}\n", True, "the key 'a' appears twice in one mapping (lines 1 and 1)"),
    ],
)
def test_a_key_given_twice_is_refused_not_the_last_taken(text: str, yaml: bool, says: str, tmp_path: Path) -> None:
    """A JSON or YAML key given twice silently took its last value (an adapter config's policy, a policy.json field
    edited in its first copy, a hyperparameter)."""
    from llmsched_env.common.files import read_config

    path = tmp_path / ("c.yaml" if yaml else "c.json")
    path.write_text(text)
    with pytest.raises(ValueError, match="appears twice") as info:
        read_config(path, "a config")
    assert says in str(info.value) and str(path) in str(info.value) and "\n" not in str(info.value)


def test_a_merge_key_may_still_be_overridden_by_the_mapping_itself(tmp_path: Path) -> None:
    from llmsched_env.common.files import read_config

    path = tmp_path / "c.yml"
    path.write_text("base: &b {x: 1, y: 2}\nrun:\n  <<: *b\n  x: 3\n")
    assert read_config(path, "a config")["run"] == {"x": 3, "y": 2}
