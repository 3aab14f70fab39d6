"""llmsched: learn, judge and run LLM inference schedulers.

Importing the package registers ``LLMSched-v0`` and ``LLMSchedCluster-v0`` with Gymnasium when Gymnasium is
installed; the core (``llmsched_env.core``) and ``llmsched_env.decision`` never need it.
"""

__version__ = "0.1.0"


def _register() -> None:
    try:
        from gymnasium.envs.registration import register, registry
    except ImportError:  # the torch runtime may run without gymnasium
        return
    if "LLMSched-v0" not in registry:
        register(id="LLMSched-v0", entry_point="llmsched_env.env:LLMSchedEnv")
    if "LLMSchedCluster-v0" not in registry:
        register(id="LLMSchedCluster-v0", entry_point="llmsched_env.cluster_env:LLMSchedClusterEnv")


_register()
