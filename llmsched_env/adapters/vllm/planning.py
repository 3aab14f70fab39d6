"""vLLM's scheduler state as a simulator a planner can fork (``simulator_of``: the ``planning_state`` ``mpc`` gets).
Imports no vLLM. Not copied: vLLM's prefix cache, the true output lengths (forecast instead), the SLO counts.
"""

from __future__ import annotations

from typing import Any

from llmsched_env.adapters.vllm.state import VllmState
from llmsched_env.engine.engine import Engine
from llmsched_env.engine.request import Request
from llmsched_env.sim.simulator import Simulator

__all__ = ["simulator_of"]

_STEPS = 64  # the step-time estimate is given to the simulator as this many steps of the recent mean


def _copy(sh: Request, produced: int) -> Request:
    """A fresh llmsched request in ``sh``'s place with ``produced`` output tokens."""
    r = Request(sh.request_id, sh.arrival_s, sh.prompt_len, max(sh.output_len, produced + 1), tenant=sh.tenant)
    r.num_output_tokens = produced
    r.first_scheduled_s = sh.first_scheduled_s
    r.first_token_s = sh.first_token_s
    r.num_preemptions = sh.num_preemptions
    r.slo_resolved = sh.slo_resolved
    return r


def simulator_of(state: VllmState) -> Simulator:
    """A simulator in the state of ``state``'s vLLM scheduler now, in O(live requests); on the scheduler's thread."""
    engine = Engine(state.config, state.tenants, state.cost_model)
    engine.advance_clock(max(state.now_s, 0.0))
    engine.vtc[:] = state.vtc  # in place: the queue reads this very list
    engine.service_tokens[:] = state.service_tokens
    engine.finished = list(state.recent_finished)
    engine.num_arrived = len(engine.finished)
    for r in engine.finished:
        engine.num_arrived_t[r.tenant] += 1
    copies: dict[int, Request] = {}  # id(shadow) -> its copy
    unplaced: list[Request] = []
    for vreq in list(state.running):
        sh = state.shadows.get(vreq.request_id)
        produced = int(vreq.num_output_tokens)
        if sh is None or produced >= sh.output_len:  # finishing in this very step
            continue
        r = copies[id(sh)] = _copy(sh, produced)
        computed = min(int(vreq.num_computed_tokens), r.num_prefill_tokens - 1)
        try:
            engine.resume(r, computed)
        except ValueError:  # no room without vLLM's shared prefixes: it waits
            r.num_computed_tokens = 0
            unplaced.append(r)
    for t in range(len(state.tenants)):
        for sh in list(state.queue.in_order(t)):
            waiting: Any = state.vreqs.get(sh.request_id)
            produced = int(waiting.num_output_tokens) if waiting is not None else sh.num_output_tokens
            r = copies[id(sh)] = _copy(sh, produced)
            engine.add_request(r)
    for r in unplaced:
        engine.add_request(r)
    arrived = [copies.get(id(sh), sh) for sh in state.recent_arrivals]
    # before two steps the mean is 0: the planner takes at least the simulator's idle tick
    return Simulator.around(engine, arrived, _STEPS, engine.now_s - _STEPS * state.step_s)
