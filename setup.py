"""The package's build: everything pyproject.toml declares, and with it the simulator's core compiled by mypyc.

``pip install .`` and ``pip install -e .`` compile the modules of ``llmsched_env.common.compiled.MODULES`` (the
engine, the simulator, the observation encoders, the action space) into C extensions beside their sources and
record what they were built from (``_compiled.json``): the same trajectories, observations and metrics as the
sources, at about twice the simulator's speed (docs/architecture.md, docs/results.md). It takes a C compiler
and the Python headers, and about 2.5 minutes on one core. With ``LLMSCHED_PURE=1`` in the environment, or
when the type check or the C compiler fails, the package installs without them (one line on stderr says why;
pip shows it with -v) and the Python sources run: the same results, slower. ``llmsched-compile`` builds them
again in a checkout, or removes them.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from setuptools import setup
from setuptools.command.build_ext import build_ext
from setuptools.errors import CCompilerError, CompileError, ExecError, LinkError, PlatformError

ROOT = Path(__file__).resolve().parent
# the commands that build the package's files (metadata alone, egg_info or dist_info, needs no compiling)
BUILDS = {"build", "build_ext", "bdist_wheel", "editable_wheel", "install", "develop"}
# the commands whose extensions land beside the sources (an editable install)
IN_PLACE = {"editable_wheel", "develop", "--inplace"}


def _say(message: str) -> None:
    print(f"llmsched build: {message}", file=sys.stderr)


def _compiled_module() -> ModuleType:
    """``llmsched_env/common/compiled.py`` loaded on its own (the standard library only): importing the package
    would run its ``__init__``."""
    path = ROOT / "llmsched_env" / "common" / "compiled.py"
    spec = importlib.util.spec_from_file_location("_llmsched_compiled", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


COMPILED = _compiled_module()


def _sources_alone(reason: str, in_place: bool) -> None:
    """Say why the engine is not compiled. In place (an editable install), also remove an earlier build lying
    beside the sources: it, not the sources, would run where it is still fresh."""
    removed = COMPILED.clean(COMPILED.PACKAGE_DIR) if in_place else []
    earlier = f" (removed the {len(removed)} files of an earlier build)" if removed else ""
    _say(f"{reason}: the Python sources alone, not compiled{earlier}")


def extensions() -> list[Any]:
    """mypyc's extensions, or none (with the reason on stderr) where they are not to be or cannot be built."""
    if not BUILDS.intersection(sys.argv[1:]):
        return []
    in_place = bool(IN_PLACE.intersection(sys.argv[1:]))
    if COMPILED.pure_requested():
        _sources_alone(f"{COMPILED.PURE_ENV} is set", in_place)
        return []
    try:
        return COMPILED.mypyc_extensions(COMPILED.PACKAGE_DIR, str(ROOT / "build" / "mypyc"))
    except ImportError as e:
        _sources_alone(f"mypyc is not available ({e})", in_place)
    except (Exception, SystemExit) as e:  # mypy's type check exits on an error
        _sources_alone(f"mypyc could not translate the engine ({type(e).__name__}: {e})", in_place)
    return []


class BuildCompiled(build_ext):
    """build_ext that never fails the install: when the C compiler fails it removes what it built (and, in place,
    an earlier build) and leaves the Python sources; when it succeeds it writes ``_compiled.json`` beside the
    extensions, last."""

    def run(self) -> None:
        if not self.extensions:
            return
        digests = COMPILED.source_digests(COMPILED.PACKAGE_DIR)  # taken before: what the extensions are built from
        inplace = self.inplace
        try:
            super().run()
        except (CCompilerError, CompileError, ExecError, LinkError, PlatformError, OSError) as e:
            for ext in self.extensions:  # no extension without its record is left to be packaged
                built = Path(self.build_lib) / self.get_ext_filename(self.get_ext_fullname(ext.name))
                built.unlink(missing_ok=True)
            _sources_alone(f"the C compiler failed ({type(e).__name__}: {e})", inplace)
            return
        package_dir = COMPILED.PACKAGE_DIR if inplace else Path(self.build_lib) / "llmsched_env"
        COMPILED.write_manifest(package_dir, digests)
        _say(f"compiled {len(COMPILED.MODULES)} modules of the engine with mypyc ({package_dir})")


if __name__ == "__main__":  # as pip's build (setuptools' build_meta) and `python setup.py` run it
    setup(ext_modules=extensions(), cmdclass={"build_ext": BuildCompiled})
