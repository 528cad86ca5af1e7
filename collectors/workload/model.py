"""A Llama-style decoder built from an advisor `ModelSpec`, and its synthetic data.

The layout follows torchtitan's Llama (`tok_embeddings`, `layers` as a `ModuleDict`, `norm`,
`output`) so that tensor-parallel plans address modules by the same names and a pipeline stage
is the same class with the layers it does not own removed. Every block is RMSNorm → GQA
attention with RoPE (`F.scaled_dot_product_attention`, causal) → RMSNorm → SwiGLU MLP, with an
untied output projection.

Models are built on the meta device and materialised after parallelisation
(`Transformer.init_weights`), so no rank ever holds more than its own shard.
"""

from __future__ import annotations

import dataclasses
import zlib

import torch
import torch.nn.functional as F
from torch import nn

from advisor.core.model import ModelSpec

SCALE_FIELDS = ("num_layers", "hidden_size", "ffn_hidden_size", "num_attention_heads",
                "num_kv_heads", "vocab_size", "head_dim", "max_seq_len")
"""advisor.catalog.SCALE_FIELDS: the same names, so a scaled model means one thing."""
"""`RunSpec.scale` keys: `ModelSpec` fields a campaign may override to shrink a model."""
ROPE_THETA = 10000.0  # Llama 2's base (Touvron et al. 2023); the base does not change cost


class UnsupportedModel(ValueError):
    """The workload cannot build this model (it implements dense decoders only)."""


def workload_spec(spec: ModelSpec, scale: dict[str, int]) -> ModelSpec:
    """The `ModelSpec` the workload actually trains: `spec` with `scale` applied, as a Llama.

    Dense decoders of other styles (GPT-3's learned positions, LayerNorm, GELU MLP and tied
    embeddings) run as Llama-style blocks of the same shape; the returned spec says so, so
    FLOP counts match what ran. When `scale` changes the width or the head count but not
    `head_dim`, the head size is derived again (hidden_size / num_attention_heads).
    """
    unknown = set(scale) - set(SCALE_FIELDS)
    if unknown:
        raise UnsupportedModel(f"scale keys {sorted(unknown)} are not model sizes; use "
                               f"{', '.join(SCALE_FIELDS)}.")
    if spec.is_moe or spec.is_mla or spec.layer_pattern:
        kind = "MoE" if spec.is_moe else "MLA" if spec.is_mla else "hybrid Mamba"
        raise UnsupportedModel(f"{spec.name} is a {kind} model; the workload implements dense "
                               f"Llama-style decoders only; pick a dense model.")
    changes: dict[str, object] = dict(scale)
    if {"hidden_size", "num_attention_heads"} & set(scale) and "head_dim" not in scale:
        changes["head_dim"] = 0
    changes.update(tied_embeddings=False, gated_mlp=True, position_embedding="rope",
                   norm="rmsnorm", attention_bias=False, qkv_bias=False, mlp_bias=False,
                   sliding_window=0, num_sliding_window_layers=0, published_total_params=0.0,
                   published_active_params=0.0)
    out = dataclasses.replace(spec, **changes)
    if out.num_attention_heads % out.num_kv_heads or out.attention_head_dim % 2:
        raise UnsupportedModel(f"{out.name} scaled by {scale}: num_kv_heads "
                               f"({out.num_kv_heads}) must divide num_attention_heads "
                               f"({out.num_attention_heads}) and the head size "
                               f"({out.attention_head_dim}) must be even (RoPE pairs).")
    return out


def rope_cache(head_dim: int, seq_len: int, *, device: torch.device | str | None = None
               ) -> torch.Tensor:
    """cos and sin of the rotary angles, shape (seq_len, head_dim // 2, 2)."""
    inv_freq = 1.0 / ROPE_THETA ** (torch.arange(0, head_dim, 2, device=device).float()
                                    / head_dim)
    angles = torch.outer(torch.arange(seq_len, device=device).float(), inv_freq)
    return torch.stack((angles.cos(), angles.sin()), dim=-1)


def apply_rope(x: torch.Tensor, rope: torch.Tensor) -> torch.Tensor:
    """Rotate (batch, seq, heads, head_dim) pairs of channels by the cached angles."""
    pairs = x.float().unflatten(-1, (-1, 2))
    cos, sin = rope[: x.shape[1], None, :, 0], rope[: x.shape[1], None, :, 1]
    even, odd = pairs[..., 0], pairs[..., 1]
    rotated = torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1)
    return rotated.flatten(-2).type_as(x)


class CoreAttention(nn.Module):
    """Softmax(QKᵀ)V, the part selective recomputation re-runs (Megatron's `core_attn`)."""

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)


class Attention(nn.Module):
    def __init__(self, spec: ModelSpec) -> None:
        super().__init__()
        h, hd = spec.hidden_size, spec.attention_head_dim
        self.head_dim = hd
        self.wq = nn.Linear(h, spec.num_attention_heads * hd, bias=False)
        self.wk = nn.Linear(h, spec.num_kv_heads * hd, bias=False)
        self.wv = nn.Linear(h, spec.num_kv_heads * hd, bias=False)
        self.wo = nn.Linear(spec.num_attention_heads * hd, h, bias=False)
        self.core = CoreAttention()

    def forward(self, x: torch.Tensor, rope: torch.Tensor) -> torch.Tensor:
        bs, seq, _ = x.shape
        # -1 heads: under tensor parallelism each rank holds num_heads / tp of them.
        q = self.wq(x).view(bs, seq, -1, self.head_dim)
        k = self.wk(x).view(bs, seq, -1, self.head_dim)
        v = self.wv(x).view(bs, seq, -1, self.head_dim)
        q, k = apply_rope(q, rope), apply_rope(k, rope)
        out = self.core(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
        return self.wo(out.transpose(1, 2).reshape(bs, seq, -1))


class FeedForward(nn.Module):
    """SwiGLU: w2(silu(w1 x) · w3 x)."""

    def __init__(self, spec: ModelSpec) -> None:
        super().__init__()
        self.w1 = nn.Linear(spec.hidden_size, spec.ffn_hidden_size, bias=False)
        self.w2 = nn.Linear(spec.ffn_hidden_size, spec.hidden_size, bias=False)
        self.w3 = nn.Linear(spec.hidden_size, spec.ffn_hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    def __init__(self, spec: ModelSpec) -> None:
        super().__init__()
        self.attention_norm = nn.RMSNorm(spec.hidden_size, eps=1e-5)
        self.attention = Attention(spec)
        self.ffn_norm = nn.RMSNorm(spec.hidden_size, eps=1e-5)
        self.feed_forward = FeedForward(spec)

    def forward(self, x: torch.Tensor, rope: torch.Tensor) -> torch.Tensor:
        h = x + self.attention(self.attention_norm(x), rope)
        return h + self.feed_forward(self.ffn_norm(h))


class Transformer(nn.Module):
    """The decoder, or one pipeline stage of it (absent parts are None or removed layers)."""

    def __init__(self, spec: ModelSpec, *, seq_len: int) -> None:
        super().__init__()
        self.spec, self.seq_len = spec, seq_len
        self.tok_embeddings: nn.Module | None = nn.Embedding(spec.vocab_size, spec.hidden_size)
        self.layers = nn.ModuleDict({str(i): Block(spec) for i in range(spec.num_layers)})
        self.norm: nn.Module | None = nn.RMSNorm(spec.hidden_size, eps=1e-5)
        self.output: nn.Module | None = nn.Linear(spec.hidden_size, spec.vocab_size, bias=False)
        self.register_buffer("rope", rope_cache(spec.attention_head_dim, seq_len),
                             persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.tok_embeddings(x) if self.tok_embeddings is not None else x
        for layer in self.layers.values():
            h = layer(h, self.rope)
        h = self.norm(h) if self.norm is not None else h
        return self.output(h) if self.output is not None else h

    def keep_stage(self, first_layer: int, end_layer: int) -> None:
        """Turn this model into the pipeline stage holding layers [first_layer, end_layer)."""
        for name in list(self.layers):
            if not first_layer <= int(name) < end_layer:
                del self.layers[name]
        if first_layer > 0:
            self.tok_embeddings = None
        if end_layer < self.spec.num_layers:
            self.norm = self.output = None

    @torch.no_grad()
    def init_weights(self, *, seed: int, device: torch.device) -> None:
        """Materialise (meta → `device`) and initialise: N(0, 0.02) weights, unit norms.

        Each parameter's full value comes from a generator seeded by its name, and each rank
        keeps its own shard of it (`distribute_tensor` without communication), so every
        layout starts from the same model. `nn.init` on DTensors would not: DTensor random
        ops are not layout-consistent on CPU meshes in torch 2.13 (it warns so).
        """
        from torch.distributed.tensor import DTensor, distribute_tensor

        self.to_empty(device=device)
        for name, param in self.named_parameters():
            name = name.replace(".inner.", ".")  # activation-checkpoint wrappers
            if name.rsplit(".", 2)[-2].endswith("norm"):
                full = torch.ones(param.shape, device=device)
            else:
                gen = torch.Generator(device=device).manual_seed(seed + zlib.crc32(name.encode()))
                full = torch.randn(param.shape, generator=gen, device=device) * 0.02
            if isinstance(param, DTensor):
                full = distribute_tensor(full, param.device_mesh, param.placements,
                                         src_data_rank=None)
            param.copy_(full)
        self.rope = rope_cache(self.spec.attention_head_dim, self.seq_len, device=device)


def loss_fn(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Next-token cross entropy in fp32."""
    return F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten())


def synthetic_batch(*, num_sequences: int, seq_len: int, vocab_size: int, seed: int,
                    part: int = 0, num_parts: int = 1, device: torch.device
                    ) -> tuple[torch.Tensor, torch.Tensor]:
    """Random token ids (inputs, next-token labels): part `part` of `num_parts` of a global
    batch of `num_sequences` drawn from `seed`, so the global batch does not depend on dp."""
    gen = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, vocab_size, (num_sequences, seq_len + 1), generator=gen)
    tokens = tokens.chunk(num_parts)[part].to(device)
    return tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
