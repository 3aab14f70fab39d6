"""Fork an episode: what ``env.unwrapped.snapshot()`` returns and ``restore(snapshot)`` takes, on ``LLMSched-v1``
and ``LLMSchedCluster-v0`` (CompilerGym's ``fork()`` is the model).

    snap = env.unwrapped.snapshot()      # mid-episode: everything the rest of the episode depends on
    ...                                  # step on: try something
    env.unwrapped.restore(snap)          # back where the snapshot was taken; step the same actions, get the
                                         # same observations, rewards, infos and final metrics
    other.unwrapped.restore(snap)        # or into another env made with the same arguments

A snapshot is opaque and never changes: restoring it copies it again, so it can be restored any number of
times, into the env that took it or into another env made with the same arguments (anything else is refused
in one line), and the env that took it steps on unaffected. It holds the simulator's state (``Simulator.fork``
/ ``Cluster.fork``: live requests copied, finished ones and the requests still to arrive shared), the
generator states, the reward bookkeeping and the episode counters; the observation encoders hold no state of
their own (the arrival-rate estimate and the recent latency averages live in the engine).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["EnvSnapshot", "check_snapshot", "episode_state", "restore_episode_state"]


@dataclass(frozen=True, eq=False)
class EnvSnapshot:
    """One moment of one episode (``snapshot()``), for ``restore()``. ``env`` names the env's class and
    ``signature`` its arguments; ``state`` is the env's own business: do not read it or change it."""

    env: str
    signature: tuple[Any, ...]
    state: dict[str, Any]

    def __repr__(self) -> str:
        return f"EnvSnapshot({self.env}, step {self.state.get('step', '?')})"


def check_snapshot(owner: Any, snapshot: object, signature: tuple[Any, ...]) -> EnvSnapshot:
    """``snapshot`` if ``owner`` (an env) can restore it, else one-line ``ValueError`` saying why: not a
    snapshot, taken from another kind of env, or from an env made with other arguments (naming the first)."""
    kind = type(owner).__name__
    if not isinstance(snapshot, EnvSnapshot):
        raise ValueError(f"{kind}.restore: expected what snapshot() returned, got {type(snapshot).__name__}")
    if snapshot.env != kind:
        raise ValueError(f"{kind}.restore: this snapshot was taken from a {snapshot.env}")
    if snapshot.signature is not signature and snapshot.signature != signature:
        for (name, mine), (_, theirs) in zip(signature, snapshot.signature, strict=True):
            if mine != theirs:
                raise ValueError(
                    f"{kind}.restore: the snapshot's env was made with {name}={theirs!r}, this one with {mine!r}"
                )
    return snapshot


def episode_state(env: Any) -> dict[str, Any]:
    """What every env's snapshot holds besides its simulator: the generator's state and seed, the reward
    bookkeeping (copied), the load and the trace window of the episode."""
    return {
        "rng": env.np_random.bit_generator.state,
        "seed": env._np_random_seed,
        "reward": env._reward.copy(),
        "load": env.load,
        "window": env._episode_window,
    }


def restore_episode_state(env: Any, state: dict[str, Any]) -> None:
    """Put ``episode_state``'s part of ``state`` back into ``env`` (the reward bookkeeping copied again, so the
    snapshot can be restored any number of times). Before the simulator's fork, which may draw from the
    restored generator."""
    env.np_random.bit_generator.state = state["rng"]
    env._np_random_seed = state["seed"]
    env._reward = state["reward"].copy()
    env.load = state["load"]
    env._episode_window = state["window"]
