"""What a live ``LLMSchedScheduler`` logs for the simulator to be checked against it (``log_dir`` set).

Two JSONL files, appended to, one JSON object per line:

- ``steps.jsonl``, one record per engine step: ``t0`` (``time.time()`` as ``schedule()`` starts), ``t1`` (it
  returned), ``t2`` (``update_from_output`` starts: the model ran in between), ``t3`` (it returned), the batch's
  cost-model features ``prefill_tokens``, ``decode_seqs``, ``kv_tokens``, ``attn_pairs`` and
  ``num_prefill_seqs`` (``contract.batch_features``), ``busy`` (requests were left after the step, so vLLM's
  engine loop went straight on to the next ``schedule()``), ``policy`` (the name of the policy active when the
  step was decided), ``fallback`` (the cause of a fallback decision made at that step: ``error``,
  ``invalid`` or ``timeout``; null when the policy decided or its decision was held) and ``decision`` (the
  knobs the step ran with, ``[order, token_budget, chunk_cap, prefill_first, max_admit, kv_reserve, shed]``
  after the mask's correction; null for vLLM's own settings);
- ``requests.jsonl``, one record per request as it leaves the scheduler: ``id`` (vLLM's), ``label`` (the
  client's own id, ``vllm_xargs: {"llmsched_request": ...}``, or null), ``tenant`` (the tenant the scheduler
  served it as), ``arrival`` (vLLM's ``arrival_time``), ``first_scheduled``, ``first_token`` (null if never),
  ``finish``, ``prompt_tokens``, ``cached_tokens`` (found in vLLM's prefix cache when first scheduled),
  ``output_tokens``, ``status`` (vLLM's finished status: ``stopped``,
  ``length``, ``aborted``, ...), ``preemptions`` and ``policy`` (the policy active when it was added: policies
  switch only on an engine holding no request, so the one that decided all its steps).

At start, ``engine.json`` holds the scheduler's limits as llmsched's ``EngineConfig`` fields (``num_kv_blocks``
without vLLM's null block, ``block_size``, ``max_num_seqs``, ``max_num_batched_tokens``, ``max_model_len``),
the tenants with their SLO targets, the policy as configured, ``policies`` (the resolved names of every policy
loaded, the one that starts active first), ``control_file`` (null for none) and the vLLM distribution and
version.

Records are buffered and written once a second, when the scheduler runs out of requests, and at exit, so a
step costs a list append. ``live.replay`` reads these files.
"""

from __future__ import annotations

import atexit
import json
import time
from pathlib import Path
from typing import Any

from llmsched_env.common.outputs import write_text_atomically

__all__ = ["LABEL_KEY", "ServeLog"]

LABEL_KEY = "llmsched_request"  # sampling_params.extra_args key carrying the client's id of a request
_FLUSH_S = 1.0


def _knobs(decision: Any) -> list[Any] | None:
    """A step's ``Decision`` as the log keeps it: ``[order, token_budget, chunk_cap, prefill_first, max_admit,
    kv_reserve, shed]`` (the order by name); None for vLLM's own settings (a fallback to them)."""
    if decision is None:
        return None
    d = decision
    return [d.order.name, d.token_budget, d.chunk_cap, int(d.prefill_first), d.max_admit, d.kv_reserve, int(d.shed)]


class ServeLog:
    """Appends step and request records to ``folder``/steps.jsonl and ``folder``/requests.jsonl."""

    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self._steps: list[tuple[Any, ...]] = []
        self._requests: list[dict[str, Any]] = []
        self._last_flush = time.monotonic()
        atexit.register(self.flush)

    def engine(self, info: dict[str, Any]) -> None:
        """Write ``engine.json`` (the server's limits, tenants, policies and vLLM version)."""
        write_text_atomically(self.folder / "engine.json", json.dumps(info, indent=1) + "\n")

    def step(
        self,
        t0: float,
        t1: float,
        t2: float,
        t3: float,
        features: Any,
        busy: bool,
        policy: str,
        fallback: str | None,
        decision: Any = None,
    ) -> None:
        f = features
        self._steps.append(
            (t0, t1, t2, t3, f.num_prefill_tokens, f.num_decode_seqs, f.num_kv_tokens, f.prefill_attn_pairs,
             f.num_prefill_seqs, busy, policy, fallback, decision)
        )  # fmt: skip
        if not busy or time.monotonic() - self._last_flush > _FLUSH_S:
            self.flush()

    def request(self, record: dict[str, Any]) -> None:
        self._requests.append(record)

    def flush(self) -> None:
        """Write what is buffered."""
        self._last_flush = time.monotonic()
        if self._steps:
            keys = ("t0", "t1", "t2", "t3", "prefill_tokens", "decode_seqs", "kv_tokens", "attn_pairs",
                    "num_prefill_seqs", "busy", "policy", "fallback", "decision")  # fmt: skip
            with open(self.folder / "steps.jsonl", "a") as f:
                f.writelines(
                    json.dumps(dict(zip(keys, (*s[:-1], _knobs(s[-1])), strict=True))) + "\n" for s in self._steps
                )
            self._steps = []
        if self._requests:
            with open(self.folder / "requests.jsonl", "a") as f:
                f.writelines(json.dumps(r) + "\n" for r in self._requests)
            self._requests = []
