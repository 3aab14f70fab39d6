"""What the simulator benchmarks share: the bare simulator loop, timed.

    from timing import run_to_end           # bench/ is on the path of a script run as python bench/NAME.py
    seconds = run_to_end(sim, decision)      # the core alone: one constant decision every iteration

A constant decision (fcfs's knobs do not depend on the state) leaves out the observation, the mask and the
policy, so the figure is the engine and the simulator's own cost per iteration.
"""

from __future__ import annotations

import time

from llmsched_env.engine.batch import Decision
from llmsched_env.sim.simulator import Simulator

__all__ = ["run_to_end"]


def run_to_end(sim: Simulator, decision: Decision) -> float:
    """Step ``sim`` under ``decision`` until every request has finished or been rejected; the seconds taken."""
    step = sim.step  # bound once: the loop is what is measured
    t0 = time.perf_counter()
    while not sim.done:
        step(decision)
    return time.perf_counter() - t0
