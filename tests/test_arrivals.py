"""Arrival processes (workloads/arrivals.py): rates, burstiness, shapes in time, scaling, round trips, validation."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from llmsched_env.workloads.arrivals import (
    ARRIVAL_KINDS,
    ArrivalProcess,
    Diurnal,
    GammaArrivals,
    OnOff,
    Poisson,
    Ramp,
    TraceReplay,
    arrival_from_dict,
    interarrival_cv,
)

N = 50_000


def _trace() -> TraceReplay:
    gaps = np.random.default_rng(123).exponential(1 / 8.0, size=N)
    return TraceReplay(np.cumsum(gaps))


PROCESSES = [
    Poisson(10.0),
    GammaArrivals(10.0, 0.5),
    GammaArrivals(10.0, 2.0),
    OnOff(20.0, on_s=2.0, off_s=3.0, phase_s=0.7),
    Diurnal(12.0, amplitude=0.8, period_s=20.0, phase_s=3.0),
    Ramp(1.0, 15.0, duration_s=30.0),
    Ramp(30.0, 5.0, duration_s=30.0),
    _trace(),
]
IDS = [type(p).__name__ for p in PROCESSES]


def _rate(times: np.ndarray, start_s: float = 0.0) -> float:
    return times.size / float(times[-1] - start_s)


@pytest.mark.parametrize("process", PROCESSES, ids=IDS)
def test_sample_contract_and_mean_rate(process: ArrivalProcess) -> None:
    assert isinstance(process, ArrivalProcess)
    for start_s in (0.0, 7.5):
        times = process.sample(np.random.default_rng(0), N, start_s=start_s)
        assert times.dtype == np.float64 and times.shape == (N,)
        assert np.all(times > start_s) and np.all(np.diff(times) >= 0)
    times = process.sample(np.random.default_rng(0), N)
    assert _rate(times) == pytest.approx(process.mean_rate_rps, rel=0.03)
    assert process.sample(np.random.default_rng(0), 0).shape == (0,)


@pytest.mark.parametrize("process", PROCESSES, ids=IDS)
def test_scaled_doubles_the_measured_rate(process: ArrivalProcess) -> None:
    doubled = process.scaled(2.0)
    assert type(doubled) is type(process)
    assert doubled.mean_rate_rps == pytest.approx(2 * process.mean_rate_rps)
    n = N if not isinstance(process, TraceReplay) else process.num_arrivals
    base = _rate(process.sample(np.random.default_rng(1), n))
    fast = _rate(doubled.sample(np.random.default_rng(1), n))  # same draws: the ratio is nearly noise-free
    assert fast == pytest.approx(2 * base, rel=0.03)
    assert fast == pytest.approx(2 * process.mean_rate_rps, rel=0.03)
    with pytest.raises(ValueError, match="load"):
        process.scaled(0.0)


@pytest.mark.parametrize("process", PROCESSES, ids=IDS)
def test_deterministic_given_the_seed(process: ArrivalProcess) -> None:
    a = process.sample(np.random.default_rng(42), 1000, start_s=3.0)
    b = process.sample(np.random.default_rng(42), 1000, start_s=3.0)
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("process", PROCESSES, ids=IDS)
def test_dict_round_trip_through_json(process: ArrivalProcess) -> None:
    d = process.to_dict()
    assert d["kind"] in ARRIVAL_KINDS
    again = arrival_from_dict(json.loads(json.dumps(d)))
    assert again == process and hash(again) == hash(process)
    assert arrival_from_dict(d) != process.scaled(2.0)


@pytest.mark.parametrize("cv", [0.5, 1.0, 2.0, 4.0])
def test_gamma_hits_rate_and_interarrival_cv(cv: float) -> None:
    times = GammaArrivals(5.0, cv).sample(np.random.default_rng(3), 400_000)
    assert _rate(times) == pytest.approx(5.0, rel=0.03)
    assert interarrival_cv(times) == pytest.approx(cv, rel=0.05)


def test_poisson_interarrival_cv_is_one() -> None:
    assert interarrival_cv(Poisson(3.0).sample(np.random.default_rng(4), N)) == pytest.approx(1.0, rel=0.03)


def test_on_off_is_silent_in_off_periods() -> None:
    p = OnOff(50.0, on_s=0.4, off_s=1.1, phase_s=0.25)
    times = p.sample(np.random.default_rng(5), N, start_s=0.9)  # start inside an off-period
    into = np.mod(times + p.phase_s, p.cycle_s)
    tol = 1e-9 * p.cycle_s
    assert not np.any((into > p.on_s + tol) & (into < p.cycle_s - tol))
    assert _rate(times, 0.9) == pytest.approx(50.0 * 0.4 / 1.5, rel=0.03)
    assert np.all(p.rate_at(times) == 50.0)
    # On the clock that runs only during on-periods the arrivals are Poisson at the on-rate.
    num_cycles, into = np.divmod(times + p.phase_s, p.cycle_s)
    on_clock = num_cycles * p.on_s + np.minimum(into, p.on_s)
    assert _rate(on_clock, on_clock[0]) == pytest.approx(50.0, rel=0.03)
    assert interarrival_cv(on_clock) == pytest.approx(1.0, rel=0.03)


def test_diurnal_high_half_over_low_half_matches_the_sine() -> None:
    amplitude = 0.6
    p = Diurnal(40.0, amplitude, period_s=10.0, phase_s=2.0)
    times = p.sample(np.random.default_rng(6), N)
    whole = times[times < math.floor(times[-1] / p.period_s) * p.period_s]  # whole periods only
    high = np.sin(2 * np.pi * (whole + p.phase_s) / p.period_s) > 0
    expected = (1 + 2 * amplitude / np.pi) / (1 - 2 * amplitude / np.pi)
    assert high.sum() / (~high).sum() == pytest.approx(expected, rel=0.04)
    # Amplitude 1: the rate touches zero, and sampling still hits the mean.
    flat_out = Diurnal(40.0, 1.0, period_s=10.0).sample(np.random.default_rng(7), N)
    assert _rate(flat_out) == pytest.approx(40.0, rel=0.03)


@pytest.mark.parametrize(("start", "end"), [(10.0, 200.0), (200.0, 20.0), (0.0, 100.0), (50.0, 50.0)])
def test_ramp_follows_the_linear_rate(start: float, end: float) -> None:
    p = Ramp(start, end, duration_s=100.0)
    times = p.sample(np.random.default_rng(8), N)
    assert times[-1] > 250.0  # the sample reaches well past the ramp
    # Poisson counts: within 4 standard deviations of the integral of the linear rate.
    for until_s, mean_rate in ((100.0, 0.5 * (start + end)), (50.0, start + 0.25 * (end - start))):
        expected = mean_rate * until_s
        assert abs(np.sum(times <= until_s) - expected) < 4 * math.sqrt(expected)
    assert np.allclose(p.rate_at([0.0, 50.0, 100.0, 1e6]), [start, 0.5 * (start + end), end, end])
    tail = times[times > 150.0]
    assert _rate(tail, 150.0) == pytest.approx(end, rel=0.03)


def test_trace_replay_is_exact_and_compresses() -> None:
    stamps = (0.0, 0.5, 0.5, 2.0, 3.5)
    trace = TraceReplay(stamps)
    times = trace.sample(np.random.default_rng(0), 5, start_s=10.0)
    np.testing.assert_array_equal(times[1:], np.array(stamps[1:]) + 10.0)
    assert times[0] == np.nextafter(10.0, math.inf)  # a 0 timestamp lands just after start_s
    np.testing.assert_array_equal(TraceReplay(stamps, 4.0).sample(np.random.default_rng(0), 3)[1:], [0.125, 0.125])
    np.testing.assert_array_equal(trace.scaled(4.0).sample(np.random.default_rng(0), 4)[1:], [0.125, 0.125, 0.5])
    assert trace.mean_rate_rps == pytest.approx(4 / 3.5)
    with pytest.raises(ValueError, match="has 5"):
        trace.sample(np.random.default_rng(0), 6)
    assert not trace.timestamps_s.flags.writeable
    src = np.array([1.0, 2.0, 3.0])
    copy = TraceReplay(src)
    src[0] = 99.0
    assert copy.timestamps_s[0] == 1.0 and len(repr(TraceReplay(np.arange(1.0, 1e5)))) < 100


def test_trace_replay_rng_is_unused() -> None:
    trace = TraceReplay((1.0, 2.0, 3.0))
    np.testing.assert_array_equal(trace.sample(np.random.default_rng(0), 3), trace.sample(np.random.default_rng(1), 3))


@pytest.mark.parametrize(
    ("make", "field"),
    [
        (lambda: Poisson(-1.0), "Poisson.rate_rps"),
        (lambda: Poisson(math.inf), "Poisson.rate_rps"),
        (lambda: Poisson("3"), "Poisson.rate_rps"),
        (lambda: GammaArrivals(1.0, 0.0), "GammaArrivals.cv"),
        (lambda: GammaArrivals(0.0, 1.0), "GammaArrivals.rate_rps"),
        (lambda: OnOff(1.0, on_s=0.0, off_s=1.0), "OnOff.on_s"),
        (lambda: OnOff(1.0, on_s=1.0, off_s=-1.0), "OnOff.off_s"),
        (lambda: Diurnal(1.0, 1.5, 10.0), "Diurnal.amplitude"),
        (lambda: Diurnal(1.0, -0.1, 10.0), "Diurnal.amplitude"),
        (lambda: Diurnal(1.0, 0.5, 0.0), "Diurnal.period_s"),
        (lambda: Ramp(1.0, 0.0, 10.0), "Ramp.end_rate_rps"),
        (lambda: Ramp(-1.0, 1.0, 10.0), "Ramp.start_rate_rps"),
        (lambda: TraceReplay((0.0, 2.0, 1.0)), "TraceReplay.timestamps_s must be sorted"),
        (lambda: TraceReplay((-1.0, 2.0)), "TraceReplay.timestamps_s"),
        (lambda: TraceReplay((1.0,)), "TraceReplay.timestamps_s"),
        (lambda: TraceReplay((1.0, 1.0)), "TraceReplay.timestamps_s"),
        (lambda: TraceReplay((1.0, 2.0), rate_multiplier=0.0), "TraceReplay.rate_multiplier"),
        (lambda: arrival_from_dict({"kind": "weibull", "rate_rps": 1.0}), "kind"),
        (lambda: arrival_from_dict({"rate_rps": 1.0}), "kind"),
        (lambda: arrival_from_dict({"kind": "poisson", "rate": 1.0}), "rate"),
        (lambda: arrival_from_dict({"kind": "gamma", "rate_rps": 1.0}), "cv"),
        (lambda: arrival_from_dict({"kind": "gamma", "rate_rps": 1.0, "cv": -2}), "GammaArrivals.cv"),
        (lambda: arrival_from_dict([("kind", "poisson")]), "mapping"),
        (lambda: Poisson(1.0).sample(np.random.default_rng(0), -1), "n"),
        (lambda: Poisson(1.0).sample(np.random.default_rng(0), 5, start_s=-1.0), "start_s"),
        (lambda: Poisson(1.0).sample(0, 5), "rng"),
        (lambda: interarrival_cv(np.array([1.0, 2.0])), "interarrival_cv"),
    ],
)
def test_invalid_values_raise_naming_the_field(make, field: str) -> None:
    with pytest.raises(ValueError, match=field):
        make()


def test_processes_are_frozen_and_hashable() -> None:
    p = GammaArrivals(2, 1)
    assert p == GammaArrivals(2.0, 1.0) and isinstance(p.rate_rps, float)
    with pytest.raises(AttributeError):
        p.cv = 2.0  # type: ignore[misc]
    assert len({*PROCESSES, *(q.scaled(1.0) for q in PROCESSES)}) == len(PROCESSES)


def test_continuing_from_the_last_arrival_keeps_the_rate() -> None:
    # Time-varying kinds are functions of absolute time: chunks drawn from the last arrival join up.
    p = Diurnal(20.0, 0.9, period_s=15.0)
    rng = np.random.default_rng(9)
    chunks = [p.sample(rng, 5000)]
    for _ in range(9):
        chunks.append(p.sample(rng, 5000, start_s=float(chunks[-1][-1])))
    times = np.concatenate(chunks)
    assert np.all(np.diff(times) > 0) and _rate(times) == pytest.approx(20.0, rel=0.03)
