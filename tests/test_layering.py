"""Each folder imports only the folders below it (docs/architecture.md), and no import cycle exists.

Reads every module's import statements (``TYPE_CHECKING`` blocks and function-level imports included), so a
layer that reaches up, a heavy dependency in the wrong place, or two modules that import each other fail here.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "llmsched_env"

# folder -> the project folders it may import (besides itself); the order is the layering, bottom first
ALLOWED: dict[str, set[str]] = {
    "common": set(),
    "costs": {"common"},
    "engine": {"common", "costs"},
    "sim": {"common", "costs", "engine"},
    "workloads": {"common", "costs", "engine", "sim"},
    "cluster": {"common", "costs", "engine", "sim", "workloads"},
    "decision": {"common", "costs", "engine", "sim", "workloads", "cluster"},
    "envs": {"common", "costs", "engine", "sim", "workloads", "cluster", "decision"},
    "runtime": {"common", "costs", "engine", "sim", "workloads", "cluster", "decision"},
    "adapters": {"common", "costs", "engine", "sim", "workloads", "cluster", "decision", "runtime"},
    "evaluation": {
        "common",
        "costs",
        "engine",
        "sim",
        "workloads",
        "cluster",
        "decision",
        "envs",
        "runtime",
        "adapters",
    },
}
ALLOWED["live"] = ALLOWED["evaluation"] | {"evaluation"}
ALLOWED["commands"] = ALLOWED["live"] | {"live"}
# third-party packages each folder may import (numpy and the standard library go everywhere)
THIRD_PARTY: dict[str, set[str]] = {
    "decision": {"safetensors"},  # safetensors.numpy: policy files without torch
    "envs": {"gymnasium", "matplotlib"},
    "runtime": {"torch", "safetensors"},
    "adapters": {"vllm", "torch", "safetensors", "yaml"},
    "evaluation": {"gymnasium", "matplotlib", "ray", "tqdm", "torch", "tensorboard"},
    "live": {"vllm", "matplotlib"},  # server.py's client and launcher, in the vLLM venv; the verdict's plots
    "commands": {"gymnasium", "matplotlib", "ray", "tqdm", "torch"},
}
HEAVY = {"gymnasium", "torch", "safetensors", "stable_baselines3", "sb3_contrib", "ray", "matplotlib", "vllm", "scipy",
         "yaml", "tensorboard", "hypothesis"}  # fmt: skip
TOP = {"agents", "baselines", "train", "evaluate", "calibrate"}
# heavy packages the agents may import (vLLM and Ray reach them only through llmsched_env's adapters and workers)
AGENTS_THIRD_PARTY = {"gymnasium", "torch", "safetensors", "stable_baselines3", "sb3_contrib", "yaml", "tensorboard"}


def _imports(path: Path) -> set[str]:
    """Absolute module names imported anywhere in ``path`` (relative imports resolved)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    rel = path.relative_to(ROOT).with_suffix("")
    package = list(rel.parts[:-1])
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            names.add(module)
            # ``from llmsched_env.workloads import traces`` imports the module llmsched_env.workloads.traces
            names.update(f"{module}.{alias.name}" for alias in node.names)
    return names


def _module(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


MODULES = {_module(p): p for p in sorted(PACKAGE.rglob("*.py"))}
FOLDERS = sorted({p.relative_to(PACKAGE).parts[0] for p in PACKAGE.rglob("*.py") if p.parent != PACKAGE})


def _folder(module: str) -> str | None:
    """The folder of ``llmsched_env`` a module lies in, or None."""
    parts = module.split(".")
    return parts[1] if parts[0] == "llmsched_env" and len(parts) > 1 and parts[1] in ALLOWED else None


def test_every_folder_has_a_layer() -> None:
    assert set(FOLDERS) == set(ALLOWED), f"folders and layers differ: {set(FOLDERS) ^ set(ALLOWED)}"
    assert sorted(p.name for p in PACKAGE.glob("*.py")) == ["__init__.py"], "modules belong in a folder"


@pytest.mark.parametrize("module", [m for m in MODULES if _folder(m)], ids=str)
def test_folder_imports_only_downward(module: str) -> None:
    folder = _folder(module)
    assert folder is not None
    allowed = ALLOWED[folder] | {folder}
    for name in _imports(MODULES[module]):
        top = name.split(".")[0]
        assert top not in TOP, f"{module} imports {name}, a layer above the package"
        if top == "llmsched_env" and name != "llmsched_env":
            target = _folder(name)
            assert target in allowed, f"{module} ({folder}/) imports {name}, not from a folder below it"
        elif top in HEAVY:
            assert top in THIRD_PARTY.get(folder, set()), f"{module} ({folder}/) imports {top}"


def test_package_init_imports_nothing_of_its_folders() -> None:
    """The package root only registers the envs (by entry-point string), so importing a low layer stays light;
    its one import is the compiled engine's guard (standard library), which must run before the engine loads."""
    names = {n for n in _imports(PACKAGE / "__init__.py") if n.startswith("llmsched_env.")}
    assert names <= {"llmsched_env.common.compiled", "llmsched_env.common.compiled.guard"}, names


def test_the_planners_sit_on_top_of_the_decision_layer() -> None:
    """``decision/planners/`` (lookahead, mpc, their candidates, the tuned table) imports the rest of ``decision/``;
    of the rest only ``policy_spec`` (which spells and builds them) imports the planners."""
    for module, path in MODULES.items():
        if module.startswith("llmsched_env.decision.") and not module.startswith("llmsched_env.decision.planners"):
            reached = {n for n in _imports(path) if n.startswith("llmsched_env.decision.planners")}
            assert not reached or module == "llmsched_env.decision.policy_spec", f"{module} imports {sorted(reached)}"


@pytest.mark.parametrize("path", sorted((ROOT / "baselines").rglob("*.py")), ids=str)
def test_baselines_use_the_decision_layer_and_below(path: Path) -> None:
    for name in _imports(path):
        top = name.split(".")[0]
        assert top not in HEAVY and top not in TOP - {"baselines"}, f"{path.name} imports {name}"
        if top == "llmsched_env" and name != "llmsched_env":
            assert _folder(name) in ALLOWED["decision"] | {"decision"}, f"{path.name} imports {name}"


@pytest.mark.parametrize("path", sorted((ROOT / "agents").rglob("*.py")), ids=str)
def test_agents_import_no_command_line_script(path: Path) -> None:
    assert not _imports(path) & {"train", "evaluate", "calibrate"}
    if path.name != "cli.py":  # the library part of agents/ does not go through a command line
        assert not {n for n in _imports(path) if n.startswith("llmsched_env.commands")}, path.name
    heavy = {n.split(".")[0] for n in _imports(path)} & HEAVY
    assert heavy <= AGENTS_THIRD_PARTY, f"{path.name} imports {sorted(heavy - AGENTS_THIRD_PARTY)}"  # no vllm, no ray


@pytest.mark.parametrize("path", sorted((ROOT / "bench").glob("*.py")), ids=str)
def test_bench_scripts_use_the_package_not_the_tests(path: Path) -> None:
    """A benchmark measures the package as users get it: it may import any layer, never the test suite."""
    assert not {n.split(".")[0] for n in _imports(path)} & {"tests", "conftest"}, path.name


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("*.py")) + sorted((ROOT / "baselines").rglob("*.py")), ids=str)
def test_only_agents_import_sb3(path: Path) -> None:
    assert not {n.split(".")[0] for n in _imports(path)} & {"stable_baselines3", "sb3_contrib"}


def test_no_import_cycles() -> None:
    """No module reaches itself through the import graph of the package, the baselines and the agents."""
    paths = {**MODULES}
    for pkg in ("baselines", "agents"):
        paths.update({_module(p): p for p in sorted((ROOT / pkg).rglob("*.py"))})
    graph: dict[str, set[str]] = {}
    for module, path in paths.items():
        deps = set()
        for name in _imports(path):
            # a package import runs its __init__; a submodule import runs the submodule
            while name and name not in paths:
                name = name.rpartition(".")[0]
            if name and name != module:
                deps.add(name)
        graph[module] = deps
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for d in sorted(graph[m]):
            if state.get(d) == 1:
                cycle = [*stack[stack.index(d) :], d]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if d not in state:
                visit(d)
        stack.pop()
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m)


def _layer_table(text: str, indent: str) -> list[tuple[str, list[str]]]:
    """(folder, the folders its arrow names) per row of a layer table: a row starts with ``indent`` and a folder
    name (a trailing ``/`` allowed), may go on over more deeply indented lines, and ends with ``<- a, b``."""
    rows: list[tuple[str, str]] = []
    for line in text.splitlines():
        head = line[len(indent) :].split(" ", 1)[0].rstrip("/") if line.startswith(indent) else ""
        if head in ALLOWED and not line[len(indent)].isspace():
            rows.append((head, line))
        elif rows and line.startswith(indent + " ") and line.strip():  # the row goes on
            rows[-1] = (rows[-1][0], rows[-1][1] + line)
        elif rows and rows[-1][0] == "commands":
            break
    arrows = [(folder, row.rsplit("<-", 1)[1] if "<-" in row else "") for folder, row in rows]
    return [(folder, [a.strip() for a in arrow.split(",") if a.strip()]) for folder, arrow in arrows]


@pytest.mark.parametrize(
    ("path", "indent"), [(PACKAGE / "__init__.py", "    "), (ROOT / "docs" / "architecture.md", "  ")], ids=str
)
def test_the_layer_tables_of_the_docs_and_the_package_agree_with_the_layering(path: Path, indent: str) -> None:
    rows = _layer_table(path.read_text(), indent)
    assert [folder for folder, _ in rows] == list(ALLOWED), f"{path.name}: the folders, in the layering's order"
    for folder, nearest in rows:
        assert set(nearest) <= ALLOWED[folder], f"{path.name}: {folder} names {nearest}, not below it"
        assert nearest or folder == "common", f"{path.name}: {folder} names no folder below it"
