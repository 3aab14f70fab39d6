"""Learned agents (Stable-Baselines3 and sb3-contrib). The only package that imports SB3, and only when one of
its names is used: ``import agents`` (and ``llmsched-train --help``) stays free of torch and SB3."""

from __future__ import annotations

from typing import Any

__all__ = ["ALGOS", "MASKED_ALGOS", "SB3Policy", "make_model"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from agents import sb3

        return getattr(sb3, name)
    raise AttributeError(f"module 'agents' has no attribute {name!r}")
