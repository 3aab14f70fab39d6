"""llmsched: learn, judge and run LLM inference schedulers.

One folder per concern, each importing only the folders listed before it in this table (the arrow names
the nearest one):

    common      checks, fields, outputs, worker lifetimes, registry, the compiled-engine guard  stdlib
    costs       cost models (roofline, fitted) and their presets             <- common
    engine      requests, batch, block pool, queues, engine, invariants      <- costs
    sim         the simulator (event clock), KV-usage accounting, metrics    <- engine
    workloads   arrivals, lengths, traces (+ data/), scenarios, library      <- sim
    cluster     the cluster simulator, its config, metrics and scenarios     <- workloads
    decision    the decision loop, observations, actions, policies, registry <- cluster
    envs        LLMSched-v1, LLMSchedCluster-v0, LLMSchedMix-v0 (gymnasium)  <- decision
    runtime     model, paged KV cache, runner, Runtime        (torch)        <- decision
    adapters    vllm/: parity with vLLM, policies inside vLLM      (vllm)    <- runtime
    evaluation  episodes, grids, capacity search, statistics, outputs, Ray   <- envs, adapters
    live        live vLLM servers measured, fitted and replayed               <- evaluation
    commands    the command lines (llmsched-evaluate, llmsched-calibrate)    <- live

Importing the package registers ``LLMSched-v1`` (and its schema-1 predecessor ``LLMSched-v0``),
``LLMSchedCluster-v0`` and ``LLMSchedMix-v0`` with Gymnasium when Gymnasium is installed; no folder listed before
``envs`` needs it.
"""

__version__ = "0.1.0"

from llmsched_env.common.compiled import guard as _guard_compiled

_guard_compiled()  # a compiled engine older than its sources never runs (llmsched-compile)


def _register() -> None:
    # Gymnasium imported by name: the type check of the compiled engine's build follows every import statement of
    # this file, and pip's build environment holds only the build requirements (tests/test_compiled.py)
    import importlib

    try:
        registration = importlib.import_module("gymnasium.envs.registration")
    except ImportError:  # the torch runtime may run without gymnasium
        return
    register, registry = registration.register, registration.registry
    envs = {
        "LLMSched-v0": "llmsched_env.envs.single_node:make_v0",  # observation schema 1 (per named tenant)
        "LLMSched-v1": "llmsched_env.envs.single_node:make_v1",  # observation schema 2 (workload-agnostic)
        "LLMSchedCluster-v0": "llmsched_env.envs.cluster:LLMSchedClusterEnv",
        "LLMSchedMix-v0": "llmsched_env.envs.mixture:WorkloadMixEnv",
    }
    for env_id, entry_point in envs.items():
        if env_id not in registry:
            # gym.make returns the env itself: no OrderEnforcing wrapper and no PassiveEnvChecker (the tests check)
            register(id=env_id, entry_point=entry_point, order_enforce=False, disable_env_checker=True)


_register()
