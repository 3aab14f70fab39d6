"""The scheduling core of one serving engine, as vLLM v1 builds its batches: requests, the paged KV block
pool with prefix caching, the waiting queues, the batch builder with chunked prefill and preemption, the
remote KV store, and the invariants tests check every step. Stdlib and numpy; no clock of its own.
"""

from llmsched_env.engine.batch import Batch, Decision, QueueOrder
from llmsched_env.engine.block_pool import BlockPool
from llmsched_env.engine.config import SLO_CLASSES, EngineConfig, SLOClass, TenantConfig
from llmsched_env.engine.engine import Engine
from llmsched_env.engine.invariants import check_engine
from llmsched_env.engine.remote_kv import RemoteKVConfig, RemoteKVStore
from llmsched_env.engine.request import Request, Status

__all__ = ["SLO_CLASSES", "Batch", "BlockPool", "Decision", "Engine", "EngineConfig", "QueueOrder", "RemoteKVConfig",
           "RemoteKVStore", "Request", "SLOClass", "Status", "TenantConfig", "check_engine"]
