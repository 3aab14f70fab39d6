"""The raw experiment data under docs/results/, packed: one ``GROUP.tar.gz`` per group of sibling runs.

    python bench/results_archive.py pack docs/results/sustained       # pack its run folders, keep *.md plain
    python bench/results_archive.py unpack docs/results/sustained/default.tar.gz --into /tmp/x

A results folder's runs are its subfolders; a run ``S-capacity...`` belongs to group ``S`` (every search on
scenario ``S``: the full run, ``-tuned``, ``-mpc``, ...), any other run is a group of its own. ``pack`` writes
each group's files (all but Markdown: a report stays a plain file beside its data) into ``GROUP.tar.gz``, merged
with what that archive already holds (a plain file replaces its packed copy), and removes the packed files. An
archive is deterministic: members sorted, mode 0644, owner 0, mtime 0, gzip without a name or time, so packing
the same files gives the same bytes. ``unpacked`` gives a results folder's whole tree (archives extracted,
plain files over them) to readers such as ``bench/headline.py``.
"""

from __future__ import annotations

import argparse
import gzip
import io
import shutil
import tarfile
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path, PurePosixPath

from llmsched_env.common.outputs import replaced_atomically

SUFFIX = ".tar.gz"
KEPT_PLAIN = (".md",)  # reports and tables the pages link to


def group_of(run: str) -> str:
    """The archive a run folder belongs to: ``S`` for ``S-capacity...``, else the run itself."""
    return run.split("-capacity")[0] if "-capacity" in run else run


def tar_bytes(files: dict[str, bytes]) -> bytes:
    """An uncompressed tar of ``files`` (member name -> content), deterministic: sorted, no owner, no time."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for name in sorted(files):
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(files[name]), 0o644, 0
            tar.addfile(info, io.BytesIO(files[name]))
    return buffer.getvalue()


def write_archive(path: Path, files: dict[str, bytes]) -> None:
    """``path`` (a ``.tar.gz``) holding ``files``, the same bytes for the same files; replaced atomically, so a
    crash while re-packing leaves the archive it had (the packed files are removed only after)."""
    buffer = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buffer, compresslevel=9, mtime=0) as gz:
        gz.write(tar_bytes(files))
    with replaced_atomically(path) as tmp:
        tmp.write_bytes(buffer.getvalue())


def read_archive(path: Path) -> dict[str, bytes]:
    """Member name -> content of the archive ``path``; a member that is no plain file inside it is an error."""
    files: dict[str, bytes] = {}
    try:
        with tarfile.open(path, mode="r:gz") as tar:
            for info in tar:
                name = PurePosixPath(info.name)
                if not info.isfile() or name.is_absolute() or ".." in name.parts:
                    raise ValueError(f"{path}: member {info.name!r} is not a plain file inside the archive")
                files[info.name] = tar.extractfile(info).read()  # type: ignore[union-attr]
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise ValueError(f"{path}: not a readable {SUFFIX} archive ({exc})") from None
    return files


def read_member(path: Path, name: str) -> bytes:
    """The content of member ``name`` of the archive ``path``."""
    files = read_archive(path)
    if name not in files:
        raise ValueError(f"{path}: no member {name!r}")
    return files[name]


def extract(path: Path, into: Path) -> list[Path]:
    """The files of the archive ``path`` written under ``into``; returns their paths."""
    written = []
    for name, data in sorted(read_archive(path).items()):
        target = into / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        written.append(target)
    return written


def pack(results: Path) -> list[Path]:
    """Pack every run folder of ``results`` into its group's archive (see the module's docstring); returns the
    archives written."""
    groups: dict[str, list[Path]] = {}
    for run in sorted(p for p in results.iterdir() if p.is_dir()):
        groups.setdefault(group_of(run.name), []).append(run)
    written = []
    for group, runs in sorted(groups.items()):
        archive = results / f"{group}{SUFFIX}"
        files = read_archive(archive) if archive.exists() else {}
        packed = [p for run in runs for p in sorted(run.rglob("*")) if p.is_file() and p.suffix not in KEPT_PLAIN]
        if not packed:
            continue
        files.update({p.relative_to(results).as_posix(): p.read_bytes() for p in packed})
        write_archive(archive, files)
        for p in packed:
            p.unlink()
        for run in runs:  # the folders left empty go
            for folder in sorted((d for d in [run, *run.rglob("*")] if d.is_dir()), key=lambda d: -len(d.parts)):
                if not any(folder.iterdir()):
                    folder.rmdir()
        written.append(archive)
    return written


@contextmanager
def unpacked(results: Path) -> Iterator[Path]:
    """``results`` whole: itself when it holds no archive, else a temporary copy with every archive extracted
    and the plain files over them (a run written since replaces its packed copy)."""
    archives = sorted(results.glob(f"*{SUFFIX}"))
    if not archives:
        yield results
        return
    with tempfile.TemporaryDirectory(prefix="llmsched-results-") as tmp:
        root = Path(tmp)
        for archive in archives:
            extract(archive, root)
        for path in sorted(results.rglob("*")):
            if path.is_file() and not path.name.endswith(SUFFIX):
                target = root / path.relative_to(results)
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(path, target)
        yield root


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("pack", help="pack the run folders of RESULTS").add_argument("results", type=Path, nargs="+")
    unpack = sub.add_parser("unpack", help="extract archives")
    unpack.add_argument("archives", type=Path, nargs="+")
    unpack.add_argument("--into", type=Path, default=None, help="where (default: beside each archive)")
    args = p.parse_args(argv)
    try:
        if args.command == "pack":
            for results in args.results:
                for archive in pack(results):
                    print(f"wrote {archive}")
        else:
            for archive in args.archives:
                extract(archive, args.into or archive.parent)
                print(f"extracted {archive} into {args.into or archive.parent}")
    except ValueError as exc:
        p.error(str(exc))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
