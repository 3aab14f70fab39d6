"""The runtime backend measures the machine it is on (a few seconds' profile) against the cost model that
prices its SLOs and arrival rate, and warns with the measured ratio when the two differ."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from llmsched_env.commands.evaluate import main
from llmsched_env.evaluation import runtime_backend
from llmsched_env.evaluation.runtime_backend import speed_message

RUN = ["--backend", "runtime", "--model", "tiny", "--device", "cpu", "--policies", "fcfs", "--num-requests", "4",
       "--no-progress"]  # fmt: skip


def test_the_message_names_the_ratio_only_when_it_is_off() -> None:
    assert speed_message(1.1, "runtime-tiny-cpu", "tiny", "cpu") is None
    assert speed_message(0.85, "runtime-tiny-cpu", "tiny", "cpu") is None
    slow = speed_message(2.3, "runtime-tiny-cpu", "tiny", "cpu")
    assert slow is not None and "2.30x slower than the cost model runtime-tiny-cpu" in slow and "\n" not in slow
    assert "`llmsched-calibrate profile --model tiny --device cpu" in slow  # the installed command
    fast = speed_message(0.5, "runtime-tiny-cpu", "tiny", "cpu")
    assert fast is not None and "2.00x faster" in fast


@pytest.mark.slow
def test_evaluate_measures_the_machine_and_warns(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    measured = []

    def slow_machine(runners: object, cfg: object, cost_model: str, repeats: int = 3) -> float:
        measured.append(cost_model)
        return 2.3

    monkeypatch.setattr(runtime_backend, "speed_check", slow_machine)
    assert main(RUN) == 0
    err = capsys.readouterr().err
    assert measured == ["runtime-tiny-cpu"]
    assert "measured step time / runtime-tiny-cpu's = 2.30" in err and "2.30x slower" in err


@pytest.mark.slow
def test_no_speed_check_skips_it(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    def refuse(*args: object, **kwargs: object) -> float:
        raise AssertionError("--no-speed-check must not profile")

    monkeypatch.setattr(runtime_backend, "speed_check", refuse)
    assert main([*RUN, "--no-speed-check"]) == 0
    assert "speed check" not in capsys.readouterr().err


def test_the_real_speed_check_measures_a_finite_ratio() -> None:
    from llmsched_env.engine.config import EngineConfig
    from llmsched_env.evaluation.runtime_options import RuntimeOptions

    ratio = runtime_backend.speed_check(
        runtime_backend.Runners(RuntimeOptions(device="cpu")), EngineConfig(), "runtime-tiny-cpu", repeats=1
    )
    assert 0.05 < ratio < 50
