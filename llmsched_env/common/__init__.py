"""Shared primitives at the bottom of the package: number checks at public boundaries and the registry type
for everything chosen by name. Standard library only.
"""

from llmsched_env.common.checks import check_int, check_number, check_positive
from llmsched_env.common.registry import Registry

__all__ = ["Registry", "check_int", "check_number", "check_positive"]
