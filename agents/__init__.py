"""Learned agents (Stable-Baselines3 and sb3-contrib). The only package that imports SB3."""

from agents.sb3 import ALGOS, SB3Policy, make_model

__all__ = ["ALGOS", "SB3Policy", "make_model"]
