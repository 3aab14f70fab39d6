"""Fork an episode: what ``env.unwrapped.snapshot()`` returns and ``restore(snapshot)`` takes, on ``LLMSched-v0``
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

__all__ = ["EnvSnapshot", "check_snapshot"]


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
