"""A Llama-style decoder (RMSNorm, rotary GQA attention, SwiGLU) with Hugging Face tensor names. Attention is a
callable, so the paged runner and the dense reference (``forward_dense``) share the rest. Weights are seeded
random or read from a local safetensors file or folder.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import cast

import torch
from safetensors import safe_open
from torch import nn

# attend(layer, q [N, heads, head_dim], k [N, kv_heads, head_dim], v [N, kv_heads, head_dim]) -> [N, heads, head_dim]
AttendFn = Callable[[int, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}  # by CLI name


@dataclass(frozen=True)
class ModelConfig:
    """Shapes of a Llama-style decoder; ``rope_llama3``: Llama 3.1's rope scaling (factor, low, high, original max
    position) or None; ``tie_word_embeddings``: lm_head shares the embedding (``lm_head.weight`` may be absent)."""

    name: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rope_theta: float = 500000.0
    rms_norm_eps: float = 1e-5
    max_position: int = 16384
    rope_llama3: tuple[float, float, float, int] | None = None
    tie_word_embeddings: bool = False

    def __post_init__(self) -> None:
        if not (isinstance(self.name, str) and self.name):
            raise ValueError(f"ModelConfig.name must be a non-empty string, got {self.name!r}")
        for f in fields(self):
            value = getattr(self, f.name)
            if f.type == "int" and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
                raise ValueError(f"ModelConfig.{f.name} must be an integer >= 1, got {value!r}")
        for key in ("rope_theta", "rms_norm_eps"):
            value = getattr(self, key)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
                raise ValueError(f"ModelConfig.{key} must be a finite number > 0, got {value!r}")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"ModelConfig.num_heads ({self.num_heads}) must be divisible by num_kv_heads ({self.num_kv_heads})"
            )
        if self.head_dim % 2:
            raise ValueError(f"ModelConfig.head_dim must be even (rotary embeddings), got {self.head_dim}")
        if self.rope_llama3 is not None and (len(self.rope_llama3) != 4 or min(self.rope_llama3) <= 0):
            raise ValueError(f"ModelConfig.rope_llama3 must be 4 positive numbers or None, got {self.rope_llama3!r}")

    @property
    def num_params(self) -> int:
        """Parameter count (the tied lm_head counted once)."""
        h, kv = self.hidden_size, self.num_kv_heads * self.head_dim
        attn = h * self.num_heads * self.head_dim * 2 + h * kv * 2
        layer = attn + 3 * h * self.intermediate_size + 2 * h
        head = 0 if self.tie_word_embeddings else self.vocab_size * h
        return self.vocab_size * h + self.num_layers * layer + h + head


MODEL_PRESETS: dict[str, ModelConfig] = {
    # CPU tests and demos, on one thread: ~3 ms per decode step of 8 at context 512, ~30 ms per 512-token prefill
    "tiny": ModelConfig("tiny", 2048, 192, 512, 4, 6, 2, 32, rope_theta=10000.0),
    "llama-1b": ModelConfig(  # Llama-3.2-1B
        "llama-1b", 128256, 2048, 8192, 16, 32, 8, 64, rope_llama3=(32.0, 1.0, 4.0, 8192), tie_word_embeddings=True
    ),
    "llama3-8b": ModelConfig("llama3-8b", 128256, 4096, 14336, 32, 32, 8, 128),  # Llama-3-8B
}


def model_config(preset: str | ModelConfig) -> ModelConfig:
    """The preset named ``preset``, or ``preset`` itself when it already is a ``ModelConfig``."""
    if isinstance(preset, ModelConfig):
        return preset
    if preset not in MODEL_PRESETS:
        raise ValueError(f"unknown model preset {preset!r}; presets: {sorted(MODEL_PRESETS)}")
    return MODEL_PRESETS[preset]


def _rope_inv_freq(config: ModelConfig) -> torch.Tensor:
    d = config.head_dim
    inv_freq = 1.0 / (config.rope_theta ** (torch.arange(0, d, 2, dtype=torch.float64) / d))  # [head_dim / 2]
    if config.rope_llama3 is not None:  # Llama 3.1 scaling: slow down low frequencies, keep high ones
        factor, low, high, original = config.rope_llama3
        wavelen = 2 * math.pi / inv_freq
        smooth = ((original / wavelen) - low) / (high - low)
        scaled = torch.where(wavelen > original / low, inv_freq / factor, inv_freq)
        mid = (wavelen <= original / low) & (wavelen >= original / high)
        inv_freq = torch.where(mid, (1 - smooth) * inv_freq / factor + smooth * inv_freq, scaled)
    return inv_freq


class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.float()  # normalise in float32 as Hugging Face Llama does
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(x.dtype)


class Attention(nn.Module):
    def __init__(self, c: ModelConfig) -> None:
        super().__init__()
        self.q_proj = nn.Linear(c.hidden_size, c.num_heads * c.head_dim, bias=False)
        self.k_proj = nn.Linear(c.hidden_size, c.num_kv_heads * c.head_dim, bias=False)
        self.v_proj = nn.Linear(c.hidden_size, c.num_kv_heads * c.head_dim, bias=False)
        self.o_proj = nn.Linear(c.num_heads * c.head_dim, c.hidden_size, bias=False)


class MLP(nn.Module):
    def __init__(self, c: ModelConfig) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(c.hidden_size, c.intermediate_size, bias=False)
        self.up_proj = nn.Linear(c.hidden_size, c.intermediate_size, bias=False)
        self.down_proj = nn.Linear(c.intermediate_size, c.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(nn.functional.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, c: ModelConfig) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.self_attn = Attention(c)
        self.post_attention_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.mlp = MLP(c)


class Backbone(nn.Module):
    def __init__(self, c: ModelConfig) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(c.vocab_size, c.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(c) for _ in range(c.num_layers))
        self.norm = RMSNorm(c.hidden_size, c.rms_norm_eps)


class LlamaModel(nn.Module):
    """A Llama decoder over packed tokens ``[num_tokens]``: ``hidden(token_ids, positions, attend)``,
    ``logits(hidden)``, and ``forward_dense(token_ids)`` (the no-cache reference tests compare with)."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        self.model = Backbone(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        if config.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight
        self.register_buffer("rope_cos", torch.empty(0), persistent=False)
        self.register_buffer("rope_sin", torch.empty(0), persistent=False)

    def init_rope(self) -> None:
        """(Re)compute the cos/sin tables for positions [0, max_position) on the model's device."""
        device = self.model.norm.weight.device
        pos = torch.arange(self.config.max_position, dtype=torch.float64)
        angles = torch.outer(pos, _rope_inv_freq(self.config))  # [max_position, head_dim / 2]
        angles = torch.cat((angles, angles), dim=-1)  # [max_position, head_dim], HF's rotate_half layout
        self.rope_cos = angles.cos().float().to(device)
        self.rope_sin = angles.sin().float().to(device)

    def _rotate(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        # x: [N, heads, head_dim]; cos, sin: [N, 1, head_dim]
        half = x.shape[-1] // 2
        rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
        return x * cos + rotated * sin

    def hidden(self, token_ids: torch.Tensor, positions: torch.Tensor, attend: AttendFn) -> torch.Tensor:
        """Hidden states ``[N, hidden]`` (before the final norm) of tokens ``[N]`` at absolute ``positions [N]``."""
        c = self.config
        n = token_ids.shape[0]
        x = self.model.embed_tokens(token_ids)  # x: [N, hidden]
        cos = self.rope_cos[positions].to(x.dtype).unsqueeze(1)  # [N, 1, head_dim]
        sin = self.rope_sin[positions].to(x.dtype).unsqueeze(1)
        layers = cast("Iterable[DecoderLayer]", self.model.layers)  # Backbone holds DecoderLayers only
        for i, layer in enumerate(layers):
            h = layer.input_layernorm(x)
            a = layer.self_attn
            q = self._rotate(a.q_proj(h).view(n, c.num_heads, c.head_dim), cos, sin)
            k = self._rotate(a.k_proj(h).view(n, c.num_kv_heads, c.head_dim), cos, sin)
            v = a.v_proj(h).view(n, c.num_kv_heads, c.head_dim)
            x = x + a.o_proj(attend(i, q, k, v).reshape(n, c.num_heads * c.head_dim))
            x = x + layer.mlp(layer.post_attention_layernorm(x))
        return x

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Logits ``[M, vocab]`` (float32) of hidden states ``[M, hidden]``."""
        return self.lm_head(self.model.norm(hidden)).float()

    def forward_dense(self, token_ids: torch.Tensor) -> torch.Tensor:
        """Reference logits ``[T, vocab]`` of one sequence ``[T]`` from position 0: plain causal attention."""
        c = self.config
        group = c.num_heads // c.num_kv_heads

        def attend(_layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            t = q.shape[0]
            k = k.repeat_interleave(group, dim=1)  # [T, heads, head_dim]: query head h reads kv head h // group
            v = v.repeat_interleave(group, dim=1)
            scores = torch.einsum("qhd,khd->hqk", q.float(), k.float()) / math.sqrt(c.head_dim)  # [heads, T, T]
            future = torch.ones(t, t, dtype=torch.bool, device=q.device).triu(1)
            probs = scores.masked_fill(future, float("-inf")).softmax(-1)
            return torch.einsum("hqk,khd->qhd", probs, v.float()).to(q.dtype)  # [T, heads, head_dim]

        with torch.inference_mode():
            positions = torch.arange(token_ids.shape[0], device=token_ids.device)
            return self.logits(self.hidden(token_ids, positions, attend))


def build_model(config: str | ModelConfig, *, seed: int = 0, dtype: torch.dtype = torch.float32,
                device: str | torch.device = "cpu", weights_path: str | Path | None = None) -> LlamaModel:
    """A ``LlamaModel`` in eval mode on ``device``: seeded random weights (std 0.02), or a local safetensors file or
    folder's (``ValueError`` naming the file and a missing, unexpected or misshapen tensor)."""
    config = model_config(config)
    device = torch.device(device)
    with torch.device("meta"):  # no host allocation: the 8B preset goes straight to the GPU, in its dtype
        model = LlamaModel(config).to(dtype)
    model.to_empty(device=device)
    if config.tie_word_embeddings:  # to_empty unties shared parameters
        model.lm_head.weight = model.model.embed_tokens.weight
    with torch.no_grad():
        if weights_path is None:
            gen = torch.Generator(device=device).manual_seed(seed)
            for name, p in sorted(model.named_parameters()):
                if name.endswith("norm.weight"):
                    p.fill_(1.0)
                else:
                    p.normal_(0.0, 0.02, generator=gen)
        else:
            _load_weights(model, Path(weights_path))
    model.init_rope()
    return model.eval().requires_grad_(False)


def _load_weights(model: LlamaModel, path: Path) -> None:
    files = sorted(path.glob("*.safetensors")) if path.is_dir() else [path]
    if not files or not all(f.is_file() for f in files):
        raise ValueError(f"{path}: no safetensors weights file (or folder of *.safetensors shards) there")
    params = dict(model.named_parameters())  # a tied lm_head is listed once, as model.embed_tokens.weight
    tied = model.config.tie_word_embeddings
    found: dict[str, Path] = {}
    for file in files:  # check every name and shape before copying anything
        try:
            with safe_open(file, framework="pt", device="cpu") as f:
                shapes = {name: list(f.get_slice(name).get_shape()) for name in f.keys()}  # noqa: SIM118
        except Exception as exc:  # safetensors raises its own SafetensorError, or OSError
            raise ValueError(f"{file}: not a readable safetensors file: {exc}") from exc
        for name, shape in shapes.items():
            if name.endswith("rotary_emb.inv_freq") or (tied and name == "lm_head.weight"):
                continue  # recomputed from the config / shared with the embedding
            if name not in params:
                raise ValueError(f"{file}: unexpected tensor {name!r} for model {model.config.name!r}")
            if name in found:
                raise ValueError(f"{file}: tensor {name!r} is also in {found[name]}")
            if shape != list(params[name].shape):
                raise ValueError(f"{file}: tensor {name!r} has shape {shape}, model {model.config.name!r} expects "
                                 f"{list(params[name].shape)}")
            found[name] = file
    missing = [name for name in params if name not in found]
    if missing:
        raise ValueError(f"{path}: tensor {missing[0]!r} is missing ({len(missing)} missing in all)")
    for file in files:
        with safe_open(file, framework="pt", device="cpu") as f:
            for name in (n for n, src in found.items() if src == file):
                params[name].copy_(f.get_tensor(name))  # casts to the model's dtype and device
