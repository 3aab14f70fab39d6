"""Add ``fields_sha256`` (``decision.policy_file.seal_meta``) to exported policies written before policy files
recorded their fields, after checking the pair otherwise loads; a file with a record is left as it is.

    python -m llmsched_env.commands.seal_policy runs/ppo0 [more policies ...]
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path

from llmsched_env.commands.entry import command, keep
from llmsched_env.common.checks import Parser, one_line
from llmsched_env.common.files import CONFIG_BYTES, parse_json, read_text
from llmsched_env.common.outputs import write_text_atomically
from llmsched_env.decision.policy_file import JSON_NAME, PolicyFileError, UnsealedPolicyError, seal_meta
from llmsched_env.runtime.policy_file import load_policy_file


def seal_policy_file(path: str | Path) -> tuple[Path, bool]:
    """Add ``fields_sha256`` to the policy at ``path`` when it has none; (its JSON, whether written)."""
    try:
        return load_policy_file(path).path, False  # it has its record, which holds
    except UnsealedPolicyError:  # every other check passed: the fields, the weights and their digest
        pass
    json_path = Path(path) / JSON_NAME if Path(path).is_dir() else Path(path).with_suffix(".json")
    original = read_text(json_path, CONFIG_BYTES)
    sealed = seal_meta(parse_json(original))
    try:
        write_text_atomically(json_path, json.dumps(sealed, indent=1) + "\n")
    except OSError as exc:  # an immutable file, a read-only folder or filesystem, a full disk: left as it was
        raise PolicyFileError(f"{json_path}: cannot be replaced ({exc.strerror or exc}); left as it was") from None
    try:
        load_policy_file(json_path)  # and the network's probe, which runs once the record holds
    except BaseException:  # a policy that fails it (or Ctrl-C) is put back as it was
        write_text_atomically(json_path, original)
        raise
    return json_path, True


PROG = "python -m llmsched_env.commands.seal_policy"


@command(PROG)
def main(argv: Sequence[str] | None = None) -> int:
    """Seal each policy given: one line each, an error line (and status 1) for one that fails."""
    parser = Parser(prog=PROG, description=__doc__)
    parser.add_argument("policies", nargs="+", type=Path, help="policy folders (or their policy.json)")
    args = parser.parse_args(argv)
    keep("the policies sealed before it are sealed, the others as they were (each policy.json is replaced whole)",
         "rerun it")  # fmt: skip
    status = 0
    for path in args.policies:
        try:
            json_path, written = seal_policy_file(path)
        except (ValueError, OSError) as exc:  # PolicyFileError, a refused file; OSError: reading met (EACCES, EIO)
            why = f"{path}: {exc.strerror or exc}" if isinstance(exc, OSError) else str(exc)
            print(one_line(f"seal_policy: error: {why}"), file=sys.stderr)
            status = 1
            continue
        print(f"{json_path}: {'sealed' if written else 'has its fields_sha256 already; left as it is'}")
    return status


if __name__ == "__main__":
    raise SystemExit(main())
