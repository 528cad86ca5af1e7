"""Compute time of one micro-batch on every pipeline stage: the kernels of each layer kind
priced once (GEMMs by shape, fused attention and the Mamba-2 scan at their efficiencies,
elementwise work from HBM traffic), then summed over the layers each stage holds, with the
recompute and the CPU time launching the kernels. `step` overlaps communication with it and
assembles the step (its docstring states the model).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import NamedTuple

import numpy as np

from advisor.core.frameworks import EAGER_BLOCKS, FLASH_ATTENTION_2
from advisor.core.model import ModelSpec
from advisor.core.platform import Platform
from advisor.perf.calibration import Efficiency, FrameworkEfficiency
from advisor.perf.columns import per_value
from advisor.perf.finetune import ADAPTER_BACKWARD_TRAFFIC, adapter_traffic_per_layer_token
from advisor.perf.flops import (
    Gemm,
    attention_core_flops_per_token,
    layer_gemms,
    mamba_scan_flops_per_token,
    sublayer_counts,
)
from advisor.perf.gemm import GemmKernel, load_kernel_table
from advisor.perf.layout import StageLayout
from advisor.perf.memory import DROPOUT_MASK_BYTES
from advisor.perf.power_params import load_power_params
from advisor.perf.recompute import Recompute

ACT = 2.0
"""Bytes per activation element (BF16; FP8 recipes keep BF16 activations between layers)."""
ATTENTION_BACKWARD_RATIO = 2.5
"""FlashAttention-2 (Dao 2023, §3.2): backward runs 5 matmuls against 2 forward."""
ATTENTION_HALF_SPEED_TOKENS = 400.0
"""Sequence length (tokens of one sequence on one GPU: seq / CP) at which fused causal
attention runs at half its long-sequence speed: a kernel's speed on L tokens is L / (L + 400)
of its speed on long ones (its fixed work per head and block, the causal diagonal's partly
masked blocks and the last wave over few blocks amortise over the sequence). Fitted to the
causal head-dim-128 forward speeds on an H100 at 512 to 16k tokens of Shah et al. 2024
(FlashAttention-3, arXiv:2407.08608, Figure 5): cuDNN 315-539 TFLOP/s (L0 387 tokens),
FlashAttention-2 191-335 (L0 403), FlashAttention-3 292-616 (L0 603); each within 3.3 % of
E · L / (L + L0). So 2k tokens run at 84 %, 4k at 91 %, 32k at 99 % of the long-sequence
speed (`Efficiency.attention`), and context parallelism, which hands each kernel seq / CP
tokens, pays for the shorter ones."""
FLASH_ATTENTION_2_SPEED = {"hopper": 0.62}
"""Speed of FlashAttention-2's kernels (`advisor.core.frameworks.FLASH_ATTENTION_2`) against the
cuDNN fused attention Megatron-Core runs, per architecture family where both were measured on
one GPU. Hopper: Shah et al. 2024 (FlashAttention-3, arXiv:2407.08608) time both on an H100
SXM5 at head dim 128 from 512 to 16k tokens; from 1k tokens up FlashAttention-2 runs at
0.62-0.63 of cuDNN forward with the causal mask (Figure 5: 260-335 against 410-539 TFLOP/s)
and 0.61-0.64 backward (Figure 6: 260-322 against 408-518), the Triton port 0.63-0.66 forward;
FlashAttention-2 has no Hopper-specific (wgmma, TMA) path, which cuDNN and FlashAttention-3 use.
Elsewhere no measurement sets them apart (on A100, FlashAttention-2 is the fastest kernel of its
time: Dao 2023), so 1."""
MEMORY_EFFICIENCY = 0.8
"""Fraction of HBM bandwidth elementwise kernels and the optimizer reach. placeholder: typical
for fused elementwise kernels on HBM GPUs (STREAM-like copy reaches 80-90 %); campaign data to
replace it."""
DROPOUT_FORWARD_BYTES = 5.0
"""HBM bytes per element a dropout kernel moves forward: read its 16-bit input, write the 16-bit
output and a one-byte keep mask (torch.nn.Dropout on CUDA: `fused_dropout` returns the mask as
bool). Its backward reads the gradient and the mask and writes the gradient: 5 bytes again."""
LOSS_BYTES_PER_LOGIT = 12.0
"""Vocab-parallel cross-entropy: write BF16 logits, FP32 softmax read/write, gradient write."""
GROUPED_KERNEL_FRAMEWORKS = ("torchtitan",)
"""Frameworks whose MoE experts run as one grouped kernel per linear (TorchTitan:
`torch._grouped_mm` over every local expert, torchtitan/models/moe), so the host cost of a MoE
layer does not grow with its local experts; Megatron-Core's Transformer Engine grouped GEMM
launches each expert's GEMMs (`Efficiency.expert_overhead_s`)."""
ROPE_EAGER_BYTES = 16.0
"""HBM bytes per query and key element that eager RoPE moves beyond one fused kernel:
TorchTitan's `apply_rotary_emb` (torchtitan/models/llama3/model/model.py) casts to FP32 (read
2 B, write 4 B), multiplies as complex numbers (read 4, write 4) and casts back (read 4, write
2): 20 B where a fused kernel reads and writes 2 B each (4 B)."""
SWIGLU_EAGER_BYTES = 4.0
"""Bytes per FFN element that eager SwiGLU (`F.silu(w1(x)) * w3(x)`, TorchTitan's
`FeedForward` and MoE experts) moves beyond one fused kernel: silu reads and writes (4 B), the
product reads two and writes one (6 B): 10 B where a fused kernel reads the two halves and
writes the product (6 B). A non-gated MLP's activation is one kernel either way. RMSNorm costs
the same compiled or not: eager PyTorch runs it as one CUDA kernel (aten._fused_rms_norm,
pytorch/pytorch#153666); with a torch from before it, eager norms cost more than charged."""
QUANTIZE_BYTES = {"fp8": 4.0, "fp4": 3.0}
"""HBM bytes per element of quantizing a GEMM operand for a low-precision recipe: read the BF16
tensor (2 B) and write the copies the forward or input-gradient GEMM and the weight-gradient
GEMM read, row-wise and column-wise (FP8: 1 B each; Hopper's FP8 tensor cores take K-major
operands only, so Transformer Engine's cast-transpose writes both, and MXFP8 quantizes row and
column blocks; NVFP4: 0.5 B each). Block scales and current scaling's amax pass are left out."""
REFERENCE_GEMM_SIDE = 8192.0
"""The best-fed GEMM the power model's demand is stated for: the H200 power probe's continuous
8192³ load (`datasets/probes/h200-power`), whose utilization is 1 by definition there."""


class GemmPasses(NamedTuple):
    """Seconds of a layer's weight GEMMs per micro-batch, per pass (configurations × 1)."""

    fwd: np.ndarray
    dgrad: np.ndarray
    """Input gradients: (tokens × n) · (n × k)."""
    wgrad: np.ndarray
    """Weight gradients: (k × tokens) · (tokens × n), the tokens the reduction."""


class _GemmClock:
    """Prices weight GEMMs with the measured-kernel model (`advisor/perf/gemm.py`) at the
    full-clock peak times the family's and framework's factors, each pass at its own shape, and
    keeps the math-only time alongside so the power model knows how well fed the tensor cores
    are."""

    def __init__(self, kernel: GemmKernel, peak: np.ndarray, element_bytes: np.ndarray,
                 hbm_bytes_per_s: float, num_units: int | None) -> None:
        self.kernel, self.peak = kernel, peak
        self.element_bytes, self.hbm, self.units = element_bytes, hbm_bytes_per_s, num_units
        self.power_shape = load_power_params().gemm_power_shape
        self.actual = 0.0
        self.ideal = 0.0

    def seconds(self, m: np.ndarray, n: np.ndarray | float, k: np.ndarray | float,
                batch: np.ndarray | float = 1.0) -> np.ndarray:
        return self.kernel.seconds(m, n, k, peak_flops_per_s=self.peak, num_units=self.units,
                                   hbm_bytes_per_s=self.hbm, element_bytes=self.element_bytes,
                                   batch=batch)

    def passes(self, gemms: tuple[Gemm, ...], rows: np.ndarray, split: np.ndarray,
               weight: np.ndarray | float = 1.0, batch: np.ndarray | float = 1.0,
               launches: np.ndarray | float = 1.0, speed: float = 1.0) -> GemmPasses:
        """Forward, input-gradient and weight-gradient seconds of `gemms` over `rows` token
        rows with dims split by `split`, `batch` of each in one kernel (a grouped GEMM of
        experts) and `launches` such kernels, at `speed` × the clock's peak; `weight` (how
        many such layers run per micro-batch) only feeds the utilisation."""
        shape = np.broadcast(rows, split, self.peak).shape
        fwd, dgrad, wgrad = np.zeros(shape), np.zeros(shape), np.zeros(shape)
        if not gemms:                      # a layer kind the model lacks: adds nothing
            return GemmPasses(fwd, dgrad, wgrad)
        ideal = np.zeros(shape)
        for g in gemms:
            k, nn = g.local(split)
            times = g.count * launches / speed
            fwd = fwd + times * self.seconds(rows, nn, k, batch)
            dgrad = dgrad + times * self.seconds(rows, k, nn, batch)
            wgrad = wgrad + times * self.seconds(k, nn, rows, batch)
            # Math-only time, weighted by how much a GEMM of this shape draws per FLOP (the
            # three passes share the three dimensions).
            ideal = ideal + (3.0 * g.count * launches * batch * 2.0 * rows * k * nn / self.peak
                             * self.power_shape(rows, nn, k))
        self.actual = self.actual + np.sum(weight * (fwd + dgrad + wgrad), axis=-1,
                                           keepdims=True)
        self.ideal = self.ideal + np.sum(weight * ideal, axis=-1, keepdims=True)
        return GemmPasses(fwd, dgrad, wgrad)

    def time(self, gemms: tuple[Gemm, ...], rows: np.ndarray, split: np.ndarray) -> np.ndarray:
        """Forward seconds alone (a recomputed module), not counted in the utilisation."""
        return self.passes(gemms, rows, split, 0.0).fwd

    @property
    def utilization(self) -> np.ndarray:
        """Math-only over actual GEMM time, each GEMM's weighted by what its shape draws per
        FLOP (`PowerParams.gemm_power_shape`), relative to the same ratio for a square
        `REFERENCE_GEMM_SIDE` GEMM priced the same way: how hard the tensor cores and their
        operand traffic work against the load the power model's demand is stated for (larger
        GEMMs pass 1 a little, as the H200 campaign's clock keeps falling from 16k to 32k tokens
        per micro-batch)."""
        side = np.array([[REFERENCE_GEMM_SIDE]])
        reference = (2.0 * side ** 3 / self.peak) / self.seconds(side, side, side)
        own = np.asarray(self.ideal) / np.maximum(np.asarray(self.actual), 1e-30)
        return own / reference


@dataclass(frozen=True)
class StageLayers:
    """How many layers of each kind every pipeline stage holds, as 1 × pp rows that broadcast
    over configurations."""

    attention: np.ndarray
    mamba: np.ndarray
    mlp: np.ndarray
    moe: np.ndarray
    total: np.ndarray
    last: np.ndarray
    """1.0 on the last stage (it holds the output layer, the loss and any MTP layers), else 0."""

    @classmethod
    def of(cls, layout: StageLayout, pp: int) -> StageLayers:
        return cls(attention=layout.num_attention[None, :], mamba=layout.num_mamba[None, :],
                   mlp=layout.num_mlp[None, :], moe=layout.num_moe[None, :],
                   total=layout.num_layers[None, :],
                   last=(np.arange(pp) == pp - 1)[None, :].astype(float))


def eager_traffic(model: ModelSpec, tp: np.ndarray) -> dict[str, np.ndarray]:
    """Forward HBM bytes per token that eager blocks move beyond compiled (fused) ones, per
    layer of each kind (`attention`, `mlp`, `moe`; configurations × 1): RoPE on Q and K, and
    SwiGLU's activation and product in the MLP and in every routed and shared expert
    (`ROPE_EAGER_BYTES`, `SWIGLU_EAGER_BYTES`). Their backward is charged like every
    elementwise kernel's, twice the forward (RoPE's own backward moves about one forward's
    bytes: 16 B per element over at most a few percent of a step). The extra kernel launches
    are not charged."""
    zero = np.zeros_like(tp, dtype=float)
    rope = (ROPE_EAGER_BYTES * (model.q_dim + model.kv_dim) / tp
            if model.position_embedding == "rope" else zero)
    gated = SWIGLU_EAGER_BYTES if model.gated_mlp else 0.0
    moe = (gated * (model.moe_top_k * model.moe_ffn_hidden_size
                    + model.num_shared_experts * model.shared_ffn_size) / tp
           if model.is_moe else zero)
    return {"attention": rope + zero, "mlp": gated * model.ffn_hidden_size / tp + zero,
            "moe": moe + zero}


def quantized_elements(model: ModelSpec, gemms: dict, tp: np.ndarray, etp: np.ndarray
                       ) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Elements per token that a low-precision recipe quantizes in one layer of each kind
    (`attention`, `mlp`, `mamba`, `moe`; configurations × 1), as (forward, backward): each
    weight GEMM's input in the forward, its output gradient in the backward. An input straight
    from the layer's norm (a GEMM over the hidden size that is not row-parallel: QKV, FC1,
    Mamba's in_proj, MLA's down-projections) is quantized by the norm kernel (Transformer
    Engine's LayerNormLinear writes it in FP8: nothing extra); a MoE layer's router stays in
    BF16, and its experts' and shared experts' inputs come from the dispatch or a separate
    norm, so each is quantized. Routed experts count once per routed copy of a token (top-k),
    split by etp."""
    zero = np.zeros_like(tp, dtype=float)

    def total(layer: tuple[Gemm, ...], split: np.ndarray, *, copies: float = 1.0,
              from_norm: bool = False) -> tuple[np.ndarray, np.ndarray]:
        fwd, bwd = zero, zero
        for g in layer:
            k, n = g.local(split)
            normed = from_norm and g.k == model.hidden_size and g.split != "k"
            fwd = fwd + (0.0 if normed else copies * g.count * k)
            bwd = bwd + copies * g.count * n
        return fwd, bwd

    out = {kind: total(gemms[kind], tp, from_norm=True) for kind in ("attention", "mlp", "mamba")}
    # The router (moe_dense's first GEMM) runs in BF16.
    shared, routed = total(gemms["moe_dense"][1:], tp), total(gemms["expert"], etp,
                                                               copies=model.moe_top_k)
    out["moe"] = (shared[0] + routed[0], shared[1] + routed[1])
    return out


def kernels_for(platform: Platform, pclass: np.ndarray) -> GemmKernel:
    """The measured-kernel parameters per configuration's precision class, as a `GemmKernel`
    whose fields are arrays shaped like `pclass` (configurations × 1)."""
    table = load_kernel_table()
    chosen = per_value(pclass, lambda c: table.kernel(platform, str(c)))
    return GemmKernel(**{f.name: np.array([getattr(k, f.name) for k in chosen.ravel()],
                                          dtype=float).reshape(chosen.shape)
                         for f in fields(GemmKernel)})


def _module_forward(model: ModelSpec, clock: _GemmClock, gemms: dict, *, rows: np.ndarray,
                    tp: np.ndarray, sp: np.ndarray, to_s: np.ndarray, moe_forward: np.ndarray,
                    moe_memory: np.ndarray, mlp_forward: np.ndarray, mlp_memory: np.ndarray,
                    recompute: Recompute) -> tuple[dict, dict]:
    """The forward that selective recompute runs again, per layer of each kind (`attention`,
    `mlp`: a dense MLP, `moe`; configurations × 1): GEMM seconds and HBM-bound seconds.
    core_attn (the attention core) is counted with the attention kernels by the caller."""
    h = model.hidden_size
    seq_shard = np.where(sp, tp, 1.0)
    gate = 3 if model.gated_mlp else 2
    zero = np.zeros_like(rows, dtype=float)
    # A norm reads its input and writes its output (2 passes over h per token).
    norm = ACT * 2 * h / seq_shard * to_s
    up_proj = tuple(g for g in gemms["attention"] if g.split == "n") if model.is_mla else ()
    shared = tuple(g for g in gemms["moe_dense"] if g.split != "none")
    gemm = {"attention": np.where(recompute.module("mla_up_proj"),
                                  clock.time(up_proj, rows, tp), zero),
            "mlp": np.where(recompute.module("mlp"), mlp_forward, zero)}
    memory = {"attention": np.where(recompute.module("layernorm") & model.is_mla, norm, zero),
              "mlp": np.where(recompute.module("mlp"), mlp_memory, zero)}
    if model.is_moe:
        whole = recompute.module("moe")
        act = ACT * gate * model.moe_top_k * model.moe_ffn_hidden_size / tp * to_s
        shared_act = ACT * gate * model.num_shared_experts * model.shared_ffn_size / tp * to_s
        gemm["moe"] = np.where(whole, moe_forward, np.where(
            recompute.module("shared_experts"), clock.time(shared, rows, tp), zero))
        memory["moe"] = np.where(whole, moe_memory, (
            np.where(recompute.module("layernorm"), norm, zero)
            + np.where(recompute.module("moe_act"), act, zero)
            + np.where(recompute.module("shared_experts"), shared_act, zero)))
    else:
        gemm["moe"] = memory["moe"] = zero
    return gemm, memory


@dataclass(frozen=True)
class StageCompute:
    """One micro-batch's compute on every pipeline stage (configurations × stages, seconds)."""

    gemm_fwd_s: np.ndarray
    attention_fwd_s: np.ndarray
    memory_fwd_s: np.ndarray
    """Forward only: tensor-core GEMMs, fused attention (and the Mamba-2 scan), HBM-bound
    kernels."""
    gemm_s: np.ndarray
    attention_s: np.ndarray
    memory_s: np.ndarray
    """Forward and backward, the loss included."""
    recompute_gemm_s: np.ndarray
    recompute_attention_s: np.ndarray
    recompute_memory_s: np.ndarray
    """The extra forward of activation recomputation."""
    host_s: np.ndarray
    """CPU time launching the micro-batch's kernels (the GPU waits where it is the longer)."""
    tp_gemm_s: np.ndarray
    """The GEMMs tensor-parallel communication can hide under: all but the routed experts'."""
    wgrad_cover_s: dict[str, np.ndarray]
    """Per layer kind (`attention`, `mlp`, `mamba`; configurations × 1): one layer's
    weight-gradient GEMMs of its column-parallel input projections (QKV, FC1, Mamba's in_proj)
    for one micro-batch, which the backward's input-gradient reduce runs under (`step`)."""
    gemm_utilization: np.ndarray
    """How well fed the tensor cores are (configurations × 1; `_GemmClock.utilization`), for
    the power model."""


def stage_compute(model: ModelSpec, platform: Platform, layers: StageLayers, *,
                  eff: Efficiency, frameworks: np.ndarray,
                  framework: Callable[[str], FrameworkEfficiency], rows: np.ndarray,
                  tp: np.ndarray, ep: np.ndarray, etp: np.ndarray, mbs: np.ndarray,
                  seq: np.ndarray, sp: np.ndarray, pclass: np.ndarray,
                  recompute: Recompute, attention: np.ndarray | None,
                  compiled: np.ndarray | None = None, lora: np.ndarray | None = None,
                  lora_targets: np.ndarray | None = None,
                  dropout: np.ndarray | None = None) -> StageCompute:
    """Compute of one micro-batch of `rows` token rows per GPU, for configurations given as
    column vectors (configurations × 1): tp, ep, etp, mbs, seq (sequence length), sp (sequence
    parallel), pclass (the precision's class), recompute (what the backward recomputes),
    attention (the `attention` column, None where the input has none), compiled (the
    `torch_compile` column, None: not compiled), run by `frameworks`' kernels (those of
    `EAGER_BLOCKS` as eager PyTorch unless compiled: `eager_traffic`); `lora`
    (configurations × 1) marks LoRA fine-tuning with adapters on `lora_targets`
    (`advisor/perf/finetune.py`: frozen GEMMs skip their weight gradients); dropout (the
    `dropout` column, None: off, as in LLM pre-training recipes) the dropout probability."""
    h = model.hidden_size
    gemms = layer_gemms(model)

    # ---- peaks ---------------------------------------------------------------------------
    ratio = np.where(pclass == "fp8", eff.fp8_ratio, np.where(pclass == "fp4", eff.fp4_ratio, 1.0))
    gemm_kernels = per_value(frameworks[:, None], lambda f: framework(f).gemm)
    attn_kernels = (per_value(frameworks[:, None], lambda f: framework(f).attention)
                    * np.where(np.isin(frameworks, FLASH_ATTENTION_2)[:, None],
                               FLASH_ATTENTION_2_SPEED.get(platform.family, 1.0), 1.0))
    # GEMMs at the measured kernels' full-clock peak, times what the end-to-end fit finds the
    # family's and framework's training GEMMs reach against those kernels (`eff.gemm`).
    gemm_peak = (per_value(pclass, platform.full_clock_peak_flops) * ratio * gemm_kernels
                 * eff.gemm)
    attn_class = np.where(pclass == "fp16", "fp16", "bf16")
    attn_peak = per_value(attn_class, platform.peak_flops) * eff.attention * attn_kernels
    hbm = platform.hbm_bandwidth_bytes_per_s * MEMORY_EFFICIENCY

    # ---- one micro-batch, per layer kind and pass (configs × 1) --------------------------
    element = np.where(pclass == "fp8", 1.0, np.where(pclass == "fp4", 0.5, 2.0))
    kernel = kernels_for(platform, pclass)
    clock = _GemmClock(kernel, gemm_peak, element, platform.hbm_bandwidth_bytes_per_s,
                       platform.num_compute_units)
    kinds = sublayer_counts(model)
    t_attn_gemm = clock.passes(gemms["attention"], rows, tp, kinds.attention)
    t_mlp_gemm = clock.passes(gemms["mlp"], rows, tp, kinds.mlp)
    t_mamba_gemm = clock.passes(gemms["mamba"], rows, tp, kinds.mamba)
    num_moe = kinds.moe
    t_moe_dense = clock.passes(gemms["moe_dense"], rows, tp, num_moe)
    t_output_gemm = clock.passes(gemms["output"], rows, tp)
    # LoRA's frozen base computes no weight gradients: nothing to run, nothing to run under.
    trains = 1.0 if lora is None else np.where(lora, 0.0, 1.0)
    cover = {kind: trains * clock.passes(tuple(g for g in gemms[kind] if g.split == "n"), rows,
                                         tp, 0.0).wgrad
             for kind in ("attention", "mlp", "mamba")}
    local_experts = model.num_experts / ep if model.is_moe else np.zeros_like(ep)
    grouped = np.isin(frameworks, GROUPED_KERNEL_FRAMEWORKS)[:, None]
    if model.is_moe:
        # Each local expert's GEMMs over its share of the tokens: one grouped kernel for them
        # all (`GROUPED_KERNEL_FRAMEWORKS`) or a kernel each (Transformer Engine).
        expert_rows = rows * model.moe_top_k * ep * etp / (tp * model.num_experts)
        t_experts = clock.passes(gemms["expert"], expert_rows, etp, num_moe,
                                 batch=np.where(grouped, local_experts, 1.0),
                                 launches=np.where(grouped, 1.0, local_experts),
                                 speed=eff.expert_gemm)
    else:
        t_experts = GemmPasses(*(np.zeros_like(tp, dtype=float),) * 3)
    core_flops = per_value(seq, lambda s: attention_core_flops_per_token(model, int(s)))
    # Fused attention below its long-sequence speed on the seq / CP tokens a kernel sees.
    t_core = (rows * core_flops / tp / attn_peak
              * (1.0 + ATTENTION_HALF_SPEED_TOKENS / (rows / mbs)))
    unfused = (attention[:, None] == "unfused") if attention is not None else False
    if np.any(unfused):
        # Unfused: QKᵀ and PV as batched GEMMs over every key (the causal mask is applied
        # after the product, nothing is skipped), one per head and sequence (M = N = seq,
        # K = head dim), plus the softmax pass over the s² scores between them: read the scores
        # QKᵀ wrote and write the probabilities PV reads (4 B per score; the GEMMs' own traffic
        # counts the write and the read); backward scales with the forward like
        # fused attention's does (ATTENTION_BACKWARD_RATIO). A batch of mbs × heads such GEMMs
        # fills the GPU with tiles whatever their shape, and a reduction over the head dim
        # (64-128) makes each little more than a write of its s² output, so they run on the
        # roofline: math at the GEMM efficiency plus their whole HBM traffic, with none of the
        # small-dimension penalty of a lone weight GEMM (`_GemmClock`).
        # The score GEMMs run in 16-bit whatever the weights' recipe (ParallelConfig refuses
        # unfused attention with context parallelism, so every GPU holds whole sequences).
        heads = model.num_attention_heads / tp
        head_dim = float(model.attention_head_dim)
        score_peak = (per_value(attn_class, platform.full_clock_peak_flops) * gemm_kernels
                      * eff.gemm * kernel.efficiency)
        # Per head and sequence, QKᵀ and PV: 2·s·s·d FLOPs each; traffic 2 B × (two s×d
        # operands and the s×s product).
        math = 2 * 2.0 * seq * seq * head_dim / score_peak
        traffic = 2 * 2.0 * (2 * seq * head_dim + seq * seq) / hbm
        gemm_core = (math + traffic) * heads * mbs
        softmax = rows * heads * seq * 4.0 / hbm
        t_core = np.where(unfused, gemm_core + softmax, t_core)
    scan_peak = attn_peak / eff.attention * eff.scan
    t_scan = rows * mamba_scan_flops_per_token(model) / tp / scan_peak

    # Elementwise HBM traffic per token, forward: norm (read + write), residual add (2 reads +
    # write), RoPE on Q and K, activation (gated: read 2f, write f), permutation for MoE.
    seq_shard = np.where(sp, tp, 1.0)      # hidden-wide elementwise work is split by SP
    common = ACT * 5 * h / seq_shard
    rope = np.where(model.position_embedding == "rope",
                    ACT * 2 * (model.q_dim + model.kv_dim) / tp, 0.0)
    gate = 3 if model.gated_mlp else 2
    e_attn = common + rope
    e_mlp = common + ACT * gate * model.ffn_hidden_size / tp
    # Mamba-2 (mamba_ssm kernels): conv1d in/out over x, B, C; the chunked scan reads x, B, C,
    # dt and writes y with FP32 chunk states; the gated RMSNorm reads y and z, writes its output:
    # about 12 passes over d_inner-wide tensors.
    e_mamba = common + ACT * 12 * model.mamba_inner_size / tp
    if model.is_moe:
        width = model.moe_latent_size or h
        e_moe = (common + ACT * gate * model.moe_top_k * model.moe_ffn_hidden_size / tp
                 + ACT * 4 * model.moe_top_k * width / seq_shard
                 + ACT * gate * model.num_shared_experts * model.shared_ffn_size / tp)
    else:
        e_moe = np.zeros_like(tp)
    eager = np.isin(frameworks, EAGER_BLOCKS)[:, None]
    if compiled is not None:
        eager = eager & ~np.asarray(compiled, dtype=bool).reshape(-1, 1)
    if eager.any():
        extra = eager_traffic(model, tp)
        e_attn = e_attn + np.where(eager, extra["attention"], 0.0)
        e_mlp = e_mlp + np.where(eager, extra["mlp"], 0.0)
        e_moe = e_moe + np.where(eager, extra["moe"], 0.0)
    to_s = rows / hbm                      # bytes per token -> seconds for the micro-batch
    t_e_attn, t_e_mlp, t_e_mamba, t_e_moe = (e * to_s for e in (e_attn, e_mlp, e_mamba, e_moe))
    # Dropout (on where the `dropout` column says so): each block's bias-dropout-add (Megatron's
    # `bias_dropout_add_fused_train`, whose add the elementwise traffic counts) also writes its
    # mask forward and reads it backward, and unfused attention drops the probabilities of every
    # score in a kernel of its own (fused attention drops them inside its kernel, at its
    # measured speed).
    drop = (np.zeros_like(tp, dtype=bool) if dropout is None
            else np.asarray(dropout, dtype=float).reshape(-1, 1) > 0)
    t_drop_block = np.where(drop, DROPOUT_MASK_BYTES * h / seq_shard, 0.0) * to_s
    t_drop_attn = t_drop_block + np.where(
        drop & unfused,
        DROPOUT_FORWARD_BYTES * model.num_attention_heads / tp * seq, 0.0) * to_s
    t_loss = rows * model.vocab_size / tp * LOSS_BYTES_PER_LOGIT / hbm

    # ---- per stage (configs × pp) -------------------------------------------------------
    na, nm, nl, nmoe = layers.attention, layers.mamba, layers.mlp, layers.moe
    nlayers, last = layers.total, layers.last
    mtp = model.num_mtp_layers
    mtp_proj = (clock.passes((Gemm(2 * h, h, "none"),), rows, tp) if mtp
                else GemmPasses(*(np.zeros_like(tp, dtype=float),) * 3))

    def stage_sum(part: str) -> np.ndarray:
        """One pass (`fwd`, `dgrad`, `wgrad`) of every weight GEMM a stage holds."""
        def of(passes: GemmPasses) -> np.ndarray:
            return getattr(passes, part)
        return (na * of(t_attn_gemm) + nm * of(t_mamba_gemm) + nl * of(t_mlp_gemm)
                + nmoe * (of(t_moe_dense) + of(t_experts))
                + last * (of(t_output_gemm) * (1 + mtp) + mtp * of(mtp_proj)))

    gemm_fwd = stage_sum("fwd")
    attn_fwd = na * t_core + nm * t_scan
    mem_fwd = na * t_e_attn + nm * t_e_mamba + nl * t_e_mlp + nmoe * t_e_moe
    drop_fwd = na * t_drop_attn + (nm + nl + nmoe) * t_drop_block
    # Quantizing the GEMM operands of a low-precision recipe: forward inputs and backward
    # output gradients (`quantized_elements`), each once per pass.
    quantize = per_value(pclass, lambda c: QUANTIZE_BYTES.get(str(c), 0.0)) * to_s
    if quantize.any():
        q = quantized_elements(model, gemms, tp, etp)
        q_fwd, q_bwd = (quantize * (na * q["attention"][i] + nm * q["mamba"][i]
                                    + nl * q["mlp"][i] + nmoe * q["moe"][i]) for i in (0, 1))
    else:
        q_fwd = q_bwd = np.zeros_like(mem_fwd)
    # Forward, input gradients and weight gradients; a frozen base (LoRA) skips the last.
    gemm_mb = gemm_fwd + stage_sum("dgrad") + trains * stage_sum("wgrad")
    experts_mb = t_experts.fwd + t_experts.dgrad + trains * t_experts.wgrad
    attn_mb = (1.0 + ATTENTION_BACKWARD_RATIO) * attn_fwd
    # Elementwise kernels' backward moves about twice their forward traffic; dropout's as much.
    mem_mb = 3.0 * mem_fwd + q_fwd + q_bwd + last * t_loss * (1 + mtp) + 2.0 * drop_fwd
    mem_fwd = mem_fwd + q_fwd + drop_fwd
    if lora is not None and lora.any():
        adapters = np.where(lora, adapter_traffic_per_layer_token(
            model, layers, targets=lora_targets) * ACT / tp * to_s, 0.0)
        mem_fwd = mem_fwd + adapters
        mem_mb = mem_mb + (1.0 + ADAPTER_BACKWARD_TRAFFIC) * adapters
    is_full = recompute.full
    re_gemm = np.where(is_full, gemm_fwd - last * t_output_gemm.fwd * (1 + mtp), 0.0)
    re_attn = (np.where(is_full | recompute.module("core_attn"), na * t_core, 0.0)
               + np.where(is_full, nm * t_scan, 0.0))
    re_mem = np.where(is_full, mem_fwd, 0.0)
    # Selective recompute of named modules runs each one's forward again in the backward.
    if recompute.selective.any():
        sel_gemm, sel_mem = _module_forward(model, clock, gemms, rows=rows, tp=tp, sp=sp,
                                            to_s=to_s,
                                            moe_forward=t_moe_dense.fwd + t_experts.fwd,
                                            moe_memory=t_e_moe, mlp_forward=t_mlp_gemm.fwd,
                                            mlp_memory=t_e_mlp, recompute=recompute)
        re_gemm = re_gemm + na * sel_gemm["attention"] + nl * sel_gemm["mlp"] \
            + nmoe * sel_gemm["moe"]
        re_mem = re_mem + na * sel_mem["attention"] + nl * sel_mem["mlp"] + nmoe * sel_mem["moe"]
    host_layer = per_value(frameworks[:, None], lambda f: (
        eff.layer_overhead_s if framework(f).layer_overhead_s is None
        else framework(f).layer_overhead_s))
    # A grouped GEMM that launches each local expert's GEMMs one by one costs host time per
    # expert, which a fused grouped kernel does not (`GROUPED_KERNEL_FRAMEWORKS`).
    per_expert = np.where(grouped, 0.0, eff.expert_overhead_s)
    host_mb = ((host_layer * nlayers + per_expert * local_experts * nmoe)
               * np.where(is_full, 4.0 / 3.0, 1.0))
    return StageCompute(
        gemm_fwd_s=gemm_fwd, attention_fwd_s=attn_fwd, memory_fwd_s=mem_fwd, gemm_s=gemm_mb,
        attention_s=attn_mb, memory_s=mem_mb, recompute_gemm_s=re_gemm,
        recompute_attention_s=re_attn, recompute_memory_s=re_mem, host_s=host_mb,
        tp_gemm_s=gemm_mb - nmoe * experts_mb + re_gemm, wgrad_cover_s=cover,
        gemm_utilization=clock.utilization)
