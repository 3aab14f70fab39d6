"""The training's configuration and command line, without training: TrainConfig's checks and its command
line, --help with every default, bad arguments, sweeps' runs, and run folders refused inside shipped folders."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

from agents.cli import build_parser, main, parse_args
from agents.train_config import QUICK, TrainConfig, resolve_hyperparams
from llmsched_env.commands.help import DefaultsFormatter
from llmsched_env.common.outputs import check_output, shipped_folders

ROOT = Path(__file__).resolve().parents[1]


def _help_texts(parser: argparse.ArgumentParser) -> dict[str, str]:
    """Every option's help as ``--help`` shows it (defaults appended by the formatter)."""
    fmt = DefaultsFormatter(parser.prog)
    return {a.option_strings[-1]: fmt._get_help_string(a) or "" for a in parser._actions if a.option_strings}


def test_help_runs_as_a_module_and_shows_every_default() -> None:
    done = subprocess.run([sys.executable, "-m", "agents.cli", "--help"], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.startswith("usage: llmsched-train")
    text = " ".join(done.stdout.split())  # argparse wraps lines
    for shown in ("(default: maskable_ppo)", "(default: dummy)", "(default: runs/<scenario>-seed<seed>",
                  "(default: the YAML's)", "(default: 0)", "(default: default)", "--force allow"):  # fmt: skip
        assert shown in text, shown
    texts = _help_texts(build_parser())
    missing = [opt for opt, help_text in texts.items() if opt != "--help" and "default" not in help_text]
    assert not missing, f"options whose --help shows no default: {missing}"


def test_the_config_checks_its_fields() -> None:
    for kwargs, message in (
        ({"scenario": "nope"}, "scenario: unknown scenario 'nope'"),
        ({"algo": "nope"}, "algo: unknown algorithm"),
        ({"timesteps": 0}, "timesteps: expected an integer >= 1"),
        ({"seed": -1}, "seed: expected an integer >= 0"),
        ({"vec_env": "threads"}, "vec_env"),
        ({"bc": "least_kv_load"}, "bc: unknown scheduler 'least_kv_load'"),  # a router, on a single node
        ({"scenario": "cluster-mooncake-4", "bc": "fcfs"}, "bc: unknown router 'fcfs'"),
        ({"eval_baselines": ("fcfs", "nope")}, "eval_baselines: unknown schedulers ['nope']"),
        ({"hp": [("gamma", 0.9)]}, "hp: expected a mapping"),
    ):
        with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
            TrainConfig(**kwargs)  # type: ignore[arg-type]
    assert TrainConfig(scenario="bursty", seed=3).run_folder == Path("runs/bursty-seed3")
    assert TrainConfig(scenario="cluster-mooncake-4").baselines[0] == "round_robin"


def test_the_config_resolves_the_yaml_quick_hp_then_flags() -> None:
    hp = resolve_hyperparams(TrainConfig(quick=True, timesteps=999, hp={"batch_size": 64, "env_kwargs": {"load": 2}}))
    assert hp["n_timesteps"] == 999 and hp["batch_size"] == 64 and hp["eval_freq"] == QUICK["eval_freq"]
    assert hp["env_kwargs"]["num_requests"] == 300 and hp["env_kwargs"]["load"] == 2  # QUICK, then --hp
    assert resolve_hyperparams(TrainConfig(algo="dqn", bc="slo_aware"))["bc_warmstart"] is None


def test_an_entry_may_carry_its_own_quick_preset(tmp_path: Path) -> None:
    quick = resolve_hyperparams(TrainConfig(scenario="generalist", quick=True))
    full = resolve_hyperparams(TrainConfig(scenario="generalist"))
    assert (quick["bc_steps"], quick["n_timesteps"], quick["bc_stride"]) == (15_000, 20_000, 4)  # its own
    assert quick["env_kwargs"]["num_requests"] == QUICK["env_kwargs"]["num_requests"]  # QUICK beneath it
    assert "quick" not in quick and "quick" not in full and full["bc_steps"] == 50_000
    assert resolve_hyperparams(TrainConfig(scenario="mixed-slo", quick=True))["bc_steps"] == QUICK["bc_steps"]
    bad = tmp_path / "hp.yml"
    bad.write_text("default: {n_timesteps: 1000, quick: 5}\n")
    with pytest.raises(ValueError, match="quick: expected a mapping"):
        resolve_hyperparams(TrainConfig(hyperparams=bad))


def test_the_config_is_its_command_line() -> None:
    config = TrainConfig(scenario="mixed-slo", algo="a2c", seed=2, timesteps=500, bc="none", quick=True,
                         hp={"learning_rate": 3e-4, "env_kwargs": {"load": [1.0, 3.0], "num_requests": 30}},
                         eval_baselines=("fcfs", "sjf"), out=Path("runs/x"), progress=False)  # fmt: skip
    argv = config.to_argv()
    assert "env_kwargs.load=[1.0, 3.0]" in argv and "--no-progress" in argv and "--quick" in argv
    assert parse_args(argv).config == config


def test_bad_arguments_are_one_line_usage_errors(capsys: pytest.CaptureFixture) -> None:
    for argv, message in (
        (["--out", "x", "--scenario", "nope"], "unknown scenario"),
        (["--out", "x", "--hp", "novalue"], "key=value"),
        (["--out", "x", "--bc", "nope"], "bc: unknown scheduler 'nope'"),
        (["--seeds", "a,b"], "argument --seeds: expected a comma-separated list of int, got 'a,b'"),
        (["--hp-grid", "gamma"], "--hp-grid: item 'gamma' is not KEY=V1,V2"),
        (["--hp-grid", "gamma="], "no values for 'gamma'"),
        (["--hyperparams", "/nonexistent.yml", "--out", "x"], "no hyperparameter file"),
    ):
        with pytest.raises(SystemExit) as exc:
            parse_args(argv)
        err = capsys.readouterr().err
        assert exc.value.code == 2 and message in err and "Traceback" not in err, err


def test_a_sweep_names_one_run_per_trial() -> None:
    args = parse_args(
        ["--scenarios", "mixed-slo,bursty", "--seeds", "0,1", "--hp-grid", "learning_rate=1e-4,3e-4", "--out", "r"]
    )
    assert args.sweep and len(args.configs) == 8
    second = args.configs[1]
    assert second.run_folder.name == "mixed-slo-seed0-learning_rate=3e-4" and second.run_folder.is_absolute()
    assert second.hp == {"learning_rate": 3e-4} and not second.progress
    assert "--scenarios" not in second.to_argv() and [c.scenario for c in args.configs[4:]] == ["bursty"] * 4
    assert parse_args(["--seeds", "0,1"]).config.run_folder == Path("runs/sweep")


def test_shipped_folders_are_refused_without_force(capsys: pytest.CaptureFixture) -> None:
    protected = {p.relative_to(ROOT).as_posix() for p in shipped_folders() if ROOT in p.parents}
    assert {"llmsched_env", "agents", "baselines", "policies", "docs/results"} <= protected
    preset = ROOT / "llmsched_env" / "costs" / "presets" / "runtime-tiny-cpu.json"
    for path in (ROOT / "policies" / "mixed-slo", ROOT / "docs" / "results", preset):
        with pytest.raises(ValueError, match="refusing to write inside the shipped folder"):
            check_output(path)
        assert check_output(path, force=True, file=path.suffix == ".json") == path
    assert check_output(ROOT / "runs" / "x") == ROOT / "runs" / "x"
    with pytest.raises(SystemExit) as exc:
        main(["--scenario", "mixed-slo", "--out", str(ROOT / "policies" / "mixed-slo")])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and f"--out {ROOT / 'policies' / 'mixed-slo'}: refusing" in err
    assert len(err.strip().splitlines()[-1]) > 0 and "Traceback" not in err
