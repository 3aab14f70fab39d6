"""Learned agents (Stable-Baselines3 and sb3-contrib). The only package that imports SB3."""

from agents.sb3 import ALGOS, MASKED_ALGOS, SB3Policy, make_model

__all__ = ["ALGOS", "MASKED_ALGOS", "SB3Policy", "make_model"]
