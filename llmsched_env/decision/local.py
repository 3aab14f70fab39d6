"""Each replica's own scheduler inside a cluster: ``LocalScheduler`` drives every replica's iterations with a
single-node ``Policy``, through one ``DecisionLoop`` per replica (that replica's ``ObservationEncoder`` and
``ActionSpec``). No gymnasium, no torch."""

from __future__ import annotations

from collections.abc import Sequence

from llmsched_env.cluster.simulator import Cluster
from llmsched_env.decision.actions import ActionSpec
from llmsched_env.decision.loop import DecisionLoop
from llmsched_env.decision.observation import ObservationEncoder
from llmsched_env.decision.policy import Policy
from llmsched_env.engine.batch import Decision
from llmsched_env.engine.engine import Engine


class LocalScheduler:
    """``local_decide`` for ``Cluster``: ``policies[i]`` decides replica i's iterations through a ``DecisionLoop``
    (no deadline, no fallback: a malformed action is refused naming the replica)."""

    def __init__(
        self,
        policies: Sequence[Policy],
        specs: Sequence[ActionSpec],
        encoders: Sequence[ObservationEncoder],
        record: bool = False,
    ) -> None:
        if not (len(policies) == len(specs) == len(encoders)):
            raise ValueError("LocalScheduler needs one policy, action spec and encoder per replica")
        self.loops = [
            DecisionLoop(spec, encoder, policy, name=f"replica {i}'s local policy", record=record)
            for i, (policy, spec, encoder) in enumerate(zip(policies, specs, encoders, strict=True))
        ]
        self.cluster: Cluster | None = None  # bound after the cluster is built: last iteration times

    @property
    def policies(self) -> list[Policy]:
        """Each replica's policy (every loop has one)."""
        return [loop.policy for loop in self.loops if loop.policy is not None]

    def set_policy(self, i: int, policy: Policy) -> None:
        """Replica ``i``'s policy from now on (``LLMSchedClusterEnv.restore`` puts a copy back)."""
        self.loops[i].policy = policy

    def __call__(self, i: int, engine: Engine) -> Decision:
        # the replica's own last iteration time (its clock also covers the idle gaps between iterations)
        last = self.cluster.replicas[i].last_step_s if self.cluster is not None else 0.0
        decision = self.loops[i].next(engine, last)
        assert decision is not None  # no ENGINE_DEFAULT fallback here
        return decision
