"""Every field of policy.json that decides a policy's actions is under ``fields_sha256``: an edit after export is
refused in one line naming the file and the field; a file exported before the record is refused with the
command that adds it (``llmsched_env.commands.seal_policy``); the shipped policies carry it."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from safetensors.numpy import load_file, save_file

from llmsched_env.commands.seal_policy import main as seal_main
from llmsched_env.decision.policy_file import FIELDS_KEY, PolicyFileError, field_digests, load_policy_file
from llmsched_env.evaluation.config import EvalConfig
from llmsched_env.evaluation.resume import evaluation_record
from tests.bench_scripts import bench_script

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = sorted((ROOT / "agents" / "policies").glob("*/policy.json"))
FIXTURES = sorted((ROOT / "tests" / "data" / "policies").glob("*/policy.json"))
MIXED = ROOT / "tests" / "data" / "policies" / "mixed-slo"


def _copy(tmp_path: Path, src: Path = MIXED) -> Path:
    dst = tmp_path / "p"
    shutil.copytree(src, dst)
    return dst


def _edit(folder: Path, **changes: Any) -> None:
    meta = json.loads((folder / "policy.json").read_text())
    for key, value in changes.items():
        if value is None:
            meta.pop(key)
        else:
            meta[key] = value
    (folder / "policy.json").write_text(json.dumps(meta, indent=1))


def _refused(folder: Path) -> str:
    with pytest.raises(PolicyFileError) as err:
        load_policy_file(folder)
    message = str(err.value)
    assert "\n" not in message and str(folder / "policy.json") in message
    return message


@pytest.mark.parametrize("path", SHIPPED + FIXTURES, ids=lambda p: p.parent.name)
def test_the_shipped_policies_carry_their_record_and_load(path: Path) -> None:
    meta = json.loads(path.read_text())
    assert meta[FIELDS_KEY] == field_digests(meta)
    assert load_policy_file(path).meta["tensors_sha256"] == meta["tensors_sha256"]


def _meta() -> dict[str, Any]:
    return json.loads((MIXED / "policy.json").read_text())


def _normalization(n: int, clip: float = 10.0) -> dict[str, Any]:
    return {"mean": [0.0] * n, "var": [1.0] * n, "epsilon": 1e-8, "clip": clip}


EDITS = {  # field -> a value that loads (it passes every other check) and changes what the policy does
    "masked": False,
    "iterations_per_step": 1,
    "normalization": _normalization(len(_meta()["obs_names"])),
    "obs_names": [*reversed(_meta()["obs_names"])],
    "action_options": {
        **_meta()["action_options"],
        "token_budgets": [v * 2 for v in _meta()["action_options"]["token_budgets"]],
    },
    "network": {**_meta()["network"], "activation": "relu"},
    "algo": "ppo",
    "schema_version": 2,
}


@pytest.mark.parametrize("field", sorted(EDITS))
def test_an_edited_field_is_refused_in_one_line_naming_it(tmp_path: Path, field: str) -> None:
    folder = _copy(tmp_path)
    _edit(folder, **{field: EDITS[field]})
    message = _refused(folder)
    assert f"edited after export: {field!r} changed" in message and "export the policy again" in message


def test_a_changed_clip_and_an_added_or_removed_field_are_named(tmp_path: Path) -> None:
    folder = _copy(tmp_path)
    n = len(_meta()["obs_names"])
    _edit(folder, normalization=_normalization(n, 5.0))
    assert "'normalization' changed" in _refused(folder)
    folder = _copy(tmp_path / "b")
    _edit(folder, temperature=2.0, iterations_per_step=None)
    message = _refused(folder)
    assert "'temperature' added; 'iterations_per_step' removed" in message


def test_informational_fields_may_change(tmp_path: Path) -> None:
    folder = _copy(tmp_path)
    _edit(folder, scenario="relabelled", seed=7, timesteps=1)
    assert load_policy_file(folder).meta["scenario"] == "relabelled"


def test_weights_replaced_with_their_digest_are_named(tmp_path: Path) -> None:
    """Other weights with their own ``tensors_sha256`` pass the weights' check, not the record's."""
    folder = _copy(tmp_path)
    tensors = load_file(str(folder / "policy.safetensors"))
    save_file({k: v * 2 for k, v in tensors.items()}, str(folder / "policy.safetensors"))
    _edit(folder, tensors_sha256=hashlib.sha256((folder / "policy.safetensors").read_bytes()).hexdigest())
    assert "'tensors_sha256' changed" in _refused(folder)


def test_a_bad_iterations_per_step_is_refused_before_the_record(tmp_path: Path) -> None:
    folder = _copy(tmp_path)
    _edit(folder, iterations_per_step=0)
    assert "key 'iterations_per_step' must be an integer >= 1, got 0" in _refused(folder)


def test_a_file_without_the_record_is_refused_with_the_command_that_adds_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = _copy(tmp_path)
    _edit(folder, **{FIELDS_KEY: None})
    message = _refused(folder)
    assert f"no {FIELDS_KEY}: the file was exported before" in message
    assert f"python -m llmsched_env.commands.seal_policy {folder}" in message
    assert seal_main([str(folder)]) == 0
    assert "sealed" in capsys.readouterr().out
    assert load_policy_file(folder).meta[FIELDS_KEY] == json.loads((MIXED / "policy.json").read_text())[FIELDS_KEY]
    assert seal_main([str(folder)]) == 0  # a sealed file is left as it is
    assert "left as it is" in capsys.readouterr().out


def test_sealing_does_not_bless_an_edit_or_a_broken_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = _copy(tmp_path)
    _edit(folder, masked=False)
    before = (folder / "policy.json").read_bytes()
    assert seal_main([str(folder), str(tmp_path / "missing")]) == 1
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and "'masked' changed" in err[0] and "missing" in err[1]
    assert (folder / "policy.json").read_bytes() == before


def test_the_evaluation_record_of_a_policy_leaves_its_fields_record_out() -> None:
    """The fingerprint of an exported policy (``evaluation.json``'s ``inputs``) is the one the committed
    evaluations of the generalist recorded before the shipped file was sealed: adding the record changed no
    input."""
    packed = ROOT / "docs/results/sustained/default.tar.gz"
    committed = json.loads(bench_script("results_archive").read_member(packed, "default-capacity/evaluation.json"))
    record = evaluation_record({}, EvalConfig(policies=["learned"], scenarios=["default"]))
    assert record["inputs"]["policy learned"] == committed["inputs"]["policy learned"]
