"""The live experiment's host guard: how much of the server's CPUs other processes used (``CpuMeter``,
``sample_host``), the refusal to start on a busy host (``refusal``), the per-block flags of a starved block or an
engine steps that drifted from calibration (``block_flag``), and the refusal of a calibration far slower or
faster than the idle reference (``calibration_check``).

Everything reads Linux's ``/proc`` (``proc``: another root, for tests). Without ``/proc/stat`` (off Linux) a sample's
shares and load average are None ("unknown"), and the checks pass it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeGuard

__all__ = [
    "DRIFT_MAX", "HOST_BUSY_MAX", "SLOW_MAX", "CpuMeter", "HostSample", "OtherProcess", "allowed_cpus",
    "block_flag", "calibration_check", "cpu_list", "load_average", "refusal", "sample_host",
]  # fmt: skip

HOST_BUSY_MAX = 0.10  # refuse / flag when other processes (or the hypervisor's steal) took more of the CPUs
DRIFT_MAX = 1.5  # flag a block whose engine steps take over this times what calibration's model predicts, or 1/this
SLOW_MAX = 3.0  # refuse a calibration whose median step time is over this times the idle reference, or under 1/this
BUSIEST = 5  # how many other processes a sample names
OVERRIDE = "--host-override"

_PROC = Path("/proc")


@dataclass(frozen=True)
class OtherProcess:
    """A process outside our tree that used CPU time in the window: ``share`` is its (and its reaped children's) CPU
    time over the measured CPUs' capacity (above 1 when it ran on more CPUs); ``on_cpus``: its affinity intersects the
    measured CPUs (None: unknown, it exited)."""

    pid: int
    name: str
    share: float
    on_cpus: bool | None

    def as_dict(self) -> dict[str, Any]:
        """For ``experiment.json``."""
        return {"pid": self.pid, "name": self.name, "share": round(self.share, 4), "on_cpus": self.on_cpus}


@dataclass(frozen=True)
class HostSample:
    """What ran on ``cpus`` over ``window_s`` seconds besides our own process tree.

    ``others_share``: the CPUs' busy time (user, nice, system, irq, softirq) less our tree's CPU time, over their
    capacity, in [0, 1]; ``steal_share``: the time the hypervisor took from them, over their capacity; both None when
    unknown (no ``/proc/stat``). ``load_average``: ``/proc/loadavg``'s three figures (None: unknown). ``busiest``: up
    to five other processes, those that may run on ``cpus`` first, each by CPU time."""

    cpus: tuple[int, ...]
    window_s: float
    others_share: float | None
    steal_share: float | None
    load_average: tuple[float, float, float] | None
    busiest: tuple[OtherProcess, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        """For ``experiment.json``."""
        return {
            "cpus": list(self.cpus), "window_s": round(self.window_s, 3),
            "others_share": None if self.others_share is None else round(self.others_share, 4),
            "steal_share": None if self.steal_share is None else round(self.steal_share, 4),
            "load_average": None if self.load_average is None else list(self.load_average),
            "busiest": [p.as_dict() for p in self.busiest],
        }  # fmt: skip


def cpu_list(text: str) -> frozenset[int]:
    """The CPUs of a kernel CPU list (``"0-3,8,10-11"``); ValueError on anything else."""
    out: set[int] = set()
    for part in text.strip().split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        first, last = int(lo), int(hi or lo)
        if last < first:
            raise ValueError(f"CPU list {text!r}: range {part!r} runs backwards")
        out.update(range(first, last + 1))
    return frozenset(out)


def allowed_cpus(pid: int, proc: Path = _PROC) -> frozenset[int] | None:
    """The CPUs ``pid`` may run on (``/proc/<pid>/status``'s ``Cpus_allowed_list``); None if unreadable."""
    try:
        for line in (proc / str(pid) / "status").read_text().splitlines():
            if line.startswith("Cpus_allowed_list:"):
                return cpu_list(line.split(":", 1)[1])
    except (OSError, ValueError):
        return None
    return None


def load_average(proc: Path = _PROC) -> tuple[float, float, float] | None:
    """``/proc/loadavg``'s 1, 5 and 15-minute load averages; None if unreadable."""
    try:
        fields = (proc / "loadavg").read_text().split()
        return float(fields[0]), float(fields[1]), float(fields[2])
    except (OSError, ValueError, IndexError):
        return None


def _cpu_jiffies(cpus: tuple[int, ...], proc: Path) -> dict[int, tuple[int, int, int]] | None:
    """Per CPU of ``cpus``: (total, busy, steal) jiffies from ``/proc/stat`` (busy: total less idle, iowait and
    steal; guest time is inside user and nice already). None without the file; ValueError if a CPU is missing."""
    path = proc / "stat"
    try:
        text = path.read_text()
    except OSError:
        return None
    out: dict[int, tuple[int, int, int]] = {}
    for line in text.splitlines():
        name, _, rest = line.partition(" ")
        if not (name.startswith("cpu") and name[3:].isdigit()) or int(name[3:]) not in cpus:
            continue
        try:
            user, nice, system, idle, iowait, irq, softirq, steal = (int(v) for v in rest.split()[:8])
        except ValueError:
            raise ValueError(f"{path}: line {name!r} has not eight jiffy counts: {line!r}") from None
        total = user + nice + system + idle + iowait + irq + softirq + steal
        out[int(name[3:])] = (total, total - idle - iowait - steal, steal)
    missing = [c for c in cpus if c not in out]
    if missing:
        raise ValueError(f"{path}: no line for CPU {','.join(map(str, missing))} (offline, or not on this host)")
    return out


@dataclass(frozen=True)
class _Proc:
    pid: int
    ppid: int
    name: str
    own: int  # utime + stime
    reaped: int  # cutime + cstime: the waited-for children's


_Key = tuple[int, int]  # (pid, start time): a pid the kernel reused is another process


def _processes(proc: Path) -> dict[_Key, _Proc]:
    """Every process's ``/proc/<pid>/stat`` CPU times; a process that exits while read, or whose file does not parse,
    is left out (the kernel writes these files, a reader races with exits)."""
    out: dict[_Key, _Proc] = {}
    for stat in proc.glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
            head, tail = text.rsplit(")", 1)
            f = tail.split()
            key = (int(stat.parent.name), int(f[19]))
            out[key] = _Proc(key[0], int(f[1]), head.split("(", 1)[1], int(f[11]) + int(f[12]), int(f[13]) + int(f[14]))
        except (OSError, ValueError, IndexError):
            continue
    return out


def _tree(procs: dict[_Key, _Proc], root_pid: int) -> set[_Key]:
    """``root_pid``'s process and every process below it (by parent pid), as keys of ``procs``."""
    children: dict[int, list[_Key]] = {}
    for key, p in procs.items():
        children.setdefault(p.ppid, []).append(key)
    out = {k for k in procs if k[0] == root_pid}
    frontier = [root_pid] if out else []
    while frontier:
        below = [k for pid in frontier for k in children.get(pid, []) if k not in out]
        out.update(below)
        frontier = [k[0] for k in below]
    return out


def _window_jiffies(before: dict[_Key, _Proc], after: dict[_Key, _Proc]) -> dict[_Key, int]:
    """Each process alive at the end: the CPU time it and the children it reaped used in the window. A process that
    started in the window counts whole; one alive at both ends counts its growth, less the time that the processes
    below it which exited in the window (and it reaped) had used before the window."""
    kids: dict[int, list[_Key]] = {}
    for key, p in before.items():
        kids.setdefault(p.ppid, []).append(key)

    def gone_before(pid: int) -> int:  # the pre-window time of the exited processes below pid (through exited ones)
        total = 0
        for key in kids.get(pid, []):
            if key not in after:
                total += before[key].own + before[key].reaped + gone_before(key[0])
        return total

    out: dict[_Key, int] = {}
    for key, b in after.items():
        a = before.get(key)
        out[key] = b.own + b.reaped if a is None else b.own - a.own + b.reaped - a.reaped - gone_before(key[0])
    return out


@dataclass(frozen=True)
class _Snapshot:
    t: float
    cpu: dict[int, tuple[int, int, int]]
    procs: dict[_Key, _Proc]


class CpuMeter:
    """What ran on ``cpus`` between ``start()`` and ``stop()`` besides ``root_pid`` and its descendants.

    Others' share = (the CPUs' busy jiffies - our tree's CPU time) / the jiffies the CPUs counted (their capacity,
    len(cpus) x window x CLK_TCK as the kernel measured it). Our tree is every process below ``root_pid`` at either
    end; a tree process that started in the window counts whole, one that exited counts through its parent's reaped
    children's time (``cutime``, ``cstime``) less what it had used at the start.

    Residual error: our tree's CPU time is subtracted wherever it ran, so a tree process that also ran on other CPUs
    makes others' share too low (the experiment pins its tree to these CPUs); a tree process that exited unreaped by
    the tree (an orphan, or a parent ignoring SIGCHLD) and short-lived processes that nobody of ours reaped are
    counted as other; irq and softirq time (our own localhost traffic's included) counts as other; busy jiffies are
    sampled at the tick while process times are exact, so a window of a second or less errs by a few percent."""

    def __init__(
        self, cpus: Iterable[int | str], root_pid: int, proc: Path = _PROC,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:  # fmt: skip
        self.cpus = tuple(sorted({int(c) for c in cpus}))
        if not self.cpus:
            raise ValueError("CpuMeter: no CPUs to measure")
        self.root_pid, self.proc, self.clock = root_pid, proc, clock
        self._start: _Snapshot | None = None
        self._started = False

    def _snapshot(self) -> _Snapshot | None:
        t = self.clock()
        cpu = _cpu_jiffies(self.cpus, self.proc)
        return None if cpu is None else _Snapshot(t, cpu, _processes(self.proc))

    def start(self) -> None:
        """Read the CPUs' jiffies and every process's CPU time now."""
        self._started = True
        self._start = self._snapshot()

    def stop(self) -> HostSample:
        """Read them again; the window's sample (shares None where ``/proc/stat`` is missing)."""
        if not self._started:
            raise RuntimeError("CpuMeter.stop() before start()")
        a, b = self._start, self._snapshot()
        loadavg = load_average(self.proc)
        if a is None or b is None:
            return HostSample(self.cpus, 0.0, None, None, loadavg)
        capacity = sum(b.cpu[c][0] - a.cpu[c][0] for c in self.cpus)
        if capacity <= 0:
            return HostSample(self.cpus, b.t - a.t, None, None, loadavg)
        busy = sum(b.cpu[c][1] - a.cpu[c][1] for c in self.cpus)
        steal = sum(b.cpu[c][2] - a.cpu[c][2] for c in self.cpus)
        window = _window_jiffies(a.procs, b.procs)
        ours = (_tree(a.procs, self.root_pid) | _tree(b.procs, self.root_pid)) & window.keys()
        others = min(1.0, max(0.0, (busy - sum(window[k] for k in ours)) / capacity))
        candidates = []
        for key, used in window.items():
            if key in ours or used <= 0:
                continue
            allowed = allowed_cpus(key[0], self.proc)
            on = None if allowed is None else not allowed.isdisjoint(self.cpus)
            candidates.append(OtherProcess(key[0], b.procs[key].name, used / capacity, on))
        candidates.sort(key=lambda p: (p.on_cpus is False, -p.share, p.pid))
        return HostSample(
            self.cpus, b.t - a.t, others, min(1.0, max(0.0, steal / capacity)), loadavg, tuple(candidates[:BUSIEST])
        )


def sample_host(cpus: Iterable[int | str], root_pid: int, window_s: float = 3.0, proc: Path = _PROC) -> HostSample:
    """``CpuMeter`` over ``window_s`` seconds of sleep."""
    meter = CpuMeter(cpus, root_pid, proc)
    meter.start()
    time.sleep(window_s)
    return meter.stop()


def _pct(share: float) -> str:
    return f"{share:.0%}"


def refusal(sample: HostSample, threshold: float = HOST_BUSY_MAX) -> str | None:
    """One line refusing the host when other processes or the hypervisor's steal took more than ``threshold`` of the
    sample's CPUs (naming the busiest processes that may run on them, those of 1% or more, and the override); None
    when not, or unknown."""
    parts = []
    if sample.others_share is not None and sample.others_share > threshold:
        parts.append(f"other processes used {_pct(sample.others_share)}")
    if sample.steal_share is not None and sample.steal_share > threshold:
        parts.append(f"the hypervisor stole {_pct(sample.steal_share)}")
    if not parts:
        return None
    cpus = ",".join(map(str, sample.cpus))
    text = f"host busy: {' and '.join(parts)} of CPUs {cpus} over {sample.window_s:.1f} s (threshold {_pct(threshold)})"
    named = [p for p in sample.busiest if p.on_cpus is not False and p.share >= 0.005]
    names = [f"{p.name} (pid {p.pid}) {_pct(p.share)}" for p in named]
    return text + (": " + ", ".join(names) if names else "") + f"; free the CPUs or pass {OVERRIDE}"


def _finite_positive(x: float | None) -> TypeGuard[float]:
    return x is not None and math.isfinite(x) and x > 0


def block_flag(
    sample: HostSample | None, step_period_s: float | None, reference_period_s: float | None, *,
    busy_max: float = HOST_BUSY_MAX, drift_max: float = DRIFT_MAX,
) -> dict[str, Any]:  # fmt: skip
    """A block's host figures and flag: ``others_share`` and ``steal_share`` over the block (``sample``; None: not
    measured), ``step_ratio`` (its engine steps' time over a reference: the experiment passes the steps' measured over
    predicted time under the model fitted to calibration, against 1; None without both), and ``flag``: None, or
    "; "-joined texts for a starved block (others or steal over ``busy_max``) and steps over ``drift_max`` times
    the reference or under 1/that."""
    others = None if sample is None else sample.others_share
    steal = None if sample is None else sample.steal_share
    ratio = None
    if _finite_positive(step_period_s) and _finite_positive(reference_period_s):
        ratio = step_period_s / reference_period_s
    flags = []
    if others is not None and others > busy_max:
        flags.append(f"starved: others used {_pct(others)} of the CPUs")
    if steal is not None and steal > busy_max:
        flags.append(f"starved: the hypervisor stole {_pct(steal)} of the CPUs")
    if ratio is not None and (ratio > drift_max or ratio < 1 / drift_max):
        flags.append(f"engine steps x{ratio:.2g} of calibration")
    return {"others_share": others, "steal_share": steal, "step_ratio": ratio, "flag": "; ".join(flags) or None}


def calibration_check(step_s_live: float, step_s_reference: float, bound: float = SLOW_MAX) -> str | None:
    """One line refusing a calibration whose median engine step time ``step_s_live`` is over ``bound`` times the idle
    reference ``step_s_reference`` (or under 1/``bound``); None when within. ValueError on a non-positive figure."""
    for name, value in (("step_s_live", step_s_live), ("step_s_reference", step_s_reference), ("bound", bound)):
        if not _finite_positive(value):
            raise ValueError(f"calibration_check: {name} must be a positive number, got {value!r}")
    ratio = step_s_live / step_s_reference
    if 1 / bound <= ratio <= bound:
        return None
    which = "slower" if ratio > bound else "faster"
    return (f"calibration {which} than the reference: median engine step {step_s_live * 1e3:.3g} ms, x{ratio:.2g} of "
            f"the reference's {step_s_reference * 1e3:.3g} ms (bound x{bound:g} either way); a busy or different host? "
            f"free the CPUs or pass {OVERRIDE}")  # fmt: skip
