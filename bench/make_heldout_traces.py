"""Write the held-out traces of ``tests/data/heldout/``: traces that no training, tuning or checkpoint selection
reads, on which the generalist is judged against the named baselines (docs/generalist.md).

Each is cut from the *test* part (the last 15% of the time, or of the rows: ``workloads.scenarios``) of a
public trace, which training and selection never read, and reshaped into a situation the library does not
have:

- ``azure_code_1tenant.csv``: Azure code, Azure format, one tenant (the test part as it is);
- ``mooncake_1tenant.jsonl``: Mooncake, Mooncake format, its test part;
- ``conv_code_2tenants.csv``: Azure conversation and Azure code merged on their own timestamps over the span
  both cover, two tenants throughout (generic format: ``arrival,prompt_len,output_len,tenant``);
- ``sharegpt_12tenants.csv``: ShareGPT test-part lengths dealt to 12 tenants with their own arrival processes
  (Poisson, bursty Gamma, on/off) and rates, over ten minutes (generic format).

    python bench/make_heldout_traces.py        # rewrites tests/data/heldout (deterministic: seed 0)
    python bench/make_heldout_traces.py --user-trace /tmp/two_tenants.csv
        # instead, a user's trace of 24,000 requests (docs/evaluation.md, "A trace too short to judge"): two
        # tenants over about 4.6 hours, "chat" (Gamma arrivals, CV 2, at 0.45 req/s) and "summarize" (Poisson at
        # 1 req/s, the longer prompts), lengths of ShareGPT's test part (generic format)
    python bench/make_heldout_traces.py --eight-tenants /tmp/eight_tenants.csv
        # instead, a user's trace of 24,000 requests from eight tenants over about 4.2 hours (``eight_tenants``
        # below: SLO classes, arrival processes and rates of their own), generic format; tune and evaluate it with
        #   --trace /tmp/eight_tenants.csv --trace-format generic
        #   --trace-columns arrival=arrival,prompt_len=prompt_len,output_len=output_len,tenant=tenant
        #   --tenant-slo chat=chat,assist=chat,ui=interactive,code=code,codegen=code_long,
        #                summarize=summarization,rag=long_context,batch=batch   (one word, no spaces)

The files keep the licences of their sources (tests/data/heldout/README.md).
"""

from __future__ import annotations

import argparse
import gzip
import json
from pathlib import Path

import numpy as np

from llmsched_env.common.outputs import write_text_atomically
from llmsched_env.workloads.arrivals import ArrivalProcess, GammaArrivals, OnOff, Poisson
from llmsched_env.workloads.public_traces import trace_path
from llmsched_env.workloads.scenarios import split_bounds

OUT = Path(__file__).resolve().parents[1] / "tests" / "data" / "heldout"
HORIZON_S = 600.0  # the 12-tenant trace spans ten minutes


def _lines(path: Path) -> list[str]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:  # type: ignore[operator]
        return f.read().splitlines()


def _test_rows(rows: list[str], times: list[float]) -> list[int]:
    """Indices of the rows in the test part of the trace's time span."""
    lo, _ = split_bounds("test")
    start, end = times[0], times[-1]
    cut = start + lo * (end - start)
    return [i for i, t in enumerate(times) if t >= cut]


def _azure(key: str) -> tuple[str, list[str], list[float]]:
    lines = _lines(trace_path(key))
    header, rows = lines[0], lines[1:]
    stamps = np.array([r.split(",")[0] for r in rows], dtype="datetime64[us]")
    times = ((stamps - stamps[0]) / np.timedelta64(1, "s")).astype(float).tolist()
    keep = _test_rows(rows, times)
    return header, [rows[i] for i in keep], [times[i] for i in keep]


def _sharegpt_test_lengths() -> list[tuple[int, int]]:
    """(prompt, output) lengths of the rows of ShareGPT's test part (its last 15% of the rows)."""
    share = _lines(trace_path("sharegpt"))
    head = share[0].split(",")
    pi, oi = head.index("num_prefill_tokens"), head.index("num_decode_tokens")
    body = share[1:]
    lo, _ = split_bounds("test")
    body = body[int(lo * len(body)) :]
    return [(max(int(float(r.split(",")[pi])), 1), max(int(float(r.split(",")[oi])), 1)) for r in body]


def _write_generic(path: Path, rows: list[tuple[float, int, int, str]]) -> None:
    text = ["arrival,prompt_len,output_len,tenant"] + [f"{a:.6f},{p},{o},{k}" for a, p, o, k in rows]
    write_text_atomically(path, "\n".join(text) + "\n")


def user_trace(path: Path, num_requests: int = 24000) -> None:
    """A two-tenant trace of ``num_requests`` requests (seed 0): ``chat`` at 0.45 req/s in Gamma bursts (CV 2) and
    ``summarize`` at 1 req/s, Poisson, taking the prompts of 1,000 tokens or more; lengths drawn from
    ShareGPT's test part."""
    lengths = _sharegpt_test_lengths()
    longer = [pair for pair in lengths if pair[0] >= 1000]
    tenants: list[tuple[str, ArrivalProcess, list[tuple[int, int]]]] = [
        ("chat", GammaArrivals(0.45, cv=2.0), lengths),
        ("summarize", Poisson(1.0), longer),
    ]
    _write_tenants(path, tenants, num_requests)


def _write_tenants(
    path: Path, tenants: list[tuple[str, ArrivalProcess, list[tuple[int, int]]]], num_requests: int
) -> None:
    """The first ``num_requests`` arrivals of ``tenants`` (name, arrivals, (prompt, output) lengths to draw from),
    seed 0, written to ``path`` (generic format)."""
    rng = np.random.default_rng(0)
    rows: list[tuple[float, int, int, str]] = []
    for name, proc, pool in tenants:
        for t in proc.sample(rng, num_requests).tolist():
            p, o = pool[int(rng.integers(len(pool)))]
            rows.append((t, p, o, name))
    rows.sort()
    _write_generic(path, rows[:num_requests])
    print(f"wrote {path} ({num_requests} requests over {rows[num_requests - 1][0]:.0f} s)")


# the eight tenants: (name, SLO class for --tenant-slo, arrival process, prompt lengths) -- 1.6 req/s in all
EIGHT_TENANTS: tuple[tuple[str, str, ArrivalProcess, tuple[int, int]], ...] = (
    ("chat", "chat", Poisson(0.30), (1, 10**9)),
    ("assist", "chat", GammaArrivals(0.20, cv=3.0), (1, 10**9)),
    ("ui", "interactive", OnOff(0.60, on_s=60.0, off_s=120.0), (1, 512)),  # 0.2 req/s on average
    ("code", "code", Poisson(0.25), (1, 1000)),
    ("codegen", "code_long", GammaArrivals(0.10, cv=2.0), (1000, 10**9)),
    ("summarize", "summarization", Poisson(0.20), (1000, 10**9)),
    ("rag", "long_context", OnOff(0.30, on_s=120.0, off_s=240.0), (1500, 10**9)),  # 0.1 req/s on average
    ("batch", "batch", GammaArrivals(0.25, cv=4.0), (1, 10**9)),
)


def eight_tenants(path: Path, num_requests: int = 24000) -> None:
    """An eight-tenant trace of ``num_requests`` requests (seed 0), each tenant its SLO class, arrival process, rate
    and prompt-length range (``EIGHT_TENANTS``; lengths drawn from ShareGPT's test part):

    - ``chat`` (SLO class ``chat``): Poisson, 0.30 req/s, any prompt;
    - ``assist`` (``chat``): Gamma gaps, CV 3, 0.20 req/s, any prompt;
    - ``ui`` (``interactive``): on/off, Poisson 0.6 req/s for 60 s then silent for 120 s, prompts < 512 tokens;
    - ``code`` (``code``): Poisson, 0.25 req/s, prompts < 1,000 tokens;
    - ``codegen`` (``code_long``): Gamma gaps, CV 2, 0.10 req/s, prompts >= 1,000 tokens;
    - ``summarize`` (``summarization``): Poisson, 0.20 req/s, prompts >= 1,000 tokens;
    - ``rag`` (``long_context``): on/off, Poisson 0.3 req/s for 120 s then silent for 240 s, prompts >= 1,500;
    - ``batch`` (``batch``): Gamma gaps, CV 4, 0.25 req/s, any prompt.

    1.6 req/s in all, about 4.2 hours. ``--tenant-slo chat=chat,assist=chat,ui=interactive,code=code,``
    ``codegen=code_long,summarize=summarization,rag=long_context,batch=batch`` (``tenant_slo()``)."""
    lengths = _sharegpt_test_lengths()
    tenants = [
        (name, proc, [pr for pr in lengths if low <= pr[0] < high]) for name, _, proc, (low, high) in EIGHT_TENANTS
    ]
    _write_tenants(path, tenants, num_requests)


def tenant_slo() -> str:
    """The ``--tenant-slo`` value of the eight-tenant trace."""
    return ",".join(f"{name}={slo}" for name, slo, _, _ in EIGHT_TENANTS)


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    header, code_rows, code_t = _azure("azure-code")
    write_text_atomically(OUT / "azure_code_1tenant.csv", "\n".join([header, *code_rows]) + "\n")

    moon = _lines(trace_path("mooncake-conv"))
    times = [json.loads(line)["timestamp"] / 1000.0 for line in moon]
    keep = _test_rows(moon, times)
    write_text_atomically(OUT / "mooncake_1tenant.jsonl", "\n".join(moon[i] for i in keep) + "\n")

    _, conv_rows, conv_t = _azure("azure-conv")
    merged = []
    span = min(code_t[-1] - code_t[0], conv_t[-1] - conv_t[0])  # both tenants over the whole trace
    for rows, ts, tenant in ((conv_rows, conv_t, "conv"), (code_rows, code_t, "code")):
        t0 = ts[0]
        for row, t in zip(rows, ts, strict=True):
            if t - t0 <= span:
                _, prompt, output = row.split(",")
                merged.append((t - t0, int(prompt), int(output), tenant))
    merged.sort(key=lambda r: (r[0], r[3]))
    _write_generic(OUT / "conv_code_2tenants.csv", merged)

    lengths = _sharegpt_test_lengths()
    rates = rng.uniform(0.1, 0.5, size=12)
    rows = []
    for k in range(12):
        kind = k % 3
        proc = (
            Poisson(rates[k])
            if kind == 0
            else GammaArrivals(rates[k], cv=float(rng.uniform(2, 4)))
            if kind == 1
            else OnOff(rates[k], on_s=float(rng.uniform(10, 30)), off_s=float(rng.uniform(10, 40)))
        )
        for t in proc.sample(rng, 2000).tolist():
            if t >= HORIZON_S:
                break
            p, o = lengths[int(rng.integers(len(lengths)))]
            rows.append((t, p, o, f"tenant{k:02d}"))
    rows.sort()
    _write_generic(OUT / "sharegpt_12tenants.csv", rows)
    print(f"wrote {sorted(p.name for p in OUT.iterdir())} into {OUT}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--user-trace", type=Path, default=None, help="write the 24,000-request user trace there")
    parser.add_argument(
        "--eight-tenants", type=Path, default=None, help="write the 24,000-request 8-tenant trace there"
    )
    args = parser.parse_args()
    if args.user_trace is not None and args.eight_tenants is not None:
        parser.error("give --user-trace or --eight-tenants, one of the two")
    if args.user_trace is not None:
        user_trace(args.user_trace)
    elif args.eight_tenants is not None:
        eight_tenants(args.eight_tenants)
    else:
        main()
