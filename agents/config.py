"""Hyperparameters in YAML keyed by scenario (rl-baselines3-zoo style), with command-line overrides."""

from __future__ import annotations

import contextlib
import copy
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from llmsched_env.common.checks import clipped, shown
from llmsched_env.common.fields import split_items
from llmsched_env.common.files import link_problem, parse_yaml, read_config

ALGO_NAMES = ("maskable_ppo", "ppo", "a2c", "dqn", "recurrent_ppo")  # agents.sb3.ALGOS' keys, known without SB3

HYPERPARAM_DIR = Path(__file__).resolve().parent / "hyperparams"


def finite_json(value: Any, **kwargs: Any) -> str:
    """``json.dumps`` with every non-finite float written as ``null`` (JSON has no ``NaN``/``Infinity``)."""
    return json.dumps(_finite(value), allow_nan=False, **kwargs)


def _finite(value: Any) -> Any:
    """``value`` with its non-finite floats, at any depth of mappings, lists and tuples, as None."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(item) for item in value]
    return value


def merge_config(base: dict[str, Any], update: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` updated by ``update``, nested mappings merged key by key (neither is modified)."""
    out = copy.deepcopy(base)
    for key, value in update.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), dict):
            out[key] = merge_config(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def parse_overrides(items: Sequence[str]) -> dict[str, Any]:
    """``["learning_rate=1e-4", "env_kwargs.load=[1, 2]"]`` -> nested dict, values read as YAML (``parse_yaml``: its
    aliases bounded; a key given twice: the last counts)."""
    out: dict[str, Any] = {}
    given = split_items(items, "--hp", what="item", form="key=value (e.g. learning_rate=1e-4)", repeat=True)
    for key, text in given.items():
        value = parse_yaml(text, f"--hp {clipped(key, 40)}={clipped(text, 40)}", lines=False)
        if isinstance(value, str):  # YAML 1.1 reads 1e-4 (no dot) as a string
            with contextlib.suppress(ValueError):
                value = float(value)
        node = out
        parts = key.split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = value
    return out


def dotted(tree: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"dotted.key": value}`` for every value of a nested mapping that is no (non-empty) mapping: what
    ``parse_overrides`` reads back."""
    out: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, Mapping) and value:
            out.update(dotted(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def load_hyperparams(
    algo: str, scenario: str, overrides: Mapping[str, Any] | None = None, path: Path | None = None
) -> dict[str, Any]:
    """``default`` merged with the ``scenario`` entry of ``<algo>.yml`` (or ``path``), then with ``overrides``."""
    data = read_hyperparam_file(algo, path)
    if scenario not in data and "default" not in data:  # a flat file (learning_rate: 0.5) would apply nothing
        keys = ", ".join(clipped(str(k), 40) for k in list(data)[:6]) + (", ..." if len(data) > 6 else "") or "none"
        raise ValueError(
            f"{path or HYPERPARAM_DIR / f'{algo}.yml'}: no entry for scenario {shown(scenario)} and no 'default' entry "
            f"(its keys: {keys}); expected a mapping of scenario -> hyperparameters, e.g. 'default: {{learning_rate: "
            f"0.0003}}' or '{clipped(scenario, 40)}: {{learning_rate: 0.0003}}'"
        )
    entry = data.get(scenario)
    if entry is not None and not isinstance(entry, dict):
        raise ValueError(
            f"{path or HYPERPARAM_DIR / f'{algo}.yml'}: the {shown(scenario)} entry must be a mapping of "
            f"hyperparameters, got {shown(entry, 60)}"
        )
    params = merge_config(data.get("default", {}), entry or {})
    return merge_config(params, overrides or {})


def read_hyperparam_file(algo: str, path: Path | None = None) -> dict[str, Any]:
    """The entries of ``<algo>.yml`` (or ``path``), scenario -> hyperparameters; ``ValueError`` naming the file when
    it is missing, not YAML, or not such a mapping."""
    file = path or HYPERPARAM_DIR / f"{algo}.yml"
    problem = link_problem(file)
    if problem is not None:  # a link loop, a link to nothing
        raise ValueError(f"{file}: {problem}")
    if not file.exists():
        raise ValueError(f"no hyperparameter file for algorithm {shown(algo)}: {file} does not exist")
    data = read_config(file, "the hyperparameter file", yaml=True) or {}
    if not isinstance(data, dict) or not isinstance(data.get("default", {}), dict):
        raise ValueError(f"{file}: expected a mapping of scenario -> hyperparameters with a 'default' entry")
    return data
