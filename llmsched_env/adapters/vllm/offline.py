"""vLLM's v1 ``Scheduler`` without a GPU or a model: ``make_scheduler`` builds it from an ``EngineConfig``,
``to_vllm_request`` gives synthetic tokens sharing blocks as llmsched's prefix ids do, ``fake_output`` stands in
for the model (one token per request whose prefill is complete).
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import tempfile
from collections.abc import Iterable
from functools import cache
from typing import Any

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")

import torch
from vllm.config import CacheConfig, DeviceConfig, ModelConfig, SchedulerConfig, VllmConfig
from vllm.sampling_params import SamplingParams
from vllm.utils.hashing import sha256
from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
from vllm.v1.core.sched.output import SchedulerOutput
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
from vllm.v1.outputs import ModelRunnerOutput
from vllm.v1.request import Request as VllmRequest
from vllm.v1.structured_output import StructuredOutputManager

from llmsched_env.adapters.vllm import require_vllm
from llmsched_env.engine.config import EngineConfig
from llmsched_env.engine.request import Request

__all__ = ["fake_output", "make_scheduler", "output_token", "prompt_token_ids", "to_vllm_request", "vllm_config"]

_UNIQUE_BASE = 1 << 40  # token ids at or above this are unique to one request and position
_POSITION_BITS = 24  # positions below 16M tokens per request


@cache
def _model_dir(max_position_embeddings: int) -> str:
    """A folder with a tiny Llama ``config.json``: enough for ``ModelConfig`` with no tokenizer and no weights."""
    folder = tempfile.mkdtemp(prefix="llmsched-vllm-model-")
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    config = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
        "num_attention_heads": 4, "num_key_value_heads": 4, "num_hidden_layers": 1, "vocab_size": 32000,
        "max_position_embeddings": max_position_embeddings, "torch_dtype": "float32",
    }  # fmt: skip
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(config, f)
    return folder


def vllm_config(
    config: EngineConfig, chunk_cap: int = 0, watermark: float = 0.0, reserve_full_prefill: bool = True,
    policy: str = "fcfs", async_scheduling: bool = False,
) -> VllmConfig:  # fmt: skip
    """The ``VllmConfig`` of ``config``'s limits on the CPU, prefix caching and chunked prefill on (``chunk_cap``:
    ``long_prefill_token_threshold``, 0 none; ``async_scheduling``: vLLM's ``AsyncScheduler``)."""
    require_vllm()
    model = ModelConfig(model=_model_dir(config.max_model_len), skip_tokenizer_init=True,
                        max_model_len=config.max_model_len, dtype="float32")  # fmt: skip
    sched = SchedulerConfig(
        max_num_batched_tokens=config.max_num_batched_tokens, max_num_seqs=config.max_num_seqs,
        max_model_len=config.max_model_len, enable_chunked_prefill=True, is_encoder_decoder=False,
        long_prefill_token_threshold=chunk_cap, watermark=watermark, scheduler_reserve_full_isl=reserve_full_prefill,
        policy=policy, async_scheduling=async_scheduling,
    )  # fmt: skip
    cache_config = CacheConfig(block_size=config.block_size, enable_prefix_caching=True)
    cache_config.num_gpu_blocks = config.num_kv_blocks + 1  # vLLM keeps one null block
    vc = VllmConfig(
        model_config=model, scheduler_config=sched, cache_config=cache_config, device_config=DeviceConfig("cpu")
    )
    # vLLM's CPU platform turns async scheduling off while building the config (its engine cannot overlap
    # steps); the scheduler itself runs either way, so offline it is set back as asked
    vc.scheduler_config.async_scheduling = async_scheduling
    return vc


def make_scheduler(config: EngineConfig, scheduler_cls: type[Scheduler] = Scheduler, **kwargs: Any) -> Scheduler:
    """vLLM's v1 scheduler (or ``scheduler_cls``) as its engine core builds it from ``kwargs``."""
    names = ("chunk_cap", "watermark", "reserve_full_prefill", "policy", "async_scheduling")
    vc = vllm_config(config, **{k: kwargs.pop(k) for k in names if k in kwargs})
    num_blocks = vc.cache_config.num_gpu_blocks
    assert num_blocks is not None
    spec = FullAttentionSpec(block_size=config.block_size, num_kv_heads=4, head_size=16, dtype=torch.float32)
    kv_cache_config = KVCacheConfig(
        num_blocks=num_blocks, kv_cache_tensors=[], kv_cache_groups=[KVCacheGroupSpec(["layer.0"], spec)]
    )
    init_none_hash(sha256)
    return scheduler_cls(
        vllm_config=vc, kv_cache_config=kv_cache_config, structured_output_manager=StructuredOutputManager(vc),
        block_size=config.block_size, log_stats=True, **kwargs,
    )  # fmt: skip


def _unique_token(request_id: int, position: int) -> int:
    return _UNIQUE_BASE + (request_id << _POSITION_BITS) + position


def prompt_token_ids(r: Request) -> list[int]:
    """Synthetic prompt tokens of ``r``: equal prefix ids at one position give equal tokens, the rest are unique."""
    pit = r.prefix_id_tokens
    covered = min(len(r.prefix_ids) * pit, r.prompt_len)
    tokens = [1 + r.prefix_ids[p // pit] * pit + p % pit for p in range(covered)]
    tokens += [_unique_token(r.request_id, p) for p in range(covered, r.prompt_len)]
    return tokens


def output_token(request_id: int, position: int) -> int:
    """The token a fake model samples for request ``request_id`` at sequence position ``position`` (unique)."""
    return _unique_token(request_id, position)


@cache
def _block_hasher(block_size: int) -> Any:
    init_none_hash(sha256)
    return get_request_block_hasher(block_size, sha256)


def to_vllm_request(r: Request, block_size: int, priority: int = 0) -> VllmRequest:
    """The vLLM request for ``r`` (id ``str(r.request_id)``): synthetic prompt, ``max_tokens=r.output_len``."""
    return VllmRequest(
        request_id=str(r.request_id), prompt_token_ids=prompt_token_ids(r),
        sampling_params=SamplingParams(max_tokens=r.output_len, ignore_eos=True), pooling_params=None,
        arrival_time=r.arrival_s, priority=priority, block_hasher=_block_hasher(block_size),
    )  # fmt: skip


def fake_output(scheduler: Scheduler, out: SchedulerOutput, skip: Iterable[str] = ()) -> ModelRunnerOutput:
    """A token for every scheduled request of ``out`` now fully computed, none mid-prefill or in ``skip``."""
    req_ids = list(out.num_scheduled_tokens)
    skipped = set(skip)
    sampled: list[list[int]] = []
    requests = scheduler.requests
    for rid in req_ids:
        req = requests[rid]
        if rid not in skipped and req.num_computed_tokens >= req.num_tokens:
            sampled.append([output_token(int(rid), req.num_tokens)])
        else:
            sampled.append([])
    return ModelRunnerOutput(
        req_ids=req_ids, req_id_to_index={rid: i for i, rid in enumerate(req_ids)}, sampled_token_ids=sampled
    )
