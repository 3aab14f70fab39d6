"""Signed checkpoints for ``--resume``: a checkpoint is a pickle, so training writes ``<name>.sig`` beside it, an
HMAC-SHA256 of its bytes under this user's key (``$XDG_CONFIG_HOME/llmsched/checkpoint.key``), bound to the
run's id, algorithm, scenario, spaces and step; ``verify_checkpoint`` checks it before unpickling
(``CheckpointError``). Files are read bounded (``CHECKPOINT_BYTES``).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, overload

from stable_baselines3.common.callbacks import CheckpointCallback

from llmsched_env.common.files import (
    CHECKPOINT_BYTES,
    KEY_BYTES,
    SIGNATURE_BYTES,
    FileRefusedError,
    InputFileError,
    check_regular_file,
    open_regular,
    parse_json,
    read_bytes,
    read_text,
)
from llmsched_env.common.outputs import replaced_atomically, write_text_atomically

SIGNATURE_SUFFIX = ".sig"
_KEY_BYTES = 32


class CheckpointError(InputFileError):
    """A checkpoint that ``--resume`` refuses to load: not signed with this user's key."""


def key_path() -> Path:
    """This user's checkpoint key: ``$XDG_CONFIG_HOME/llmsched/checkpoint.key`` (default ``~/.config``)."""
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "llmsched" / "checkpoint.key"


@overload
def _key(create: Literal[True]) -> bytes: ...
@overload
def _key(create: bool) -> bytes | None: ...


def _key(create: bool) -> bytes | None:
    """This user's key; created (atomically, mode 0600) when missing and ``create``; None when missing."""
    path = key_path()
    try:
        key = read_bytes(path, KEY_BYTES)
    except FileRefusedError as exc:
        raise CheckpointError(str(exc)) from None
    except FileNotFoundError:
        if not create:
            return None
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            try:
                os.write(fd, secrets.token_bytes(_KEY_BYTES))
            finally:
                os.close(fd)
            os.link(tmp, path)  # atomic; a concurrent training that won the race keeps its key
        except FileExistsError:
            pass
        finally:
            tmp.unlink()  # also when the write failed (a full disk): no half key is left beside it
        key = read_bytes(path, KEY_BYTES)
    if len(key) != _KEY_BYTES:
        raise CheckpointError(f"{path}: the checkpoint key must hold {_KEY_BYTES} bytes, found {len(key)}")
    _check_private(path)
    return key


def _check_private(path: Path) -> None:
    """``CheckpointError`` when the key at ``path`` is not this user's own or others may read or write it."""
    st = os.stat(path)
    getuid = getattr(os, "getuid", None)
    if getuid is not None and st.st_uid != getuid():
        raise CheckpointError(
            f"{path}: the checkpoint key belongs to another user (uid {st.st_uid}); checkpoints are signed with "
            "this user's own key: move it away (a new one is made) or set XDG_CONFIG_HOME"
        )
    if st.st_mode & 0o077:
        raise CheckpointError(
            f"{path}: the checkpoint key is readable or writable by others (mode {stat.S_IMODE(st.st_mode):04o}); "
            f"anyone who can read it can sign a checkpoint that --resume runs: chmod 600 {path}"
        )


def _digest(key: bytes, checkpoint: Path, binding: Mapping[str, Any] | None = None) -> str:
    """HMAC-SHA256 under ``key`` of ``binding`` (canonical JSON, when given) and then ``checkpoint``'s bytes."""
    mac = hmac.new(key, digestmod=hashlib.sha256)
    if binding is not None:
        mac.update(json.dumps(dict(binding), sort_keys=True).encode() + b"\n")
    with open_regular(checkpoint, CHECKPOINT_BYTES) as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            mac.update(chunk)
    return mac.hexdigest()


def _signature_path(checkpoint: Path) -> Path:
    return checkpoint.with_name(checkpoint.name + SIGNATURE_SUFFIX)


def ensure_key() -> Path:
    """This user's checkpoint key, created if missing; ``CheckpointError`` when it cannot be."""
    try:
        _key(create=True)
    except OSError as exc:
        raise CheckpointError(
            f"checkpoint key {key_path()}: cannot be created or read ({exc.strerror or exc}); checkpoints are signed "
            "with it, so set XDG_CONFIG_HOME to a folder this user can write"
        ) from None
    return key_path()


def step_of(checkpoint: Path) -> int | None:
    """The steps in a checkpoint's name (``model_<steps>_steps.zip``), or None for another name."""
    number = checkpoint.name[len("model_") : -len("_steps.zip")]
    ok = checkpoint.name.startswith("model_") and checkpoint.name.endswith("_steps.zip") and number.isdigit()
    return int(number) if ok else None


def sign_checkpoint(checkpoint: Path, name: Path | None = None, binding: Mapping[str, Any] | None = None) -> Path:
    """Sign ``checkpoint``'s bytes for the file ``name`` (bound to ``binding``); the signature's path."""
    target = name or checkpoint
    sig = _signature_path(target)
    key = _key(create=True)
    if binding is None:
        write_text_atomically(sig, _digest(key, checkpoint) + "\n")
        return sig
    bound = {**{k: str(v) for k, v in binding.items()}, "step": str(step_of(target))}
    record = {"format": SIGNATURE_FORMAT, "binding": bound, "hmac": _digest(key, checkpoint, bound)}
    write_text_atomically(sig, json.dumps(record, sort_keys=True) + "\n")
    return sig


SIGNATURE_FORMAT = "llmsched-checkpoint-signature"


NO_SIGNATURE = "it has no signature, as when a training is killed while writing it"
MISMATCH = "its signature does not match its bytes (cut short, changed since it was signed, or signed by another user)"


UNBOUND = "its signature names no run (signed before signatures bound a checkpoint to its run and step)"


def _refusal(checkpoint: Path, binding: Mapping[str, Any] | None = None) -> str | None:
    """Why ``checkpoint`` may not be loaded, or None when its signature checks out."""
    sig = _signature_path(checkpoint)
    try:
        check_regular_file(checkpoint, CHECKPOINT_BYTES)
        recorded = read_text(sig, SIGNATURE_BYTES).strip()
    except FileRefusedError as exc:
        raise CheckpointError(f"--resume: {exc}") from None
    except UnicodeDecodeError:
        return MISMATCH
    except OSError:
        return NO_SIGNATURE
    bound: dict[str, str] | None = None
    if recorded.startswith("{"):
        try:
            record = parse_json(recorded)  # nested too deeply: a JSONDecodeError, not a RecursionError
            bound = {str(k): str(v) for k, v in record["binding"].items()}
            recorded = str(record["hmac"])
        except (ValueError, KeyError, TypeError, AttributeError):
            return MISMATCH
    if binding is not None:
        if bound is None:
            return UNBOUND
        expected = {**{k: str(v) for k, v in binding.items()}, "step": str(step_of(checkpoint))}
        differs = [k for k in expected if bound.get(k) != expected[k]]
        if differs:
            k = differs[0]
            why = {"step": "a checkpoint copied from another step: a rollback", "run": "another run's checkpoint"}
            hint = f" ({why[k]})" if k in why else ""
            return f"its signature binds it to {k} {bound.get(k)!r}, not {expected[k]!r} as here{hint}"
    key = _key(create=False)
    if key is None:
        return f"there is no checkpoint key at {key_path()} to check it with"
    try:
        digest = _digest(key, checkpoint, bound)
    except FileRefusedError as exc:  # the checkpoint grew past the limit, or became a FIFO, since the check
        raise CheckpointError(f"--resume: {exc}") from None
    if not hmac.compare_digest(recorded, digest):
        return MISMATCH
    return None


WHY = "checkpoints are pickles that can run code, and only those this user's training signed are loaded"


def verify_checkpoint(checkpoint: Path, binding: Mapping[str, Any] | None = None) -> None:
    """``CheckpointError`` (one line) unless ``checkpoint``'s signature checks out."""
    reason = _refusal(checkpoint, binding)
    if reason is not None:
        raise CheckpointError(f"--resume: refusing to load {checkpoint}: {reason}; {WHY}")


def checkpoints(folder: Path) -> list[Path]:
    """The checkpoints in ``folder`` (``model_<steps>_steps.zip``), the most steps first."""
    steps: list[tuple[int, Path]] = []
    for path in folder.glob("model_*_steps.zip"):
        number = step_of(path)
        if number is not None:
            steps.append((number, path))
    return [path for _, path in sorted(steps, reverse=True)]


def newest_signed_checkpoint(
    folder: Path, binding: Mapping[str, Any] | None = None
) -> tuple[Path | None, list[tuple[Path, str]]]:
    """The newest checkpoint in ``folder`` whose signature checks out, and the newer ones skipped."""
    found = checkpoints(folder)
    skipped: list[tuple[Path, str]] = []
    for checkpoint in found:
        reason = _refusal(checkpoint, binding)
        if reason is None:
            return checkpoint, skipped
        if reason.startswith("there is no checkpoint key"):  # no key: no checkpoint can be checked
            skipped = [(checkpoint, reason)]  # the newest: the loop stops at the first one
            break
        skipped.append((checkpoint, reason))
    if not found:
        return None, []
    more = f" (nor any of the {len(found) - 1} earlier ones)" if len(found) > 1 else ""
    newest, reason = skipped[0]  # each refusal was recorded, the newest first: none is checked twice
    raise CheckpointError(f"--resume: refusing to load {newest}{more}: {reason}; {WHY}")


def check_spaces(checkpoint: Path, spaces: Mapping[str, str]) -> None:
    """``CheckpointError`` when ``checkpoint``'s signature binds it to other spaces than ``spaces``."""
    try:
        bound = parse_json(read_text(_signature_path(checkpoint), SIGNATURE_BYTES))["binding"]
    except (OSError, ValueError, KeyError, TypeError):
        return
    for name, mine in spaces.items():
        if name in bound and bound[name] != mine:
            raise CheckpointError(
                f"--resume: refusing to load {checkpoint}: its signature binds it to {name} {bound[name]}, "
                f"not {mine} as the env here has it"
            )


def model_spaces(model: Any) -> dict[str, str]:
    """A model's (or a vec env's) observation and action spaces, as a signature binds them."""
    return {"observation_space": str(model.observation_space), "action_space": str(model.action_space)}


def latest_checkpoint(folder: Path) -> Path | None:
    """The checkpoint with the most steps in ``folder`` (``model_<steps>_steps.zip``), or None."""
    found = checkpoints(folder)
    return found[0] if found else None


class SignedCheckpointCallback(CheckpointCallback):
    """SB3's ``CheckpointCallback`` that writes each checkpoint under a temporary name, signs it, then renames it."""

    def __init__(self, *args: Any, binding: Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.binding = binding  # the run every checkpoint is bound to (its spaces added from the model)

    def _on_step(self) -> bool:
        if self.n_calls % self.save_freq == 0:
            path = Path(self._checkpoint_path(extension="zip"))
            binding = None
            if self.binding is not None:
                spaces = model_spaces(self.model)
                binding = {**self.binding, **spaces}
            with replaced_atomically(path) as tmp:
                self.model.save(str(tmp))
                sign_checkpoint(tmp, name=path, binding=binding)
            if self.verbose >= 2:
                print(f"Saving model checkpoint to {path}")
        return True
