"""Metrics: exact latencies from hand-built token records, attainment with misses, goodput, Jain, tables."""

from __future__ import annotations

import numpy as np
import pytest

from llmsched_env.engine.config import SLOClass, TenantConfig
from llmsched_env.engine.request import Request, Status
from llmsched_env.evaluation.tables import format_table
from llmsched_env.sim.metrics import _stats, compute_metrics, jain_index, token_times

# Decode round i ends at ROUNDS[i].
ROUNDS = [1.0, 1.5, 2.0, 3.0, 4.0, 4.5, 5.0, 6.0]
SLO = SLOClass("test", ttft_s=1.0, tpot_s=0.6)
TENANTS = [TenantConfig("a", slo=SLO), TenantConfig("b", slo=SLO, weight=2.0)]


def finished(
    rid: int,
    arrival: float,
    prefills: list[float],
    segments: list[tuple[int, int]],
    scheduled: float,
    tenant: int = 0,
    prompt_len: int = 10,
) -> Request:
    n = len(prefills) + sum(e - s for s, e in segments)
    r = Request(rid, arrival, prompt_len, n, tenant=tenant)
    r.status = Status.FINISHED
    r.first_scheduled_s = scheduled
    r.first_token_s = prefills[0]
    r.prefill_token_s = list(prefills)
    r.token_segments = list(segments)
    r.num_output_tokens = n
    r.num_preemptions = len(prefills) - 1
    r.finish_s = token_times(r, ROUNDS)[-1]
    return r


def test_token_times_plain_and_preempted() -> None:
    plain = finished(0, 0.0, [0.5], [(0, 3)], 0.1)
    np.testing.assert_array_equal(token_times(plain, ROUNDS), [0.5, 1.0, 1.5, 2.0])
    # Prefill token at 0.8, rounds 0-1, preempted, recomputed: token at 3.5, then rounds 4-6.
    resumed = finished(1, 0.0, [0.8, 3.5], [(0, 2), (4, 7)], 0.2)
    times = token_times(resumed, ROUNDS)
    np.testing.assert_array_equal(times, [0.8, 1.0, 1.5, 3.5, 4.0, 4.5, 5.0])
    assert len(times) == resumed.output_len
    single = finished(2, 0.0, [0.7], [(3, 3)], 0.0)
    np.testing.assert_array_equal(token_times(single, ROUNDS), [0.7])


def test_token_times_of_a_decoding_request_include_its_open_segment() -> None:
    r = Request(0, 0.0, 10, 100)
    r.status = Status.RUNNING
    r.decoding = True
    r.prefill_token_s = [0.8, 3.5]
    r.token_segments = [(0, 2)]
    r.decode_round0, r.decode_out0 = 4, 4
    np.testing.assert_array_equal(token_times(r, ROUNDS), [0.8, 1.0, 1.5, 3.5, 4.0, 4.5, 5.0, 6.0])


def test_exact_latencies() -> None:
    a = finished(0, 0.0, [0.5], [(0, 3)], 0.1)  # tokens 0.5, 1, 1.5, 2
    b = finished(1, 0.0, [0.8, 3.5], [(0, 2), (4, 7)], 0.2)  # tokens 0.8, 1, 1.5, 3.5, 4, 4.5, 5
    m = compute_metrics([a, b], TENANTS, ROUNDS, duration_s=10.0)
    assert m["ttft_mean_s"] == pytest.approx(0.65)
    assert m["tpot_mean_s"] == pytest.approx((1.5 / 3 + 4.2 / 6) / 2)
    assert m["e2el_mean_s"] == pytest.approx(3.5)
    assert m["e2el_p50_s"] == pytest.approx(3.5)
    assert m["queue_delay_mean_s"] == pytest.approx(0.15)
    itl = np.diff([0.5, 1, 1.5, 2]).tolist() + np.diff([0.8, 1, 1.5, 3.5, 4, 4.5, 5]).tolist()
    assert m["itl_mean_s"] == pytest.approx(np.mean(itl))
    for q in (50, 90, 99):
        assert m[f"itl_p{q}_s"] == pytest.approx(np.percentile(itl, q))
        assert m[f"ttft_p{q}_s"] == pytest.approx(np.percentile([0.5, 0.8], q))
    assert m["preemptions"] == 1.0
    assert m["num_finished"] == 2.0
    assert m["request_throughput_rps"] == pytest.approx(0.2)
    assert m["output_throughput_tps"] == pytest.approx(1.1)
    assert m["total_token_throughput_tps"] == pytest.approx(3.1)
    assert all(type(v) is float for v in m.values())


def test_single_token_request_has_zero_tpot_and_no_itl() -> None:
    r = finished(0, 1.0, [1.25], [(2, 2)], 1.0)
    m = compute_metrics([r], TENANTS, ROUNDS, duration_s=2.0)
    assert m["tpot_mean_s"] == 0.0
    assert m["itl_mean_s"] == 0.0 and m["itl_p99_s"] == 0.0
    assert m["ttft_mean_s"] == pytest.approx(0.25) and m["e2el_mean_s"] == pytest.approx(0.25)


def test_tpot_statistics_leave_out_one_token_requests_but_their_slo_check_takes_zero() -> None:
    """vLLM's benchmark: TPOT statistics over requests of more than one output token; for goodput a one-token
    request's TPOT is 0, so it meets even a TPOT target it could not otherwise be measured against."""
    tight = SLOClass("tight", ttft_s=1.0, tpot_s=0.01)
    tenants = [TenantConfig("a", slo=tight), TenantConfig("b", slo=tight)]
    slow = finished(0, 0.0, [0.5], [(0, 3)], 0.1)  # TPOT 0.5: misses 0.01
    faster = finished(1, 0.0, [0.8], [(0, 4)], 0.1, tenant=1)  # tokens 0.8, 1, 1.5, 2, 3: TPOT 0.55
    one = finished(2, 1.0, [1.25], [(2, 2)], 1.0)  # one token: no TPOT sample, meets the TPOT target
    m = compute_metrics([slow, faster, one], tenants, ROUNDS, duration_s=4.0)
    assert m["tpot_mean_s"] == pytest.approx((0.5 + 0.55) / 2)
    assert m["tpot_p50_s"] == pytest.approx(np.percentile([0.5, 0.55], 50))
    assert m["tenant/a/tpot_p99_s"] == pytest.approx(0.5)  # not percentile([0.5, 0.0])
    assert m["tpot_attainment"] == pytest.approx(1 / 3)
    assert m["slo_attainment"] == pytest.approx(1 / 3) and m["goodput_rps"] == pytest.approx(1 / 4)
    # only one-token requests: no sample, every TPOT statistic 0
    alone = compute_metrics([one], tenants, ROUNDS, duration_s=4.0)
    assert alone["tpot_mean_s"] == alone["tpot_p99_s"] == alone["tenant/a/tpot_p99_s"] == 0.0
    assert alone["tpot_attainment"] == 1.0


def test_throughput_counts_completed_requests_only() -> None:
    done = finished(0, 0.0, [0.5], [(0, 3)], 0.1, prompt_len=100)  # 4 output tokens
    running = Request(1, 0.0, 1000, 50)
    running.status, running.first_scheduled_s, running.num_output_tokens = Status.RUNNING, 0.5, 30
    shed = Request(2, 0.0, 500, 5)
    shed.status, shed.reject_reason = Status.REJECTED, "ttft_unreachable"
    m = compute_metrics([done, running, shed], TENANTS, ROUNDS, duration_s=2.0)
    assert m["request_throughput_rps"] == pytest.approx(1 / 2)
    assert m["output_throughput_tps"] == pytest.approx(4 / 2)
    assert m["total_token_throughput_tps"] == pytest.approx((100 + 4) / 2)
    # the running request's work still counts as service (VTC), which is not throughput
    assert m["tenant/a/service"] == pytest.approx(100 + 2 * 4 + 1000 + 2 * 30)


def test_attainment_counts_rejected_and_unfinished_as_misses() -> None:
    good = finished(0, 0.0, [0.5], [(0, 3)], 0.1)  # TTFT 0.5, TPOT 0.5: meets both
    slow_ttft = finished(1, 0.0, [1.5], [(2, 3)], 1.2, tenant=1)  # TTFT 1.5 > 1: misses, TPOT 0.5 ok
    slow_tpot = finished(2, 2.0, [2.5], [(3, 5)], 2.1, tenant=1)  # TTFT 0.5 ok, TPOT 0.75 > 0.6
    rejected = Request(3, 0.0, 10, 5)
    rejected.status, rejected.reject_reason, rejected.finish_s = Status.REJECTED, "ttft_unreachable", 1.0
    waiting = Request(4, 0.0, 10, 5, tenant=1)
    running = Request(5, 0.0, 20, 5)
    running.status, running.first_scheduled_s, running.num_output_tokens = Status.RUNNING, 0.5, 2
    reqs = [good, slow_ttft, slow_tpot, rejected, waiting, running]
    m = compute_metrics(reqs, TENANTS, ROUNDS, duration_s=4.0)
    assert m["num_requests"] == 6.0
    assert (m["num_finished"], m["num_rejected"], m["num_unfinished"]) == (3.0, 1.0, 2.0)
    assert m["rejection_rate"] == pytest.approx(1 / 6)
    assert m["slo_attainment"] == pytest.approx(1 / 6)
    assert m["ttft_attainment"] == pytest.approx(2 / 6)
    assert m["tpot_attainment"] == pytest.approx(2 / 6)
    assert m["goodput_rps"] == pytest.approx(0.25)
    assert m["tenant/a/num_requests"] == 3.0 and m["tenant/b/num_requests"] == 3.0
    assert m["tenant/a/slo_attainment"] == pytest.approx(1 / 3)
    assert m["tenant/b/slo_attainment"] == 0.0
    assert m["tenant/a/ttft_p99_s"] == pytest.approx(0.5)
    assert m["tenant/b/ttft_p99_s"] == pytest.approx(np.percentile([1.5, 0.5], 99))
    assert m["tenant/b/tpot_p99_s"] == pytest.approx(np.percentile([0.5, 0.75], 99))
    # Service: a = (10 + 2*4) + 0 (rejected) + (20 + 2*2); b = ((10 + 2*2) + (10 + 2*3) + 0) / 2.
    assert m["tenant/a/service"] == pytest.approx(42.0)
    assert m["tenant/b/service"] == pytest.approx(15.0)
    assert m["jain_fairness"] == pytest.approx(57.0**2 / (2 * (42.0**2 + 15.0**2)))
    # Throughput is over completed requests (vLLM's benchmark): output tokens 4 + 2 + 3, not the running
    # request's 2; prompts 10 + 10 + 10, not the running request's 20.
    assert m["output_throughput_tps"] == pytest.approx(9 / 4)
    assert m["total_token_throughput_tps"] == pytest.approx((30 + 9) / 4)


def test_jain_index_known_values() -> None:
    assert jain_index([1.0, 1.0]) == 1.0
    assert jain_index([1.0, 0.0]) == 0.5
    assert jain_index([3.0]) == 1.0
    assert jain_index([0.0, 0.0]) == 1.0
    assert jain_index([]) == 1.0


def test_jain_weights_and_ignores_tenants_without_arrivals() -> None:
    a = finished(0, 0.0, [0.5], [(0, 3)], 0.1, tenant=0)  # service 10 + 8 = 18
    b = finished(1, 0.0, [0.5], [(0, 3)], 0.1, tenant=1)  # 18 / weight 2 = 9
    assert compute_metrics([a, b], TENANTS, ROUNDS, 1.0)["jain_fairness"] == pytest.approx(
        27.0**2 / (2 * (18.0**2 + 9.0**2))
    )
    b2 = finished(2, 0.0, [0.5], [(0, 3)], 0.1, tenant=1, prompt_len=28)  # (28 + 8) / 2 = 18
    assert compute_metrics([a, b2], TENANTS, ROUNDS, 1.0)["jain_fairness"] == pytest.approx(1.0)
    m = compute_metrics([a], TENANTS, ROUNDS, 1.0)
    assert m["jain_fairness"] == 1.0
    assert m["tenant/b/num_requests"] == 0.0 and m["tenant/b/slo_attainment"] == 0.0


def test_prefix_hits_extra_and_empty_input() -> None:
    a = finished(0, 0.0, [0.5], [(0, 3)], 0.1, prompt_len=100)
    a.num_prefix_hit_tokens = 48
    a.num_remote_tokens = 16
    a.num_admitted_tokens = 100 + 60  # admitted twice: once fresh, once after a preemption with 60 tokens
    b = Request(1, 0.0, 60, 5)  # never scheduled: not in the denominator
    m = compute_metrics([a, b], TENANTS, ROUNDS, 1.0, extra={"kv_usage_mean": 0.5})
    assert m["prefix_cache_hit_rate"] == pytest.approx(48 / 160)
    assert m["remote_kv_hit_rate"] == pytest.approx(16 / 160)
    assert m["kv_usage_mean"] == 0.5
    empty = compute_metrics([], TENANTS, [], 0.0)
    assert empty["num_requests"] == 0.0 and empty["slo_attainment"] == 0.0
    assert empty["jain_fairness"] == 1.0 and empty["ttft_p99_s"] == 0.0
    assert "tenant/a/service" in empty and "tenant/b/tpot_p99_s" in empty
    assert not any(np.isnan(v) for v in empty.values())


def test_bad_inputs_raise_readable_errors() -> None:
    r = finished(0, 0.0, [0.5], [(0, 3)], 0.1)
    with pytest.raises(ValueError, match="duration_s"):
        compute_metrics([r], TENANTS, ROUNDS, -1.0)
    with pytest.raises(ValueError, match="tenant"):
        compute_metrics([finished(1, 0.0, [0.5], [(0, 3)], 0.1, tenant=5)], TENANTS, ROUNDS, 1.0)
    with pytest.raises(ValueError, match="round_end_s"):
        compute_metrics([r], TENANTS, ROUNDS[:2], 1.0)


def test_ten_thousand_requests_match_token_times() -> None:
    rng = np.random.default_rng(0)
    rounds = np.cumsum(rng.uniform(0.01, 0.05, 20_000))
    reqs = []
    for i in range(10_000):
        s = int(rng.integers(0, 19_000))
        e = s + int(rng.integers(0, 400))
        e = min(e, len(rounds))
        if i % 10 == 0 and e - s > 2:  # a preempted-and-resumed request
            mid = (s + e) // 2
            r = finished(
                i,
                rounds[s] - 1.0,
                [rounds[s] - 0.5, rounds[mid] + 0.01],
                [(s, mid), (mid + 1, e)],
                rounds[s] - 0.9,
            )
        else:
            r = finished(i, rounds[s] - 1.0, [rounds[s] - 0.5], [(s, e)], rounds[s] - 0.9)
        reqs.append(r)
    m = compute_metrics(reqs, TENANTS, rounds, duration_s=float(rounds[-1]))
    times = [token_times(r, rounds) for r in reqs]
    itl = np.concatenate([np.diff(t) for t in times])
    tpot = [(t[-1] - t[0]) / (len(t) - 1) for t in times if len(t) > 1]
    assert len(tpot) < len(times)  # some one-token requests, left out of the TPOT statistics
    assert m["itl_mean_s"] == pytest.approx(itl.mean())
    for q in (50, 90, 99):
        assert m[f"itl_p{q}_s"] == pytest.approx(np.percentile(itl, q), rel=1e-12, abs=0)
    assert m["tpot_p90_s"] == pytest.approx(np.percentile(tpot, 90))
    assert m["e2el_mean_s"] == pytest.approx(np.mean([t[-1] - r.arrival_s for t, r in zip(times, reqs, strict=True)]))
    assert all(len(t) == r.output_len for t, r in zip(times, reqs, strict=True))


def test_format_table() -> None:
    rows = [{"policy": "fcfs", "ttft_p99_s": 0.123456, "num": 10.0}, {"policy": "vtc", "ttft_p99_s": 12.5}]
    text = format_table(rows, ["policy", "ttft_p99_s", "num"])
    lines = text.splitlines()
    assert lines[0].split() == ["policy", "ttft_p99_s", "num"]
    assert lines[2].split() == ["fcfs", "0.1235", "10"]
    assert lines[3].split() == ["vtc", "12.5"]
    assert len({len(line) for line in lines[:3]}) == 1


@pytest.mark.parametrize("seed", range(6))
def test_counted_statistics_equal_those_of_the_sample_written_out(seed: int) -> None:
    """The ITL statistics count each distinct gap instead of listing the sample (a gap of the engine's clock
    occurs once per request decoding across it): mean and percentiles equal numpy's on the listed sample, ties,
    zero counts and a one-element sample included."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 40))
    values = rng.choice([0.01, 0.02, 0.5, 1.0, rng.random()], size=n) if seed % 2 else rng.random(n)
    counts = rng.integers(0, 5, size=n)
    counts[int(rng.integers(n))] += 1  # never an empty sample
    listed = np.repeat(values, counts)
    counted: dict[str, float] = {}
    written: dict[str, float] = {}
    _stats(counted, "x", values, counts)
    _stats(written, "x", listed)
    assert counted.keys() == written.keys()
    for key, value in written.items():
        assert counted[key] == pytest.approx(value, rel=1e-12, abs=1e-15), key


def test_counted_statistics_of_an_empty_sample_are_zero() -> None:
    out: dict[str, float] = {}
    _stats(out, "x", np.array([0.5, 0.7]), np.array([0, 0]))
    assert out == {"x_mean_s": 0.0, "x_p50_s": 0.0, "x_p90_s": 0.0, "x_p99_s": 0.0}
