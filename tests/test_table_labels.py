"""Names that label the rows of the commands' tables (policy names, a trace's scenario name, the headline's
agent) are refused, in one usage line naming the option and the name, when they hold a control character
(a newline, a tab...) or the Markdown separator ``|``; any other name passes unchanged."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from llmsched_env.commands.evaluate import parse
from llmsched_env.common.checks import check_label, label_fault
from llmsched_env.decision.policy_spec import PolicySpec
from llmsched_env.evaluation import EvalConfig
from tests.bench_scripts import bench_script

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    ("name", "fault"),
    [("a\nb", "'\\n'"), ("a\tb", "'\\t'"), ("a\rb", "'\\r'"), ("a\x1b[31mb", "'\\x1b'"), ("a\u2028b", "'\\u2028'"),
     ("a\x85b", "'\\x85'"), ("a|b", "separator '|'")],
)  # fmt: skip
def test_control_characters_and_the_separator_are_faults(name: str, fault: str) -> None:
    found = label_fault(name)
    assert found is not None and found.endswith(fault)
    with pytest.raises(ValueError) as exc:
        check_label("policy name", name)
    assert "\n" not in str(exc.value) and str(exc.value).startswith(f"policy name {name!r} holds")


@pytest.mark.parametrize("name", ["fcfs", "mine", "my policy", "ppo-mixed_0.5", "politique-é", "策略", "a=b:c,(d)"])
def test_other_names_pass(name: str) -> None:
    assert label_fault(name) is None
    check_label("policy name", name)


def test_the_separator_alone_can_be_allowed() -> None:
    assert label_fault("runs/a|b", separator=False) is None and label_fault("a\nb", separator=False) is not None


def _usage_line(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """The one error line that ``llmsched-evaluate`` prints for ``argv`` (exit 2)."""
    with pytest.raises(SystemExit) as exc:
        parse(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if "error:" in line]
    assert len(errors) == 1 and err.rstrip().endswith(errors[0]) and "Traceback" not in err, err
    return errors[0]


@pytest.mark.parametrize(
    ("policies", "shown"),
    [("fcfs,mine\nx=tests/data/policies/mixed-slo", "policy name 'mine\\nx' holds the control character '\\n'"),
     ("a\tb=fcfs", "policy name 'a\\tb' holds the control character '\\t'"),
     ("fcfs,a|b=fcfs", "policy name 'a|b' holds the table separator '|'"),
     ("fcfs\nslo_aware", "policy 'fcfs\\nslo_aware' holds the control character '\\n'")],
)  # fmt: skip
def test_evaluate_refuses_a_policy_name_that_breaks_tables(
    policies: str, shown: str, capsys: pytest.CaptureFixture[str]
) -> None:
    line = _usage_line(["--policies", policies, "--scenarios", "mixed-slo", "--num-requests", "5"], capsys)
    assert "argument --policies: " + shown in line


def test_evaluate_refuses_a_policy_folder_whose_name_breaks_tables(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "ppo|v2"  # no NAME=: the folder's name labels the rows
    shutil.copytree(ROOT / "tests" / "data" / "policies" / "mixed-slo", folder)
    line = _usage_line(["--policies", f"fcfs,{folder}", "--scenarios", "mixed-slo", "--num-requests", "5"], capsys)
    assert "--policies: policy name 'ppo|v2' holds the table separator '|'" in line
    config = parse(["--policies", f"fcfs,v2={folder}", "--scenarios", "mixed-slo", "--num-requests", "5"]).config
    assert [p.name for p in config.policies] == ["fcfs", "v2"]  # named: its own name labels the rows


def test_evaluate_refuses_a_trace_whose_name_breaks_tables(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "week|1.csv"  # the file's stem names the scenario
    trace.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:00:00,5,3\n2023-11-16 18:00:01,5,3\n")
    line = _usage_line(["--trace", str(trace), "--trace-format", "azure"], capsys)
    assert f"--trace {str(trace)!r}: scenario name 'week|1' holds the table separator '|'" in line


def test_the_library_refuses_such_names_too() -> None:
    with pytest.raises(ValueError, match=r"^EvalConfig\.policies: policy name 'a\\nb' holds"):
        EvalConfig(scenarios=["mixed-slo"], policies=[PolicySpec("a\nb", baseline="fcfs")])


def test_names_that_pass_are_kept() -> None:
    config = parse(["--policies", "my fcfs=fcfs,lookahead:k=8,horizon=8", "--scenarios", "mixed-slo"]).config
    mine, bound = (p.name for p in config.policies)
    assert mine == "my fcfs" and bound.startswith("lookahead")


def test_headline_refuses_such_an_agent_name(capsys: pytest.CaptureFixture[str]) -> None:
    headline = bench_script("headline")
    with pytest.raises(SystemExit) as exc:
        headline.main(["--agent", "agent|x", "--results", "nowhere"])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "argument --agent: policy name 'agent|x' holds the table separator '|'" in err
