"""Where a command may write and how (docs/reliability.md): never over what the project ships unless forced
(``check_output``) nor over what it reads (``check_inputs_apart``: each command lists what it writes as ``Written``);
every file through a temporary file renamed over it (``replaced_atomically``); one writer per output folder
(``locked_output``), marked complete last (``mark_complete``); a rerun's stale files removed by name
(``remove_outputs``). Shipped: the installed packages and a checkout's ``policies/`` and ``docs/results/``."""

from __future__ import annotations

import argparse
import csv
import errno
import glob
import importlib.util
import json
import os
import stat
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llmsched_env.common.files import file_kind, link_problem, unreachable

PACKAGES = ("llmsched_env", "agents", "baselines")
REPO_FOLDERS = ("policies", "docs/results")


def package_dir(name: str) -> Path | None:
    """The folder of the top-level package ``name`` (found, not imported), or None."""
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))).resolve()


def shipped_folders() -> list[Path]:
    """The folders ``check_output`` protects: the installed packages, and ``policies/`` and ``docs/results/`` of the
    checkout they lie in and of the working directory when it is one."""
    packages = [p for p in map(package_dir, PACKAGES) if p is not None]
    roots = {p.parent for p in packages} | {Path.cwd().resolve()}
    checkouts = sorted(r for r in roots if (r / "pyproject.toml").is_file() and (r / "llmsched_env").is_dir())
    return packages + [root / folder for root in checkouts for folder in REPO_FOLDERS]


def shipped_folder_of(resolved: Path) -> Path | None:
    """The shipped folder (``shipped_folders``) that the resolved path ``resolved`` is or lies in; None if none."""
    return next((f for f in shipped_folders() if resolved == f or f in resolved.parents), None)


class OutputRefusedError(ValueError):
    """A place a command may not write (``check_output``, ``check_folder``, ``check_replaceable``, a lock that is
    not a regular file): one line naming the option and the path."""


def output_path(text: str) -> Path:
    """An output option's value as a path (an argparse ``type``); an empty or blank one (``--out "$UNSET"``) is
    refused."""
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty path (an unset variable?); give a path, ./ for this folder")
    return Path(text)


def file_output_path(text: str) -> Path:
    """``output_path`` for an option that names a file: a value ending with a path separator (a folder) is refused."""
    path = output_path(text)
    if text.endswith(tuple(sep for sep in (os.sep, os.altsep) if sep)):
        raise argparse.ArgumentTypeError(f"{text!r} ends with {text[-1]!r}, a folder; this option writes a file: "
                                         "give a file name")  # fmt: skip
    return path


def check_output(
    path: str | Path,
    force: bool = False,
    option: str = "--out",
    file: bool = False,
    files: Iterable[str] = (),
    folders: Iterable[str] = (),
) -> Path:
    """``path`` when a command may write there, checked before any work; else a one-line ``ValueError`` naming
    ``option`` and the path: (inside) a shipped folder without ``force``, a file where a folder is written (or the
    reverse with ``file``), unreachable, or not writable; an existing folder must pass ``check_folder``."""
    target = Path(path)
    _check_reachable(target, option)
    if not force:
        try:
            resolved = target.expanduser().resolve()
        except (RuntimeError, OSError) as exc:  # a loop that _check_reachable missed (e.g. through "~")
            raise OutputRefusedError(
                f"{option} {target}: cannot be resolved ({exc}); choose another {option}"
            ) from None
        folder = shipped_folder_of(resolved)
        if folder is not None:
            raise OutputRefusedError(
                f"{option} {target}: refusing to write inside the shipped folder {folder} "
                "(choose a path under runs/ or results/, or pass --force to overwrite shipped files)"
            )
    if file and target.is_dir():
        raise OutputRefusedError(f"{option} {target}: is a folder; give a file name")
    written = written_path(target) if file else target
    if file:  # a link is followed: its target is what is written (replaced_atomically), so it is what must fit
        check_replaceable(written, option if not target.is_symlink() else f"{option} {target} ->")
    if not file and target.is_symlink() and not target.exists():
        link = os.readlink(target)
        raise OutputRefusedError(f"{option} {target}: is a symbolic link to {link}, which does not exist; create "
                                 f"that folder, remove the link or choose another {option}")  # fmt: skip
    if not file and target.exists() and not target.is_dir():
        mode = os.stat(target).st_mode
        kind = "a file" if stat.S_ISREG(mode) else file_kind(mode)
        raise OutputRefusedError(f"{option} {target}: is {kind}; give a folder (it is created if missing)")
    if not file and target.is_dir():
        check_folder(target, option, files, folders)
    existing = (written.parent if file else target).expanduser().absolute()
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
        raise OutputRefusedError(f"{option} {target}: cannot be written ({existing} is not a writable folder)")
    return target


def _check_reachable(path: Path, option: str) -> None:
    """``ValueError`` when ``path`` cannot be looked up: a link loop or a file on the way to it."""
    try:
        os.stat(path)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise OutputRefusedError(f"{option} {path}: {unreachable(path, exc)}; choose another {option}") from None


def check_folder(folder: Path, option: str = "--out", files: Iterable[str] = (), folders: Iterable[str] = ()) -> None:
    """``ValueError`` naming the entry when the output folder holds (at its top or in one of ``folders``) anything
    but regular files and folders, a folder at a name of ``files``, a non-folder at one of ``folders``, or a link at
    one of ``files`` (or at one of ``folders`` leading out of the folder or to nothing)."""
    where = f"{option} {folder}"
    subfolders = set(folders)
    inside = os.path.realpath(folder)
    for name in sorted(set(files) | subfolders):
        place = folder / name
        if not place.is_symlink():
            continue
        real = os.path.realpath(place)
        if name in subfolders and os.path.isdir(real) and os.path.commonpath([inside, real]) == inside:
            continue  # a link to a folder inside the output folder: the files stay inside
        raise OutputRefusedError(f"{where}: {name} is a symbolic link (to {os.readlink(place)}); the command writes "
                                 f"its own files in {option}: remove it")  # fmt: skip
    for name in sorted(set(files)):
        if (folder / name).is_dir():
            raise OutputRefusedError(f"{where}: {name} is a folder where a file is written; remove it or choose "
                                     f"another {option}")  # fmt: skip
    for name in sorted(subfolders):
        if (folder / name).exists() and not (folder / name).is_dir():
            raise OutputRefusedError(f"{where}: {name} is not a folder, and the run writes into {name}/; remove it or "
                             f"choose another {option}")  # fmt: skip
    scanned = [folder, *(folder / name for name in sorted(subfolders) if (folder / name).is_dir())]
    for place in scanned:
        for entry in sorted(os.scandir(place), key=lambda e: e.name):
            try:
                mode = os.stat(entry.path).st_mode
            except OSError:  # a dangling link, or an entry gone since: nothing the command will open
                continue
            if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
                name = os.path.relpath(entry.path, folder)
                raise OutputRefusedError(
                    f"{where}: {name} is {file_kind(mode)}; an output folder may hold only regular files and "
                    f"folders (remove it or choose another {option})"
                )


@dataclass(frozen=True)
class Written:
    """A path a command writes, named by the option ``option`` whose value is ``root``: a file (written, replaced
    or removed), or with ``folder`` a folder it makes, ``owned`` when it writes or removes files in it under names
    of its own (any file there may be overwritten), else one it only adds new files to."""

    option: str
    root: Path
    path: Path
    folder: bool = False
    owned: bool = True


def written_in(
    option: str,
    root: str | os.PathLike[str],
    files: Iterable[str] = (),
    folders: Iterable[str] = (),
    made: Iterable[str] = (),
) -> list[Written]:
    """What a command writes in its output folder ``root`` (the value of ``option``): the ``files``, the ``folders``
    it owns and the folders it ``made`` and only adds files of new names to (each a path relative to ``root``)."""
    base = Path(root)
    return [*(Written(option, base, base / name) for name in files),
            *(Written(option, base, base / name, folder=True) for name in folders),
            *(Written(option, base, base / name, folder=True, owned=False) for name in made)]  # fmt: skip


def written_file(option: str, path: str | os.PathLike[str]) -> Written:
    """The file ``path`` that ``option`` names, written by the command."""
    return Written(option, Path(path), Path(path))


Inputs = Iterable[tuple[str, "str | os.PathLike[str] | None"]]  # (option, path) of each file a command reads


def check_input_links(inputs: Inputs) -> None:
    """One-line ``ValueError`` naming the option and the path of the first input that is a symbolic link loop (or
    lies behind one) or a symbolic link to nothing; inputs of None are skipped, missing ones left to their
    readers."""
    for option, path in inputs:
        if path is None:
            continue
        problem = link_problem(Path(path).expanduser())
        if problem is not None:
            raise ValueError(f"{option} {path}: {problem}; give the file itself")


def check_inputs_apart(inputs: Inputs, written: Iterable[Written]) -> None:
    """Before a command writes anything: ``check_input_links``, then a one-line ``ValueError`` naming both options
    and paths when an input (a file, or an entry at the top of an input folder) is a file of ``written`` (the same
    path, or the same file through a symbolic or a hard link), is or lies in an owned folder of ``written``, or
    sits where a folder of ``written`` (or one on the way to a file or folder of it) must be made."""
    given = [(option, Path(path).expanduser()) for option, path in inputs if path is not None]
    check_input_links(given)
    outputs = list(written)
    for option, path in given:
        for file in _read_files(path):
            for out in outputs:
                how = _overlap(file, out)
                if how is None:
                    continue
                if out.folder:
                    target = f"{out.path}, a folder {out.option} {out.root} writes into"
                else:
                    target = (f"the file of {out.option} {out.root}" if out.path == out.root
                              else f"{out.path}, which {out.option} {out.root} writes")  # fmt: skip
                raise ValueError(f"{option} {file}: {how} {target}; {_CONSEQUENCES[how]}: choose another "
                                 f"{out.option}, or move the input out of its way")  # fmt: skip


_MADE = "sits where a folder must be made on the way to"
_MADE_AT = "sits where the command makes the folder"
_CONSEQUENCES = {
    "is": "the command would overwrite its own input",
    "leads through a symbolic link to": "the command would overwrite its own input",
    "is a hard link to (the same file as)": "the command would overwrite its own input",
    "lies in": "the command may overwrite or remove files there",
    _MADE: "the command would fail to make that folder after its work",
    _MADE_AT: "the command would fail to make it after its work",
}


def _read_files(path: Path) -> list[Path]:
    """The input ``path``, and when it is a folder the entries at its top (what a reader of the folder opens)."""
    if not path.is_dir():
        return [path]
    try:
        return [path, *sorted(path / entry.name for entry in os.scandir(path))]
    except OSError:  # unreadable: its reader says so
        return [path]


def _overlap(file: Path, out: Written) -> str | None:
    """How the input ``file`` meets the output ``out`` (a key of ``_CONSEQUENCES``), or None."""
    try:
        st = os.stat(file)
    except OSError:  # nothing there (a missing input is its reader's to name): nothing to overwrite
        return None
    places = {os.path.abspath(file), os.path.realpath(file)}

    def at(path: Path) -> bool:
        return bool(places & {os.path.abspath(path), os.path.realpath(path)})

    if not stat.S_ISDIR(st.st_mode):  # a file where the command makes a folder
        if out.folder and at(out.path):
            return _MADE_AT
        if any(at(p) for p in out.path.parents if p == out.root or out.root in p.parents):
            return _MADE
    if out.folder:
        if not out.owned:  # it only adds files of new names there
            return None
        if at(out.path):
            return "is"
        ends = {os.path.abspath(out.path), os.path.realpath(out.path)}
        inside = any(os.path.commonpath([place, end]) == end for place in places for end in ends)
        return "lies in" if inside else None
    try:
        same = os.path.samestat(st, os.stat(out.path))
    except OSError:  # not there yet: no file of the input's
        return None
    if not same:
        return None
    if os.path.abspath(file) == os.path.abspath(out.path):
        return "is"
    if os.path.realpath(file) == os.path.realpath(out.path):
        return "leads through a symbolic link to"
    return "is a hard link to (the same file as)"


def write_csv(rows: Sequence[Mapping[str, Any]], path: Path, columns: Sequence[str] | None = None) -> None:
    """``rows`` as a CSV file with a header (``columns``, default: every key in first-seen order; a missing cell is
    empty), written atomically. ``ValueError`` naming ``path`` for no rows and no columns, or a key ``columns``
    lacks."""
    if not rows and columns is None:
        raise ValueError(f"{path}: no rows to write and no columns given")
    fields = list(columns) if columns is not None else list(dict.fromkeys(key for row in rows for key in row))
    with replaced_atomically(path) as tmp, tmp.open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        try:
            writer.writerows(rows)
        except ValueError as exc:  # DictWriter: "dict contains fields not in fieldnames: ..."
            raise ValueError(f"{path}: {exc}") from None


def written_path(path: str | Path) -> Path:
    """Where a write to ``path`` lands: ``path``, or the file a symbolic link leads to (the link stays)."""
    path = Path(path)
    return Path(os.path.realpath(path)) if path.is_symlink() else path


def check_replaceable(path: str | Path, option: str | None = None) -> None:
    """``ValueError`` naming ``path`` (and ``option``) when anything but a regular file sits there, or a file or
    link loop on the way leaves no place for it; nothing there is fine."""
    where = f"{option} {path}" if option else str(path)
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    except OSError as exc:  # a file on the way to it (f/x.json), a link loop on the way
        raise OutputRefusedError(f"{where}: {unreachable(Path(path), exc)}") from None
    if stat.S_ISREG(mode):
        return
    kind = "a symbolic link" if stat.S_ISLNK(mode) else "a folder" if stat.S_ISDIR(mode) else file_kind(mode)
    raise OutputRefusedError(f"{where}: is {kind}, not a regular file; refusing to replace it (give a file name)")


@contextmanager
def replaced_atomically(path: str | Path) -> Iterator[Path]:
    """A temporary path beside ``path`` to write to; when the block ends without an error it is flushed and replaces
    ``path`` in one ``os.replace`` (a crash leaves the old file whole). Only a regular file (or nothing) is
    replaced (``check_replaceable``); a link's target is replaced, the link kept."""
    path = written_path(path)
    check_replaceable(path)
    tmp = path.with_name(f".{path.stem}.{os.getpid()}.tmp{path.suffix}")
    try:
        yield tmp
        _fsync(tmp)
        os.replace(tmp, path)
        _fsync(path.parent)  # the rename itself on disk (best effort: not every system opens a folder)
    finally:
        tmp.unlink(missing_ok=True)


def _fsync(path: Path) -> None:
    """Flush the file ``path`` to disk, or a folder's entries (best effort for a folder)."""
    folder = path.is_dir()
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        if folder:
            return
        raise
    try:
        os.fsync(fd)
    except OSError:
        if not folder:
            raise
    finally:
        os.close(fd)


def write_text_atomically(path: str | Path, text: str) -> None:
    """``path.write_text(text)`` through ``replaced_atomically``."""
    with replaced_atomically(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def remove_outputs(folder: str | Path, names: Iterable[str], keep: Iterable[str] = ()) -> list[Path]:
    """Remove the files ``names`` of ``folder`` but ``keep`` (an earlier run's outputs) and the temporary files a
    killed write left beside them, holding the folder (``locked_output``); returns the files removed."""
    folder = Path(folder)
    kept = set(keep)
    removed = []
    for name in names:
        target = folder / name
        leftovers = sorted(folder.glob(f".{glob.escape(target.stem)}.*.tmp{glob.escape(target.suffix)}"))
        for path in [*([] if name in kept else [target]), *leftovers]:
            if path.is_file() or path.is_symlink():
                path.unlink()
                removed.append(path)
    return removed


class OutputBusyError(OutputRefusedError):
    """An output folder that another command holds (``locked_output``): one line naming it and the holder."""


LOCK_NAME = ".llmsched.lock"  # in an output folder while a command writes there (ignored by git)
COMPLETE_NAME = "complete.json"  # written last into an output folder by a command that finished


@contextmanager
def locked_output(out: str | Path, command: str, option: str = "--out") -> Iterator[Path]:
    """Hold the folder ``out`` (created if missing) for one command: an exclusive ``flock`` on
    ``out/.llmsched.lock`` until the process ends; a second process gets ``OutputBusyError`` naming the holder.
    ``COMPLETE_NAME`` is removed on entry. Without ``fcntl`` nothing is locked."""
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not on the systems this project runs on
        (folder / COMPLETE_NAME).unlink(missing_ok=True)
        yield folder
        return
    flags = os.O_RDWR | os.O_CREAT | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOFOLLOW  # never through a link
    try:
        fd = os.open(folder / LOCK_NAME, flags, 0o644)
    except OSError as exc:  # a link (ELOOP) or a folder there, put in place after check_folder
        why = "is a symbolic link" if exc.errno == errno.ELOOP else f"cannot be opened ({exc.strerror or exc})"
        raise OutputBusyError(f"{option} {folder}: {LOCK_NAME} {why}; remove it") from None
    try:
        st = os.fstat(fd)
        mode = st.st_mode
        if not stat.S_ISREG(mode):  # a FIFO there would block the read below: refused, as check_folder does
            raise OutputBusyError(f"{option} {folder}: {LOCK_NAME} is {file_kind(mode)}, not a regular file; remove it")
        if st.st_nlink > 1:  # written below: through a hard link, a file outside the folder would be
            raise OutputBusyError(f"{option} {folder}: {LOCK_NAME} has {st.st_nlink - 1} other hard link(s), so "
                                  "writing it would write a file elsewhere; remove it")  # fmt: skip
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 200).decode("utf-8", "replace").strip() or "another process"
            raise OutputBusyError(
                f"{option} {folder}: {holder} is writing there; wait for it to end or choose another {option}"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{command} (pid {os.getpid()})\n".encode())
        (folder / COMPLETE_NAME).unlink(missing_ok=True)
        yield folder
    finally:
        os.close(fd)  # releases the lock; the file stays, so no second process can race on a fresh one


def update_lock(path: str | Path) -> Path:
    """The lock file ``updating`` holds for ``path``: ``.NAME.lock`` beside it."""
    target = Path(path)
    return target.with_name(f".{target.name}.lock")


def check_update_lock(path: str | Path, option: str | None = "--out") -> None:
    """``ValueError`` naming ``option``, ``path`` and the lock when something other than a regular file sits at
    ``update_lock(path)``; a command calls it before its work."""
    lock = update_lock(path)
    where = f"{option} {path}" if option else str(path)
    try:
        mode = os.lstat(lock).st_mode
    except FileNotFoundError:
        return
    except OSError as exc:
        raise OutputRefusedError(f"{where}: its lock {lock}: {exc.strerror or exc}") from None
    if not stat.S_ISREG(mode):
        kind = "a symbolic link" if stat.S_ISLNK(mode) else file_kind(mode)
        raise OutputRefusedError(f"{where}: its lock {lock} is {kind}, not a regular file; remove it")


@contextmanager
def updating(path: str | Path) -> Iterator[Path]:
    """Hold the file ``path`` for a read-modify-write: an exclusive ``flock`` on ``update_lock(path)``, waited for
    (a lock that is not a regular file: ``ValueError``); without ``fcntl`` nothing is locked."""
    target = Path(path)
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not on the systems this project runs on
        yield target
        return
    check_update_lock(target, None)
    flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(update_lock(target), flags, 0o644)
    except OSError as exc:  # put in place since the check: a folder (EISDIR), a link (ELOOP)
        raise OutputRefusedError(
            f"{target}: cannot take its lock {update_lock(target)}: {exc.strerror or exc}"
        ) from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise OutputRefusedError(
                f"{target}: its lock {update_lock(target)} is {file_kind(mode)}, not a regular file"
            )
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield target
    finally:
        os.close(fd)


def mark_complete(out: str | Path, record: Mapping[str, Any]) -> None:
    """Write ``out/complete.json`` (``record`` and the time), atomically and last."""
    data = {**record, "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    write_text_atomically(Path(out) / COMPLETE_NAME, json.dumps(data, indent=1, default=str) + "\n")


def is_complete(out: str | Path) -> bool:
    """Whether ``out`` holds a run that finished (``COMPLETE_NAME`` is there)."""
    return (Path(out) / COMPLETE_NAME).is_file()
