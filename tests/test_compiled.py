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
from pathlib import Path

import pytest

from llmsched_env.commands import compile as compile_command
from llmsched_env.common import compiled

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


def test_no_build_is_not_stale_and_a_fresh_record_may_run(tmp_path: Path) -> None:
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
    finders = list(sys.meta_path)
    try:
        assert compiled.guard(pkg) is True
        (finder,) = [f for f in sys.meta_path if f not in finders]
        spec = finder.find_spec("llmsched_env.engine.engine", None)
        assert spec is not None and spec.origin == str(pkg / "engine" / "engine.py")
        assert finder.find_spec("llmsched_env.envs.single_node", None) is None
    finally:
        sys.meta_path[:] = finders
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "the compiled engine is stale" in err and "llmsched-compile --clean" in err


def test_check_and_clean_say_what_they_did(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                           monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    pkg = fake_package(tmp_path)
    ext = pkg / "engine" / f"engine{SUFFIX}"
    ext.write_bytes(b"")
    record(pkg)
    assert compile_command.clean(pkg) == [ext, pkg / compiled.MANIFEST.name]
    assert compiled.stale_sources(pkg) is None
    compile_command.main(["--check"])
    out = capsys.readouterr().out
    assert out.startswith("llmsched-compile: ") and ("not compiled" in out or "compiled:" in out or "stale" in out)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    with pytest.raises(RuntimeError, match=r"mypyc is not installed: pip install -e '.\[compile\]'"):
        compile_command.build(pkg)


def copy_tree(dest: Path) -> None:
    """What the compiled run needs of this checkout: the packages, the tests and their data, the bench scripts
    some tests load, the config."""
    for name in ("llmsched_env", "agents", "baselines", "tests", "bench"):
        shutil.copytree(ROOT / name, dest / name, ignore=shutil.ignore_patterns("__pycache__", "*.so", "*.pyd",
                                                                                  "_compiled.json"))  # fmt: skip
    shutil.copy(ROOT / "pyproject.toml", dest / "pyproject.toml")
    (dest / "policies").symlink_to("agents/policies")  # as in the checkout


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
    tests = ["tests/test_fingerprint.py", "tests/test_snapshot.py", "tests/test_lookahead.py", "tests/test_core.py",
             "tests/test_env.py", "tests/test_schema2.py", "tests/test_kv_usage.py"]  # fmt: skip
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *tests], cwd=tree,
                         env=env, capture_output=True, text=True)  # fmt: skip
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    # an edited source makes the build stale: the sources run, and one line says so
    engine_py = tree / "llmsched_env" / "engine" / "engine.py"
    engine_py.write_text(engine_py.read_text() + "\n# edited\n")
    run = subprocess.run([sys.executable, "-c", probe], cwd=tree, env=env, capture_output=True, text=True)
    assert run.stdout.strip() == "False"
    assert run.stderr.count("\n") == 1 and "engine/engine.py changed since it was compiled" in run.stderr
