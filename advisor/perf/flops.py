"""What one token costs: model FLOPs and the matrix shapes that carry them, per layer kind.

Two uses:

* `model_flops_per_token` counts training FLOPs the way Megatron-Core/Megatron-Bridge report
  "model TFLOP/s": 3 × forward (backward = 2 × forward), every matrix multiply of the active
  parameters (MoE: top-k routed experts plus shared experts), the output layer and any
  multi-token-prediction modules, and the attention score/value products with the causal mask
  halving them; no recompute FLOPs, no embedding lookup. Checked against `tflops_per_gpu /
  tokens_per_sec_per_gpu` of the Megatron-Bridge rows in `published_runs.csv`: Llama3
  8B/70B/405B, Qwen3, Kimi-K2 and DeepSeek-V3 within 1 % (tests/perf/test_flop_conventions.py).
* `layer_gemms` lists each layer kind's GEMMs with the dimension tensor parallelism splits,
  so the step-time model can price each one by its shape after splitting.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import NamedTuple

from advisor.core.model import ModelSpec


@dataclass(frozen=True)
class Gemm:
    """One weight GEMM per token row: (tokens × k) · (k × n); `split` is what TP divides."""

    k: float
    n: float
    split: str
    """`n` (column-parallel), `k` (row-parallel) or `none` (replicated)."""
    count: float = 1.0
    """How many such GEMMs (e.g. shared experts)."""

    def local(self, split):
        """(k, n) on one GPU when `split` GPUs divide the dimension `split` names; an unsplit
        dimension stays a Python float (the same IEEE arithmetic as an array of it, and fewer
        array operations)."""
        return (self.k / split if self.split == "k" else float(self.k),
                self.n / split if self.split == "n" else float(self.n))


class SublayerCounts(NamedTuple):
    """How many of a model's sublayers have each mixer and each FFN kind."""

    attention: int
    mamba: int
    mlp: int
    moe: int


@functools.lru_cache(maxsize=512)
def sublayer_counts(model: ModelSpec) -> SublayerCounts:
    kinds = model.sublayers
    return SublayerCounts(attention=sum(s.mixer == "attention" for s in kinds),
                          mamba=sum(s.mixer == "mamba" for s in kinds),
                          mlp=sum(s.ffn == "mlp" for s in kinds),
                          moe=sum(s.ffn == "moe" for s in kinds))


def attention_span(model: ModelSpec, seq_len: int, window: int = 0) -> float:
    """Mean number of keys a query attends to under a causal mask (optionally windowed)."""
    if window and window < seq_len:
        return window * (1.0 - window / (2.0 * seq_len))
    return seq_len / 2.0


def attention_core_flops_per_token(model: ModelSpec, seq_len: int) -> float:
    """Forward FLOPs of the score (QKᵀ) and value (PV) products per token, per attention layer,
    averaged over the layers (sliding-window layers attend to fewer keys)."""
    heads = model.num_attention_heads
    qk = model.q_dim
    v = heads * (model.v_head_dim if model.is_mla else model.attention_head_dim)
    num_attn = sublayer_counts(model).attention or 1
    windowed = min(model.num_sliding_window_layers, num_attn) if model.sliding_window else 0
    span = ((num_attn - windowed) * attention_span(model, seq_len)
            + windowed * attention_span(model, seq_len, model.sliding_window)) / num_attn
    return 2.0 * span * (qk + v)


def mamba_scan_flops_per_token(model: ModelSpec) -> float:
    """Forward FLOPs of the Mamba-2 state-space scan per token (state update and readout:
    about 6 · d_inner · d_state; the chunked SSD algorithm does the same order of work)."""
    return 6.0 * model.mamba_inner_size * model.mamba_state_dim


@functools.lru_cache(maxsize=512)
def layer_gemms(model: ModelSpec) -> dict[str, tuple[Gemm, ...]]:
    """Weight GEMMs per layer kind: `attention`, `mamba`, `mlp`, `moe_dense` (router, shared
    experts, latent projections; per token of the layer), `expert` (one routed expert, per
    routed token), `output` (output layer)."""
    h = model.hidden_size
    gate = 2 if model.gated_mlp else 1
    if model.is_mla:
        heads = model.num_attention_heads
        qk_head = model.qk_nope_head_dim + model.qk_rope_head_dim
        q = ((Gemm(h, model.q_lora_rank, "none"), Gemm(model.q_lora_rank, heads * qk_head, "n"))
             if model.q_lora_rank else (Gemm(h, heads * qk_head, "n"),))
        attention = (*q, Gemm(h, model.kv_lora_rank + model.qk_rope_head_dim, "none"),
                     Gemm(model.kv_lora_rank, heads * (model.qk_nope_head_dim + model.v_head_dim),
                          "n"),
                     Gemm(heads * model.v_head_dim, h, "k"))
    else:
        attention = (Gemm(h, model.q_dim + 2 * model.kv_dim, "n"), Gemm(model.q_dim, h, "k"))
    mlp = (Gemm(h, gate * model.ffn_hidden_size, "n"), Gemm(model.ffn_hidden_size, h, "k"))
    moe_dense: tuple[Gemm, ...] = ()
    expert: tuple[Gemm, ...] = ()
    if model.is_moe:
        width = model.moe_latent_size or h
        moe_dense = (Gemm(h, model.num_experts, "none"),)
        if model.num_shared_experts:
            f = model.shared_ffn_size
            moe_dense += (Gemm(h, gate * f, "n", model.num_shared_experts),
                          Gemm(f, h, "k", model.num_shared_experts))
        if model.moe_latent_size:
            moe_dense += (Gemm(h, width, "none"), Gemm(width, h, "none"))
        f = model.moe_ffn_hidden_size
        expert = (Gemm(width, gate * f, "n"), Gemm(f, width, "k"))
    mamba: tuple[Gemm, ...] = ()
    if model.mamba_num_heads:
        d_inner = model.mamba_inner_size
        groups_state = 2 * max(model.mamba_num_groups, 1) * model.mamba_state_dim
        mamba = (Gemm(h, 2 * d_inner + groups_state + model.mamba_num_heads, "n"),
                 Gemm(d_inner, h, "k"))
    output = (Gemm(h, model.vocab_size, "n"),)
    return {"attention": attention, "mamba": mamba, "mlp": mlp, "moe_dense": moe_dense,
            "expert": expert, "output": output}


def gemm_flops(gemms: tuple[Gemm, ...]) -> float:
    """Forward FLOPs per token row of a list of GEMMs (2 per multiply-add)."""
    return sum(2.0 * g.k * g.n * g.count for g in gemms)


@functools.lru_cache(maxsize=4096)
def model_flops_per_token(model: ModelSpec, seq_len: int) -> float:
    """Training FLOPs per token, Megatron "model TFLOP/s" convention (module docstring)."""
    gemms = layer_gemms(model)
    forward = 0.0
    core = attention_core_flops_per_token(model, seq_len)
    for sub in model.sublayers + model.sublayers[-1:] * model.num_mtp_layers:
        if sub.mixer == "attention":
            forward += gemm_flops(gemms["attention"]) + core
        elif sub.mixer == "mamba":
            forward += gemm_flops(gemms["mamba"]) + mamba_scan_flops_per_token(model)
        if sub.ffn == "mlp":
            forward += gemm_flops(gemms["mlp"])
        elif sub.ffn == "moe":
            forward += gemm_flops(gemms["moe_dense"]) + model.moe_top_k * gemm_flops(
                gemms["expert"])
    forward += gemm_flops(gemms["output"])
    forward += model.num_mtp_layers * mtp_extra_flops_per_token(model)
    return 3.0 * forward


@functools.lru_cache(maxsize=4096)
def core_flops_per_token(model: ModelSpec, seq_len: int) -> float:
    """The forward FLOPs of `model_flops_per_token` that multiply no weight: attention score and
    value products and Mamba scans (a frozen-weight backward still runs them twice)."""
    counts = sublayer_counts(model)
    last = model.sublayers[-1]
    attention = counts.attention + model.num_mtp_layers * (last.mixer == "attention")
    mamba = counts.mamba + model.num_mtp_layers * (last.mixer == "mamba")
    return (attention * attention_core_flops_per_token(model, seq_len)
            + mamba * mamba_scan_flops_per_token(model))


def mtp_extra_flops_per_token(model: ModelSpec) -> float:
    """Forward FLOPs of one multi-token-prediction module beyond its transformer layer: the
    2h → h projection and another pass through the output layer."""
    h = model.hidden_size
    return 2.0 * 2 * h * h + gemm_flops(layer_gemms(model)["output"])
