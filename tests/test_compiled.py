"""The compiled engine (``llmsched-compile``): a stale build never runs, and a fresh one plays exactly as the sources.

The fast tests exercise the guard on a fake package folder; the slow one compiles a copy of this tree with mypyc
(about 2 minutes on one core) and runs the fingerprint, snapshot and lookahead tests on it, compiled.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import venv
from importlib import metadata
from pathlib import Path
from types import ModuleType

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from llmsched_env.commands import compile as compile_command
from llmsched_env.common import compiled

if sys.version_info >= (3, 11):
    import tomllib
else:  # pytest itself depends on tomli below Python 3.11
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
SUFFIX = importlib.machinery.EXTENSION_SUFFIXES[0]


def fake_package(tmp_path: Path) -> Path:
    """A package folder holding copies of the compiled modules' sources (nothing is imported from it)."""
    pkg = tmp_path / "llmsched_env"
    for module in compiled.MODULES:
        src = compiled.source_path(module)
        dest = compiled.source_path(module, pkg)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(src, dest)
    return pkg


def record(pkg: Path, **changes: object) -> None:
    data = {"python": compiled.python_tag(), "sources": compiled.source_digests(pkg), **changes}
    (pkg / compiled.MANIFEST.name).write_text(json.dumps(data))


def guarded_origins(pkg: Path) -> list[str | None]:
    """Run ``guard(pkg)``, which must steer imports to the sources, and say where its finder loads a compiled module
    (the engine) and a module outside the group from (None: not its business); the import system is restored."""
    finders = list(sys.meta_path)
    try:
        assert compiled.guard(pkg) is True
        (finder,) = [f for f in sys.meta_path if f not in finders]
        names = ("llmsched_env.engine.engine", "llmsched_env.envs.single_node")
        specs = [finder.find_spec(name, None) for name in names]
        return [None if spec is None else spec.origin for spec in specs]
    finally:
        sys.meta_path[:] = finders


def test_no_build_is_not_stale_and_a_fresh_record_may_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(compiled.PURE_ENV, raising=False)  # the guard as it runs by default (LLMSCHED_PURE: below)
    pkg = fake_package(tmp_path)
    assert compiled.stale_sources(pkg) is None
    assert compiled.guard(pkg) is False
    (pkg / "engine" / f"engine{SUFFIX}").write_bytes(b"")
    record(pkg)
    assert compiled.stale_sources(pkg) == []
    assert compiled.guard(pkg) is False


def test_a_stale_build_is_named_and_the_sources_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(compiled.PURE_ENV, raising=False)  # with it, the sources run silently (tested below)
    pkg = fake_package(tmp_path)
    (pkg / "engine" / f"engine{SUFFIX}").write_bytes(b"")
    assert compiled.stale_sources(pkg) == [f"1 compiled extension(s) with no {compiled.MANIFEST.name}"]
    record(pkg)
    engine_py = pkg / "engine" / "engine.py"
    engine_py.write_text(engine_py.read_text() + "\n# edited\n")
    assert compiled.stale_sources(pkg) == ["engine/engine.py changed since it was compiled"]
    record(pkg, python="cpython-27-beos")
    assert compiled.stale_sources(pkg) == [f"built for cpython-27-beos, this is {compiled.python_tag()}"]
    (pkg / compiled.MANIFEST.name).write_text("{not json")
    (reason,) = compiled.stale_sources(pkg) or [""]
    assert reason.startswith(f"{pkg / compiled.MANIFEST.name}: unreadable")
    monkeypatch.setattr(compiled, "_guarded", False)
    assert guarded_origins(pkg) == [str(pkg / "engine" / "engine.py"), None]
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "the compiled engine is stale" in err and "llmsched-compile --clean" in err


def run_check(capsys: pytest.CaptureFixture[str]) -> tuple[object, str]:
    """``llmsched-compile --check`` in this process: its exit status (0 when it returns) and its stdout."""
    try:
        compile_command.main(["--check"])
    except SystemExit as e:
        return e.code, capsys.readouterr().out
    return 0, capsys.readouterr().out


def test_check_and_clean_say_what_they_did(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                           monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    pkg = fake_package(tmp_path)
    ext = pkg / "engine" / f"engine{SUFFIX}"
    ext.write_bytes(b"")
    record(pkg)
    assert compile_command.clean(pkg) == [ext, pkg / compiled.MANIFEST.name]
    assert compiled.stale_sources(pkg) is None
    # this install as it is: exit 0 and "in use" exactly where the engine runs compiled (a pure install, or
    # LLMSCHED_PURE=1, exits 1 with the reason)
    code, out = run_check(capsys)
    if compiled.compiled_in_use():
        assert (code, out) == (0, f"llmsched-compile: compiled: in use ({compiled.MANIFEST})\n")
    else:
        assert code == 1 and out.startswith("llmsched-compile: ") and "the Python sources run" in out, out
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    with pytest.raises(RuntimeError, match=r"mypyc is not installed: pip install -e '.\[compile\]'"):
        compile_command.build(pkg)


@pytest.mark.parametrize(
    ("reasons", "in_use", "pure", "code", "line"),
    [
        (None, False, False, 1, "not compiled: the Python sources run"),
        (["a.py changed since it was compiled", "b"], False, False, 1,
         "stale, the Python sources run: a.py changed since it was compiled; b"),
        ([], True, False, 0, f"compiled: in use ({compiled.MANIFEST})"),
        ([], False, True, 1,
         f"compiled, not loaded (LLMSCHED_PURE is set): the Python sources run ({compiled.MANIFEST})"),
        ([], False, False, 1, f"compiled, not loaded: the Python sources run ({compiled.MANIFEST})"),
    ],
)  # fmt: skip
def test_check_exits_0_only_where_the_compiled_engine_runs(
    reasons: list[str] | None, in_use: bool, pure: bool, code: int, line: str,
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """CI and the fresh-install test rely on the exit status: each state of a build, and what --check says."""
    monkeypatch.setattr(compile_command, "stale_sources", lambda: reasons)
    monkeypatch.setattr(compile_command, "compiled_in_use", lambda: in_use)
    if pure:
        monkeypatch.setenv(compiled.PURE_ENV, "1")
    else:
        monkeypatch.delenv(compiled.PURE_ENV, raising=False)
    assert run_check(capsys) == (code, f"llmsched-compile: {line}\n")


def copy_tree(dest: Path) -> None:
    """What the compiled run needs of this checkout: the packages, the tests and their data, the bench scripts
    some tests load, the config."""
    for name in ("llmsched_env", "agents", "baselines", "tests", "bench"):
        shutil.copytree(ROOT / name, dest / name, ignore=shutil.ignore_patterns("__pycache__", "*.so", "*.pyd",
                                                                                  "_compiled.json"))  # fmt: skip
    shutil.copy(ROOT / "pyproject.toml", dest / "pyproject.toml")
    (dest / "policies").symlink_to("agents/policies")  # as in the checkout


# the tests that pin trajectories, observations and snapshots exactly: replayed on the other build
REPLAYED = ["tests/test_fingerprint.py", "tests/test_snapshot.py", "tests/test_lookahead.py", "tests/test_core.py",
            "tests/test_env.py", "tests/test_schema2.py", "tests/test_kv_usage.py"]  # fmt: skip


@pytest.mark.slow
def test_the_compiled_engine_plays_exactly_as_the_sources(tmp_path: Path) -> None:
    if importlib.util.find_spec("mypyc") is None or (shutil.which("cc") is None and shutil.which("gcc") is None):
        pytest.skip("mypyc or a C compiler is missing (pip install -e '.[compile]')")
    tree = tmp_path / "tree"
    copy_tree(tree)
    written = compile_command.build(tree / "llmsched_env", quiet=True)
    assert {p.name for p in written} >= {compiled.MANIFEST.name, f"engine{SUFFIX}", f"_native__mypyc{SUFFIX}"}
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(tree)}
    probe = "from llmsched_env.common.compiled import compiled_in_use as c; print(c())"
    run = subprocess.run([sys.executable, "-c", probe], cwd=tree, env=env, capture_output=True, text=True)
    assert run.stdout.strip() == "True", run.stderr
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *REPLAYED], cwd=tree,
                         env=env, capture_output=True, text=True)  # fmt: skip
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    # an edited source makes the build stale: the sources run, and one line says so
    engine_py = tree / "llmsched_env" / "engine" / "engine.py"
    engine_py.write_text(engine_py.read_text() + "\n# edited\n")
    run = subprocess.run([sys.executable, "-c", probe], cwd=tree, env=env, capture_output=True, text=True)
    assert run.stdout.strip() == "False"
    assert run.stderr.count("\n") == 1 and "engine/engine.py changed since it was compiled" in run.stderr


@pytest.mark.slow
def test_the_sources_play_as_recorded_where_the_install_compiled_them() -> None:
    """Where installing compiled the engine, the fast tier ran the compiled modules: the sources must play the
    same recorded trajectories, run here with LLMSCHED_PURE=1."""
    if not compiled.compiled_in_use():
        pytest.skip("the engine runs from its sources here: the fast tier played them")
    env = {**os.environ, "OMP_NUM_THREADS": "1", compiled.PURE_ENV: "1"}
    probe = "from llmsched_env.common.compiled import compiled_in_use as c; print(c())"
    run = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, env=env, capture_output=True, text=True)
    assert (run.stdout.strip(), run.stderr) == ("False", "")  # the sources, silently
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *REPLAYED], cwd=ROOT,
                         env=env, capture_output=True, text=True)  # fmt: skip
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]


def test_llmsched_pure_runs_the_sources_of_a_fresh_build_silently(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    pkg = fake_package(tmp_path)
    monkeypatch.setenv(compiled.PURE_ENV, "1")
    monkeypatch.setattr(compiled, "_guarded", False)
    assert compiled.guard(pkg) is False  # nothing built: nothing to steer
    (pkg / "engine" / f"engine{SUFFIX}").write_bytes(b"")
    record(pkg)
    assert compiled.stale_sources(pkg) == []
    assert guarded_origins(pkg) == [str(pkg / "engine" / "engine.py"), None]
    assert capsys.readouterr().err == ""
    monkeypatch.setenv(compiled.PURE_ENV, "0")  # "0" asks for nothing
    monkeypatch.setattr(compiled, "_guarded", False)
    assert compiled.guard(pkg) is False


def load_setup() -> ModuleType:
    """The checkout's setup.py as a module (its ``setup()`` runs only as a script, as pip's build runs it)."""
    spec = importlib.util.spec_from_file_location("llmsched_setup", ROOT / "setup.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_build_compiles_only_when_it_builds_and_may_and_says_why_not(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Compiled only for a build command; with LLMSCHED_PURE or a mypyc error, none, and an editable install
    also removes an earlier build beside the sources (a wheel's build leaves the checkout alone)."""
    setup_py = load_setup()
    pkg = fake_package(tmp_path)  # stands in for the checkout's package: this tree's own build stays
    monkeypatch.setattr(setup_py.COMPILED, "PACKAGE_DIR", pkg)
    calls: list[object] = []

    def fake(*args: object) -> list[str]:
        calls.append(args)
        return ["ext"]

    monkeypatch.setattr(setup_py.COMPILED, "mypyc_extensions", fake)
    monkeypatch.delenv(compiled.PURE_ENV, raising=False)
    monkeypatch.setattr(sys, "argv", ["setup.py", "egg_info"])  # metadata only: nothing compiled
    assert setup_py.extensions() == [] and calls == []
    monkeypatch.setattr(sys, "argv", ["setup.py", "editable_wheel", "--dist-dir", "x"])
    assert setup_py.extensions() == ["ext"] and len(calls) == 1
    earlier = pkg / "engine" / f"engine{SUFFIX}"
    earlier.write_bytes(b"")
    record(pkg)
    monkeypatch.setenv(compiled.PURE_ENV, "1")
    monkeypatch.setattr(sys, "argv", ["setup.py", "bdist_wheel"])  # a wheel: the checkout's build is not its
    assert setup_py.extensions() == [] and len(calls) == 1
    assert "LLMSCHED_PURE is set: the Python sources alone, not compiled\n" in capsys.readouterr().err
    assert earlier.exists() and compiled.stale_sources(pkg) == []
    monkeypatch.setattr(sys, "argv", ["setup.py", "editable_wheel", "--dist-dir", "x"])
    assert setup_py.extensions() == [] and len(calls) == 1
    err = capsys.readouterr().err
    assert "LLMSCHED_PURE is set: the Python sources alone, not compiled (removed the 2 files of an earlier" in err
    assert compiled.stale_sources(pkg) is None  # no extension, no record: the sources run
    monkeypatch.delenv(compiled.PURE_ENV)

    def type_error(*args: object) -> list[str]:
        raise SystemExit(1)  # what mypyc does on a type error

    monkeypatch.setattr(setup_py.COMPILED, "mypyc_extensions", type_error)
    assert setup_py.extensions() == []
    assert "mypyc could not translate the engine (SystemExit: 1): the Python sources alone" in capsys.readouterr().err


@pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None, reason="no C compiler")
@pytest.mark.parametrize("compiles", [True, False])
def test_the_build_records_what_it_compiled_or_leaves_nothing_when_the_compiler_fails(
    compiles: bool, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A tiny C extension stands in for mypyc's: built, the record lies beside it with the sources' digests;
    failed, the build goes on with no extension and no record (the package installs pure)."""
    from setuptools import Distribution, Extension

    setup_py = load_setup()
    source = tmp_path / "probe.c"
    body = 'static struct PyModuleDef m = {PyModuleDef_HEAD_INIT, "probe", NULL, -1, NULL};'
    body += "PyMODINIT_FUNC PyInit_probe(void) { return PyModule_Create(&m); }"
    source.write_text("#include <Python.h>\n" + (body if compiles else "this is not C;"))
    dist = Distribution({"name": "probe", "ext_modules": [Extension("llmsched_env.probe", [str(source)])]})
    cmd = setup_py.BuildCompiled(dist)
    cmd.build_lib, cmd.build_temp = str(tmp_path / "lib"), str(tmp_path / "temp")
    cmd.ensure_finalized()
    cmd.run()
    out = tmp_path / "lib" / "llmsched_env"
    built = list(out.glob("probe*")) if out.exists() else []
    manifest = out / compiled.MANIFEST.name
    err = capsys.readouterr().err
    if compiles:
        assert len(built) == 1 and manifest.exists()
        record = json.loads(manifest.read_text())
        assert record == {"python": compiled.python_tag(), "sources": compiled.source_digests()}
        assert "llmsched build: compiled" in err
    else:
        assert built == [] and not manifest.exists()
        assert "the C compiler failed (CompileError" in err and "the Python sources alone" in err


def build_environment() -> list[metadata.Distribution]:
    """The distributions installed here that pip's build environment holds: pyproject.toml's [build-system]
    requirements and, recursively, what they require on this Python (no extras). One not installed here is left
    out, which can only make a check against them stricter."""
    requires = tomllib.loads((ROOT / "pyproject.toml").read_text())["build-system"]["requires"]
    todo, seen, found = [Requirement(r) for r in requires], set(), []
    while todo:
        req = todo.pop()
        name = canonicalize_name(req.name)
        if name in seen or (req.marker is not None and not req.marker.evaluate({"extra": ""})):
            continue
        seen.add(name)
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        found.append(dist)
        todo.extend(Requirement(r) for r in dist.requires or [])
    return found


def python_with_only(dists: list[metadata.Distribution], where: Path) -> Path:
    """A Python (a venv without pip) whose site-packages holds links to ``dists``' files and nothing else."""
    venv.create(where, with_pip=False, symlinks=os.name != "nt")
    python = where / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    ask = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    site = Path(subprocess.run([python, "-c", ask], check=True, capture_output=True, text=True).stdout.strip())
    for dist in dists:
        for top in {f.parts[0] for f in dist.files or [] if f.parts[0] not in ("..", "__pycache__")}:
            if not (site / top).exists():
                (site / top).symlink_to(str(dist.locate_file(top)))
    return python


def test_the_builds_type_check_needs_only_the_build_requirements(tmp_path: Path) -> None:
    """pip builds the package (``pip install -e .`` and ``pip install .``) in an environment holding only the
    build requirements, where mypyc first type-checks MODULES, following every import statement of theirs and of
    the packages above them: an import that needs a runtime dependency (``gymnasium`` in
    ``llmsched_env/__init__.py``, issue 43) fails that check in a fresh environment and the install falls back to the
    sources, while a second install, whose build then sees the installed packages, compiles. The same check here,
    run by mypy with the build's arguments against a Python that has only the build requirements (about 4 s)."""
    if importlib.util.find_spec("mypy") is None:
        pytest.skip("mypy is not installed (pip install -e '.[dev]')")
    python = python_with_only(build_environment(), tmp_path / "build-env")
    probe = "import importlib.util as u, numpy, mypy_extensions; print(u.find_spec('gymnasium') is None)"
    seen = subprocess.run([python, "-c", probe], capture_output=True, text=True)
    assert seen.stdout == "True\n", seen.stderr  # the build requirements there, the runtime dependencies not
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "MYPYPATH")}
    version = f"{sys.version_info.major}.{sys.version_info.minor}"  # mypyc checks for the Python it builds for
    cmd = [sys.executable, "-m", "mypy", "--python-executable", str(python), "--python-version", version,
           "--cache-dir", str(tmp_path / "cache"), *compiled.type_check_arguments()]  # fmt: skip
    done = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
