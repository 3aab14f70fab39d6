"""How steady is this machine? The same model steps timed again and again, window by window.

    python bench/bench_speed_drift.py                  # tiny preset, one thread, 60 s (cuda when there is one)
    python bench/bench_speed_drift.py --seconds 120 --window 10

Alternates one fixed decode batch (``--decodes`` sequences at context ``--context``) and one fixed prefill
chunk (``--prefill`` tokens) for ``--seconds``, and prints the mean step time of each per ``--window``
seconds, then the slowest window over the fastest. A cost-model preset fitted at one moment is off by that
much later on (why ``llmsched-calibrate fidelity`` also reports in-situ errors); on a dedicated machine the ratio
stays near 1.
"""

from __future__ import annotations

import argparse
import statistics
import time

from llmsched_env.commands.evaluate_args import add_runner_options, runner_spec
from llmsched_env.runtime.runner import SeqChunk


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_runner_options(parser)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--window", type=float, default=5.0)
    parser.add_argument("--decodes", type=int, default=4)
    parser.add_argument("--context", type=int, default=300)
    parser.add_argument("--prefill", type=int, default=256)
    args = parser.parse_args()
    spec = runner_spec(parser, args)
    bs = 16
    per_seq = -(-(args.context + 1) // bs)
    runner = spec.build(args.decodes * per_seq + -(-args.prefill // bs), bs)
    decode = [
        SeqChunk([1], args.context, list(range(i * per_seq, (i + 1) * per_seq)), True) for i in range(args.decodes)
    ]
    first = args.decodes * per_seq
    prefill = [SeqChunk([1] * args.prefill, 0, list(range(first, first + -(-args.prefill // bs))), True)]
    for _ in range(10):  # warm-up
        runner.run(decode)
        runner.run(prefill)
    runner.synchronize()
    print(
        f"model {runner.config.name}, {args.device}, {args.dtype}: decode x{args.decodes} @ ctx {args.context}, "
        f"prefill {args.prefill} tokens, {args.window:g} s windows"
    )
    print(f"{'window':>8}{'decode ms':>12}{'prefill ms':>12}")
    means: dict[str, list[float]] = {"decode": [], "prefill": []}
    end = time.perf_counter() + args.seconds
    while time.perf_counter() < end:
        times: dict[str, list[float]] = {"decode": [], "prefill": []}
        stop = min(time.perf_counter() + args.window, end)
        while time.perf_counter() < stop:
            for name, chunks in (("decode", decode), ("prefill", prefill)):
                t0 = time.perf_counter()
                runner.run(chunks)
                runner.synchronize()
                times[name].append(time.perf_counter() - t0)
        for name in means:
            means[name].append(statistics.mean(times[name]))
        print(
            f"{len(means['decode']):>8}{means['decode'][-1] * 1e3:>12.3f}{means['prefill'][-1] * 1e3:>12.3f}",
            flush=True,
        )
    for name, values in means.items():
        print(f"{name}: slowest window / fastest = {max(values) / min(values):.3f}")


if __name__ == "__main__":
    main()
