"""Checkpoints that ``--resume`` may load: each is signed when training writes it, and only a checkpoint whose
signature checks out is loaded.

An SB3 checkpoint (``model_<steps>_steps.zip``) is a pickle: loading it runs whatever code it names, so a run
folder that someone else wrote must not be resumed blindly. ``SignedCheckpointCallback`` writes, next to each
checkpoint, ``<name>.sig``: the HMAC-SHA256 of the checkpoint's bytes under this user's key
(``$XDG_CONFIG_HOME/llmsched/checkpoint.key``, default ``~/.config/llmsched/checkpoint.key``: 32 random bytes,
created on first use, readable by the user only). ``verify_checkpoint`` recomputes it before anything is
unpickled and raises ``CheckpointError`` (one line) for a checkpoint with no signature, a wrong one, or one
signed with another key (another user's or another machine's). A plain sha256 stored in the folder would not
do: whoever wrote the folder could write that too. The checkpoint, its signature and the key are read bounded
(``llmsched_env.common.files``): regular files only (a FIFO or ``/dev/zero`` in their place is refused, not waited
on or read forever), a checkpoint of at most ``CHECKPOINT_BYTES`` (1 GiB, ``$LLMSCHED_MAX_CHECKPOINT_BYTES``), a
signature and a key of at most 4 KiB.

    checkpoint = latest_checkpoint(run / "checkpoints")
    verify_checkpoint(checkpoint)     # CheckpointError unless this user's training wrote it
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from pathlib import Path
from typing import Literal, overload

from stable_baselines3.common.callbacks import CheckpointCallback

from llmsched_env.common.files import (
    CHECKPOINT_BYTES,
    KEY_BYTES,
    SIGNATURE_BYTES,
    FileRefusedError,
    check_regular_file,
    open_regular,
    read_bytes,
    read_text,
)

__all__ = [
    "CheckpointError",
    "SignedCheckpointCallback",
    "key_path",
    "latest_checkpoint",
    "sign_checkpoint",
    "verify_checkpoint",
]

SIGNATURE_SUFFIX = ".sig"
_KEY_BYTES = 32


class CheckpointError(ValueError):
    """A checkpoint that ``--resume`` refuses to load: not signed with this user's key."""


def key_path() -> Path:
    """Where this user's checkpoint key lives: ``$XDG_CONFIG_HOME/llmsched/checkpoint.key`` (default
    ``~/.config``)."""
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
            os.write(fd, secrets.token_bytes(_KEY_BYTES))
        finally:
            os.close(fd)
        try:
            os.link(tmp, path)  # atomic; a concurrent training that won the race keeps its key
        except FileExistsError:
            pass
        finally:
            tmp.unlink()
        key = read_bytes(path, KEY_BYTES)
    if len(key) != _KEY_BYTES:
        raise CheckpointError(f"{path}: the checkpoint key must hold {_KEY_BYTES} bytes, found {len(key)}")
    return key


def _digest(key: bytes, checkpoint: Path) -> str:
    mac = hmac.new(key, digestmod=hashlib.sha256)
    with open_regular(checkpoint, CHECKPOINT_BYTES) as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            mac.update(chunk)
    return mac.hexdigest()


def _signature_path(checkpoint: Path) -> Path:
    return checkpoint.with_name(checkpoint.name + SIGNATURE_SUFFIX)


def sign_checkpoint(checkpoint: Path) -> Path:
    """Write ``checkpoint``'s signature file (creating this user's key if needed) and return its path."""
    sig = _signature_path(checkpoint)
    sig.write_text(_digest(_key(create=True), checkpoint) + "\n")
    return sig


def verify_checkpoint(checkpoint: Path) -> None:
    """Return when ``checkpoint`` carries a valid signature under this user's key; ``CheckpointError`` (one
    line naming the file) otherwise."""
    refuse = f"--resume: refusing to load {checkpoint}"
    why = "checkpoints are pickles that can run code, and only those this user's training signed are loaded"
    sig = _signature_path(checkpoint)
    try:
        check_regular_file(checkpoint, CHECKPOINT_BYTES)  # before its signature: a FIFO is not waited on
        recorded = read_text(sig, SIGNATURE_BYTES).strip()
    except FileRefusedError as exc:
        raise CheckpointError(f"--resume: {exc}") from None
    except UnicodeDecodeError:
        raise CheckpointError(f"{refuse}: its signature ({sig.name}) is not text; {why}") from None
    except OSError:
        raise CheckpointError(f"{refuse}: it has no signature ({sig.name}); {why}") from None
    key = _key(create=False)
    if key is None:
        raise CheckpointError(f"{refuse}: there is no checkpoint key at {key_path()} to check it with; {why}")
    try:
        digest = _digest(key, checkpoint)
    except FileRefusedError as exc:  # the checkpoint grew past the limit, or became a FIFO, since the check
        raise CheckpointError(f"--resume: {exc}") from None
    if not hmac.compare_digest(recorded, digest):
        raise CheckpointError(f"{refuse}: its signature does not match (changed, or written by someone else); {why}")


def latest_checkpoint(folder: Path) -> Path | None:
    """The checkpoint with the most steps in ``folder`` (``model_<steps>_steps.zip``), or None."""
    steps: list[tuple[int, Path]] = []
    for path in folder.glob("model_*_steps.zip"):
        number = path.name[len("model_") : -len("_steps.zip")]
        if number.isdigit():
            steps.append((int(number), path))
    return max(steps)[1] if steps else None


class SignedCheckpointCallback(CheckpointCallback):
    """SB3's ``CheckpointCallback`` that signs each checkpoint it writes (``sign_checkpoint``)."""

    def _on_step(self) -> bool:
        result = super()._on_step()
        if self.n_calls % self.save_freq == 0:
            sign_checkpoint(Path(self._checkpoint_path(extension="zip")))
        return result
