"""Each layer imports only downward (DESIGN.md): reads every module's import statements."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HEAVY = {"gymnasium", "torch", "stable_baselines3", "sb3_contrib"}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def _top(names: set[str]) -> set[str]:
    return {n.split(".")[0] for n in names}


def _files(*parts: str) -> list[Path]:
    base = ROOT.joinpath(*parts)
    return sorted(base.rglob("*.py")) if base.is_dir() else [base]


@pytest.mark.parametrize("path", _files("llmsched_env", "core") + _files("llmsched_env", "decision.py"), ids=str)
def test_core_and_decision_import_no_gym_torch_or_sb3(path: Path) -> None:
    imported = _imports(path)
    assert not _top(imported) & HEAVY, f"{path.relative_to(ROOT)} imports {_top(imported) & HEAVY}"
    assert not any(n.startswith(("llmsched_env.env", "llmsched_env.runtime", "agents", "baselines")) for n in imported)


def test_config_imports_nothing_of_the_project() -> None:
    assert not any(n.startswith("llmsched_env") for n in _imports(ROOT / "llmsched_env" / "config.py"))


@pytest.mark.parametrize("path", [p for p in _files("llmsched_env") if "runtime" not in p.parts], ids=str)
def test_only_runtime_imports_torch(path: Path) -> None:
    assert "torch" not in _top(_imports(path)), f"{path.relative_to(ROOT)} imports torch outside runtime/"


@pytest.mark.parametrize("path", _files("llmsched_env") + _files("baselines"), ids=str)
def test_only_agents_import_sb3(path: Path) -> None:
    assert not _top(_imports(path)) & {"stable_baselines3", "sb3_contrib"}


@pytest.mark.parametrize("path", _files("baselines"), ids=str)
def test_baselines_use_the_decision_layer_only(path: Path) -> None:
    imported = _imports(path)
    assert not _top(imported) & HEAVY, f"{path.relative_to(ROOT)} imports {_top(imported) & HEAVY}"
    assert not any(n.startswith(("agents", "llmsched_env.runtime", "llmsched_env.env")) for n in imported)


def test_runtime_never_reaches_up() -> None:
    for path in _files("llmsched_env", "runtime") if (ROOT / "llmsched_env" / "runtime").exists() else []:
        imported = _imports(path)
        assert not _top(imported) & {"gymnasium", "stable_baselines3", "sb3_contrib", "agents", "baselines"}
