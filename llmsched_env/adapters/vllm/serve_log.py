"""What a live ``LLMSchedScheduler`` logs in its ``log_dir`` (docs/vllm.md): ``steps.jsonl``, ``requests.jsonl`` and
``engine.json``; records are written once a second, when the scheduler runs out of requests, and at exit.
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
        self, t0: float, t1: float, t2: float, t3: float, features: Any, busy: bool, policy: str, fallback: str | None,
        decision: Any = None,
    ) -> None:  # fmt: skip
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
