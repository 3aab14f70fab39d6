"""Shared primitives at the bottom of the package: checks at public boundaries, the registry of everything chosen
by name, dataclass fields to and from plain dicts and the one ``KEY=VALUE`` parser (``fields``), bounded reads
(``files``), output folders (``outputs``), worker lifetimes (``lifetime``). Standard library only."""

from llmsched_env.common.checks import check_int, check_number, check_positive
from llmsched_env.common.fields import check_fields, from_fields, to_fields
from llmsched_env.common.registry import Registry

__all__ = ["Registry", "check_fields", "check_int", "check_number", "check_positive", "from_fields", "to_fields"]
