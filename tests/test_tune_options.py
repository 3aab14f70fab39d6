"""llmsched-tune's options that do nothing without another are refused in one usage line, not ignored."""

from __future__ import annotations

import pytest

from llmsched_env.commands.tune import MAX_PLANNED_REQUESTS, planned_episodes
from llmsched_env.commands.tune import main as tune_main
from llmsched_env.evaluation.tuning import TuneConfig
from llmsched_env.workloads.library import get_scenario, list_scenarios


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


def test_a_seed_without_random_candidates_is_refused(capsys: pytest.CaptureFixture) -> None:
    """``--candidates 0 --seed 9``: the seed draws nothing. Refused; ``--candidates 0`` alone is a search."""
    with pytest.raises(SystemExit) as exit_:
        tune_main(["--scenarios", "mixed-slo", "--seeds", "0", "--candidates", "0", "--seed", "9"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert "--candidates 0 draws none" in err[-1] and not any("rung" in line for line in err)
    # the command a table records for such a search leaves the seed out, so that it runs again as recorded
    assert " --seed " not in TuneConfig(candidates=0).command("x") and " --seed 0 " in TuneConfig().command("x")


def test_a_search_too_large_to_finish_is_refused(capsys: pytest.CaptureFixture) -> None:
    """Each option within its cap, 1,000 candidates x 100 rounds x 100 seeds x 100,000 requests ran for ever:
    the requests the search plans are bounded, in one usage line naming the options, before any episode."""
    seeds = ",".join(map(str, range(100)))
    argv = ["--scenarios", "mixed-slo", "--candidates", "1000", "--rounds", "100", "--seeds", seeds]
    with pytest.raises(SystemExit) as exit_:
        tune_main([*argv, "--num-requests", "100000"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert "--candidates 1000, --rounds 100, 100 --seeds and --num-requests 100000 plan about" in err[-1], err
    assert f"more than {MAX_PLANNED_REQUESTS:.0e}" in err[-1] and not any("rung" in line for line in err)
    # the default search is far inside the bound, the largest library scenario included
    size = max(get_scenario(name).num_requests for name in list_scenarios())
    assert planned_episodes(TuneConfig()) * size * 100 < MAX_PLANNED_REQUESTS
