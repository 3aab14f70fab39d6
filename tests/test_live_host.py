"""The live experiment's host guard (``llmsched_env.live.host``): exact shares from fake ``/proc`` trees (our own tree
subtracted, exited and new processes, a reused pid, steal), the refusal and flag texts, and on Linux a real busy loop
detected as other and, when it is ours, subtracted."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from llmsched_env.live.host import (
    DRIFT_MAX,
    HOST_BUSY_MAX,
    SLOW_MAX,
    CpuMeter,
    HostSample,
    OtherProcess,
    allowed_cpus,
    block_flag,
    calibration_check,
    cpu_list,
    load_average,
    refusal,
    sample_host,
)

# jiffies: user nice system idle iowait irq softirq steal
CPU_START = {0: (1000, 0, 500, 9000, 100, 10, 10, 0), 1: (2000, 5, 300, 8000, 50, 0, 20, 0), 2: (0,) * 8}
# cpu0: +80 user +30 system +50 idle +10 iowait +5 irq +5 softirq +20 steal = 200 (busy 120, steal 20)
# cpu1: +50 user +20 system +110 idle +10 iowait +5 irq +5 softirq = 200 (busy 80); cpu2 (not measured): all busy
CPU_STOP = {0: (1080, 0, 530, 9050, 110, 15, 15, 20), 1: (2050, 5, 320, 8110, 60, 5, 25, 0), 2: (5000,) + (0,) * 7}

# pid: (name, ppid, utime, stime, cutime, cstime, starttime, Cpus_allowed_list)
PROCS_START = {
    1: ("init", 0, 50, 50, 0, 0, 1, "0-2"),
    10: ("experiment", 1, 100, 20, 0, 0, 500, "0"),  # our root
    11: ("vllm (serve)", 10, 300, 40, 5, 0, 600, "0-1"),  # a name with a space and parentheses
    13: ("tokenize", 11, 4, 1, 0, 0, 700, "0"),  # ours, exits in the window, reaped by 11
    20: ("stress", 1, 1000, 0, 0, 0, 100, "0-1"),
    21: ("far", 1, 500, 0, 0, 0, 110, "2"),
    22: ("old", 1, 1000, 0, 0, 0, 5, "0"),  # exits; its pid is reused by another process
    30: ("idle", 1, 7, 0, 0, 0, 120, "0"),
}
PROCS_STOP = {
    1: ("init", 0, 50, 50, 0, 0, 1, "0-2"),
    10: ("experiment", 1, 120, 30, 0, 0, 500, "0"),  # +30
    11: ("vllm (serve)", 10, 330, 50, 30, 0, 600, "0-1"),  # +40, reaped 13 at 25 jiffies: +20 of it in the window
    12: ("worker", 10, 8, 2, 0, 0, 900, "1"),  # ours, started in the window: 10
    20: ("stress", 1, 1080, 0, 0, 0, 100, "0-1"),  # +80
    21: ("far", 1, 800, 0, 0, 0, 110, "2"),  # +300, on CPU 2 only
    22: ("new", 1, 15, 0, 0, 0, 950, "1"),  # started in the window: 15
    30: ("idle", 1, 7, 0, 0, 0, 120, "0"),
}
OURS = 30 + 40 + 20 + 10  # jiffies of our tree in the window


LOADAVG = "0.50 1.25 2.00 1/99 7"


def write_proc(root: Path, cpus: dict[int, tuple[int, ...]], procs: dict, loadavg: str | None = LOADAVG) -> Path:
    """A fake ``/proc``: ``stat`` with an aggregate and per-CPU lines, ``<pid>/stat`` and ``<pid>/status``."""
    root.mkdir(parents=True, exist_ok=True)
    for old in root.glob("[0-9]*"):
        for f in old.iterdir():
            f.unlink()
        old.rmdir()
    agg = [sum(v[i] for v in cpus.values()) for i in range(8)]
    lines = ["cpu  " + " ".join(map(str, [*agg, 0, 0]))]
    lines += [f"cpu{c} " + " ".join(map(str, [*v, 0, 0])) for c, v in cpus.items()]
    lines += ["intr 12345 0 0", "ctxt 999", "btime 1700000000", "processes 500"]
    (root / "stat").write_text("\n".join(lines) + "\n")
    for pid, (name, ppid, utime, stime, cutime, cstime, start, allowed) in procs.items():
        d = root / str(pid)
        d.mkdir()
        fields = ["S", ppid, pid, pid, 0, -1, 4194304, 0, 0, 0, 0, utime, stime, cutime, cstime, 20, 0, 1, 0, start]
        (d / "stat").write_text(f"{pid} ({name}) " + " ".join(map(str, [*fields, 1000, 200])) + "\n")
        (d / "status").write_text(f"Name:\t{name}\nPid:\t{pid}\nCpus_allowed:\tf\nCpus_allowed_list:\t{allowed}\n")
    if loadavg is not None:
        (root / "loadavg").write_text(loadavg + "\n")
    return root


def measure(tmp_path: Path, root_pid: int, cpus=(0, 1), start=None, stop=None) -> HostSample:
    proc = write_proc(tmp_path / "proc", CPU_START, PROCS_START if start is None else start)
    clock = iter([100.0, 103.0]).__next__
    meter = CpuMeter(cpus, root_pid, proc=proc, clock=clock)
    meter.start()
    write_proc(proc, CPU_STOP, PROCS_STOP if stop is None else stop)
    return meter.stop()


def test_others_share_subtracts_our_tree_and_counts_steal_apart(tmp_path: Path) -> None:
    s = measure(tmp_path, root_pid=10)
    assert s.cpus == (0, 1) and s.window_s == 3.0 and s.load_average == (0.5, 1.25, 2.0)
    assert s.others_share == pytest.approx((120 + 80 - OURS) / 400)  # 0.25
    assert s.steal_share == pytest.approx(20 / 400)
    # those that may run on CPUs 0,1 first, each by its share; "far" (CPU 2 only) last; "idle" used nothing
    assert s.busiest == (
        OtherProcess(20, "stress", 80 / 400, True), OtherProcess(22, "new", 15 / 400, True),
        OtherProcess(21, "far", 300 / 400, False),
    )  # fmt: skip
    assert s.as_dict() == {
        "cpus": [0, 1], "window_s": 3.0, "others_share": 0.25, "steal_share": 0.05, "load_average": [0.5, 1.25, 2.0],
        "busiest": [{"pid": 20, "name": "stress", "share": 0.2, "on_cpus": True},
                    {"pid": 22, "name": "new", "share": 0.0375, "on_cpus": True},
                    {"pid": 21, "name": "far", "share": 0.75, "on_cpus": False}],
    }  # fmt: skip


def test_a_root_below_or_outside_the_tree_counts_the_rest_as_other(tmp_path: Path) -> None:
    # root 11: 10 and 12 are no longer ours (30 + 10 jiffies more count as other)
    s = measure(tmp_path, root_pid=11)
    assert s.others_share == pytest.approx((200 - 40 - 20) / 400)
    assert [p.pid for p in s.busiest] == [20, 10, 22, 12, 21]
    assert s.busiest[1] == OtherProcess(10, "experiment", 30 / 400, True)
    # a root that does not exist: everything busy is other, and the whole tree is listed
    assert measure(tmp_path, root_pid=4242).others_share == pytest.approx(200 / 400)
    # only CPU 1, root 10: our tree's time is subtracted wherever it ran (clamped at 0)
    one = measure(tmp_path, root_pid=10, cpus=[1])
    assert one.others_share == 0.0 and one.steal_share == 0.0
    assert [p.pid for p in one.busiest] == [20, 22, 21]  # 22's affinity (CPU 1) and 20's (0-1) meet CPU 1


def test_processes_that_exit_below_exited_ones_are_subtracted_through_the_reaper(tmp_path: Path) -> None:
    # 13 starts 14, both exit in the window; 11 reaps 13, whose cutime carried 14's 9 jiffies (6 in the window)
    start = {**PROCS_START, 14: ("child", 13, 2, 1, 0, 0, 800, "0")}
    stop = {**PROCS_STOP, 11: ("vllm (serve)", 10, 330, 50, 39, 0, 600, "0-1")}
    s = measure(tmp_path, root_pid=10, start=start, stop=stop)
    assert s.others_share == pytest.approx((200 - (OURS + 6)) / 400)


def test_unknown_without_proc_stat_and_errors_naming_the_file(tmp_path: Path) -> None:
    meter = CpuMeter(["0", "1"], 10, proc=tmp_path / "none")
    meter.start()
    s = meter.stop()
    assert (s.cpus, s.others_share, s.steal_share, s.load_average, s.busiest) == ((0, 1), None, None, None, ())
    assert refusal(s) is None and block_flag(s, None, None)["flag"] is None
    proc = write_proc(tmp_path / "proc", CPU_START, PROCS_START, loadavg=None)
    with pytest.raises(ValueError, match=r"proc/stat: no line for CPU 3,7 \(offline"):
        CpuMeter([0, 3, 7], 10, proc=proc).start()
    (proc / "stat").write_text("cpu0 1 2 x 4 5 6 7 8 0 0\n")
    with pytest.raises(ValueError, match=r"proc/stat: line 'cpu0' has not eight jiffy counts"):
        CpuMeter([0], 10, proc=proc).start()
    with pytest.raises(RuntimeError, match=r"stop\(\) before start\(\)"):
        CpuMeter([0], 10, proc=proc).stop()
    with pytest.raises(ValueError, match="no CPUs"):
        CpuMeter([], 10, proc=proc)


def test_the_same_jiffies_at_both_ends_leave_the_shares_unknown(tmp_path: Path) -> None:
    proc = write_proc(tmp_path / "proc", CPU_START, PROCS_START)
    meter = CpuMeter([0, 1], 10, proc=proc, clock=iter([1.0, 1.5]).__next__)
    meter.start()
    s = meter.stop()
    assert (s.window_s, s.others_share, s.steal_share) == (0.5, None, None)


def test_small_readers(tmp_path: Path) -> None:
    assert cpu_list("0-3,8,10-11\n") == frozenset({0, 1, 2, 3, 8, 10, 11}) and cpu_list("5") == frozenset({5})
    with pytest.raises(ValueError, match="runs backwards"):
        cpu_list("3-1")
    proc = write_proc(tmp_path / "proc", CPU_START, PROCS_START)
    assert allowed_cpus(11, proc) == frozenset({0, 1}) and allowed_cpus(99, proc) is None
    assert load_average(proc) == (0.5, 1.25, 2.0)
    (proc / "loadavg").write_text("garbage\n")
    assert load_average(proc) is None


def sample(others: float | None, steal: float | None = 0.0, busiest=()) -> HostSample:
    return HostSample((0, 1), 3.0, others, steal, (1.0, 1.0, 1.0), busiest)


def test_refusal_names_the_share_threshold_cpus_culprits_and_override() -> None:
    busiest = (OtherProcess(123, "python", 0.45, True), OtherProcess(7, "kworker/0:1", 0.031, None),
               OtherProcess(9, "far", 0.9, False), OtherProcess(1, "init", 0.004, True))  # fmt: skip
    assert refusal(sample(0.48, busiest=busiest)) == (
        "host busy: other processes used 48% of CPUs 0,1 over 3.0 s (threshold 10%): python (pid 123) 45%, "
        "kworker/0:1 (pid 7) 3%; free the CPUs or pass --host-override"
    )
    assert refusal(sample(0.02, 0.2)) == (
        "host busy: the hypervisor stole 20% of CPUs 0,1 over 3.0 s (threshold 10%); free the CPUs or pass "
        "--host-override"
    )
    assert refusal(sample(0.3, 0.2), threshold=0.15) == (
        "host busy: other processes used 30% and the hypervisor stole 20% of CPUs 0,1 over 3.0 s (threshold 15%); "
        "free the CPUs or pass --host-override"
    )
    assert refusal(sample(HOST_BUSY_MAX)) is None  # at the threshold: not over it
    assert refusal(sample(None, None)) is None


def test_block_flag_starved_and_drifted_blocks() -> None:
    assert block_flag(sample(0.05, 0.01), 0.012, 0.010) == {
        "others_share": 0.05, "steal_share": 0.01, "step_ratio": pytest.approx(1.2), "flag": None,
    }  # fmt: skip
    flag = block_flag(sample(0.35), 0.018, 0.010)["flag"]
    assert flag == "starved: others used 35% of the CPUs; engine steps x1.8 of calibration"
    assert block_flag(sample(0.0), 0.006, 0.010)["flag"] == "engine steps x0.6 of calibration"
    assert block_flag(sample(0.0, 0.15), 0.010, 0.010)["flag"] == "starved: the hypervisor stole 15% of the CPUs"
    assert block_flag(sample(0.0), 0.010 * DRIFT_MAX, 0.010)["flag"] is None  # at the bound: not over it
    assert block_flag(sample(0.2), 0.02, 0.01, busy_max=0.25, drift_max=3.0)["flag"] is None
    # no step figure (a compared arm, or a block without busy steps): only the share is judged
    for step, ref in ((None, 0.01), (math.nan, 0.01), (0.01, None), (0.01, 0.0)):
        figures = block_flag(sample(0.0), step, ref)
        assert figures == {"others_share": 0.0, "steal_share": 0.0, "step_ratio": None, "flag": None}
    assert block_flag(None, 0.03, 0.01) == {"others_share": None, "steal_share": None, "step_ratio": pytest.approx(3.0),
                                            "flag": "engine steps x3 of calibration"}  # fmt: skip


def test_calibration_check_compares_the_live_step_with_the_reference() -> None:
    assert calibration_check(0.029, 0.010) is None and calibration_check(0.0034, 0.010) is None
    assert calibration_check(0.010 * SLOW_MAX, 0.010) is None
    assert calibration_check(0.12, 0.03) == (
        "calibration slower than the reference: median engine step 120 ms, x4 of the reference's 30 ms (bound x3 "
        "either way); a busy or different host? free the CPUs or pass --host-override"
    )
    assert calibration_check(0.002, 0.010) == (
        "calibration faster than the reference: median engine step 2 ms, x0.2 of the reference's 10 ms (bound x3 "
        "either way); a busy or different host? free the CPUs or pass --host-override"
    )
    assert calibration_check(0.05, 0.01, bound=10.0) is None
    for live, ref in ((0.0, 0.01), (0.01, -1.0), (math.nan, 0.01)):
        with pytest.raises(ValueError, match=r"calibration_check: step_s_\w+ must be a positive number"):
            calibration_check(live, ref)


# ---- the real thing: a busy loop pinned to one CPU --------------------------------------------------------------

real = pytest.mark.skipif(
    not sys.platform.startswith("linux") or not hasattr(os, "sched_getaffinity") or not Path("/proc/stat").exists(),
    reason="reads Linux /proc",
)


def _spawn(code: str, cpu: int) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", code], preexec_fn=lambda: os.sched_setaffinity(0, {cpu}))


def _cpu_ticks(pid: int) -> int:
    """The user and system CPU time of process ``pid`` so far, in clock ticks (``/proc/PID/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return int(fields[11]) + int(fields[12])


@real
def test_a_busy_loop_is_other_unless_it_is_ours() -> None:
    cpu = min(os.sched_getaffinity(0))
    loop = _spawn("while True: pass", cpu)
    sleeper = _spawn("import time; time.sleep(60)", cpu)  # a root the loop is not below
    try:
        time.sleep(0.2)  # the loop is past its start-up
        theirs, ours = CpuMeter([cpu], sleeper.pid), CpuMeter([cpu], os.getpid())
        loop_ticks = _cpu_ticks(loop.pid)
        theirs.start(), ours.start()
        time.sleep(1.0)
        other, own = theirs.stop(), ours.stop()
        loop_ticks = _cpu_ticks(loop.pid) - loop_ticks
    finally:
        for p in (loop, sleeper):
            p.kill()
            p.wait()
    assert other.others_share is not None and own.others_share is not None
    # the loop keeps the CPU busy, whatever else runs there: it is all other to a root it is not below
    assert other.others_share >= 0.5, other
    # it is named among the five busiest, unless five others on its CPU used more (a busy machine's processes)
    listed = [p for p in other.busiest if p.on_cpus]
    ahead = len(listed) == 5 and all(p.share * other.window_s * os.sysconf("SC_CLK_TCK") >= loop_ticks - 1
                                     for p in listed)  # fmt: skip
    assert ahead or any(p.pid == loop.pid for p in listed), (other, loop_ticks)
    # below our root, the loop's time (what /proc says it ran, however busy the machine) is ours, not other
    loop_share = loop_ticks / (other.window_s * os.sysconf("SC_CLK_TCK"))
    assert loop_share > 0.02 and own.others_share <= other.others_share - loop_share + 0.05, (own, other, loop_share)
    assert all(p.pid != loop.pid for p in own.busiest), own


@real
def test_sample_host_measures_a_real_window() -> None:
    cpu = min(os.sched_getaffinity(0))
    loop = _spawn("while True: pass", cpu)
    try:
        s = sample_host([cpu], root_pid=os.getpid() + 10**7, window_s=0.5)  # no such pid: all is other
    finally:
        loop.kill()
        loop.wait()
    assert s.cpus == (cpu,) and s.window_s >= 0.5 and s.load_average is not None
    assert s.others_share is not None and s.others_share >= 0.5, s
