"""``llmsched-compile``: compile the simulator's core with mypyc again (about twice the iterations a second).

    llmsched-compile            # build the extensions beside the sources (needs mypy, `pip install -e '.[compile]'`,
                                # and a C compiler); about 3 minutes on one core
    llmsched-compile --check    # say whether the engine runs compiled here, and why not (exit status 1 if not)
    llmsched-compile --clean    # remove them: the Python sources run again

Installing the package compiles it already (``setup.py``); this rebuilds it after the sources changed. The
extensions go beside the sources with ``_compiled.json`` (each source's SHA-256): a source edited later makes the
build stale, and the sources run until this is run again. The same seed gives the same trajectory either way.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from llmsched_env.commands.entry import command, keep
from llmsched_env.common.checks import Parser
from llmsched_env.common.compiled import (
    MANIFEST,
    MODULES,
    PACKAGE_DIR,
    PURE_ENV,
    clean,
    compiled_in_use,
    pure_requested,
    source_digests,
    stale_sources,
    write_manifest,
)

PROG = "llmsched-compile"

# Run in a fresh interpreter inside the temporary folder: setuptools exits the process on a failed build, and
# mypy writes its cache into the working folder.
_BUILD = """
import sys
from pathlib import Path
from setuptools import setup
from llmsched_env.common.compiled import mypyc_extensions
tmp, package_dir = sys.argv[1], Path(sys.argv[2])
setup(name="llmsched-compiled", ext_modules=mypyc_extensions(package_dir, tmp + "/c"),
      script_args=["-q", "build_ext", "--build-lib", tmp + "/lib", "--build-temp", tmp + "/temp"])
"""


def build(package_dir: Path = PACKAGE_DIR, quiet: bool = False) -> list[Path]:
    """Compile ``MODULES`` and install the extensions beside their sources; ``RuntimeError`` (one line) if it fails."""
    if importlib.util.find_spec("mypyc") is None:
        raise RuntimeError("mypyc is not installed: pip install -e '.[compile]' (it ships with mypy)")
    digests = source_digests(package_dir)
    missing = [key for key, digest in digests.items() if digest is None]
    if missing:
        raise RuntimeError(f"no source to compile: {package_dir / missing[0]}")
    with tempfile.TemporaryDirectory(prefix="llmsched-compile-") as tmp:
        cmd = [sys.executable, "-c", _BUILD, tmp, str(package_dir)]
        # this checkout's llmsched_env first on the path: the build's own code is the one being compiled
        search = [str(package_dir.parent), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(search)}
        done = subprocess.run(cmd, cwd=tmp, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
            last = next((line for line in reversed(lines) if "error" in line.lower()), lines[-1] if lines else "")
            raise RuntimeError(f"mypyc failed (exit {done.returncode}): {last.strip()}")
        if not quiet:
            print(f"{PROG}: compiled {len(MODULES)} modules", file=sys.stderr)
        clean(package_dir)
        built = sorted((Path(tmp) / "lib").rglob("*.so")) + sorted((Path(tmp) / "lib").rglob("*.pyd"))
        written: list[Path] = []
        for path in built:
            rel = path.relative_to(Path(tmp) / "lib")
            if rel.parts[0] != package_dir.name:
                raise RuntimeError(f"mypyc built {rel}, outside the package")
            dest = package_dir.joinpath(*rel.parts[1:])
            shutil.copy2(path, dest)
            written.append(dest)
    # the record last: a build interrupted before this line is extensions without a record, which never run
    return [*written, write_manifest(package_dir, digests)]


@command(PROG)
def main(argv: Sequence[str] | None = None) -> None:
    """``llmsched-compile``: build, check or clean the compiled engine; Ctrl-C, a signal or a full disk: one line."""
    parser = Parser(prog=PROG, description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    what = parser.add_mutually_exclusive_group()
    what.add_argument(
        "--check", action="store_true", help="say whether the engine runs compiled (exit 1 if not), and why not"
    )
    what.add_argument("--clean", action="store_true", help="remove the compiled extensions")
    args = parser.parse_args(argv)
    if args.clean:
        removed = clean()
        print(f"{PROG}: removed {len(removed)} file(s); the Python sources run")
        return
    if args.check:
        reasons = stale_sources()
        if reasons is None:
            print(f"{PROG}: not compiled: the Python sources run")
        elif reasons:
            print(f"{PROG}: stale, the Python sources run: {'; '.join(reasons)}")
        elif compiled_in_use():
            print(f"{PROG}: compiled: in use ({MANIFEST})")
            return
        else:
            pure = f" ({PURE_ENV} is set)" if pure_requested() else ""
            print(f"{PROG}: compiled, not loaded{pure}: the Python sources run ({MANIFEST})")
        sys.exit(1)
    keep("the Python sources run until a build has finished (its record is written last)", "rerun it")
    try:
        written = build()
    except RuntimeError as e:
        parser.exit(1, f"{PROG}: {e}\n")
    print(f"{PROG}: wrote {len(written)} files into {PACKAGE_DIR}; the engine runs compiled from the next import")


if __name__ == "__main__":
    main()
