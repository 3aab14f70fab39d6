"""Hyperparameter files keyed by scenario, command-line overrides, and the flat-action wrapper."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

import llmsched_env  # noqa: F401
from agents.config import HYPERPARAM_DIR, load_hyperparams, parse_overrides
from agents.sb3 import ALGOS
from agents.wrappers import FlatActions


def test_every_algorithm_has_a_hyperparameter_file_with_a_default() -> None:
    for algo in ALGOS:
        hp = load_hyperparams(algo, "mixed-slo")
        assert hp["n_timesteps"] > 0 and "env_kwargs" in hp, algo
    assert sorted(p.stem for p in HYPERPARAM_DIR.glob("*.yml")) == sorted(ALGOS)


def test_scenario_entries_and_overrides_merge_key_by_key() -> None:
    base = load_hyperparams("maskable_ppo", "mixed-slo")
    moon = load_hyperparams("maskable_ppo", "mooncake-conv")
    assert moon["env_kwargs"]["num_requests"] != base["env_kwargs"]["num_requests"]
    over = parse_overrides(["learning_rate=1e-4", "env_kwargs.iterations_per_step=8", "policy_kwargs={net_arch: [64]}"])
    assert over == {
        "learning_rate": 1e-4,
        "env_kwargs": {"iterations_per_step": 8},
        "policy_kwargs": {"net_arch": [64]},
    }
    hp = load_hyperparams("maskable_ppo", "mixed-slo", over)
    assert hp["learning_rate"] == 1e-4 and hp["env_kwargs"]["iterations_per_step"] == 8
    assert hp["env_kwargs"]["num_requests"] == base["env_kwargs"]["num_requests"]  # siblings kept


def test_bad_hyperparameters_are_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="key=value"):
        parse_overrides(["learning_rate"])
    with pytest.raises(ValueError, match=r"^--hp x=\[1, 2: invalid YAML \("):
        parse_overrides(["x=[1, 2"])
    bad = tmp_path / "bad.yml"
    bad.write_text("default: [1, 2]\n")
    with pytest.raises(ValueError, match=r"bad\.yml"):
        load_hyperparams("maskable_ppo", "mixed-slo", path=bad)
    with pytest.raises(ValueError, match="no hyperparameter file"):
        load_hyperparams("nope", "mixed-slo")
    bad.write_text("default: [1\n")  # one line naming the file, the line and the problem
    with pytest.raises(ValueError, match=r"^\S*bad\.yml:2: invalid YAML \(while parsing a flow sequence; expected ','"):
        load_hyperparams("maskable_ppo", "mixed-slo", path=bad)


def test_flat_actions_round_trip() -> None:
    env = FlatActions(gym.make("LLMSched-v1", num_requests=10))
    nvec = env.nvec
    assert env.action_space.n == int(np.prod(nvec))
    for flat in (0, 1, 777, env.action_space.n - 1):
        multi = env.action(flat)
        assert all(0 <= a < n for a, n in zip(multi, nvec, strict=True)) and env.flat(multi) == flat
