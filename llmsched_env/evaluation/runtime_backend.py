"""The torch runtime as an evaluation backend (imported only when ``EvalConfig.runtime`` is set: it imports torch)."""

from __future__ import annotations

from typing import Any

from llmsched_env.costs.loader import load_cost_model
from llmsched_env.decision.observation import make_encoder
from llmsched_env.decision.policy_spec import PolicySpec
from llmsched_env.decision.registry import make_scheduler
from llmsched_env.decision.serve import ServeOptions, serve
from llmsched_env.engine.config import EngineConfig
from llmsched_env.evaluation.config import EvalConfig, InputError
from llmsched_env.evaluation.runtime_options import RuntimeOptions
from llmsched_env.runtime.calibrate import ProfileGrid, measured_over_predicted, profile
from llmsched_env.runtime.executor import Runtime
from llmsched_env.runtime.runner import ModelRunner
from llmsched_env.workloads.scenarios import slo_scale

__all__ = ["SPEED_CHECK_GRID", "SPEED_WARN_RATIO", "Runners", "runtime_episode", "speed_check", "speed_message"]

# A few seconds of timing on the tiny model on CPU: decode batches of several sizes and prefill chunks, the
# shapes that dominate an episode.
SPEED_CHECK_GRID = ProfileGrid(
    prefill_tokens=(0, 64, 256), prefill_context=(0,), decode_seqs=(0, 1, 8, 32), decode_context=(256,)
)
SPEED_WARN_RATIO = 1.25  # a machine this much slower or faster than its preset gets a warning


class Runners:
    """The model runners of one process, one per KV pool shape, each built on first use and kept."""

    def __init__(self, options: RuntimeOptions) -> None:
        self.options = options
        self._runners: dict[tuple[int, int], ModelRunner] = {}

    def get(self, cfg: EngineConfig) -> ModelRunner:
        """The runner for ``cfg``'s KV pool; ``InputError`` naming the file when the weights do not load."""
        key = (cfg.num_kv_blocks, cfg.block_size)
        if key not in self._runners:
            try:
                self._runners[key] = self.options.runner.build(cfg.num_kv_blocks, cfg.block_size)
            except ValueError as exc:  # a bad weights file: its loader names the file and the tensor
                raise InputError(str(exc)) from None
        return self._runners[key]


def runtime_episode(
    config: EvalConfig, env: Any, spec: PolicySpec, seed: int, runners: Runners
) -> tuple[dict[str, float], Runtime]:
    """Serve ``env``'s ``seed`` episode on the torch runtime (arrivals stretched by ``slo_scale``; fcfs fallback)."""
    assert config.runtime is not None
    u: Any = env.unwrapped
    cfg = u.engine_config
    runner = runners.get(cfg)
    dilation = slo_scale(u.cost_model)
    requests = u.episode_requests(seed)
    for r in requests:
        r.arrival_s *= dilation
    rt = Runtime(runner, cfg, u.tenants, u.cost_model, requests, seed=seed, realtime=config.runtime.realtime)
    encoder = make_encoder(u.schema, cfg, u.tenants, u.source.nominal_rate_rps() / dilation)
    metrics, _ = serve(
        rt,
        spec.make(env, seed),
        encoder,
        u.action_spec,
        make_scheduler("fcfs", u.policy_context()),
        ServeOptions(
            iterations_per_step=spec.iterations_per_step,
            policy_timeout_s=config.runtime.policy_timeout_s,
            check_invariants=config.check_invariants,
        ),
    )
    return metrics, rt


def speed_check(runners: Runners, cfg: EngineConfig, cost_model: str, repeats: int = 3) -> float:
    """This machine's step time over what ``cost_model`` predicts on ``SPEED_CHECK_GRID``: 1.0 when the preset fits."""
    samples = profile(runners.get(cfg), SPEED_CHECK_GRID, repeats=repeats)
    if not samples:
        raise ValueError(f"speed check: no profiled batch shape fits the KV pool of {cfg}")
    return measured_over_predicted(load_cost_model(cost_model), samples)


def speed_message(ratio: float, cost_model: str, model: str, device: str) -> str | None:
    """The warning for a machine ``ratio`` times slower or faster than predicted; None within ``SPEED_WARN_RATIO``."""
    if 1 / SPEED_WARN_RATIO <= ratio <= SPEED_WARN_RATIO:
        return None
    way = f"{ratio:.2f}x slower" if ratio > 1 else f"{1 / ratio:.2f}x faster"
    effect = "SLOs will be missed" if ratio > 1 else "the load is lighter than it says"
    return (
        f"warning: this machine runs {model} {way} than the cost model {cost_model} that prices the runtime's "
        f"SLOs and arrival rate ({effect}); calibrate this machine with `llmsched-calibrate profile --model "
        f"{model} --device {device} --out mine.json` and pass --cost-model mine.json (--no-speed-check skips "
        "this check)"
    )
