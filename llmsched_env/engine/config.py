"""Validated, frozen configuration of an engine and its tenants (limits, SLO classes, tenants); each dataclass
raises ``ValueError`` naming a bad field at construction."""

from __future__ import annotations

from dataclasses import dataclass, field

from llmsched_env.common.checks import MAX_SLO_S, check_int, check_positive
from llmsched_env.common.tenants import check_tenant_name

VICTIM_RULES = ("latest", "lowest_priority")


@dataclass(frozen=True)
class SLOClass:
    """Latency targets of one class of traffic: time to first token and time per output token."""

    name: str
    ttft_s: float
    tpot_s: float

    def __post_init__(self) -> None:
        for name in ("ttft_s", "tpot_s"):  # a target of over 11 days is a mistyped figure (docs/reliability.md)
            check_positive(f"SLOClass({self.name!r})", name, getattr(self, name), maximum=MAX_SLO_S, unit="s")

    def scaled(self, factor: float) -> SLOClass:
        """The same class with both targets multiplied by ``factor`` (hardware scaling)."""
        check_positive(f"SLOClass({self.name!r})", "scale factor", factor)
        return SLOClass(self.name, self.ttft_s * factor, self.tpot_s * factor)


# Targets used in the literature (DistServe, Sarathi-Serve), for a 7-8B model on one modern GPU.
SLO_CLASSES: dict[str, SLOClass] = {
    "interactive": SLOClass("interactive", ttft_s=0.25, tpot_s=0.1),
    "chat": SLOClass("chat", ttft_s=1.0, tpot_s=0.1),
    "code": SLOClass("code", ttft_s=0.125, tpot_s=0.2),
    "code_long": SLOClass("code_long", ttft_s=0.5, tpot_s=0.2),  # completion over 1k-7k-token prompts (Azure code)
    "summarization": SLOClass("summarization", ttft_s=15.0, tpot_s=0.15),
    "long_context": SLOClass("long_context", ttft_s=5.0, tpot_s=0.1),  # Mooncake-style 10k+ token prompts
    "batch": SLOClass("batch", ttft_s=60.0, tpot_s=1.0),
}


@dataclass(frozen=True)
class TenantConfig:
    """One tenant of the engine: its share weight (VTC), its priority (lower runs first) and its SLO class."""

    name: str
    slo: SLOClass = field(default_factory=lambda: SLO_CLASSES["chat"])
    weight: float = 1.0
    priority: int = 0

    def __post_init__(self) -> None:
        check_tenant_name("TenantConfig", self.name)  # printable, no | or /, not "other" (common.tenants)
        check_positive(f"TenantConfig({self.name!r})", "weight", self.weight)
        if isinstance(self.priority, bool) or not isinstance(self.priority, int):
            raise ValueError(f"TenantConfig({self.name!r}).priority must be an integer, got {self.priority!r}")
        if not isinstance(self.slo, SLOClass):
            raise ValueError(f"TenantConfig({self.name!r}).slo must be an SLOClass, got {self.slo!r}")


# The largest value of each size of an engine (docs/reliability.md, "Bounded reads"): the block pool holds about 96
# bytes per KV block (370 MiB at the bound); the others allocate nothing per unit and are bounded far above any engine.
ENGINE_BOUNDS: dict[str, int] = {"num_kv_blocks": 4_000_000, "block_size": 65_536, "max_num_seqs": 1_000_000,
                                 "max_num_batched_tokens": 16_777_216, "max_model_len": 1_073_741_824}
_BOUND_REASONS = {"num_kv_blocks": " (the simulator's block pool holds about 96 bytes per block: 370 MiB at the bound)"}


@dataclass(frozen=True)
class EngineConfig:
    """Hard limits of one serving engine, as vLLM names them."""

    num_kv_blocks: int = 4096
    block_size: int = 16
    max_num_seqs: int = 128
    max_num_batched_tokens: int = 4096  # the largest token budget
    max_model_len: int = 16384
    victim_rule: str = "latest"  # whom KV shortage preempts: latest admitted (vLLM's) or lowest_priority
    reserve_full_prefill: bool = True

    def __post_init__(self) -> None:
        for name in ENGINE_BOUNDS:
            check_int("EngineConfig", name, getattr(self, name), 2 if name in ("num_kv_blocks", "max_model_len") else 1)
        for name, bound in ENGINE_BOUNDS.items():
            value = getattr(self, name)
            if value > bound:
                raise ValueError(
                    f"EngineConfig.{name} must be at most {bound:,}{_BOUND_REASONS.get(name, '')}, got {value!r}"
                )
        if self.max_num_batched_tokens < self.max_num_seqs:
            raise ValueError(f"EngineConfig.max_num_batched_tokens must be >= max_num_seqs so every running decode "
                             f"fits in one iteration, got {self.max_num_batched_tokens} < {self.max_num_seqs}")
        if not isinstance(self.reserve_full_prefill, bool):
            raise ValueError(
                f"EngineConfig.reserve_full_prefill must be true or false, got {self.reserve_full_prefill!r}"
            )
        if self.victim_rule not in VICTIM_RULES:
            raise ValueError(f"EngineConfig.victim_rule must be one of {VICTIM_RULES}, got {self.victim_rule!r}")

    @property
    def num_kv_tokens(self) -> int:
        """Tokens the whole KV pool holds."""
        return self.num_kv_blocks * self.block_size
