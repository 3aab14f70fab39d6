"""One --help for the commands: every option's help ends with its default, said one way
(``commands.help.DefaultsFormatter``); the program's name is the one the user typed."""

from __future__ import annotations

import argparse
import dataclasses
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from agents.cli import build_parser as train_parser
from llmsched_env.commands.calibrate import build_parser as calibrate_parser
from llmsched_env.commands.evaluate_args import build_parser as evaluate_parser
from llmsched_env.commands.help import DefaultsFormatter, default_text, from_args
from llmsched_env.commands.tune import build_parser as tune_parser

ROOT = Path(__file__).resolve().parents[1]
ENDING = re.compile(r"\((default\b[^()]*(\([^()]*\)[^()]*)*|required)\)$")  # "(default: ...)" last


def _parsers() -> dict[str, argparse.ArgumentParser]:
    calibrate = calibrate_parser()
    sub = next(a for a in calibrate._actions if isinstance(a, argparse._SubParsersAction))
    parsers = {"evaluate": evaluate_parser(""), "train": train_parser(), "tune": tune_parser()}
    return parsers | {f"calibrate {name}": parser for name, parser in sub.choices.items()}


@pytest.mark.parametrize("name", ["evaluate", "train", "tune", "calibrate profile", "calibrate fidelity"])
def test_every_option_ends_with_its_default(name: str) -> None:
    parser = _parsers()[name]
    assert parser.formatter_class is DefaultsFormatter
    fmt = DefaultsFormatter(parser.prog)
    for action in parser._actions:
        if not action.option_strings or action.dest == "help":
            continue
        shown = fmt._expand_help(action)  # the text --help prints, %(default)s filled in
        assert ENDING.search(shown), f"{name} {action.option_strings[-1]}: {shown!r}"
        assert shown.count("(default") + shown.count("(required)") == 1, shown


def test_default_text_says_each_kind_of_default_one_way() -> None:
    p = argparse.ArgumentParser(formatter_class=DefaultsFormatter)
    cases = {
        p.add_argument("--list", default=["fcfs", "sjf"]): "default: fcfs,sjf",
        p.add_argument("--number", type=float, default=0.1): "default: 0.1",
        p.add_argument("--none", default=None): "default: none",
        p.add_argument("--flag", action="store_true"): "default: off",
        p.add_argument("--no-thing", dest="thing", action="store_false"): "default: off",  # the flag is off
        p.add_argument("--plots", action=argparse.BooleanOptionalAction, default=None): "default: none",
        p.add_argument("--need", required=True): "required",
        p.add_argument("--pct", default="90%", help="a share"): "default: 90%",
    }
    for action, expected in cases.items():
        assert default_text(action) == expected, action.dest
    p.add_argument("--own", default=None, help="a file (default: the scenario's)")
    text = p.format_help()
    assert "(default: 90%)" in text and "(default: the scenario's)" in text and "scenario's) (default" not in text


def test_the_help_names_the_program_the_user_ran() -> None:
    for script, prog in (("evaluate.py", "evaluate.py"), ("train.py", "train.py"), ("calibrate.py", "calibrate.py")):
        done = subprocess.run([sys.executable, script, "--help"], cwd=ROOT, capture_output=True, text=True)
        assert done.returncode == 0 and done.stdout.startswith(f"usage: {prog} "), done.stdout[:80]
    module = [sys.executable, "-m", "llmsched_env.commands.evaluate", "--help"]
    done = subprocess.run(module, cwd=ROOT, capture_output=True, text=True)
    assert done.stdout.startswith("usage: llmsched-evaluate")


@pytest.mark.parametrize(
    ("script", "shown"),
    [("llmsched-evaluate", "(default: fcfs)"), ("llmsched-train", "(default: maskable_ppo)"),
     ("llmsched-calibrate", "profile")],
)  # fmt: skip
def test_each_console_script_runs_help(script: str, shown: str) -> None:
    """The console scripts ``pip install`` puts next to the interpreter (pyproject's [project.scripts]) start and
    show help; found there first, so a venv used without activating it is tested too, then on PATH."""
    beside = Path(sys.executable).with_name(script)
    path = str(beside) if beside.is_file() else shutil.which(script)
    assert path is not None, f"{script} is neither beside {sys.executable} nor on PATH: pip install -e ."
    done = subprocess.run([path, "--help"], capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.startswith(f"usage: {script}") and shown in done.stdout, done.stderr


def test_from_args_builds_a_config_from_the_options_named_like_its_fields() -> None:
    @dataclasses.dataclass(frozen=True)
    class Config:
        model: str = "tiny"
        num_requests: int = 10
        seeds: tuple[int, ...] = (0,)

    args = argparse.Namespace(model="big", num_requests=3, unrelated=True)
    assert from_args(Config, args) == Config("big", 3)  # seeds: no option, its default
    assert from_args(Config, args, num_requests=5, seeds=(1, 2)) == Config("big", 5, (1, 2))  # computed values win
    with pytest.raises(AssertionError, match="no field"):
        from_args(Config, args, nope=1)


@pytest.mark.parametrize(
    "module, argv",
    [
        ("agents.cli", ["--help"]),
        ("llmsched_env.commands.evaluate", ["--help"]),
        ("llmsched_env.commands.tune", ["--help"]),
        ("llmsched_env.commands.calibrate", ["--help"]),
        ("llmsched_env.commands.calibrate", ["profile", "--help"]),
        ("llmsched_env.commands.calibrate", ["fidelity", "--help"]),
    ],
)
def test_help_is_printed_before_torch_or_sb3_is_imported(module: str, argv: list[str]) -> None:
    code = (
        f"import sys, runpy\nsys.argv = ['x', *{argv!r}]\n"
        f"try:\n    runpy.run_module({module!r}, run_name='__main__')\nexcept SystemExit:\n    pass\n"
        "heavy = sorted(m for m in ('torch', 'stable_baselines3', 'sb3_contrib', 'ray', 'scipy') if m in sys.modules)\n"
        "print('HEAVY', heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "usage:" in out and out.strip().splitlines()[-1] == "HEAVY []"


@pytest.mark.parametrize(
    ("name", "first"),
    [("evaluate", "what to run"), ("train", "what to train"), ("tune", "what to tune"),
     ("calibrate profile", "what to measure"), ("calibrate fidelity", "what to measure")],
)  # fmt: skip
def test_options_come_in_groups_the_common_ones_first(name: str, first: str) -> None:
    """Every option but --help sits in a titled group, and --help lists the group of what to run first."""
    parser = _parsers()[name]
    loose = [a.option_strings for g in parser._action_groups if g.title in ("options", "optional arguments")
             for a in g._group_actions if a.dest != "help"]  # fmt: skip
    titles = [
        g.title
        for g in parser._action_groups
        if g._group_actions and g.title not in ("options", "positional arguments")
    ]
    assert not loose and titles[0] == first, (loose, titles)
    text = parser.format_help()
    assert text.index(f"\n{first}:") < min(text.index(f"\n{t}:") for t in titles[1:])


@pytest.mark.parametrize("module", ["live_experiment", "live_replay", "seal_policy", "compile"])
def test_the_other_commands_print_their_help(module: str, capsys: pytest.CaptureFixture[str]) -> None:
    """``live_experiment --help`` ended in a TypeError: a percent sign of a help text read as a format."""
    main = __import__(f"llmsched_env.commands.{module}", fromlist=["main"]).main
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    out = capsys.readouterr()
    assert exc.value.code == 0 and out.out.startswith("usage: ") and "Traceback" not in out.err
