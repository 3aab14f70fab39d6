"""What forking an episode costs: ``env.unwrapped.snapshot()`` and ``restore(snapshot)`` mid-episode, against a
deep copy and a pickle round trip of the simulator. Prints figures; asserts nothing about time.

    OMP_NUM_THREADS=1 python bench/bench_snapshot.py                      # default, azure-conv; 1,000 requests
    OMP_NUM_THREADS=1 python bench/bench_snapshot.py --scenarios mixed-slo,tenants-on-off --policy tuned

For each scenario: one episode of ``--num-requests`` requests (``--split``, ``--load``, seed 0) under
``--policy`` (a static baseline) is run to its end to count its steps, then again to ``--at`` of them (0.5: the
middle), where snapshot and restore are timed ``--repeats`` times (median and worst, in ms), with the requests
waiting and running and the KV pool's size at that moment. The cluster env is measured the same way with
``--cluster`` (a cluster scenario). Target (issue 26): <= 5 ms each at the middle of a 1,000-request episode.
The worst times include CPython's cyclic garbage collector, whose full collections (tens of ms, over every
object of the process) land on whichever allocation crosses its threshold; ``--gc-off`` times without it.
"""

from __future__ import annotations

import argparse
import copy
import gc
import pickle
import statistics
import time
from typing import Any

import gymnasium as gym

import llmsched_env  # noqa: F401
from llmsched_env.decision.registry import make_policy


def _ms(fn: Any, repeats: int) -> tuple[float, float]:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times), max(times)


def _play(env: Any, policy: Any, obs: Any, steps: int | None) -> tuple[Any, int]:
    u = env.unwrapped
    n = 0
    while steps is None or n < steps:
        obs, _, terminated, truncated, _ = env.step(policy.act(obs, u.action_masks()))
        n += 1
        if terminated or truncated:
            break
    return obs, n


def bench(env_id: str, scenario: str, args: argparse.Namespace) -> None:
    kwargs: dict[str, Any] = {"scenario": scenario, "num_requests": args.num_requests, "split": args.split}
    kwargs["load"] = args.load
    env = gym.make(env_id, **kwargs)
    u = env.unwrapped
    policy = make_policy(args.policy if env_id == "LLMSched-v1" else "round_robin", u.policy_context(), 0)
    obs, _ = env.reset(seed=0)
    _, total = _play(env, policy, obs, None)
    obs, _ = env.reset(seed=0)
    _play(env, policy, obs, max(1, int(total * args.at)))
    snap = u.snapshot()
    snap_ms = _ms(u.snapshot, args.repeats)
    restore_ms = _ms(lambda: u.restore(snap), args.repeats)
    core = u.sim if env_id == "LLMSched-v1" else u.cluster
    deep_ms = _ms(lambda: copy.deepcopy(core), max(1, args.repeats // 10))
    pickle_ms = _ms(lambda: pickle.loads(pickle.dumps(core)), max(1, args.repeats // 10))
    engines = [u.sim.engine] if env_id == "LLMSched-v1" else [rep.engine for rep in u.cluster.replicas]
    waiting = sum(e.num_waiting_total for e in engines)
    running = sum(len(e.running) for e in engines)
    blocks = sum(e.pool.num_blocks for e in engines)
    print(
        f"{scenario:22s} step {int(total * args.at):6d}/{total:<6d} waiting {waiting:4d} running {running:4d} "
        f"KV blocks {blocks:6d} | snapshot {snap_ms[0]:6.2f} ms (max {snap_ms[1]:6.2f})  restore {restore_ms[0]:6.2f}"
        f" ms (max {restore_ms[1]:6.2f}) | deepcopy {deep_ms[0]:7.1f} ms  pickle round trip {pickle_ms[0]:6.1f} ms"
    )
    env.close()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--scenarios", default="default,azure-conv")
    p.add_argument("--cluster", default="", help="cluster scenarios, comma-separated (round_robin router)")
    p.add_argument("--policy", default="fcfs", help="the single-node policy that plays the episode")
    p.add_argument("--num-requests", type=int, default=1000)
    p.add_argument("--split", default="train", help="a split that holds --num-requests requests")
    p.add_argument("--load", type=float, default=1.0)
    p.add_argument("--at", type=float, default=0.5, help="where in the episode, as a share of its steps")
    p.add_argument("--repeats", type=int, default=50)
    p.add_argument("--gc-off", action="store_true", help="time with CPython's cyclic garbage collector off")
    args = p.parse_args()
    if args.gc_off:
        gc.disable()
    gc_note = ", garbage collector off" if args.gc_off else ""
    print(f"snapshot / restore at {args.at:.0%} of a {args.num_requests}-request episode ({args.policy}, "
          f"load {args.load}, split {args.split}); median of {args.repeats}, one core{gc_note}")  # fmt: skip
    for scenario in filter(None, args.scenarios.split(",")):
        bench("LLMSched-v1", scenario, args)
    for scenario in filter(None, args.cluster.split(",")):
        bench("LLMSchedCluster-v0", scenario, args)


if __name__ == "__main__":
    main()
