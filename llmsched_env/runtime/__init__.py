"""The torch runtime: a real model served by the same engine as the simulator, under any scheduling policy
(never importing gymnasium, Stable-Baselines3, ``agents`` or ``baselines``; policies arrive as exported files)."""
