"""The Gymnasium environments, thin wrappers over the simulators and the decision layer, on one template
(``envs.base.EnvBase``): ``LLMSched-v1``/``-v0`` (one engine, one iteration per step), ``LLMSchedCluster-v0`` (a
router over N engines, one arrival per step) and ``LLMSchedMix-v0`` (a new workload each episode)."""

# ruff: noqa: F401 (the package re-exports these names)

from llmsched_env.envs.base import EnvBase, EnvSnapshot
from llmsched_env.envs.cluster import ClusterEnvConfig, LLMSchedClusterEnv
from llmsched_env.envs.episode import run_episode
from llmsched_env.envs.options import EpisodeConfig
from llmsched_env.envs.reward import RewardConfig
from llmsched_env.envs.single_node import LLMSchedEnv, SingleNodeConfig
