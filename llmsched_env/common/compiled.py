"""The compiled engine: the modules mypyc compiles (``MODULES``) and ``guard()``, run when ``llmsched_env`` is
imported: when ``_compiled.json``'s source hashes (or Python) differ from the sources now, or extensions lie
there without a record, every module loads from its source, with one line on stderr saying how to rebuild
(``llmsched-compile``; silent with ``LLMSCHED_PURE=1``). Standard library only.
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
# LLMSCHED_PURE=1: the build compiles nothing, and importing llmsched_env runs the sources even beside a fresh build
PURE_ENV = "LLMSCHED_PURE"


def _relative(module: str) -> Path:
    return Path(*module.split(".")[1:])


def source_path(module: str, package_dir: Path = PACKAGE_DIR) -> Path:
    """The ``.py`` source of ``module`` (one of ``MODULES``)."""
    return package_dir / _relative(module).with_suffix(".py")


def source_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def source_digests(package_dir: Path = PACKAGE_DIR) -> dict[str, str | None]:
    """Each module's source path in the package (``engine/engine.py``) -> its SHA-256 (None: missing)."""
    out: dict[str, str | None] = {}
    for module in MODULES:
        path = source_path(module, package_dir)
        out[str(path.relative_to(package_dir))] = source_digest(path) if path.exists() else None
    return out


def extension_files(package_dir: Path = PACKAGE_DIR) -> list[Path]:
    """The compiled extensions in the package: one per module of ``MODULES`` and the shared library."""
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
    """The mypy arguments of mypyc's check of ``MODULES``: their sources and, in a checkout, ``pyproject.toml``
    named explicitly (so the check does not depend on the folder the build runs in)."""
    config = package_dir.parent / "pyproject.toml"
    options = ["--config-file", str(config)] if config.is_file() else []
    return [*options, *(str(source_path(m, package_dir)) for m in MODULES)]


def mypyc_extensions(package_dir: Path = PACKAGE_DIR, target_dir: str = "build/mypyc") -> list[Any]:
    """mypyc's setuptools extensions for ``MODULES`` (one group; C sources under ``target_dir``), for ``setup.py``
    and ``llmsched-compile``; type-checks first (``SystemExit`` on a type error)."""
    from mypyc.build import mypycify

    arguments = type_check_arguments(package_dir)
    return list(mypycify(arguments, opt_level="3", debug_level="0", group_name=GROUP, target_dir=target_dir))


def write_manifest(package_dir: Path, digests: dict[str, str | None]) -> Path:
    """Record in ``_compiled.json`` the interpreter and the sources' SHA-256 (taken before the build); written last."""
    record = {"python": python_tag(), "sources": digests}
    path = package_dir / MANIFEST.name
    path.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    return path


def python_tag() -> str:
    """The interpreter a build is for (an extension only loads into the one that built it)."""
    return f"{sys.implementation.cache_tag}-{sys.platform}"


def stale_sources(package_dir: Path = PACKAGE_DIR) -> list[str] | None:
    """None when there is no compiled build here; else the reasons it must not run (empty: it may): a source changed
    or missing from the record, a build for another interpreter, or extensions with no record."""
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
    """Make a stale compiled build harmless (the module docstring); True when the sources will run because of it.
    Called once, by ``llmsched_env/__init__.py``, before any module of ``MODULES`` is imported."""
    global _guarded
    pure = pure_requested()
    reasons = stale_sources(package_dir)
    if reasons is None or not (pure or reasons):
        return False
    if not _guarded:
        _guarded = True
        sys.meta_path.insert(0, _FromSource(package_dir))
        if not pure:  # asked for the sources: no line to print
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
