"""Parse time of each shipped trace, gzip-compressed (as the package ships it) against the same file plain.

    python bench/bench_traces.py [--repeats N]

The plain copies are the packaged files decompressed into a temporary folder, so the bench needs nothing
beside the package. Each load runs with the trace cache cleared and the best of ``--repeats`` runs is kept (the
least disturbed by other work on the machine). Also prints the seconds to decompress alone and to load again
from the cache (a trace is parsed once per process).
"""

from __future__ import annotations

import argparse
import gzip
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from llmsched_env.workloads.public_traces import TRACE_FILES, trace_path
from llmsched_env.workloads.traces import Trace, clear_trace_cache, load_trace

FORMATS = {"azure-conv": "azure", "azure-code": "azure", "mooncake-conv": "mooncake", "sharegpt": "lengths"}


def best_of(repeats: int, fn: Callable[[], object], cold: bool = True) -> float:
    """The shortest of ``repeats`` timed calls of ``fn``; ``cold`` clears the trace cache before each."""
    times = []
    for _ in range(repeats):
        if cold:
            clear_trace_cache()
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def bench_one(key: str, plain_dir: Path, repeats: int) -> str:
    packed = trace_path(key)
    plain = plain_dir / Path(TRACE_FILES[key]).name
    raw = packed.read_bytes()
    plain.write_bytes(gzip.decompress(raw))
    fmt = FORMATS[key]
    gz_s = best_of(repeats, lambda: load_trace(packed, fmt))
    plain_s = best_of(repeats, lambda: load_trace(plain, fmt))
    unzip_s = best_of(repeats, lambda: gzip.decompress(raw), cold=False)
    first: Trace = load_trace(packed, fmt)
    cached_s = best_of(repeats, lambda: load_trace(packed, fmt), cold=False)
    assert load_trace(packed, fmt) is first  # the cache hands back the parsed trace
    return (
        f"{key:14s} {len(first):>7,} {plain.stat().st_size / 1e6:>7.2f} {packed.stat().st_size / 1e6:>6.2f} "
        f"{plain_s:>8.3f} {gz_s:>8.3f} {gz_s / plain_s:>6.2f} {unzip_s:>8.3f} {cached_s * 1e6:>8.1f}"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="timed loads per file and kind (default: 5)")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error(f"--repeats must be >= 1, got {args.repeats}")
    print(f"best of {args.repeats} cold loads (trace cache cleared before each)")
    print(
        f"{'trace':14s} {'rows':>7s} {'MB':>7s} {'MB gz':>6s} {'plain s':>8s} {'gz s':>8s} {'ratio':>6s} "
        f"{'unzip s':>8s} {'cache µs':>8s}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        for key in TRACE_FILES:
            print(bench_one(key, Path(tmp), args.repeats), flush=True)


if __name__ == "__main__":
    main()
