"""What ``llmsched-evaluate --out`` promises when things go wrong (docs/reliability.md, "Evaluation outputs"):
every file is written to a temporary file and renamed over the old one (a full disk or a kill mid-write
leaves the old file whole); one evaluation per folder; an earlier run's files removed by name; complete.json
last; each finished run (or capacity search) appended to rows.jsonl, so that ``--resume`` after a kill runs
only the rest and writes the files an uninterrupted run writes."""

from __future__ import annotations

import csv
import errno
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from llmsched_env.commands.evaluate import main
from llmsched_env.common.outputs import COMPLETE_NAME, is_complete, write_csv
from llmsched_env.evaluation import resume
from llmsched_env.evaluation.outputs import (
    EVALUATION_FILES,
    FINISHED_FILES,
    PLOT_FILES,
    clear_outputs,
    write_results,
)
from llmsched_env.evaluation.resume import RECORD_NAME, ROWS_NAME, RowsLog, read_rows

ROOT = Path(__file__).resolve().parents[1]
TINY = ["--scenarios", "mixed-slo", "--num-requests", "20", "--policies", "fcfs,slo_aware", "--seeds", "0,1"]
GRID = [*TINY, "--loads", "0.8,1.5", "--no-progress"]  # 8 runs of 20 requests
CAPACITY = ["--capacity", "--per-seed", *TINY, "--no-progress", "--no-plots"]  # 4 searches


def _no_space(*args: object, **kwargs: object) -> None:
    raise OSError(errno.ENOSPC, "No space left on device")


def _csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def _without_wall(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in r.items() if k != "wall_s"} for r in rows]


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file() and p.name != ".llmsched.lock"}


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The uninterrupted grid, with plots."""
    out = tmp_path_factory.mktemp("reference")
    assert main([*GRID, "--out", str(out)]) == 0
    return out


@pytest.fixture(scope="module")
def capacity_reference(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The uninterrupted per-seed capacity searches."""
    out = tmp_path_factory.mktemp("capacity")
    assert main([*CAPACITY, "--out", str(out)]) == 0
    return out


def _same_results(out: Path, reference: Path, plots: bool = True) -> None:
    """``out`` holds the files of the uninterrupted run: the same rows (fingerprints included; wall times
    differ), summary and (with ``plots``) plots, and is marked complete."""
    rows = _csv(out / "results.csv")
    assert _without_wall(rows) == _without_wall(_csv(reference / "results.csv"))
    assert all(r["trajectory"] for r in rows)
    runs = json.loads((out / "results.json").read_text())
    assert _without_wall(runs) == _without_wall(json.loads((reference / "results.json").read_text()))
    if (reference / "summary.csv").exists():
        assert (out / "summary.csv").read_bytes() == (reference / "summary.csv").read_bytes()
    pngs = sorted(p.name for p in reference.glob("*.png")) if plots else []
    assert sorted(p.name for p in out.glob("*.png")) == pngs
    assert is_complete(out)
    assert json.loads((out / COMPLETE_NAME).read_text())["rows"] == len(rows)


class Interrupt(Exception):
    """Stands in for a kill in the middle of an evaluation (in this process)."""


def _interrupt_after(monkeypatch: pytest.MonkeyPatch, appended: int) -> None:
    """The next evaluation stops right after its ``appended``-th run reaches the rows file."""
    append = RowsLog.append
    count = [0]

    def stop(self: RowsLog, row: dict[str, Any], details: Any = None) -> None:
        append(self, row, details)
        count[0] += 1
        if count[0] == appended:
            raise Interrupt

    monkeypatch.setattr(RowsLog, "append", stop)


# 1. Every file through a temporary file and a rename: a full disk or a kill mid-write keeps the old file.


def test_a_full_disk_mid_csv_keeps_the_old_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "results.csv"
    write_csv([{"a": 1, "b": 2}], target)
    before = target.read_bytes()

    class HalfWriter(csv.DictWriter):  # type: ignore[type-arg]
        def writerows(self, rows: Any) -> None:
            self.writerow(next(iter(rows)))
            _no_space()

    monkeypatch.setattr(csv, "DictWriter", HalfWriter)
    with pytest.raises(OSError, match="No space left"):
        write_csv([{"a": 3, "b": 4}, {"a": 5, "b": 6}], target)
    assert target.read_bytes() == before and sorted(tmp_path.iterdir()) == [target]


@pytest.mark.parametrize("stage", ["results.json", "summary.csv", "attainment_vs_load.png"])
def test_a_full_disk_mid_write_results_keeps_every_old_file(
    stage: str, reference: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """write_results over an earlier run's files, the disk full while it writes ``stage``: that file and every
    one not yet written are the old ones, whole; no temporary file is left."""
    from matplotlib.figure import Figure

    out = tmp_path / "out"
    out.mkdir()
    for name in ("results.csv", "results.json", "summary.csv", *PLOT_FILES):
        if (reference / name).exists():
            (out / name).write_bytes((reference / name).read_bytes())
    before = _files(out)
    rows = [{**r, "slo_attainment": 0.5} for r in json.loads((reference / "results.json").read_text())]
    summary = _csv(reference / "summary.csv")
    savefig, write_text = Figure.savefig, Path.write_text

    def full_png(fig: Figure, path: Any, **kwargs: Any) -> None:
        if Path(stage).stem in str(path):
            Path(path).write_bytes(b"\x89PNG half")
            _no_space()
        savefig(fig, path, **kwargs)

    def full_text(path: Path, text: str, *args: Any, **kwargs: Any) -> int:
        if Path(stage).stem in path.name:
            write_text(path, text[: len(text) // 2], *args, **kwargs)
            _no_space()
        return write_text(path, text, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", full_png)
    monkeypatch.setattr(Path, "write_text", full_text)
    writerows = csv.DictWriter.writerows

    def full_summary(writer: csv.DictWriter, rows: Any) -> None:  # type: ignore[type-arg]
        if stage == "summary.csv" and "num_seeds" in writer.fieldnames:
            _no_space()
        writerows(writer, rows)

    monkeypatch.setattr(csv.DictWriter, "writerows", full_summary)
    with pytest.raises(OSError, match="No space left"):
        write_results(out, rows, summary=summary, details=[], plots=True)
    after = _files(out)
    assert sorted(after) == sorted(before)  # no temporary file left beside them
    assert after[stage] == before[stage]
    assert after["attainment_vs_load.png"] == before["attainment_vs_load.png"]  # written after the failure


KILLED_WRITER = """
import csv, sys
from pathlib import Path
from llmsched_env.common.outputs import write_csv

class Stuck(csv.DictWriter):
    def writerows(self, rows):
        rows = list(rows)
        for row in rows[: len(rows) // 2]:
            self.writerow(row)
        print("half written", flush=True)
        sys.stdin.readline()  # killed here

csv.DictWriter = Stuck
write_csv([{"run": i, "value": "x" * 100} for i in range(20000)], Path(sys.argv[1]))
"""


def test_a_kill_mid_write_keeps_the_old_file_and_the_next_run_removes_the_leftover(tmp_path: Path) -> None:
    target = tmp_path / "results.csv"
    write_csv([{"run": 0, "value": "old"}], target)
    (tmp_path / "notes.txt").write_text("mine")
    before = target.read_bytes()
    proc = subprocess.Popen(
        [sys.executable, "-c", KILLED_WRITER, str(target)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=_env(),
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "half written"
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    assert target.read_bytes() == before
    leftovers = [p for p in tmp_path.iterdir() if p.name.startswith(".results.")]
    assert len(leftovers) == 1 and leftovers[0].stat().st_size > 100_000  # the half-written temporary file
    removed = clear_outputs(tmp_path, keep=("results.csv",))  # what a new evaluation does first
    assert removed == leftovers
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt", "results.csv"]


def test_the_other_result_writers_are_atomic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The cost-model JSON (calibrate, live replay) and the tuned-settings table (tune) keep the old file."""
    from llmsched_env.costs.linear import LinearCostModel
    from llmsched_env.costs.loader import load_cost_model
    from llmsched_env.decision.planners.tuned import load_tuned_table, settings_of, write_tuned_entries
    from llmsched_env.engine.batch import Decision

    model = load_cost_model("runtime-tiny-cpu")
    assert isinstance(model, LinearCostModel)
    path = tmp_path / "model.json"
    model.save(path)
    table = tmp_path / "tuned.json"
    entry = {"settings": settings_of(Decision()), "provenance": {"by": "test"}}
    write_tuned_entries(table, {"mixed-slo": entry})
    before = _files(tmp_path)
    write_text = Path.write_text

    def half(path: Path, text: str, *args: Any, **kwargs: Any) -> int:
        write_text(path, text[: len(text) // 2], *args, **kwargs)
        _no_space()
        return 0

    monkeypatch.setattr(Path, "write_text", half)
    with pytest.raises(OSError, match="No space left"):
        model.save(path)
    with pytest.raises(OSError, match="No space left"):
        write_tuned_entries(table, {"bursty": entry})
    assert _files(tmp_path) == before
    monkeypatch.undo()
    assert load_cost_model(str(path)).to_dict() == model.to_dict()
    assert list(load_tuned_table(table).entries) == ["mixed-slo"]


# 2. One evaluation per --out, checked before any episode.


HOLDER = """
import sys
from llmsched_env.common.outputs import locked_output
with locked_output(sys.argv[1], "llmsched-evaluate"):
    print("held", flush=True)
    sys.stdin.readline()
"""


def test_a_second_evaluation_into_one_out_is_refused_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    import llmsched_env.commands.evaluate as command

    out = tmp_path / "out"
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(out)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=_env()
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
        (out / "results.csv").write_text("the first evaluation's")
        monkeypatch.setattr(command, "run_grid", _no_space)  # no episode may run
        with pytest.raises(SystemExit) as exit_:
            main([*GRID, "--out", str(out)])
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    message = str(exit_.value.code)
    assert "\n" not in message and message.startswith("llmsched-evaluate: error: --out")
    assert f"llmsched-evaluate (pid {proc.pid}) is writing there" in message
    assert sorted(p.name for p in out.iterdir()) == [".llmsched.lock", "results.csv"]  # untouched
    assert (out / "results.csv").read_text() == "the first evaluation's"
    assert "llmsched evaluation" not in capsys.readouterr().out  # no table began


def test_an_unwritable_out_is_refused_before_anything_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    import llmsched_env.commands.evaluate as command

    monkeypatch.setattr(command, "run_grid", _no_space)
    monkeypatch.setattr(os, "access", lambda *args: False)  # a read-only folder (root ignores the mode bits)
    with pytest.raises(SystemExit) as exit_:
        main([*GRID, "--out", str(tmp_path / "out")])
    assert exit_.value.code == 2
    assert "cannot be written" in capsys.readouterr().err.strip().splitlines()[-1]
    assert list(tmp_path.iterdir()) == []


# 3. and 4. An earlier run's files removed by name; complete.json last.


def test_a_rerun_removes_the_earlier_plots_and_keeps_other_files(reference: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    for p in reference.iterdir():
        if p.is_file():
            (out / p.name).write_bytes(p.read_bytes())
    (out / "notes.txt").write_text("mine")
    (out / "figure.png").write_text("not one of the evaluation's")
    assert sorted(p.name for p in reference.glob("*.png")) == sorted(set(PLOT_FILES) - {"capacity.png"})
    assert main([*GRID, "--loads", "0.8", "--no-plots", "--out", str(out)]) == 0
    names = sorted(p.name for p in out.iterdir())
    assert names == sorted([".llmsched.lock", "complete.json", "evaluation.json", "figure.png", "notes.txt",
                            "results.csv", "results.json", "rows.jsonl", "summary.csv"])  # fmt: skip
    assert {r["load"] for r in _csv(out / "results.csv")} == {"0.8"}
    assert set(EVALUATION_FILES) >= {n for n in names if n not in ("notes.txt", "figure.png", ".llmsched.lock")}


def test_complete_json_is_written_last_and_a_killed_run_has_none(
    reference: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    record = json.loads((reference / COMPLETE_NAME).read_text())
    assert record["rows"] == 8 and record["command"].startswith("llmsched-evaluate --scenarios mixed-slo")
    assert "finished" in record
    out = tmp_path / "out"
    _interrupt_after(monkeypatch, 3)
    with pytest.raises(Interrupt):
        main([*GRID, "--out", str(out)])
    assert not is_complete(out) and not (out / "results.csv").exists()  # nothing claims a whole result
    assert len((out / ROWS_NAME).read_text().splitlines()) == 3


# 5. The rows file and --resume.


KILLED_EVALUATION = """
import os, signal, sys
from llmsched_env.evaluation.resume import RowsLog
from llmsched_env.commands.evaluate import main

append, count = RowsLog.append, [0]
def killed(self, row, details=None):
    append(self, row, details)
    count[0] += 1
    if count[0] == int(sys.argv[1]):
        self._file.write('{"row": {"policy": "fcfs", "scen')  # the next line, cut short by the kill
        self._file.flush()
        os.kill(os.getpid(), signal.SIGKILL)
RowsLog.append = killed
main(sys.argv[2:])
"""


def test_a_killed_grid_resumes_to_the_uninterrupted_files(
    reference: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    out = tmp_path / "out"
    argv = [*GRID, "--out", str(out)]
    proc = subprocess.run([sys.executable, "-c", KILLED_EVALUATION, "3", *argv], env=_env(), capture_output=True)
    assert proc.returncode == -signal.SIGKILL
    assert not is_complete(out) and not (out / "results.csv").exists()
    runs, whole = read_rows(out / ROWS_NAME)
    assert len(runs) == 3 and whole < (out / ROWS_NAME).stat().st_size  # three whole lines, one cut short
    assert main([*argv, "--resume"]) == 0
    _same_results(out, reference)
    runs, whole = read_rows(out / ROWS_NAME)
    assert len(runs) == 8 and whole == (out / ROWS_NAME).stat().st_size  # the cut line gone
    capsys.readouterr()
    assert main([*argv, "--resume", "--no-plots"]) == 0  # a finished evaluation resumed: nothing runs
    assert "resuming: 8 finished runs" in capsys.readouterr().err
    assert len(read_rows(out / ROWS_NAME)[0]) == 8
    _same_results(out, reference, plots=False)  # the same files, and no plots left from before


def test_an_interrupted_grid_resumes_on_worker_processes(
    reference: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """Worker processes return runs out of grid order: the rows file takes them as they come, the files are
    still in grid order."""
    out = tmp_path / "out"
    argv = [*GRID, "--no-plots", "--out", str(out)]
    with monkeypatch.context() as patch:
        _interrupt_after(patch, 2)
        with pytest.raises(Interrupt):
            main(argv)
    capsys.readouterr()
    assert main([*argv, "--resume", "--workers", "2"]) == 0
    assert "resuming: 2 finished runs" in capsys.readouterr().err
    _same_results(out, reference, plots=False)
    keys = [(r.row["policy"], r.row["load"], r.row["seed"]) for r in read_rows(out / ROWS_NAME)[0]]
    assert len(keys) == len(set(keys)) == 8


def test_resume_with_plots_reruns_the_runs_kept_without_details(reference: Path, tmp_path: Path) -> None:
    """Runs kept by a --no-plots run hold no per-request details; a resume that plots runs them again."""
    out = tmp_path / "out"
    assert main([*GRID, "--no-plots", "--out", str(out)]) == 0
    assert all(r.details is None for r in read_rows(out / ROWS_NAME)[0])
    assert main([*GRID, "--out", str(out), "--resume"]) == 0
    _same_results(out, reference)


def test_killed_capacity_searches_resume_per_seed(
    capacity_reference: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """bench/headline.sh's capacity run: a kill loses only the search in progress."""
    out = tmp_path / "out"
    argv = [*CAPACITY, "--split", "test", "--out", str(out)]
    with monkeypatch.context() as patch:
        _interrupt_after(patch, 3)
        with pytest.raises(Interrupt):
            main(argv)
    finished = read_rows(out / ROWS_NAME)[0]
    assert [(r.row["policy"], r.row["seed"]) for r in finished] == [("fcfs", 0), ("fcfs", 1), ("slo_aware", 0)]
    capsys.readouterr()
    searched: list[Any] = []
    import llmsched_env.evaluation.capacity as capacity

    find = capacity.find_capacity
    monkeypatch.setattr(capacity, "find_capacity", lambda *a, **k: searched.append(a[2].name) or find(*a, **k))
    assert main([*argv, "--resume"]) == 0
    assert searched == ["slo_aware"]  # the one search not finished
    assert json.loads((out / COMPLETE_NAME).read_text())["resumed_rows"] == 3
    assert "resuming: 3 finished capacity searches" in capsys.readouterr().err
    assert _csv(out / "results.csv") == _csv(capacity_reference / "results.csv")
    assert (out / "summary.csv").read_bytes() == (capacity_reference / "summary.csv").read_bytes()
    assert is_complete(out)


def test_resume_refuses_another_evaluation_in_one_line_and_leaves_the_folder(
    reference: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    for p in reference.iterdir():
        if p.is_file():
            (out / p.name).write_bytes(p.read_bytes())
    before = _files(out)
    for argv, said in (
        ([*GRID, "--seeds", "0"], "--seeds 0,1 there, 0 here"),
        ([*GRID, "--num-requests", "30"], "--num-requests 20 there, 30 here"),
        ([*TINY, "--no-progress", "--capacity", "--no-plots"], "--capacity off there, on here"),  # no --loads
    ):
        with pytest.raises(SystemExit) as exit_:
            main([*argv, "--out", str(out), "--resume"])
        message = str(exit_.value.code)
        assert "\n" not in message and message.startswith(f"llmsched-evaluate: error: --resume: {out} holds another")
        assert said in message
        assert _files(out) == before  # complete.json and the results untouched
    assert capsys.readouterr().out.count("llmsched evaluation") == 0


def test_resume_needs_out_and_starts_afresh_with_nothing_to_resume(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main([*GRID, "--resume"])
    assert exit_.value.code == 2 and "--resume" in capsys.readouterr().err.splitlines()[-1]
    out = tmp_path / "new"
    assert main([*GRID, "--loads", "0.8", "--seeds", "0", "--no-plots", "--out", str(out), "--resume"]) == 0
    assert "no evaluation to resume" in capsys.readouterr().err
    assert is_complete(out) and len(_csv(out / "results.csv")) == 2


def test_the_rows_file_ignores_and_cuts_a_torn_last_line(tmp_path: Path) -> None:
    out = tmp_path
    record = {"format": resume.RECORD_FORMAT, "version": resume.RECORD_VERSION, "options": {"--seeds": [0]},
              "inputs": {}}  # fmt: skip
    with RowsLog.start(out, record) as log:
        key = {"policy": "fcfs", "scenario": "s", "load": 1.0, "seed": 0}
        log.append({**key, "x": 0.1}, {**key, "ttft_s": [0.5, 1.5], "tpot_s": []})
        log.append({"policy": "fcfs", "scenario": "s", "load": 1.0, "seed": 1, "x": 0.2})
    whole = (out / ROWS_NAME).read_bytes()
    with (out / ROWS_NAME).open("ab") as f:
        f.write(b'{"row": {"policy": "fc')
    runs, kept = read_rows(out / ROWS_NAME)
    assert kept == len(whole) and [r.row["seed"] for r in runs] == [0, 1]
    assert runs[0].details is not None and runs[0].details["ttft_s"].tolist() == [0.5, 1.5]
    assert runs[1].details is None and runs[1].row["x"] == 0.2
    log, again = RowsLog.resume(out, record)
    with log:
        log.append({"policy": "fcfs", "scenario": "s", "load": 1.0, "seed": 2})
    assert [r.row["seed"] for r in again] == [0, 1]
    assert [r.row["seed"] for r in read_rows(out / ROWS_NAME)[0]] == [0, 1, 2]
    lines = (out / ROWS_NAME).read_bytes().split(b"\n")
    assert lines[-1] == b"" and all(json.loads(line) for line in lines[:-1])
    (out / ROWS_NAME).write_bytes(b"not json\n" + whole)  # a bad line before the last is no torn line: refused
    with pytest.raises(ValueError, match=f"{ROWS_NAME}:1: not a line"):
        read_rows(out / ROWS_NAME)
    other = {**record, "options": {"--seeds": [0, 1]}}
    with pytest.raises(ValueError, match="--seeds 0 there, 0,1 here"):
        RowsLog.resume(out, other)
    assert json.loads((out / RECORD_NAME).read_text())["options"] == {"--seeds": [0]}


def test_a_changed_input_file_is_a_difference(tmp_path: Path) -> None:
    from llmsched_env.evaluation import EvalConfig

    config = EvalConfig(scenarios=["mixed-slo"], policies=["fcfs"], num_requests=20)
    trace = tmp_path / "trace.csv"
    trace.write_text("a\n")
    old = resume.evaluation_record({"--trace": str(trace)}, config, {"--trace": trace, "--cost-model": "a100"})
    assert set(old["inputs"]) == {"--trace"}  # a preset name is no file
    trace.write_text("b\n")
    new = resume.evaluation_record({"--trace": str(trace)}, config, {"--trace": trace})
    assert resume.differences(old, new) == ["--trace: the file changed since"]
    assert resume.differences(old, old) == []


def _copy_finished(reference: Path, out: Path) -> dict[str, bytes]:
    """``out`` holding the reference's finished evaluation; its finished files' bytes."""
    out.mkdir()
    for p in reference.iterdir():
        if p.is_file():
            (out / p.name).write_bytes(p.read_bytes())
    return {name: (out / name).read_bytes() for name in FINISHED_FILES if (out / name).exists()}


def test_a_rerun_killed_or_out_of_space_leaves_the_earlier_results_whole(
    reference: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    out = tmp_path / "out"
    before = _copy_finished(reference, out)
    assert {"results.csv", "results.json", "summary.csv", "ttft_cdf.png"} <= before.keys()
    _interrupt_after(monkeypatch, 2)
    with pytest.raises(Interrupt):  # a rerun with other loads, killed before it has its own results
        main([*GRID[:-3], "--loads", "0.5", "--no-progress", "--out", str(out)])
    monkeypatch.undo()
    assert {name: (out / name).read_bytes() for name in before} == before  # every finished file as it was
    assert not is_complete(out)  # and the folder says the last run did not finish
    import llmsched_env.evaluation.outputs as outputs

    monkeypatch.setattr(outputs, "write_csv", _no_space)  # the disk fills as the new results are written
    with pytest.raises(SystemExit) as exc:
        main([*GRID[:-3], "--loads", "0.5", "--no-progress", "--no-plots", "--out", str(out)])
    err = str(exc.value)
    assert "\n" not in err and "No space left on device while writing the results" in err and str(out) in err
    assert {name: (out / name).read_bytes() for name in before} == before
    monkeypatch.undo()
    assert main([*GRID[:-3], "--loads", "0.5", "--no-progress", "--no-plots", "--out", str(out)]) == 0
    assert {r["load"] for r in _csv(out / "results.csv")} == {"0.5"} and is_complete(out)
    assert not (out / "ttft_cdf.png").exists()  # the earlier run's plots go once the new results are there


@pytest.mark.parametrize(
    ("field", "value", "problem"),
    [
        ("slo_attainment", float("nan"), "slo_attainment is nan"),
        ("slo_attainment", 1.5, "slo_attainment is 1.5, outside [0, 1]"),
        ("tenant/chat/slo_attainment", -0.1, "tenant/chat/slo_attainment is -0.1, outside [0, 1]"),
        ("ttft_p99_s", -1.0, "ttft_p99_s is -1.0, below 0"),
        ("num_finished", float("inf"), "num_finished is inf"),
        ("capacity_load", -2, "capacity_load is -2, below 0"),
        ("policy", "", "policy is '', not a name"),
        ("goodput_rps", [1, 2], "goodput_rps is [1, 2], not a number"),
    ],
)
def test_resume_refuses_a_forged_row_in_one_line(
    reference: Path, tmp_path: Path, capsys: pytest.CaptureFixture, field: str, value: Any, problem: str
) -> None:
    """A row forged with its digest recomputed (a NaN or out-of-range value, which no run writes) is refused by
    ``--resume`` in one line naming the file, the line and the field; every row a run wrote passes the same
    check."""
    out = tmp_path / "out"
    _copy_finished(reference, out)
    (out / COMPLETE_NAME).unlink()
    lines = (out / ROWS_NAME).read_text().splitlines()
    assert all(resume.check_row(json.loads(line)["row"]) is None for line in lines)
    entry = json.loads(lines[1])
    entry.pop(resume.DIGEST_KEY)
    entry["row"][field] = value
    lines[1] = json.dumps({**entry, resume.DIGEST_KEY: resume._entry_digest(entry, resume.evaluation_id(out))})
    (out / ROWS_NAME).write_text("\n".join(lines) + "\n")
    with pytest.raises(SystemExit) as exc:
        main([*GRID, "--out", str(out), "--resume"])
    err = str(exc.value)
    assert "\n" not in err and f"{ROWS_NAME}:2: {problem}" in err and "Traceback" not in capsys.readouterr().err


def test_a_full_disk_while_a_run_is_appended_is_one_line_and_resumes(
    reference: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ENOSPC as the third run is appended to rows.jsonl: one line saying the earlier runs are kept; the
    ``--resume`` that follows runs the rest and writes the uninterrupted run's files."""
    out = tmp_path / "out"
    write = RowsLog.append
    count = [0]

    def fill(self: RowsLog, row: dict[str, Any], details: Any = None) -> None:
        count[0] += 1
        if count[0] == 3:
            assert self._file is not None
            self._file.write('{"row": {"policy": "fc')  # half a line reaches the disk, then it is full
            self._file.flush()
            raise OSError(errno.ENOSPC, "No space left on device")
        write(self, row, details)

    monkeypatch.setattr(RowsLog, "append", fill)
    with pytest.raises(SystemExit) as exc:
        main([*GRID, "--out", str(out)])
    err = str(exc.value)
    assert "\n" not in err and "No space left on device" in err and "rerun with --resume" in err
    assert len(read_rows(out / ROWS_NAME)[0]) == 2 and not is_complete(out)
    monkeypatch.undo()
    assert main([*GRID, "--out", str(out), "--resume"]) == 0
    _same_results(out, reference)


@pytest.mark.parametrize("name", [ROWS_NAME, RECORD_NAME, "results.csv", ".llmsched.lock"])
def test_a_fifo_in_the_out_folder_is_refused_before_any_run(
    reference: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    """A FIFO at any name in --out (the rows file a --resume reads and appends to, the record, a result file,
    the lock) is refused in one line before any run: nothing opens it, so nothing hangs."""
    import llmsched_env.commands.evaluate as command

    out = tmp_path / "out"
    _copy_finished(reference, out)
    (out / COMPLETE_NAME).unlink()
    (out / name).unlink(missing_ok=True)
    os.mkfifo(out / name)
    monkeypatch.setattr(command, "run_grid", _no_space)  # no episode may run
    signal.alarm(30)  # a FIFO opened would block: fail instead of hanging the suite
    try:
        with pytest.raises(SystemExit) as exc:
            main([*GRID, "--out", str(out), "--resume"])
    finally:
        signal.alarm(0)
    assert exc.value.code == 2
    assert (out / name).is_fifo()


def test_the_rows_file_is_read_and_opened_only_as_a_regular_file(tmp_path: Path) -> None:
    """Past the command's check (a FIFO swapped in afterwards), the rows file and the record are refused in one
    line by ``read_rows``, ``read_record`` and ``RowsLog`` rather than waited on."""
    os.mkfifo(tmp_path / ROWS_NAME)
    os.mkfifo(tmp_path / RECORD_NAME)
    signal.alarm(30)
    try:
        with pytest.raises(ValueError, match="FIFO"):
            read_rows(tmp_path / ROWS_NAME)
        with pytest.raises(ValueError, match="FIFO"):
            resume.read_record(tmp_path)
        with pytest.raises(ValueError, match="FIFO"):
            RowsLog(tmp_path / ROWS_NAME)
    finally:
        signal.alarm(0)


def _forged(out: Path, line: int, edit: Any, digest: bool = True) -> None:
    """Line ``line`` (from 0) of ``out``'s rows file passed through ``edit(entry)``, its digest recomputed (a
    forger who knows the format) or, without ``digest``, left as it was (an edit by hand)."""
    lines = (out / ROWS_NAME).read_text().splitlines()
    entry = json.loads(lines[line])
    recorded = entry.pop(resume.DIGEST_KEY)
    edit(entry)
    salt = resume.evaluation_id(out)
    lines[line] = json.dumps({**entry, resume.DIGEST_KEY: resume._entry_digest(entry, salt) if digest else recorded})
    (out / ROWS_NAME).write_text("\n".join(lines) + "\n")


@pytest.mark.parametrize(
    ("edit", "digest", "said"),
    [
        (lambda e: e["row"].update(ttft_p99_s=77.5), False, "rows.jsonl:2: the line was changed since its run"),
        (lambda e: e["row"].update(ttft_p99_s=True), False, "the line was changed since its run wrote it"),
        (lambda e: e["row"].update(evil_column=1.0), False, "the line was changed since its run wrote it"),
        (lambda e: e["details"]["ttft_s"].clear(), False, "the line was changed since its run wrote it"),
        (lambda e: [e[k].update(seed=99) for k in ("row", "details")], True,
         "(policy 'fcfs', scenario 'mixed-slo', load 0.8, seed 99) is not"),
        (lambda e: [e[k].update(policy="p" * 2_000_000) for k in ("row", "details")], True,
         "finished run (policy 'ppppp"),
        (lambda e: e["row"].update(ttft_p99_s=1e308), True, "rows.jsonl:2: ttft_p99_s is 1e+308"),
        (lambda e: e["row"].update(ttft_p99_s=True), True, "ttft_p99_s is True, not a number"),
        (lambda e: e["row"].update(preemptions=3.5), True, "preemptions is 3.5, not a whole number"),
        (lambda e: e["row"].update(sustained="yes"), True, "sustained is 'yes', not true or false"),
        (lambda e: e["row"].pop("slo_attainment"), True, "rows.jsonl:2: no slo_attainment"),
        (lambda e: e["details"].update(ttft_s=[[1.0]]), True, "details 'ttft_s' is not a list of finite numbers"),
        (lambda e: e["details"].update(policy=[0.1]), True, "details 'policy' is [0.1], not the row's 'fcfs'"),
        (lambda e: e["details"].pop("ttft_s"), True, "rows.jsonl:2: details have no 'ttft_s'"),
        (lambda e: e["details"].update(kv_usage=[5.0, 7.0]), True, "a KV series whose times and usages do not pair"),
        (lambda e: e["details"].update(extra="x" * 100), True, "details hold 'extra', which no run keeps"),
    ],
)
def test_resume_refuses_an_edited_or_foreign_line_in_one_short_line(
    reference: Path, tmp_path: Path, capsys: pytest.CaptureFixture, edit: Any, digest: bool, said: str
) -> None:
    """Each line of the rows file carries the sha256 of its run: an edit (a value, a type, an extra column, the
    details) is refused naming the line; a forged line with its digest recomputed that names a run outside the
    grid is refused in one short line (a 2 MB name cut), not a traceback."""
    out = tmp_path / "out"
    _copy_finished(reference, out)
    (out / COMPLETE_NAME).unlink()
    _forged(out, 1, edit, digest)
    with pytest.raises(SystemExit) as exc:
        main([*GRID, "--out", str(out), "--resume"])
    err = str(exc.value)
    assert "\n" not in err and said in err and len(err) < 600 and "Traceback" not in capsys.readouterr().err
    assert not is_complete(out)


def test_a_line_nested_too_deeply_is_one_line(reference: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    _copy_finished(reference, out)
    (out / COMPLETE_NAME).unlink()
    lines = (out / ROWS_NAME).read_text().splitlines()
    lines.insert(1, "[" * 200_000)
    (out / ROWS_NAME).write_text("\n".join(lines) + "\n")
    with pytest.raises(SystemExit) as exc:
        main([*GRID, "--out", str(out), "--resume"])
    assert "rows.jsonl:2: not a line of an evaluation's rows file (not JSON)" in str(exc.value)


def test_a_folder_that_held_no_evaluation_keeps_the_users_files(tmp_path: Path) -> None:
    """``--out`` at a folder of the user's own files (no evaluation's record or marker): the files the evaluation
    writes replace theirs namesakes, and nothing else is removed (a plot of the same name it did not write stays)."""
    out = tmp_path / "mine"
    out.mkdir()
    (out / "kv_usage.png").write_bytes(b"my own plot")
    (out / "notes.txt").write_text("mine")
    assert main([*GRID, "--no-plots", "--out", str(out)]) == 0
    assert (out / "kv_usage.png").read_bytes() == b"my own plot" and (out / "notes.txt").read_text() == "mine"
    assert (out / "results.csv").is_file() and is_complete(out)
    assert main([*GRID, "--no-plots", "--loads", "0.8", "--out", str(out)]) == 0  # it holds an evaluation now
    assert not (out / "kv_usage.png").exists()  # an earlier evaluation's file this one did not write: removed


def test_a_line_of_another_evaluation_or_a_second_line_for_a_run_is_refused(
    reference: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """A genuine line of another evaluation (another cost model: other figures for the same run) appended to the
    rows file does not pass its digest, which holds the evaluation's id; a line of this evaluation written twice
    (the later would win) is refused as a second line for its run."""
    out, other = tmp_path / "out", tmp_path / "other"
    _copy_finished(reference, out)
    (out / COMPLETE_NAME).unlink()
    assert main([*GRID, "--no-plots", "--seeds", "0", "--loads", "0.8", "--cost-model", "llama3-8b-a100",
                 "--out", str(other)]) == 0  # fmt: skip
    whole = (out / ROWS_NAME).read_text()
    with (out / ROWS_NAME).open("a") as f:
        f.write((other / ROWS_NAME).read_text().splitlines()[0] + "\n")
    with pytest.raises(SystemExit) as exc:
        main([*GRID, "--out", str(out), "--resume"])
    assert "rows.jsonl:9: the line was changed since its run wrote it, or another evaluation wrote it" in str(exc.value)
    (out / ROWS_NAME).write_text(whole + whole.splitlines()[0] + "\n")
    with pytest.raises(SystemExit) as exc:
        main([*GRID, "--out", str(out), "--resume"])
    assert "a second line for the run (policy 'fcfs', scenario 'mixed-slo', load 0.8, seed 0)" in str(exc.value)


def test_hard_links_out_of_the_folder_are_never_written_through(reference: Path, tmp_path: Path) -> None:
    """The lock and, on --resume, the rows file are written in place: a hard link from either to a file outside
    --out is refused in one line, and the outside file keeps its bytes."""
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    out = tmp_path / "out"
    out.mkdir()
    os.link(victim, out / ".llmsched.lock")
    with pytest.raises(SystemExit) as exc:
        main([*GRID, "--out", str(out)])
    assert ".llmsched.lock has 1 other hard link(s)" in str(exc.value) and victim.read_text() == "precious"
    (out / ".llmsched.lock").unlink()
    shutil.rmtree(out)
    _copy_finished(reference, out)
    (out / COMPLETE_NAME).unlink()
    kept = tmp_path / "rows.copy"
    os.replace(out / ROWS_NAME, kept)
    os.link(kept, out / ROWS_NAME)
    before = kept.read_bytes()
    with pytest.raises(SystemExit) as exc:
        main([*GRID, "--out", str(out), "--resume"])
    assert "rows.jsonl: has 1 other hard link(s)" in str(exc.value) and kept.read_bytes() == before


def test_results_that_cannot_be_replaced_are_one_line(
    reference: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A results file made immutable (here: the rename over it refused, as ``chattr +i`` does) after the check:
    one line after the runs, the earlier results as they were."""
    out = tmp_path / "out"
    before = _copy_finished(reference, out)
    real = os.replace

    def refuse(src: Any, dst: Any, *args: Any, **kwargs: Any) -> None:
        if Path(dst).name == "results.csv":
            raise PermissionError(errno.EPERM, "Operation not permitted", str(dst))
        real(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "replace", refuse)
    with pytest.raises(SystemExit) as exc:
        main([*GRID, "--no-plots", "--out", str(out)])
    err = str(exc.value)
    assert "\n" not in err and "Operation not permitted" in err and "the earlier results there are as they were" in err
    assert (out / "results.csv").read_bytes() == before["results.csv"]


def test_tensorboard_at_a_file_of_out_is_refused_before_any_run(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as exc:
        main([*GRID, "--out", str(out), "--tensorboard", str(out / "results.csv")])
    assert exc.value.code == 2 and "is results.csv of --out" in capsys.readouterr().err and not out.exists()
