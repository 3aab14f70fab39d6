"""Export a trained SB3 policy as ``policy.safetensors`` + ``policy.json`` for the torch runtime: the actor's
linear layers, activation, observation names, action options and optional VecNormalize statistics, sealed
(``seal_meta``) and loaded back with torch alone before returning.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import save_file
from sb3_contrib import MaskablePPO, RecurrentPPO
from sb3_contrib.common.maskable.policies import MaskableActorCriticPolicy
from stable_baselines3 import A2C, PPO
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.policies import ActorCriticPolicy
from stable_baselines3.common.torch_layers import FlattenExtractor
from torch import nn

from llmsched_env.decision.actions import ACTION_COMPONENTS, ActionSpec
from llmsched_env.decision.policy_file import FIELDS_KEY, seal_meta
from llmsched_env.runtime.policy_file import (
    ACTIVATIONS,
    FORMAT,
    FORMAT_VERSION,
    JSON_NAME,
    TENSORS_NAME,
    action_options,
    load_policy_file,
)

_ALGO_NAMES: tuple[tuple[type[BaseAlgorithm], str], ...] = ((MaskablePPO, "maskable_ppo"), (PPO, "ppo"), (A2C, "a2c"))
_ACTIVATION_NAMES = {cls: name for name, cls in ACTIVATIONS.items()}


def export_policy(
    model: BaseAlgorithm,
    env_or_spec_info: Any,
    out_dir: str | Path,
    *,
    obs_rms: Any = None,
    extra: dict[str, Any] | None = None,
) -> tuple[Path, Path]:
    """Write ``out_dir/policy.safetensors`` and ``policy.json`` of ``model`` (MaskablePPO, PPO or A2C with an MLP
    policy) for ``env_or_spec_info`` (an env or anything with ``obs_names`` and ``action_spec``), with ``obs_rms``'s
    statistics and ``extra`` keys; return their paths. ``ValueError`` when it cannot."""
    if isinstance(model, RecurrentPPO):
        raise ValueError(
            "export_policy: a RecurrentPPO policy cannot be exported: the policy file holds a stateless MLP, and "
            "this policy's actions depend on the LSTM state it carries from step to step (act with agents.SB3Policy)"
        )
    algo = next((name for cls, name in _ALGO_NAMES if isinstance(model, cls)), None)
    if algo is None:
        raise ValueError(f"export_policy supports MaskablePPO, PPO and A2C, got {type(model).__name__}")
    obs_names, spec, schema = _spec_info(env_or_spec_info)
    policy = model.policy
    if not isinstance(policy, (ActorCriticPolicy, MaskableActorCriticPolicy)):
        raise ValueError(f"export_policy needs an actor-critic MLP policy, got {type(policy).__name__}")
    if not isinstance(policy.pi_features_extractor, FlattenExtractor):
        raise ValueError(f"only the FlattenExtractor exports (no weights); got {type(policy.pi_features_extractor)}")
    shape = model.observation_space.shape
    assert shape is not None  # SB3 builds an MLP policy on a Box, which has a shape
    n_obs = int(np.prod(shape))
    if len(obs_names) != n_obs or len(shape) != 1:
        raise ValueError(f"the model observes shape {shape}, the env names {len(obs_names)}")
    nvec = [int(n) for n in spec.nvec]
    space = model.action_space
    model_nvec = getattr(space, "nvec", None)
    if model_nvec is None and hasattr(space, "n"):  # a Discrete space (the cluster router): one component
        model_nvec = [space.n]
    if model_nvec is None or [int(n) for n in model_nvec] != nvec:
        raise ValueError(f"the model's action space {model.action_space} does not match the env's nvec {nvec}")
    activation = _ACTIVATION_NAMES.get(policy.activation_fn)
    if activation is None:
        raise ValueError(f"activation {policy.activation_fn} is not one of {sorted(ACTIVATIONS)}")

    tensors: dict[str, torch.Tensor] = {}
    layers = []
    named = [(f"mlp_extractor.policy_net.{i}", m) for i, m in enumerate(policy.mlp_extractor.policy_net)]
    for name, module in [*named, ("action_net", policy.action_net)]:
        if isinstance(module, nn.Linear):
            tensors[f"{name}.weight"] = module.weight.detach().to("cpu", torch.float32).contiguous().clone()
            tensors[f"{name}.bias"] = module.bias.detach().to("cpu", torch.float32).contiguous().clone()
            layers.append({"weight": f"{name}.weight", "bias": f"{name}.bias"})
        elif not isinstance(module, policy.activation_fn):
            raise ValueError(f"cannot export {name}: {type(module).__name__} (only Linear and the activation)")

    meta: dict[str, Any] = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "schema_version": schema,
        "obs_names": list(obs_names),
        "action_components": list(getattr(spec, "components", ACTION_COMPONENTS)),
        "action_nvec": nvec,
        "action_options": action_options(spec) if isinstance(spec, ActionSpec) else {},
        "masked": algo == "maskable_ppo",
        "normalization": _normalization(obs_rms, n_obs),
        "network": {"activation": activation, "layers": layers},
        "tensors_sha256": "",  # the digest of the file written below
        "algo": algo,
    }
    clash = {*meta, FIELDS_KEY} & set(extra or {})
    if clash:
        raise ValueError(f"extra must not override the format's keys {sorted(clash)}")
    meta.update(extra or {})
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    # The pair is written and checked in a folder of its own, then moved over the one in place (the weights,
    # then their description): a failed or interrupted export leaves the previous pair whole, or a pair whose
    # digest disagrees, which the loader refuses in one line; never a truncated file.
    staging = out / f".export.{os.getpid()}.tmp"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    try:
        save_file(tensors, str(staging / TENSORS_NAME), metadata={"format": FORMAT})
        meta["tensors_sha256"] = hashlib.sha256((staging / TENSORS_NAME).read_bytes()).hexdigest()
        meta = seal_meta(meta)  # every field that decides an action, under its digest (checked at load)
        (staging / JSON_NAME).write_text(json.dumps(meta, indent=1) + "\n", encoding="utf-8")
        load_policy_file(staging / JSON_NAME)  # what was written must load
        tensors_path, json_path = out / TENSORS_NAME, out / JSON_NAME
        os.replace(staging / TENSORS_NAME, tensors_path)
        os.replace(staging / JSON_NAME, json_path)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return tensors_path, json_path


def _spec_info(obj: Any) -> tuple[tuple[str, ...], Any, int]:
    """(obs_names, action_spec, schema) of an env, a wrapped env, a VecEnv or a PolicyContext."""

    def schema_of(schema: Any, spec: Any) -> int:
        if schema is None:
            schema = 2 if getattr(spec, "max_tokens", None) is not None else 1
        return int(schema)

    for candidate in (obj, getattr(obj, "unwrapped", None)):
        if candidate is not None and hasattr(candidate, "obs_names") and hasattr(candidate, "action_spec"):
            spec = candidate.action_spec
            return tuple(candidate.obs_names), spec, schema_of(getattr(candidate, "schema", None), spec)
    if hasattr(obj, "get_attr"):  # a VecEnv: ask its first env
        try:
            spec = obj.get_attr("action_spec", [0])[0]
            schema = obj.get_attr("schema", [0])[0] if obj.has_attr("schema") else None
            return tuple(obj.get_attr("obs_names", [0])[0]), spec, schema_of(schema, spec)
        except AttributeError:
            pass
    raise ValueError(f"{type(obj).__name__} has no obs_names and action_spec (pass the LLMSched-v1 env)")


def _normalization(obs_rms: Any, n_obs: int) -> dict[str, Any] | None:
    if obs_rms is None:
        return None
    epsilon, clip = 1e-8, 10.0  # VecNormalize's defaults
    if isinstance(obs_rms, Mapping):
        mean, var = obs_rms["mean"], obs_rms["var"]
        epsilon = obs_rms.get("epsilon", epsilon)
        clip = obs_rms.get("clip_obs", obs_rms.get("clip", clip))
    else:
        if hasattr(obs_rms, "obs_rms"):  # a VecNormalize
            if not getattr(obs_rms, "norm_obs", True):
                return None
            epsilon, clip = obs_rms.epsilon, obs_rms.clip_obs
            obs_rms = obs_rms.obs_rms
        mean, var = obs_rms.mean, obs_rms.var
        epsilon, clip = getattr(obs_rms, "epsilon", epsilon), getattr(obs_rms, "clip_obs", clip)
    mean_a, var_a = np.asarray(mean, dtype=np.float64), np.asarray(var, dtype=np.float64)
    if mean_a.shape != (n_obs,) or var_a.shape != (n_obs,):
        raise ValueError(f"obs_rms mean/var must have shape ({n_obs},), got {mean_a.shape} and {var_a.shape}")
    return {"mean": mean_a.tolist(), "var": var_a.tolist(), "epsilon": float(epsilon), "clip": float(clip)}
