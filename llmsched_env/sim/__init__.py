"""The simulator: one engine driven by a cost model on a simulated clock, its KV-usage accounting and the serving
metrics computed the way vLLM's benchmark does.
"""

from llmsched_env.sim.kv_usage import KVUsage
from llmsched_env.sim.metrics import compute_metrics, jain_index
from llmsched_env.sim.setup import SimSetup
from llmsched_env.sim.simulator import Simulator

__all__ = ["KVUsage", "SimSetup", "Simulator", "compute_metrics", "jain_index"]
