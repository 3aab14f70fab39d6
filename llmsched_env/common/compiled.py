"""The compiled engine: which modules mypyc compiles, and the guard that never lets a stale build run.

Installing the package (``pip install .``, ``pip install -e .``: ``setup.py``) compiles the simulator's core
(``MODULES``: requests, batches, the block pool, the waiting queues, the remote KV store, the engine, the
simulator and its KV-usage accounting, and the observation encoders, action space and decision loop every step
goes through) with mypyc into C extensions placed beside their sources, and records each source's SHA-256 in
``_compiled.json`` at the package's root; where there is no C compiler, or with ``LLMSCHED_PURE=1``, it installs
the Python sources alone. ``llmsched-compile`` (``llmsched_env.commands.compile``) builds the same extensions
again in a checkout, or removes them. Python imports an extension before a source of the same name, so the
compiled modules run; they behave exactly as the sources do (the same trajectories, observations and metrics:
``tests/test_compiled.py``).

A compiled module is a copy of its source at build time. ``guard()``, run when ``llmsched_env`` is imported,
compares the recorded digests (and the Python that built them) with the sources now: when any differs, or
extensions lie there without a record, every module of ``MODULES`` is loaded from its source instead (they
call each other through one shared library, so they are compiled all together or not at all), with one line on
stderr saying so and how to rebuild. Editing the engine therefore never runs old code. ``LLMSCHED_PURE=1`` in
the environment runs the sources too, silently. This module uses the standard library only (and mypy to
build).
"""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

__all__ = [
    "GROUP",
    "MANIFEST",
    "MODULES",
    "PACKAGE_DIR",
    "PURE_ENV",
    "SHARED_LIBRARY",
    "clean",
    "compiled_in_use",
    "extension_files",
    "guard",
    "mypyc_extensions",
    "pure_requested",
    "source_digest",
    "source_digests",
    "stale_sources",
    "type_check_arguments",
    "write_manifest",
]

PACKAGE_DIR = Path(__file__).resolve().parent.parent
# Compiled together, in one shared library (mypyc's group): each calls the others' methods natively.
MODULES = (
    "llmsched_env.engine.request",
    "llmsched_env.engine.batch",
    "llmsched_env.engine.block_pool",
    "llmsched_env.engine.queues",
    "llmsched_env.engine.remote_kv",
    "llmsched_env.engine.engine",
    "llmsched_env.sim.simulator",
    "llmsched_env.sim.kv_usage",
    "llmsched_env.decision.observation",
    "llmsched_env.decision.actions",
    "llmsched_env.decision.loop",
)
GROUP = "llmsched_env._native"
SHARED_LIBRARY = "llmsched_env._native__mypyc"  # mypyc's library for the group named GROUP
MANIFEST = PACKAGE_DIR / "_compiled.json"
# LLMSCHED_PURE=1: the package's build compiles nothing, and importing llmsched_env runs the sources even where a
# fresh compiled build lies (to debug the engine in Python, or to time the pure package beside the compiled one)
PURE_ENV = "LLMSCHED_PURE"


def _relative(module: str) -> Path:
    return Path(*module.split(".")[1:])


def source_path(module: str, package_dir: Path = PACKAGE_DIR) -> Path:
    """The ``.py`` source of ``module`` (one of ``MODULES``)."""
    return package_dir / _relative(module).with_suffix(".py")


def source_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def source_digests(package_dir: Path = PACKAGE_DIR) -> dict[str, str | None]:
    """Each module of ``MODULES`` by its source's path in the package (``engine/engine.py``): the source's
    SHA-256, None where it is missing. What a build records and what ``stale_sources`` compares with."""
    out: dict[str, str | None] = {}
    for module in MODULES:
        path = source_path(module, package_dir)
        out[str(path.relative_to(package_dir))] = source_digest(path) if path.exists() else None
    return out


def extension_files(package_dir: Path = PACKAGE_DIR) -> list[Path]:
    """The compiled extensions lying in the package: one per module of ``MODULES`` and the shared library."""
    out: list[Path] = []
    for module in (*MODULES, SHARED_LIBRARY):
        stem = package_dir / _relative(module)
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            path = stem.with_name(stem.name + suffix)
            if path.exists():
                out.append(path)
    return out


def pure_requested() -> bool:
    """Whether ``LLMSCHED_PURE`` asks for the sources (set, and neither empty nor ``0``)."""
    return os.environ.get(PURE_ENV, "") not in ("", "0")


def clean(package_dir: Path = PACKAGE_DIR) -> list[Path]:
    """Remove the compiled extensions and their record from ``package_dir``; returns what was removed."""
    removed = extension_files(package_dir)
    manifest = package_dir / MANIFEST.name
    if manifest.exists():
        removed.append(manifest)
    for path in removed:
        path.unlink()
    return removed


def type_check_arguments(package_dir: Path = PACKAGE_DIR) -> list[str]:
    """The mypy command line of the type check mypyc runs before it translates ``MODULES`` of the package in
    ``package_dir`` (``mypyc_extensions``): their sources and, where the package lies in a checkout or a build's
    copy of one, the project's mypy settings (``pyproject.toml``, the ones ``mypy`` checks them with) named
    explicitly, so that the check does not depend on the folder the build runs in (mypy would look for a
    configuration from there up).

    The check follows every import statement of those modules and of the packages above them (``__init__.py``,
    even an import inside a function), and in pip's build it sees only the build requirements (setuptools, mypy,
    numpy, mypy-extensions: pyproject.toml's [build-system]): what it follows must need nothing else, or a first
    install in a fresh environment falls back to the sources (``tests/test_compiled.py`` runs this check against
    the build requirements alone; ``tests/test_package.py``, slow, installs as the README says in a fresh venv)."""
    config = package_dir.parent / "pyproject.toml"
    options = ["--config-file", str(config)] if config.is_file() else []
    return [*options, *(str(source_path(m, package_dir)) for m in MODULES)]


def mypyc_extensions(package_dir: Path = PACKAGE_DIR, target_dir: str = "build/mypyc") -> list[Any]:
    """mypyc's setuptools extensions for ``MODULES`` of the package in ``package_dir``: one group (a shared
    library and a small extension per module), C sources written under ``target_dir``. What both the package's
    build (``setup.py``) and ``llmsched-compile`` compile. Needs mypy (mypyc ships with it); type-checks the
    modules first (``type_check_arguments``) and exits (``SystemExit``) on a type error."""
    from mypyc.build import mypycify

    arguments = type_check_arguments(package_dir)
    return list(mypycify(arguments, opt_level="3", debug_level="0", group_name=GROUP, target_dir=target_dir))


def write_manifest(package_dir: Path, digests: dict[str, str | None]) -> Path:
    """Record, in ``package_dir``'s ``_compiled.json``, the interpreter and the compiled sources' SHA-256
    (``source_digests`` taken before the build). Written last by a build: extensions without it never run."""
    record = {"python": python_tag(), "sources": digests}
    path = package_dir / MANIFEST.name
    path.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    return path


def python_tag() -> str:
    """The interpreter a build is for (an extension only loads into the one that built it)."""
    return f"{sys.implementation.cache_tag}-{sys.platform}"


def stale_sources(package_dir: Path = PACKAGE_DIR) -> list[str] | None:
    """None when there is no compiled build here; otherwise the reasons it must not run (empty: it may).

    A reason names a source that changed since the build, one missing from the record, a build for another
    interpreter, or extensions with no record of what they were built from."""
    manifest = package_dir / MANIFEST.name
    if not manifest.exists():
        extensions = extension_files(package_dir)
        return [f"{len(extensions)} compiled extension(s) with no {MANIFEST.name}"] if extensions else None
    try:
        record = json.loads(manifest.read_text())
        digests = record["sources"]
        python = record["python"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        return [f"{manifest}: unreadable ({e})"]
    reasons: list[str] = []
    if python != python_tag():
        reasons.append(f"built for {python}, this is {python_tag()}")
    for key, digest in source_digests(package_dir).items():
        if key not in digests:
            reasons.append(f"{key} is not in the build")
        elif digest is None or digest != digests[key]:
            reasons.append(f"{key} changed since it was compiled")
    return reasons


class _FromSource(importlib.abc.MetaPathFinder):
    """Loads the modules of ``MODULES`` from their ``.py`` sources, ahead of any extension beside them."""

    def __init__(self, package_dir: Path) -> None:
        self.package_dir = package_dir

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in MODULES:
            return None
        return importlib.util.spec_from_file_location(fullname, source_path(fullname, self.package_dir))


_guarded = False


def guard(package_dir: Path = PACKAGE_DIR) -> bool:
    """Make a stale compiled build harmless (see the module's docstring). True when the sources will run
    because of it; called once, by ``llmsched_env/__init__.py``, before any module of ``MODULES`` is imported."""
    global _guarded
    pure = pure_requested()
    reasons = stale_sources(package_dir)
    if pure and reasons is not None:  # asked for the sources: no line to print
        if not _guarded:
            _guarded = True
            sys.meta_path.insert(0, _FromSource(package_dir))
        return True
    if not reasons:
        return False
    if not _guarded:
        _guarded = True
        sys.meta_path.insert(0, _FromSource(package_dir))
        print(
            f"llmsched: the compiled engine is stale ({reasons[0]}"
            f"{f', and {len(reasons) - 1} more' if len(reasons) > 1 else ''}); running the Python sources. "
            "Rebuild with `llmsched-compile`, or remove it with `llmsched-compile --clean`.",
            file=sys.stderr,
        )
    return True


def compiled_in_use() -> bool:
    """Whether the engine runs compiled in this process: where its module is (or would be) loaded from."""
    name = "llmsched_env.engine.engine"
    module = sys.modules.get(name)
    origin = getattr(module, "__file__", None) if module is not None else None
    if origin is None:
        spec = importlib.util.find_spec(name)
        origin = spec.origin if spec is not None else None
    return origin is not None and not origin.endswith(".py")
