"""The torch runtime: runs scheduling policies (and, later, a real model) with torch alone.

Never imports gymnasium, Stable-Baselines3, ``agents`` or ``baselines``. A trained policy arrives as
``policy.safetensors`` + ``policy.json`` (see ``policy_file``), never as a pickle.
"""
