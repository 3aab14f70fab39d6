"""The command lines: ``llmsched-evaluate`` (``evaluate.py``) and ``llmsched-calibrate`` (``calibrate.py``).

Each module parses arguments and calls the library; ``llmsched-train`` lives in ``agents.cli``, beside
Stable-Baselines3. The top-level scripts only call these ``main`` functions.
"""
