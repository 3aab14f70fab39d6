"""llmsched-tune's options that do nothing without another are refused in one usage line, not ignored."""

from __future__ import annotations

import pytest

from llmsched_env.commands.tune import main as tune_main


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--trace-slo", "batch"], "--trace-slo applies to --trace only"),
        (["--trace-slo", "chat"], "--trace-slo applies to --trace only"),  # given, though it is the default value
        (["--trace-time-unit", "ms", "--trace-columns", "arrival=a"], "--trace-columns, --trace-time-unit apply"),
        (["--trace-format", "azure"], "--trace-format applies to --trace only"),
        (["--tenant-slo", "a=chat", "--fitted-traffic"], "--tenant-slo, --fitted-traffic apply to --trace only"),
    ],
)
def test_a_trace_option_without_trace_is_refused(extra: list[str], message: str, capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as exit_:
        tune_main(["--scenarios", "mixed-slo", "--seeds", "0", *extra])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert message in err[-1] and not any("rung" in line for line in err)
