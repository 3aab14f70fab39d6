"""What training the generalist and fine-tuning need: ``knee_loads()``, per library scenario the load at which the
best named heuristic keeps 90% attainment (``baselines/tuned.json``'s provenance), and ``init_from_policy``, an
exported policy's weights into a fresh SB3 model (``llmsched-train --init``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from stable_baselines3.common.base_class import BaseAlgorithm

from agents.sb3 import ALGOS, MASKED_ALGOS
from baselines.tuned import SHIPPED_TABLE
from llmsched_env.decision.planners.tuned import load_tuned_table
from llmsched_env.runtime.policy_file import ACTIVATIONS, ExportedPolicy, action_options, load_policy_file
from llmsched_env.workloads.library import mixture_scenarios


def knee_loads(table: str | Path = SHIPPED_TABLE) -> dict[str, float]:
    """Scenario -> the best named heuristic's val capacity, for the generalist's mixture scenarios."""
    out: dict[str, float] = {}
    mixture = set(mixture_scenarios())
    for name, entry in load_tuned_table(table).entries.items():
        if name not in mixture:
            continue
        reference = entry["provenance"].get("reference_capacity_load") or {}
        loads = [float(v) for v in reference.values() if isinstance(v, (int, float))]
        if loads:
            out[name] = max(loads)
    return out


def init_network(path: str | Path | ExportedPolicy) -> tuple[ExportedPolicy, dict[str, Any]]:
    """The exported policy at ``path`` and the ``policy_kwargs`` a model needs to take its weights."""
    policy = path if isinstance(path, ExportedPolicy) else load_policy_file(path)
    widths = [int(w.shape[0]) for w, _ in policy.weights[:-1]]  # the hidden layers; the last gives the logits
    activation = ACTIVATIONS[policy.meta["network"]["activation"]]
    return policy, {"net_arch": {"pi": widths, "vf": widths}, "activation_fn": activation}


def check_init(policy: ExportedPolicy, env: Any, algo: str) -> None:
    """``ValueError`` unless ``policy`` can start a training of ``algo`` on ``env``."""
    u = env.unwrapped
    policy.check_compatible(
        u.obs_names, u.action_spec.nvec, schema_version=u.schema, action_options=action_options(u.action_spec)
    )
    if policy.meta.get("normalization") is not None:
        raise ValueError(f"{policy.path}: a policy trained under observation normalisation cannot start a training")
    if policy.masked != (algo in MASKED_ALGOS):
        raise ValueError(f"{policy.path}: its algorithm {policy.meta['algo']} differs from this training's ({algo})")


def init_from_policy(model: BaseAlgorithm, policy: ExportedPolicy, env: Any) -> None:
    """Copy ``policy``'s actor weights into ``model`` after ``check_init``; the value network starts fresh."""
    check_init(policy, env, next(name for name, cls in ALGOS.items() if type(model) is cls))
    actor: Any = model.policy  # SB3's ActorCriticPolicy or sb3-contrib's MaskableActorCriticPolicy: no common base
    linears = [m for m in actor.mlp_extractor.policy_net if isinstance(m, torch.nn.Linear)]
    linears.append(actor.action_net)
    theirs = [tuple(w.shape) for w, _ in policy.weights]
    if [tuple(m.weight.shape) for m in linears] != theirs:
        raise ValueError(f"{policy.path}: its layers {theirs} do not fit the model")
    with torch.no_grad():
        for mine, (w, b) in zip(linears, policy.weights, strict=True):
            mine.weight.copy_(torch.from_numpy(w))
            mine.bias.copy_(torch.from_numpy(b))
