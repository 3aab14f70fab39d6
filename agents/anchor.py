"""``AnchorCallback``: with ``anchor_coef`` > 0, after every update, ``anchor_epochs`` passes of gradient steps on
``anchor_coef`` x KL(start || current) over the rollout, keeping a training close to the policy it started from.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import torch
from stable_baselines3.common.callbacks import BaseCallback


def _distribution(policy: Any, obs: torch.Tensor, masks: torch.Tensor | None) -> list[torch.distributions.Categorical]:
    """The per-component categorical distributions of ``policy`` on ``obs`` (masked where ``masks`` is given)."""
    dist = policy.get_distribution(obs, action_masks=masks) if masks is not None else policy.get_distribution(obs)
    parts = getattr(dist, "distributions", None)  # sb3-contrib's masked distributions
    if parts is None:
        parts = dist.distribution  # SB3's: a list for MultiDiscrete, one Categorical for Discrete
    return list(parts) if isinstance(parts, (list, tuple)) else [parts]


def kl_to_reference(reference: Any, policy: Any, obs: torch.Tensor, masks: torch.Tensor | None = None) -> torch.Tensor:
    """Per-observation KL(reference ‖ policy), summed over the action components (gradients flow to ``policy``)."""
    with torch.no_grad():
        ref = _distribution(reference, obs, masks)
    cur = _distribution(policy, obs, masks)
    return sum(
        (torch.distributions.kl_divergence(r, c) for r, c in zip(ref, cur, strict=True)),
        start=torch.zeros(obs.shape[0], device=obs.device),
    )


class AnchorCallback(BaseCallback):
    """After each update, pull the policy towards its frozen start (weight ``coef``, ``epochs`` passes)."""

    def __init__(self, coef: float, epochs: int = 1, batch_size: int = 256, seed: int = 0) -> None:
        super().__init__()
        if not (isinstance(coef, (int, float)) and coef > 0 and np.isfinite(coef)):
            raise ValueError(f"anchor_coef must be a finite number > 0, got {coef!r}")
        self.coef = float(coef)
        self.epochs = int(epochs)
        self.batch_size = int(batch_size)
        self._rng = np.random.default_rng(seed)
        self.reference: Any = None
        self._obs: np.ndarray | None = None
        self._masks: np.ndarray | None = None
        self.last_kl: float | None = None  # mean KL to the start before the latest pull
        self.last_kl_after: float | None = None  # and after it

    def _on_training_start(self) -> None:
        if self.model.policy.__class__.__name__.startswith("Recurrent") or hasattr(self.model, "_last_lstm_states"):
            raise ValueError("anchor_coef: a recurrent policy cannot be anchored (its distribution needs its state)")
        self.reference = copy.deepcopy(self.model.policy)
        self.reference.set_training_mode(False)
        for p in self.reference.parameters():
            p.requires_grad_(False)

    def _on_step(self) -> bool:
        return True

    def _on_rollout_end(self) -> None:
        model: Any = self.model  # an on-policy algorithm (checked by the hyperparameters)
        buffer: Any = model.rollout_buffer
        obs = np.asarray(buffer.observations)
        self._obs = obs.reshape(-1, *obs.shape[2:]).copy()
        masks = getattr(buffer, "action_masks", None)
        self._masks = None if masks is None else np.asarray(masks).reshape(self._obs.shape[0], -1).copy()

    def _on_rollout_start(self) -> None:
        self.pull()  # the algorithm has just learnt from the rollout kept at its end

    def _on_training_end(self) -> None:
        self.pull()

    def pull(self) -> None:
        """``epochs`` passes of KL steps towards the start on the last rollout's observations (none yet: nothing)."""
        if self._obs is None or self.reference is None:
            return
        policy: Any = self.model.policy
        device = policy.device
        obs = torch.as_tensor(self._obs, device=device)
        masks = None if self._masks is None else torch.as_tensor(self._masks, device=device)
        self.last_kl = self._mean_kl(obs, masks)
        policy.set_training_mode(True)
        max_norm = float(getattr(self.model, "max_grad_norm", 0.5))
        n = obs.shape[0]
        for _ in range(self.epochs):
            order = self._rng.permutation(n)
            for start in range(0, n, self.batch_size):
                idx = torch.as_tensor(order[start : start + self.batch_size], device=device)
                kl = kl_to_reference(self.reference, policy, obs[idx], None if masks is None else masks[idx])
                loss = self.coef * kl.mean()
                policy.optimizer.zero_grad()
                loss.backward()
                torch.nn.utils.clip_grad_norm_(policy.parameters(), max_norm)
                policy.optimizer.step()
        policy.set_training_mode(False)
        self.last_kl_after = self._mean_kl(obs, masks)
        self.logger.record("anchor/kl", self.last_kl)
        self.logger.record("anchor/kl_after", self.last_kl_after)
        self._obs = self._masks = None

    def _mean_kl(self, obs: torch.Tensor, masks: torch.Tensor | None) -> float:
        with torch.no_grad():
            return float(kl_to_reference(self.reference, self.model.policy, obs, masks).mean())
