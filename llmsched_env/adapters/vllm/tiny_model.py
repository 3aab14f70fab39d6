"""A tiny Llama with random weights and a tokenizer trained here, for a live vLLM server with nothing downloaded.

Seeded: hidden 256, 4 layers, a byte-level BPE of 4,096 tokens (``python -m llmsched_env.adapters.vllm.tiny_model
FOLDER``). Needs ``transformers`` and ``tokenizers``.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path
from typing import Any

from llmsched_env.common.files import CONFIG_BYTES, parse_json, read_text
from llmsched_env.common.outputs import write_text_atomically

__all__ = ["TINY_MODEL", "build_tiny_model"]

# The model's shape; ``vocab_size`` is the tokenizer's.
TINY_MODEL = {
    "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 4, "num_attention_heads": 4,
    "num_key_value_heads": 4, "max_position_embeddings": 4096, "vocab_size": 4096,
}  # fmt: skip
_MARKER = "llmsched-tiny.json"  # written last: its presence means the folder is complete


def _corpus(seed: int, num_lines: int = 4000) -> list[str]:
    """Seeded lines of pseudo-words over a Zipf-like vocabulary: enough structure for BPE to learn merges."""
    rng = random.Random(seed)
    letters = "etaoinshrdlcumwfgypbvkjxqz"
    words = ["".join(rng.choices(letters, k=rng.randint(1, 9))) for _ in range(3000)]
    weights = [1.0 / (k + 1) for k in range(len(words))]
    return [" ".join(rng.choices(words, weights, k=rng.randint(5, 30))) + "." for _ in range(num_lines)]


def _recorded(marker: Path) -> Any:
    """The spec ``marker`` records, None when it cannot be read (the model is built again)."""
    try:
        return parse_json(read_text(marker, CONFIG_BYTES))
    except (OSError, ValueError):
        return None


def build_tiny_model(folder: str | Path, seed: int = 0, dtype: str = "bfloat16") -> Path:
    """Write the tiny model and tokenizer into ``folder`` unless one of the same ``seed`` and ``dtype`` is there."""
    out = Path(folder)
    spec = {"seed": seed, "dtype": dtype, **TINY_MODEL}
    marker = out / _MARKER
    if marker.is_file() and _recorded(marker) == spec:
        return out
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    out.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    specials = ["<s>", "</s>"]
    trainer = trainers.BpeTrainer(
        vocab_size=TINY_MODEL["vocab_size"], special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False,
    )  # fmt: skip
    tok.train_from_iterator(_corpus(seed), trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>")
    fast.model_max_length = TINY_MODEL["max_position_embeddings"]
    fast.save_pretrained(out)

    torch.manual_seed(seed)
    config = LlamaConfig(
        **{**TINY_MODEL, "vocab_size": len(fast)}, bos_token_id=fast.bos_token_id, eos_token_id=fast.eos_token_id,
        torch_dtype=dtype,
    )  # fmt: skip
    model = LlamaForCausalLM(config).to(getattr(torch, dtype))
    model.save_pretrained(out)
    write_text_atomically(marker, json.dumps(spec) + "\n")
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", help="where to write the model (reused when complete)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32", "float16"])
    args = parser.parse_args(argv)
    print(build_tiny_model(args.folder, args.seed, args.dtype))


if __name__ == "__main__":
    main()
