"""The Gymnasium environments ``LLMSched-v1`` (one engine, one iteration per step) and ``LLMSchedCluster-v0``
(a router over N engines, one arrival per step): thin wrappers over the simulators and the decision layer.
"""

from llmsched_env.envs.cluster import LLMSchedClusterEnv
from llmsched_env.envs.episode import run_episode
from llmsched_env.envs.reward import RewardConfig
from llmsched_env.envs.single_node import LLMSchedEnv

__all__ = ["LLMSchedClusterEnv", "LLMSchedEnv", "RewardConfig", "run_episode"]
