"""Stored activation bytes per token of one layer of each kind (attention, dense MLP, MoE,
Mamba-2), without recompute: the per-layer terms `advisor.perf.memory` multiplies by tokens,
layers and in-flight micro-batches (its docstring gives the conventions and sources)."""

from __future__ import annotations

import numpy as np

from advisor.core.model import ModelSpec

ACT_BYTES = 2.0
"""Activations are stored in 16-bit (FP8 recipes keep BF16 activations between layers)."""
FP8_ACTIVATION_BYTES = 1.0
"""An activation stored in FP8 (the LoRA MLP's activation-function input, `memory`)."""
FP32_BYTES = 4.0
"""The residual stream of eager PyTorch under `torch.autocast` over FP32 weights: the
embedding is not autocast, so it and every residual sum stay FP32 (`eager_bytes_per_token`)."""


def attention_output_width(model: ModelSpec) -> int:
    """Width of the attention output O, the projection's input: one value head per query head
    (GQA shares K and V between query heads, not the output)."""
    return model.num_attention_heads * (model.v_head_dim if model.is_mla
                                        else model.attention_head_dim)


def frozen_mlp_bytes_per_token(model: ModelSpec, *, tp: np.ndarray, sp: np.ndarray,
                                fp8: np.ndarray) -> np.ndarray:
    """A frozen dense MLP without adapters: the norm's input and the activation function's
    input (FC1 output), in FP8 where `fp8`; no GEMM input (no weight gradients)."""
    fc1_out = model.ffn_hidden_size * (2 if model.gated_mlp else 1) / tp
    return ACT_BYTES * model.hidden_size / sp + np.where(fp8, FP8_ACTIVATION_BYTES,
                                                          ACT_BYTES) * fc1_out


def activation_bytes_per_token(model: ModelSpec, *, tp: np.ndarray, sp: np.ndarray,
                                etp: np.ndarray, cp: np.ndarray,
                                gemm_input: np.ndarray | float = ACT_BYTES
                                ) -> dict[str, np.ndarray]:
    """Stored bytes per token for one layer of each kind (`attention`, `mlp`, `moe`, `mamba`),
    without recompute, and the parts of them selective recompute can drop (`attention_stats`,
    `norm_output`, `attention_qkv`, `moe_act`, `shared_experts`; `layer_input`: what a
    checkpointed module keeps of its input).

    `gemm_input`: bytes per element of what a GEMM keeps of its input for the weight gradient
    (`GEMM_INPUT_BYTES`): 16-bit, or the quantised copy of an FP8/FP4 recipe. Where a tensor
    is also kept by something else in 16 bits (the attention output, which the fused attention
    keeps for its own backward), an FP8 recipe keeps both."""
    h = model.hidden_size
    a = ACT_BYTES
    g = gemm_input
    norm_and_input = (a + g) * h / sp      # norm input + the next GEMM's (norm output) input
    # Attention: Q, K, V (inputs of fused attention), its output O (input of the projection),
    # FP32 softmax statistics; MLA also keeps the compressed latents (not TP-split).
    if model.is_mla:
        latents = a * (model.q_lora_rank + model.kv_lora_rank + model.qk_rope_head_dim) / sp
    else:
        latents = 0.0
    qkv = a * (model.q_dim + model.kv_dim + model.v_dim) / tp
    head_out = attention_output_width(model)
    out = (a + np.where(np.asarray(g) < a, g, 0.0)) * head_out / tp
    stats = 4.0 * model.num_attention_heads / tp
    ring = np.where(cp > 1, 2 * a * (model.kv_dim + model.v_dim) / tp, 0.0)  # CP KV buffers
    attention = norm_and_input + latents + qkv + out + stats + ring
    # Dense MLP: FC1 output (2 × ffn when gated) and the activation's output (FC2 input).
    ffn = model.ffn_hidden_size
    mlp = norm_and_input + (a * ffn * (2 if model.gated_mlp else 1) + g * ffn) / tp
    # MoE: router probabilities (FP32), and per routed copy of a token: the permuted input,
    # FC1 output and activation output of one expert (split by etp); shared experts like MLP.
    moe = np.zeros_like(tp, dtype=float)
    if model.is_moe:
        width = model.moe_latent_size or h
        f = model.moe_ffn_hidden_size
        # With sequence parallelism a GPU dispatches tokens/tp tokens; after the all-gather over
        # etp it holds etp·k copies of each, each with an f/etp-wide expert slice.
        routed = model.moe_top_k * (etp * g * width
                                    + a * f * (2 if model.gated_mlp else 1) + g * f) / sp
        shared = model.num_shared_experts * model.shared_ffn_size * (
            a * (2 if model.gated_mlp else 1) + g) / tp
        latent = 2 * a * model.moe_latent_size / sp if model.moe_latent_size else 0.0
        moe = norm_and_input + 4.0 * model.num_experts / sp + routed + shared + latent
    # Mamba-2: in_proj output (z, x, B, C, dt), conv output, SSM output y, gated-norm output.
    mamba = np.zeros_like(tp, dtype=float)
    if model.mamba_num_heads:
        d_inner = model.mamba_inner_size
        groups_state = 2 * max(model.mamba_num_groups, 1) * model.mamba_state_dim
        mamba = norm_and_input + a * ((2 * d_inner + groups_state + model.mamba_num_heads)
                                      + (d_inner + groups_state) + 2 * d_inner) / tp
    zeros = np.zeros_like(tp, dtype=float)
    # The parts selective recompute can drop (`advisor.perf.recompute`): a norm's output, the
    # MLA up-projections' Q, K and V, the experts' activation output (FC2 input), the shared
    # experts' own tensors.
    moe_act = moe_shared = zeros
    if model.is_moe:
        moe_act = model.moe_top_k * g * model.moe_ffn_hidden_size / sp + zeros
        moe_shared = shared + zeros
    return {"attention": attention + zeros, "attention_stats": stats + zeros, "mlp": mlp + zeros,
            "moe": moe + zeros, "mamba": mamba + zeros,
            "layer_input": a * h / sp + zeros, "norm_output": g * h / sp + zeros,
            "attention_qkv": qkv + zeros, "moe_act": moe_act, "shared_experts": moe_shared}


def eager_bytes_per_token(model: ModelSpec, *, tp: np.ndarray, sp: np.ndarray
                          ) -> dict[str, np.ndarray]:
    """Stored bytes per token of one dense attention and one dense MLP layer in eager PyTorch
    under `torch.autocast(bfloat16)` over FP32 weights, the collectors' workload
    (`collectors/workload/model.py`), counted tensor by tensor from what autograd saves:

    * each norm saves its FP32 input (the residual stream stays FP32);
    * autocast casts the norm's FP32 output to BF16 once per GEMM that reads it and each GEMM
      saves its own copy (separate Q, K and V projections: three; gate and up: two);
    * `scaled_dot_product_attention` (Flash) saves Q, K, V, its output and FP32 log-sum-exp;
      the output projection saves its own contiguous copy of the transposed output;
    * a gated MLP keeps the gate output (SiLU's input), SiLU's output and the up output (the
      product's inputs) and the product (the down projection's input); ungated, the FC1 output
      and the activation's output.
    Per `campaign`'s H200 runs the sum holds the measured peaks to a few per cent
    (`benchmarks/campaign_check.py`)."""
    h = model.hidden_size
    a = ACT_BYTES
    head_out = attention_output_width(model)
    norm_in = FP32_BYTES * h / sp
    attention = (norm_in + 3 * a * h / sp
                 + a * (model.q_dim + model.kv_dim + model.v_dim + 2 * head_out) / tp
                 + FP32_BYTES * model.num_attention_heads / tp)
    ffn = model.ffn_hidden_size
    mlp = norm_in + (2 if model.gated_mlp else 1) * a * h / sp + a * ffn * (
        4 if model.gated_mlp else 2) / tp
    zeros = np.zeros_like(tp, dtype=float)
    return {"attention": attention + zeros, "mlp": mlp + zeros}


OP_SAC_FRAMEWORKS = ("torchtitan",)
"""Frameworks whose selective recompute is per-op (TorchTitan's `SelectiveAC`), not Megatron's
per-module recompute."""


def op_sac_bytes_per_token(model: ModelSpec, *, tp: np.ndarray, sp: np.ndarray
                           ) -> dict[str, np.ndarray]:
    """Stored bytes per token of a dense attention and MLP sublayer under TorchTitan's
    per-op selective checkpointing (torchtitan 0.3.0 `distributed/activation_checkpoint.py`,
    `SelectiveAC`): inside each transformer block it saves the outputs of matmuls, counted in
    execution order, except every second one, and of the ops in its save list (flash attention
    is not in it: recomputed), and recomputes everything else from the block's input. A Llama
    block runs wq, wk, wv, wo, w1, w3, w2: it keeps the block input and the outputs of wq, wv,
    w1 and w2."""
    h, a = model.hidden_size, ACT_BYTES
    zeros = np.zeros_like(tp, dtype=float)
    attention = a * (h / sp + (model.q_dim + model.v_dim) / tp)
    mlp = a * ((model.ffn_hidden_size if model.gated_mlp else 0) / tp + h / sp)
    if not model.gated_mlp:          # fc1 (saved, the 5th matmul) and fc2 (recomputed)
        mlp = a * model.ffn_hidden_size / tp
    return {"attention": attention + zeros, "mlp": mlp + zeros}
