"""vLLM's real scheduler as an evaluation engine (``compare_engines``): every run of an ``EvalConfig`` on the same
requests through the simulator and vLLM's scheduler in the loop, both priced by the scenario's cost model.
vLLM is imported only when a run starts; ``check_vllm()`` says in one line when it is missing.
"""

from __future__ import annotations

from typing import Any

from llmsched_env.adapters.vllm import require_vllm
from llmsched_env.decision.registry import make_scheduler
from llmsched_env.decision.serve import ServeOptions, serve
from llmsched_env.evaluation.config import EvalConfig, Row
from llmsched_env.sim.setup import SimSetup
from llmsched_env.sim.simulator import Simulator

__all__ = ["COMPARE_COLUMNS", "check_vllm", "compare_engines", "compare_run", "format_comparison"]

COMPARE_COLUMNS = ("policy", "scenario", "load", "seed", "sim_attainment", "vllm_attainment", "gap")


def check_vllm() -> None:
    """``ValueError`` with one actionable line unless the vLLM version the adapter reads is installed."""
    try:
        require_vllm()
    except RuntimeError as exc:
        raise ValueError(str(exc)) from None


def compare_run(
    config: EvalConfig, scenario: Any, load: float, spec: Any, seed: int, policy_timeout_s: float = 0.1
) -> Row:
    """One run on both engines: its key, both attainments, their gap and each engine's metrics (``sim/``, ``vllm/``)."""
    from llmsched_env.adapters.vllm.loop import VllmLoop

    env = config.make_env(scenario, load, spec.iterations_per_step, spec.schema)
    u: Any = env.unwrapped
    ctx = u.policy_context()
    sim = Simulator(u.engine_config, u.tenants, u.cost_model, u.episode_requests(seed))
    sim_metrics, _ = serve(
        sim,
        spec.make(env, seed),
        u.encoder,
        u.action_spec,
        make_scheduler("fcfs", ctx),
        ServeOptions(
            iterations_per_step=spec.iterations_per_step,
            policy_timeout_s=policy_timeout_s,
            check_invariants=config.check_invariants,
        ),
    )
    setup = SimSetup(
        u.engine_config,
        u.tenants,
        u.cost_model,
        u.episode_requests(seed),
        spec.make(env, seed),
        iterations_per_step=spec.iterations_per_step,
        nominal_rate_rps=u.source.nominal_rate_rps(),
        seed=seed,
        scenario=ctx.scenario,
    )
    loop = VllmLoop(setup, policy_timeout_s)
    vllm_metrics = loop.run()
    env.close()
    row: Row = {
        "policy": spec.name,
        "scenario": scenario.name,
        "load": load,
        "seed": seed,
        "sim_attainment": sim_metrics["slo_attainment"],
        "vllm_attainment": vllm_metrics["slo_attainment"],
        "gap": vllm_metrics["slo_attainment"] - sim_metrics["slo_attainment"],
    }
    row.update({f"sim/{k}": v for k, v in sim_metrics.items()})
    row.update({f"vllm/{k}": v for k, v in vllm_metrics.items()})
    return row


def compare_engines(config: EvalConfig, policy_timeout_s: float = 0.1) -> list[Row]:
    """``compare_run`` for every run of ``config`` (single-node scenarios, the simulator's cost model)."""
    for spec in config.policies:
        if spec.lookahead is not None:
            raise ValueError(f"--engine vllm: policy {spec.name!r} is clairvoyant (it replays the requests to come)")
        if spec.mpc is not None:  # it plans on the adapter's state: the adapter builds it, not this comparison
            raise ValueError(
                f"--engine vllm: policy {spec.name!r} plans on the vLLM adapter's state; run it through the adapter "
                "(policy: mpc in its config) or the live experiment"
            )
    check_vllm()
    if config.is_cluster or config.runtime is not None:
        raise ValueError("--engine vllm compares single-node scenarios on the simulator's cost model only")
    return [
        compare_run(config, scenario, load, spec, seed, policy_timeout_s)
        for scenario in config.scenarios
        for load in config.loads
        for spec in config.policies
        for seed in config.seeds
    ]


def format_comparison(rows: list[Row]) -> str:
    """The rows as an aligned table of ``COMPARE_COLUMNS``, a fallen-back run's policy marked ``[fallback N%]``."""
    from llmsched_env.evaluation.fallbacks import fallback_mark
    from llmsched_env.evaluation.tables import format_table

    return format_table([{**row, "policy": f"{row['policy']}{fallback_mark(row)}"} for row in rows], COMPARE_COLUMNS)
