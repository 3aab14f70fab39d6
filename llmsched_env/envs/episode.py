"""Run one episode of an env (``LLMSched-v1`` or ``LLMSchedCluster-v0``) under a policy: whole (``run_episode``)
or a request's outcome at a time (``Episode``, ``DirectEpisode``), as a capacity probe plays it to stop once its
verdict is certain (``evaluation.decided``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym

from llmsched_env.decision.policy import Policy, start_episode

PolicyFactory = Callable[[gym.Env], Policy]  # builds the episode's policy from the env, after its reset


class Episode:
    """One episode of ``env`` under ``policy`` (or a factory called with the env after its reset), reset with
    ``seed`` now; ``step()`` plays one env step, ``metrics`` holds the final metrics once ``done``. A stateful
    policy's ``start_episode`` is called before its first action."""

    def __init__(self, env: gym.Env, policy: Policy | PolicyFactory, seed: int) -> None:
        self.env = env
        self._obs, _ = env.reset(seed=seed)
        if not hasattr(policy, "act"):
            policy = policy(env)
        start_episode(policy)
        self.policy = policy
        self._env: Any = env.unwrapped
        self.metrics: dict[str, float] | None = None

    @property
    def done(self) -> bool:
        return self.metrics is not None

    def step(self) -> bool:
        """Play one step; whether the episode has ended."""
        self._obs, _, terminated, truncated, info = self.env.step(self.policy.act(self._obs, self._env.action_masks()))
        if terminated or truncated:
            self.metrics = dict(info["metrics"])
        return terminated or truncated

    def tally(self) -> tuple[int, int, int]:
        """``(requests, met, missed)`` so far (``EnvBase.slo_tally``)."""
        return self._env.slo_tally()

    def advance(self) -> bool:
        """Play on until one more request's outcome is known, or the end; whether the episode has ended."""
        _, met, missed = self.tally()
        while not self.step():
            _, now_met, now_missed = self.tally()
            if now_met != met or now_missed != missed:
                return False
        return True


class DirectEpisode:
    """An ``LLMSched-v1`` episode under ``policy`` (one that acts on observations and masks), reset with ``seed``
    now, its engine iterations driven through a ``DecisionLoop`` as the env's ``step`` drives them (the same
    decisions, holds, corrections and truncation) without the Gymnasium round trip; the same trajectory and
    metrics as ``Episode``, at a fraction of the cost per iteration."""

    def __init__(self, env: gym.Env, policy: Policy, seed: int) -> None:
        from llmsched_env.decision.loop import DecisionLoop

        self.env = env
        env.reset(seed=seed)
        start_episode(policy)
        u: Any = env.unwrapped
        self._env = u
        self.sim = u.sim
        self.loop = DecisionLoop(u.action_spec, u.encoder, policy, hold=u.iterations_per_step, name="the policy")
        self._hold = u.iterations_per_step
        self._left = self._hold  # iterations until the env's step would check its truncation
        self.metrics: dict[str, float] | None = None

    @property
    def done(self) -> bool:
        return self.metrics is not None

    def tally(self) -> tuple[int, int, int]:
        """``(requests, met, missed)`` so far."""
        engine = self.sim.engine
        return len(self.sim.requests), engine.num_good, engine.num_missed

    def advance(self) -> bool:
        """Play on until one more request's outcome is known, or the end; whether the episode has ended."""
        sim, loop, u = self.sim, self.loop, self._env
        engine = sim.engine
        resolved = engine.num_good + engine.num_missed
        check = u.check_invariants
        while True:
            sim.step(loop.next(engine))
            if check:
                sim.check_invariants()
            self._left -= 1
            ended = sim.done
            if not ended and self._left == 0:  # where the env's step ends: its truncation
                self._left = self._hold
                ended = sim.now_s >= u.horizon_s or sim.num_steps >= u.max_steps
            if ended:
                self.loop.close()
                self.metrics = sim.metrics()
                return True
            if engine.num_good + engine.num_missed != resolved:
                return False


def run_episode(env: gym.Env, policy: Policy | PolicyFactory, seed: int) -> dict[str, float]:
    """Run one episode of ``env`` under ``policy`` (or a factory called with the env after its reset); its final
    metrics. A stateful policy's ``start_episode`` is called before its first action."""
    episode = Episode(env, policy, seed)
    while not episode.step():
        pass
    assert episode.metrics is not None
    return episode.metrics
