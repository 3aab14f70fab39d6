"""The torch runtime: a real model served by the same engine as the simulator, under any scheduling policy.

Never imports gymnasium, Stable-Baselines3, ``agents`` or ``baselines``. A trained policy arrives as
``policy.safetensors`` + ``policy.json`` (``decision.policy_file``; ``policy_file`` here adds torch for the
activations numpy lacks), never as a pickle.
"""
