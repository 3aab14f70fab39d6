"""The cluster's invariants, checked by tests after every step: every replica's engine invariants, and no
request lost or counted twice across the cluster."""

from __future__ import annotations

from llmsched_env.cluster.simulator import Cluster
from llmsched_env.engine.invariants import Places, check_engine
from llmsched_env.engine.request import Status


def check_cluster(cluster: Cluster) -> None:
    """AssertionError naming the first inconsistency: a replica's engine invariants; a routed request not in
    exactly one place; a replica with work but not exactly one pending event; a clock ahead of the cluster's."""
    seen = Places()
    place = seen.place

    now = cluster.now_s
    events = [0] * len(cluster.replicas)
    for t, kind, i in cluster.pending_events():
        assert t >= now, f"an event at {t} lies before the cluster clock {now}"
        if kind == 0:
            events[i] += 1
    for rep in cluster.replicas:
        eng = rep.engine
        check_engine(eng)
        i = rep.index
        assert eng.now_s <= now + 1e-12, f"replica {i}'s clock {eng.now_s} is ahead of the cluster's {now}"
        assert events[i] == int(rep.busy), f"replica {i}: busy={rep.busy} but {events[i]} pending events"
        assert rep.busy or not eng.has_work, f"replica {i} has work but nothing will run it"
        assert rep.batch is None or rep.busy, f"replica {i} holds a batch while idle"
        for where, reqs in (
            ("waiting", eng.waiting_requests()),
            ("running", eng.running.values()),
            ("landed", eng.landed),
            ("finished", eng.finished),
            ("rejected", eng.rejected),
        ):
            for r in reqs:
                place(r, f"replica {i} {where}")
    for r in cluster.in_flight.values():
        place(r, "a KV transfer")
        assert r.status == Status.TRANSFERRING, f"in-flight {r} has status {r.status.name}"
    assert sum(rep.num_incoming for rep in cluster.replicas) == len(cluster.in_flight), "incoming counts drifted"
    assert len(seen) == cluster.num_routed, f"{len(seen)} requests placed but {cluster.num_routed} routed"
    assert all(r.arrival_s <= now for r in cluster.arrived_requests()), "a routed request arrives in the future"
