"""Randomised serving situations for training a generalist: ``random_scenario(seed)`` draws an engine, a cost
model and 1 to 16 tenants from a ``RandomizedSpace``, at rates that put load 1.0 near the engine's knee
(``nominal_rate_rps``); the same seed and space give an equal ``Scenario``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from llmsched_env.common.checks import MAX_LOAD, MIN_LOAD, check_int, is_finite_number
from llmsched_env.common.tenants import check_tenant_count
from llmsched_env.costs.base import CostModel, prefill_time_s
from llmsched_env.costs.loader import load_cost_model
from llmsched_env.engine.config import SLO_CLASSES, EngineConfig
from llmsched_env.workloads.arrivals import ArrivalProcess, GammaArrivals, OnOff
from llmsched_env.workloads.lengths import LengthDist
from llmsched_env.workloads.library import LONG_CONTEXT, SMALL_LOCAL
from llmsched_env.workloads.scenarios import Scenario, SyntheticSource, scaled_tenant, slo_scale
from llmsched_env.workloads.workload import TenantWorkload, WorkloadConfig

# A small engine: a quarter of the default's KV pool and half its batch limits.
SMALL_ENGINE = EngineConfig(num_kv_blocks=2048, max_num_seqs=64, max_num_batched_tokens=2048)
ENGINE_CHOICES: tuple[EngineConfig, ...] = (EngineConfig(), LONG_CONTEXT, SMALL_LOCAL, SMALL_ENGINE)
COST_MODEL_CHOICES = ("llama3-8b-h100", "llama3-8b-a100", "llama2-70b-4xh100")
ARRIVAL_CHOICES = ("poisson", "gamma", "on_off")
# The library's FCFS knees over ``nominal_rate_rps``'s bound (geometric mean of four library scenarios).
KNEE_FRACTION = 0.41
MIN_BATCHED_TOKENS = 64  # the smallest max_num_batched_tokens an engine of the space may have
FIT_COPIES = 2  # the KV pool must hold this many of a family's longest requests at once
TTFT_HEADROOM = 2.0  # an SLO class suits a tenant when its TTFT target is >= this x its typical prefill alone
PREFIX_ID_TOKENS = 512  # WorkloadConfig's default: the granularity of shared system prompts
SHARED_PREFIX_CHOICES = (512, 1024, 2048, 4096)  # system prompt lengths, those shorter than the longest prompt
MAX_SHARED_PREFIXES = 8


@dataclass(frozen=True)
class _Family:
    """A family of length distributions: lognormal medians from ``prompt`` / ``output`` and sigmas from ``sigma``,
    or (``sigma`` None) uniform sub-ranges, low end in the range's first third, high end in its last."""

    max_prompt_len: int
    max_output_len: int
    prompt: tuple[int, int]
    output: tuple[int, int]
    sigma: tuple[float, float] | None

    @property
    def max_total_len(self) -> int:
        return self.max_prompt_len + self.max_output_len

    def draw(self, rng: np.random.Generator) -> LengthDist:
        limits = {"max_prompt_len": self.max_prompt_len, "max_output_len": self.max_output_len}
        if self.sigma is None:
            return LengthDist.uniform(_sub_range(rng, self.prompt), _sub_range(rng, self.output), **limits)
        medians = [round(float(rng.uniform(*side)), 1) for side in (self.prompt, self.output)]
        sigmas = [round(float(rng.uniform(*self.sigma)), 3) for _ in range(2)]
        return LengthDist.lognormal(medians[0], medians[1], sigmas[0], sigmas[1], **limits)


def _sub_range(rng: np.random.Generator, bounds: tuple[int, int]) -> tuple[int, int]:
    lo, hi = bounds
    third = (hi - lo) // 3
    return lo + int(rng.integers(0, third + 1)), hi - int(rng.integers(0, third + 1))


_FAMILIES: dict[str, _Family] = {
    "short_chat": _Family(2048, 512, prompt=(50, 300), output=(30, 250), sigma=(0.5, 1.0)),
    "sharegpt": _Family(8192, 2048, prompt=(400, 1500), output=(150, 400), sigma=(0.8, 1.2)),
    "code": _Family(8192, 512, prompt=(800, 3000), output=(15, 80), sigma=(0.5, 0.9)),
    "summarization": _Family(12288, 1024, prompt=(2000, 5000), output=(150, 400), sigma=(0.4, 0.7)),
    "long_context": _Family(32768, 1024, prompt=(8192, 32768), output=(16, 1024), sigma=None),
}
LENGTH_FAMILIES = tuple(_FAMILIES)


def fits_engine(engine: EngineConfig, max_total_len: int) -> bool:
    """Whether requests of ``max_total_len`` tokens fit ``max_model_len``, and ``FIT_COPIES`` of them the KV pool."""
    blocks = -(-max_total_len // engine.block_size)
    return max_total_len <= engine.max_model_len and FIT_COPIES * blocks <= engine.num_kv_blocks


def _check_choices(name: str, value: Any, allowed: Sequence[str]) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, (tuple, list)) or not value:
        raise ValueError(f"RandomizedSpace.{name} must be a non-empty tuple of names, got {value!r}")
    unknown = [v for v in value if v not in allowed]
    if unknown:
        raise ValueError(f"RandomizedSpace.{name}: unknown {unknown}, expected some of {tuple(allowed)}")
    if len(set(value)) != len(value):
        raise ValueError(f"RandomizedSpace.{name} must not repeat a name, got {value!r}")
    return tuple(value)


def _check_range(name: str, value: Any, lowest: float, highest: float = math.inf) -> tuple[float, float]:
    """``value`` as floats (lo, hi) with ``lowest <= lo <= hi <= highest`` (``lowest`` excluded when 0)."""
    ok = isinstance(value, (tuple, list)) and len(value) == 2 and all(is_finite_number(v) for v in value)
    if not ok or not (lowest <= value[0] <= value[1] <= highest) or (lowest == 0 and value[0] == 0):
        low = "0 <" if lowest == 0 else f"{lowest} <="
        high = "" if highest == math.inf else f" <= {highest}"
        raise ValueError(f"RandomizedSpace.{name} must be a pair (lo, hi) with {low} lo <= hi{high}, got {value!r}")
    return float(value[0]), float(value[1])


@dataclass(frozen=True)
class RandomizedSpace:
    """The ranges a random scenario is drawn from, each field checked (``ValueError`` naming it); a tenant's SLO class
    has a TTFT target of at least ``TTFT_HEADROOM`` x its typical prefill (else the loosest)."""

    min_tenants: int = 1
    max_tenants: int = 16
    slo_classes: tuple[str, ...] = tuple(SLO_CLASSES)
    length_families: tuple[str, ...] = LENGTH_FAMILIES
    arrival_kinds: tuple[str, ...] = ARRIVAL_CHOICES
    gamma_cv_range: tuple[float, float] = (1.0, 4.0)
    on_off_cycle_s: tuple[float, float] = (10.0, 60.0)
    on_fraction_range: tuple[float, float] = (0.2, 0.8)
    load_range: tuple[float, float] = (0.3, 2.0)
    engines: tuple[EngineConfig, ...] = ENGINE_CHOICES
    cost_models: tuple[str, ...] = COST_MODEL_CHOICES
    weight_range: tuple[float, float] = (0.5, 4.0)
    max_priority: int = 3
    prefix_prob: float = 0.3
    prefix_share_range: tuple[float, float] = (0.2, 0.9)

    def __post_init__(self) -> None:
        check_int("RandomizedSpace", "min_tenants", self.min_tenants, 1)
        check_int("RandomizedSpace", "max_tenants", self.max_tenants, self.min_tenants)
        check_tenant_count("RandomizedSpace.max_tenants", self.max_tenants)  # at most MAX_TENANTS (common.tenants)
        check_int("RandomizedSpace", "max_priority", self.max_priority, 0)
        if not is_finite_number(self.prefix_prob) or not 0 <= self.prefix_prob <= 1:
            raise ValueError(f"RandomizedSpace.prefix_prob must be a probability in [0, 1], got {self.prefix_prob!r}")
        choices = {"slo_classes": tuple(SLO_CLASSES), "length_families": LENGTH_FAMILIES,
                   "arrival_kinds": ARRIVAL_CHOICES}
        ranges = {"gamma_cv_range": (0.0, math.inf), "on_off_cycle_s": (0.0, math.inf), "on_fraction_range": (0.0, 1.0),
                  "load_range": (MIN_LOAD, MAX_LOAD), "weight_range": (0.0, math.inf), "prefix_share_range": (0.0, 1.0)}
        fields: dict[str, Any] = {name: _check_choices(name, getattr(self, name), a) for name, a in choices.items()}
        fields |= {name: _check_range(name, getattr(self, name), *bounds) for name, bounds in ranges.items()}
        fields |= {"engines": self._checked_engines(), "cost_models": self._checked_cost_models()}
        for name, value in fields.items():
            object.__setattr__(self, name, value)

    def _checked_engines(self) -> tuple[EngineConfig, ...]:
        engines = self.engines
        if not isinstance(engines, (tuple, list)) or not engines:
            raise ValueError(f"RandomizedSpace.engines must be a non-empty tuple of EngineConfig, got {engines!r}")
        families = _check_choices("length_families", self.length_families, LENGTH_FAMILIES)
        for i, engine in enumerate(engines):
            if not isinstance(engine, EngineConfig):
                raise ValueError(f"RandomizedSpace.engines[{i}] must be an EngineConfig, got {engine!r}")
            if engine.max_num_batched_tokens < MIN_BATCHED_TOKENS:
                raise ValueError(f"RandomizedSpace.engines[{i}].max_num_batched_tokens must be >= "
                                 f"{MIN_BATCHED_TOKENS}, got {engine.max_num_batched_tokens}")
            if not any(fits_engine(engine, _FAMILIES[f].max_total_len) for f in families):
                raise ValueError(f"RandomizedSpace.engines[{i}] fits none of the length families {families} (a "
                                 f"family's longest request must fit max_model_len, and {FIT_COPIES} of them the KV "
                                 f"pool): {engine}")
            if self.prefix_prob > 0 and PREFIX_ID_TOKENS % engine.block_size:
                raise ValueError(f"RandomizedSpace.engines[{i}].block_size={engine.block_size} must divide "
                                 f"{PREFIX_ID_TOKENS} for shared prefixes (or set prefix_prob=0)")
        return tuple(engines)

    def _checked_cost_models(self) -> tuple[str, ...]:
        names = self.cost_models
        if isinstance(names, str) or not isinstance(names, (tuple, list)) or not names:
            raise ValueError(f"RandomizedSpace.cost_models must be a non-empty tuple of names, got {names!r}")
        for name in names:
            try:
                load_cost_model(name)
            except (TypeError, ValueError) as err:
                raise ValueError(f"RandomizedSpace.cost_models: {err}") from None
        return tuple(names)


DEFAULT_SPACE = RandomizedSpace()


def nominal_rate_rps(engine: EngineConfig, cost_model: CostModel | str, mix: Sequence[tuple[LengthDist, float]],
                     max_step_s: float | None = None, num_samples: int = 8192) -> float:
    """An estimate of the knee (load 1.0, requests/s) of ``engine`` on ``cost_model`` for ``mix`` ((lengths, share)
    pairs): with ``x`` requests starting per iteration (the most ``max_num_seqs``, the KV pool, the token budget and
    ``max_step_s`` allow, from seeded samples), ``KNEE_FRACTION * x / t(x)``, within about 2x of the real knee."""
    model = load_cost_model(cost_model) if isinstance(cost_model, str) else cost_model
    check_int("nominal_rate_rps", "num_samples", num_samples, 1)
    if not mix or any(not isinstance(ln, LengthDist) or not (is_finite_number(w) and w > 0) for ln, w in mix):
        raise ValueError(f"nominal_rate_rps: mix must be non-empty (LengthDist, share > 0) pairs, got {mix!r}")
    rng = np.random.default_rng(0)
    total = float(sum(w for _, w in mix))
    prompt = output = held = pairs = 0.0
    for lengths, weight in mix:
        p, o = (a.astype(np.float64) for a in lengths.sample(rng, num_samples))
        share = weight / total
        prompt += share * float(p.mean())
        output += share * float(o.mean())
        held += share * float(((p + o / 2) * o).mean())
        pairs += share * float((p * (p + 1) / 2).mean())

    def step_s(x: float) -> float:
        return model.step_time_s(x * prompt, x * output, x * held, x * pairs)  # type: ignore[arg-type]

    x = min(engine.max_num_seqs / output, engine.num_kv_tokens / held)
    x = min(x, engine.max_num_batched_tokens / (prompt + output))
    if max_step_s is not None and step_s(x) > max_step_s:
        lo, hi = 0.0, x  # t(x) rises with x: bisect for t(x) = max_step_s
        for _ in range(60):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if step_s(mid) <= max_step_s else (lo, mid)
        x = lo if lo > 0 else hi
    return KNEE_FRACTION * x / step_s(x)


def workload_nominal_rate_rps(engine: EngineConfig, cost_model: CostModel | str, workload: WorkloadConfig) -> float:
    """``nominal_rate_rps`` of ``workload``'s tenants by rate share, capped by their tightest TPOT target."""
    mix = [(t.lengths, t.rate_rps) for t in workload.tenants]
    return nominal_rate_rps(engine, cost_model, mix, max_step_s=min(t.tenant.slo.tpot_s for t in workload.tenants))


@dataclass(frozen=True)
class RandomizedWorkload:
    """A random scenario's ``make_source``: (split, SLO scale) -> the split's ``SyntheticSource``, SLOs scaled."""

    workload: WorkloadConfig

    def scaled_slos(self, scale: float) -> WorkloadConfig:
        """The workload with every tenant's SLO targets multiplied by ``scale`` (see ``slo_scale``)."""
        return self.workload.slo_scaled(scale)

    def __call__(self, split: str, scale: float) -> SyntheticSource:
        return SyntheticSource(self.scaled_slos(scale), split)


def _arrival(rng: np.random.Generator, space: RandomizedSpace, rate: float) -> tuple[str, ArrivalProcess | None]:
    kind = space.arrival_kinds[int(rng.integers(len(space.arrival_kinds)))]
    if kind == "gamma":
        return kind, GammaArrivals(rate, round(float(rng.uniform(*space.gamma_cv_range)), 3))
    if kind == "on_off":
        cycle = float(rng.uniform(*space.on_off_cycle_s))
        on = cycle * float(rng.uniform(*space.on_fraction_range))
        return kind, OnOff(rate * cycle / on, on_s=on, off_s=cycle - on, phase_s=float(rng.uniform(0.0, cycle)))
    return kind, None


def _typical_prompt(lengths: LengthDist) -> int:
    if lengths.kind == "lognormal":
        return max(1, round(lengths.prompt_median))
    return (lengths.prompt_range[0] + lengths.prompt_range[1]) // 2


def _draw_slo(rng: np.random.Generator, space: RandomizedSpace, typical_prefill_s: float, scale: float) -> str:
    suited = [c for c in space.slo_classes if SLO_CLASSES[c].ttft_s * scale >= TTFT_HEADROOM * typical_prefill_s]
    if not suited:
        return max(space.slo_classes, key=lambda c: SLO_CLASSES[c].ttft_s)
    return suited[int(rng.integers(len(suited)))]


def _draw_tenant(rng: np.random.Generator, space: RandomizedSpace, index: int, share: float, families: Sequence[str],
                 engine: EngineConfig, model: CostModel) -> TenantWorkload:  # fmt: skip
    """Tenant ``index`` at rate ``share`` (rescaled later), SLOs at the reference hardware."""
    family = families[int(rng.integers(len(families)))]
    lengths = _FAMILIES[family].draw(rng)
    prefill = prefill_time_s(model, _typical_prompt(lengths), chunk_tokens=engine.max_num_batched_tokens)
    slo = _draw_slo(rng, space, prefill, slo_scale(model))
    low, high = space.weight_range
    weight = round(float(math.exp(rng.uniform(math.log(low), math.log(high)))), 3)
    priority = int(rng.integers(space.max_priority + 1))
    kind, arrival = _arrival(rng, space, share)
    extra: dict[str, Any] = {}
    prefix_choices = [n for n in SHARED_PREFIX_CHOICES if n < lengths.max_prompt_len]
    if rng.random() < space.prefix_prob and prefix_choices:
        extra = {"prefix_share": round(float(rng.uniform(*space.prefix_share_range)), 3),
                 "num_shared_prefixes": int(rng.integers(1, MAX_SHARED_PREFIXES + 1)),
                 "shared_prefix_tokens": prefix_choices[int(rng.integers(len(prefix_choices)))]}
    tenant = scaled_tenant(f"t{index}-{family}-{kind}", slo, 1.0, weight, priority)
    if arrival is None:
        return TenantWorkload(tenant, share, lengths, **extra)
    return TenantWorkload.with_arrival(tenant, arrival, lengths, **extra)


def random_scenario(seed: int, space: RandomizedSpace = DEFAULT_SPACE, num_requests: int = 1000) -> Scenario:
    """The random scenario ``random-<seed>`` of ``space``: engine, cost model, tenants (named
    ``t<i>-<family>-<arrival kind>``) and their traffic shares (flat Dirichlet) of ``workload_nominal_rate_rps``."""
    check_int("random_scenario", "seed", seed, 0)
    check_int("random_scenario", "num_requests", num_requests, 1)
    if not isinstance(space, RandomizedSpace):
        raise ValueError(f"random_scenario: space must be a RandomizedSpace, got {type(space).__name__}")
    rng = np.random.default_rng([seed, 0x5CE7A])
    engine = space.engines[int(rng.integers(len(space.engines)))]
    cost_model = space.cost_models[int(rng.integers(len(space.cost_models)))]
    model = load_cost_model(cost_model)
    families = [f for f in space.length_families if fits_engine(engine, _FAMILIES[f].max_total_len)]
    num_tenants = int(rng.integers(space.min_tenants, space.max_tenants + 1))
    shares = np.maximum(rng.dirichlet(np.ones(num_tenants)), 1e-3)  # no tenant without traffic
    tenants = tuple(_draw_tenant(rng, space, i, float(share), families, engine, model) for i,
                    share in enumerate(shares))
    draft = RandomizedWorkload(WorkloadConfig(tenants, num_requests))
    rate = workload_nominal_rate_rps(engine, model, draft.scaled_slos(slo_scale(model)))
    source = RandomizedWorkload(draft.workload.scaled(rate / float(shares.sum())))
    kinds = sorted({t.tenant.name.split("-", 1)[1] for t in tenants})
    description = (f"random: {num_tenants} tenant(s) ({', '.join(kinds)}) at {rate:.3g} req/s nominal; engine with "
                   f"{engine.num_kv_tokens} KV tokens, {engine.max_num_seqs} seqs, {engine.max_num_batched_tokens} "
                   f"batched tokens; {cost_model}")
    name = f"random-{seed}"
    return Scenario(name, description, source, engine=engine, cost_model=cost_model, num_requests=num_requests)


def random_scenarios(seeds: Iterable[int], space: RandomizedSpace = DEFAULT_SPACE,
                     num_requests: int = 1000) -> list[Scenario]:
    """``random_scenario`` of each seed, in order."""
    return [random_scenario(seed, space, num_requests) for seed in seeds]
