"""Exported policies with torch at hand: ``decision.policy_file``'s loader plus a torch forward pass for the
activations numpy lacks (``ACTIVATIONS``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from llmsched_env.decision.policy_file import (
    ACTIVATION_NAMES,
    FORMAT,
    FORMAT_VERSION,
    FORWARDS,
    JSON_NAME,
    OPTION_KEYS,
    TENSORS_NAME,
    ExportedPolicy,
    Forward,
    PolicyFileError,
    action_options,
)
from llmsched_env.decision.policy_file import load_policy_file as _load_in_numpy

__all__ = ["ACTIVATIONS", "FORMAT", "FORMAT_VERSION", "JSON_NAME", "OPTION_KEYS", "TENSORS_NAME", "ExportedPolicy",
           "PolicyFileError", "action_options", "load_policy_file", "torch_forward"]

ACTIVATIONS: dict[str, type[nn.Module]] = {"tanh": nn.Tanh, "relu": nn.ReLU, "elu": nn.ELU,
                                           "leaky_relu": nn.LeakyReLU, "gelu": nn.GELU, "silu": nn.SiLU,
                                           "sigmoid": nn.Sigmoid, "identity": nn.Identity}
assert tuple(ACTIVATIONS) == ACTIVATION_NAMES  # the names a policy file may hold


def torch_forward(meta: dict[str, Any], weights: list[tuple[np.ndarray, np.ndarray]]) -> Forward:
    """The network of ``meta`` with ``weights`` ((weight [out, in], bias [out]) per layer) as a torch module
    on the CPU: a function from the input [num_obs] (float32) to the logits [sum(nvec)]."""
    activation = ACTIVATIONS[meta["network"]["activation"]]
    modules: list[nn.Module] = []
    for i, (w, b) in enumerate(weights):
        linear = nn.Linear(w.shape[1], w.shape[0])
        with torch.no_grad():
            linear.weight.copy_(torch.from_numpy(w))
            linear.bias.copy_(torch.from_numpy(b))
        modules.append(linear)
        if i < len(weights) - 1:
            modules.append(activation())
    network = nn.Sequential(*modules).eval().requires_grad_(False)

    def forward(x: np.ndarray) -> np.ndarray:
        with torch.inference_mode():
            return network(torch.from_numpy(x)[None])[0].numpy()  # [1, num_obs] -> [1, sum(nvec)]

    return forward


FORWARDS.register("torch", torch_forward)  # what the decision layer's loader asks for an activation numpy lacks


def load_policy_file(path: str | Path) -> ExportedPolicy:
    """Load and verify an exported policy (``decision.policy_file.load_policy_file``), its actor in numpy
    when numpy has its activation, else in torch (``torch_forward``)."""
    return _load_in_numpy(path, forward=torch_forward)
