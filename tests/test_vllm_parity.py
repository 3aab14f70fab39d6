"""llmsched's engine schedules as vLLM v1's real scheduler does: the lockstep comparison of
``llmsched_env.adapters.vllm.parity`` on small workloads, roomy and under KV pressure, with prefix reuse.
Needs the [vllm] extra (bench/vllm_check.sh); skipped without it."""

from __future__ import annotations

from dataclasses import replace

import pytest

from llmsched_env.costs.loader import load_cost_model
from llmsched_env.engine.config import EngineConfig

pytestmark = pytest.mark.vllm

COST = load_cost_model("llama3-8b-a100")
SMALL = EngineConfig(num_kv_blocks=512, block_size=16, max_num_seqs=32, max_num_batched_tokens=1024, max_model_len=8192)


def _requests(scenario: str, n: int) -> tuple:
    from llmsched_env.adapters.vllm.parity import scenario_requests

    return tuple(scenario_requests(scenario, n, 1.0, 0, COST))


@pytest.mark.parametrize("chunk_cap", [0, 256])
@pytest.mark.parametrize(("scenario", "blocks"), [("azure-conv", 512), ("azure-conv", 192), ("mooncake-conv", 2048)])
def test_every_step_is_identical(scenario: str, blocks: int, chunk_cap: int) -> None:
    from llmsched_env.adapters.vllm.parity import ParityCase, compare

    engine = replace(SMALL, num_kv_blocks=blocks, max_model_len=min(blocks * 16, 32768))
    report = compare(ParityCase(scenario, _requests(scenario, 120), engine, chunk_cap), COST, check=True)
    assert report.steps > 100
    assert report.agreement == 1.0, report.divergences[:3]
    assert report.first_token_step_equal == 1.0 and report.finish_step_equal == 1.0


def test_the_old_first_chunk_admission_rule_differs_from_vllm_under_pressure() -> None:
    """The comparison can fail: llmsched checking only the first chunk, vLLM the whole prefill, disagree."""
    from llmsched_env.adapters.vllm.parity import ParityCase, compare

    engine = replace(SMALL, num_kv_blocks=192, max_model_len=3072)
    case = ParityCase("azure-conv", _requests("azure-conv", 120), engine, 256)
    report = compare(case, COST, engine_rules={"reserve_full_prefill": False})
    assert report.agreement < 1.0 and report.divergences


def test_report_command_prints_the_agreement(capsys: pytest.CaptureFixture[str]) -> None:
    from llmsched_env.adapters.vllm.parity import main

    assert main(["--num-requests", "60", "--only", "azure-conv roomy"]) == 0
    out = capsys.readouterr().out
    assert "azure-conv roomy" in out and "lowest agreement: 100.00% of steps identical" in out
