"""Step times of the torch runtime's model runner: decode batches and prefill chunks.

    python bench/bench_runtime_model.py                       # tiny preset, one thread (--threads), on cuda
                                                              # when there is one (float32 on cpu)
    python bench/bench_runtime_model.py --model llama-1b --device cuda --dtype bfloat16

Each case is run on a fresh sequence layout (contiguous block ids) after warmup; the median of
``--repeats`` runs is printed, with the tokens per second it implies. Then decode batches of mixed context
lengths, attended in length groups (the runner's default) and in one padded call (what the runner did
before), against a batch of as many decodes of uniform length with about the same total context.
"""

from __future__ import annotations

import argparse

from llmsched_env.commands.evaluate_args import add_runner_options, runner_spec
from llmsched_env.runtime.calibrate import time_step
from llmsched_env.runtime.runner import SeqChunk


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_runner_options(parser)
    parser.add_argument("--block-size", type=int, default=16)
    parser.add_argument("--context", type=int, default=512, help="tokens already cached for each decode")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    spec = runner_spec(parser, args)
    bs, ctx = args.block_size, args.context
    decode_batches, prefill_sizes = (1, 8, 32), (128, 512, 2048)
    per_seq = -(-(ctx + 1) // bs)
    num_blocks = max(max(decode_batches) * per_seq, -(-max(prefill_sizes) // bs))
    runner = spec.build(num_blocks, bs)
    cfg = runner.config
    print(f"model {cfg.name} ({cfg.num_params / 1e6:.1f} M params), {args.device}, {args.dtype}, block {bs}")
    print(f"{'case':<28}{'step ms':>10}{'tokens/s':>12}")
    for b in decode_batches:  # every sequence decodes its token at position ctx
        chunks = [SeqChunk([1], ctx, list(range(i * per_seq, (i + 1) * per_seq)), True) for i in range(b)]
        t = time_step(runner, chunks, args.warmup, args.repeats)
        print(f"{f'decode x{b} @ ctx {ctx}':<28}{t * 1e3:>10.2f}{b / t:>12.0f}")
    for n in prefill_sizes:
        chunks = [SeqChunk([1] * n, 0, list(range(-(-n // bs))), True)]
        t = time_step(runner, chunks, args.warmup, args.repeats)
        print(f"{f'prefill {n} tokens':<28}{t * 1e3:>10.2f}{n / t:>12.0f}")
    mixed = {"x16 @ ctx 125": [125] * 16, "x16 (15 @ 30, 1 @ 1800)": [30] * 15 + [1800]}
    print(f"\n{'decodes, context':<28}{'grouped ms':>12}{'one call ms':>13}")
    for name, lengths in mixed.items():
        chunks, first = [], 0
        for n in lengths:
            blocks = -(-(n + 1) // bs)
            chunks.append(SeqChunk([1], n, list(range(first, first + blocks)), True))
            first += blocks
        times = []
        for slack in (runner.decode_group_slack, 1 << 30):
            runner.decode_group_slack = slack
            times.append(time_step(runner, chunks, args.warmup, args.repeats))
        runner.decode_group_slack = 256
        print(f"{name:<28}{times[0] * 1e3:>12.2f}{times[1] * 1e3:>13.2f}")


if __name__ == "__main__":
    main()
