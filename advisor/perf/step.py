"""Step time of one training iteration, with a breakdown, vectorised over configurations.

Per pipeline stage and micro-batch (forward + backward):

* compute — every weight GEMM priced by its shape after TP/EP splitting: time = 2·M·N·K /
  (peak × η · Π_d d/(d + d½)) + γ · (MK + KN + MN) · element bytes / HBM bandwidth: tile and
  wave quantisation (small dimensions fill the GPU poorly) and a soft roofline (small or skinny
  GEMMs become memory-bound); FP8/FP4 GEMMs run at their peak × a fitted
  ratio, attention stays BF16 (so FP8 gains less than 2×). Fused attention and the Mamba-2
  scan at their own efficiencies, backward 2.5 × forward (FlashAttention-2, Dao 2023, §3.2:
  five matmuls backward against two forward). Elementwise work (norms, residuals,
  activations, RoPE, MoE permutation, loss) from HBM traffic.
* host overhead — the CPU launches every kernel; a layer costs `layer_overhead_s` of CPU time
  per micro-batch (forward + backward; a third more with full recompute). The GPU waits only
  when the CPU is slower than the GPU work it launches, so a micro-batch takes the longer of
  the two and the breakdown shows the difference as overhead (small models, small micro-batches
  and high TP become launch-bound).
* recompute — the extra forward: all layers (full) or the attention core (selective).
* TP/SP — per tensor-parallel block an all-gather and a reduce-scatter of the micro-batch's
  activations forward and again backward; `tp_comm_overlap` hides up to `OVERLAP_EFFICIENCY` of
  the block's GEMM time.
* CP — ring attention passes each K/V chunk cp − 1 times (gradients too, backward), hidden under
  the attention kernels it feeds.
* EP — all-to-all dispatch and combine forward and backward, on NVLink while ep·etp fits the
  domain, else the off-node share over the network.
* PP — one send/recv of the boundary activation per micro-batch and virtual stage, each way;
  TP ranks send their 1/tp shards as separate small messages (paper finding 2: TP+PP send/recv
  under-uses bandwidth) at point-to-point efficiency.

Per step: (m + (pp − 1)/vp) × the slowest stage's micro-batch time (the 1F1B / interleaved
bubble), then the data-parallel gradient reduce-scatter and parameter all-gather (all-reduce
without a sharded optimizer; FSDP gathers per micro-batch) with overlap hiding up to the last
micro-batch's backward / first forward, then the optimizer step from HBM traffic.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd

from advisor.model import ModelSpec
from advisor.parallel import PRECISIONS
from advisor.perf.calibration import (
    Calibration,
    Efficiency,
    FrameworkEfficiency,
    load_calibration,
)
from advisor.perf.collectives import (
    ALL_GATHER,
    ALL_TO_ALL,
    REDUCE_SCATTER,
    RING_ALLREDUCE,
    SEND_RECV,
    CollectiveModel,
)
from advisor.perf.columns import (
    Columns,
    config_columns,
    num_rows,
    per_value,
    pipeline_groups,
    take,
)
from advisor.perf.flops import (
    Gemm,
    attention_core_flops_per_token,
    layer_gemms,
    mamba_scan_flops_per_token,
    model_flops_per_token,
    sublayer_counts,
)
from advisor.perf.layout import StageLayout, stage_layout
from advisor.platform import Platform

ACT = 2.0
"""Bytes per activation element (BF16; FP8 recipes keep BF16 activations between layers)."""
ATTENTION_BACKWARD_RATIO = 2.5
"""FlashAttention-2 (Dao 2023, §3.2): backward runs 5 matmuls against 2 forward."""
MEMORY_EFFICIENCY = 0.8
"""Fraction of HBM bandwidth elementwise kernels and the optimizer reach. placeholder: typical
for fused elementwise kernels on HBM GPUs (STREAM-like copy reaches 80-90 %); campaign data to
replace it."""
OVERLAP_EFFICIENCY = 0.8
"""Share of the concurrent compute that communication can hide behind when overlap is on (the
NCCL kernels take SMs and HBM bandwidth from the compute they overlap). placeholder."""
OPTIMIZER_BYTES_PER_PARAM = 32.0
"""Adam step with FP32 master weights: read master, m, v (12 B) and the gradient (4 B), write
master, m, v (12 B) and the 16-bit parameter (2 B), plus the gradient-norm read (2 B)."""
LOSS_BYTES_PER_LOGIT = 12.0
"""Vocab-parallel cross-entropy: write BF16 logits, FP32 softmax read/write, gradient write."""

DEFAULT_FRAMEWORK = "megatron"
"""Whose kernels run the step: Megatron-Core with Transformer Engine (Megatron-LM, NeMo,
Megatron-Bridge) is the reference; other frameworks' kernels scale the compute efficiencies by
their calibrated `[framework]` factor (1 where none was fitted)."""

COMPONENTS = ("compute_s", "recompute_s", "tp_comm_s", "cp_comm_s", "ep_comm_s", "pp_comm_s",
              "dp_comm_s", "bubble_s", "optimizer_s", "overhead_s")
"""The step-time breakdown; they add up to `step_time_s`."""
PHASES = ("gemm_s", "attention_s", "memory_bound_s", "hidden_comm_s")
"""Busy time by kind of work, per step (for the power model): tensor-core GEMMs, fused
attention, HBM-bound kernels, and communication running under compute."""


def _col(cols: Columns, name: str, dtype: type = float) -> np.ndarray:
    return cols[name].astype(dtype)[:, None]


def step_table(model: ModelSpec, platform: Platform, configs: pd.DataFrame, *,
               calibration: Calibration | None = None,
               framework: str = DEFAULT_FRAMEWORK) -> pd.DataFrame:
    """Step time, throughput and the breakdown for every row of `configs` (`ParallelConfig`
    columns, plus an optional `framework` column overriding `framework` per row). Returns a
    frame aligned with `configs`."""
    return pd.DataFrame(step_arrays(model, platform, config_columns(configs),
                                    calibration=calibration, framework=framework),
                        index=configs.index)


def step_arrays(model: ModelSpec, platform: Platform, cols: Columns, *,
                calibration: Calibration | None = None,
                framework: str = DEFAULT_FRAMEWORK) -> dict[str, np.ndarray]:
    """`step_table`'s columns, from and to arrays."""
    calibration = calibration or load_calibration()
    n = num_rows(cols)
    frameworks = (cols["framework"].astype(str) if "framework" in cols
                  else np.full(n, framework))
    eff = calibration.efficiency(platform.family)
    columns = COMPONENTS + PHASES + ("step_time_s", "microbatch_s", "num_microbatches",
                                     "forward_burst_s", "gemm_utilization")
    out = {c: np.zeros(n) for c in columns}
    for pp, vp, idx in pipeline_groups(cols):
        part = _step(model, platform, take(cols, idx), eff, calibration.collectives,
                     stage_layout(model, pp, vp), pp=pp, vp=vp,
                     frameworks=frameworks if idx is None else frameworks[idx],
                     framework=calibration.framework)
        for c, v in part.items():
            if idx is None:
                out[c][:] = v
            else:
                out[c][idx] = v
    tokens = cols["gbs"].astype(float) * cols["seq_len"].astype(float)
    world = (cols["tp"] * cols["pp"] * cols["cp"] * cols["dp"]).astype(float)
    out["tokens_per_sec_per_gpu"] = tokens / out["step_time_s"] / world
    flops = per_value(cols["seq_len"], lambda s: model_flops_per_token(model, int(s)))
    out["tflops_per_gpu"] = out["tokens_per_sec_per_gpu"] * flops / 1e12
    peak = per_value(cols["precision"], lambda p: platform.peak_flops(PRECISIONS[p]))
    out["mfu"] = out["tflops_per_gpu"] * 1e12 / peak
    out["calibrated"] = np.full(n, eff.calibrated)
    return out


class _GemmClock:
    """Prices GEMMs as math at the family's efficiency plus the exposed share of their HBM
    traffic (a soft roofline), and keeps the math-only time alongside so the power model knows
    how well fed the tensor cores are."""

    def __init__(self, eff: Efficiency, peak: np.ndarray, element_bytes: np.ndarray,
                 hbm_bytes_per_s: float) -> None:
        self.eff, self.peak = eff, peak
        self.element_bytes, self.hbm = element_bytes, hbm_bytes_per_s
        self.actual = 0.0
        self.ideal = 0.0

    def time(self, gemms: tuple[Gemm, ...], rows: np.ndarray, split: np.ndarray,
             weight: np.ndarray | float = 1.0) -> np.ndarray:
        """Forward seconds of `gemms` over `rows` token rows with dims split by `split`;
        `weight` (how many such layers run per micro-batch) only feeds the utilisation."""
        total = np.zeros(np.broadcast(rows, split, self.peak).shape)
        if not gemms:                      # a layer kind the model lacks: adds nothing
            return total
        ideal = np.zeros_like(total)
        d = self.eff.gemm_half_dim
        row_shape = rows / (rows + d)
        peak = self.peak * self.eff.gemm
        for g in gemms:
            # An unsplit dimension stays a Python float (the same IEEE arithmetic as an array
            # of it, and fewer array operations).
            k = g.k / split if g.split == "k" else float(g.k)
            nn = g.n / split if g.split == "n" else float(g.n)
            shape = row_shape * (k / (k + d)) * (nn / (nn + d))
            math = g.count * 2.0 * rows * k * nn / peak
            traffic = g.count * (rows * k + k * nn + rows * nn) * self.element_bytes / self.hbm
            total = total + math / shape + self.eff.gemm_memory_exposure * traffic
            ideal = ideal + math
        self.actual = self.actual + np.sum(weight * total, axis=-1, keepdims=True)
        self.ideal = self.ideal + np.sum(weight * ideal, axis=-1, keepdims=True)
        return total

    @property
    def utilization(self) -> np.ndarray:
        return np.asarray(self.ideal) / np.maximum(np.asarray(self.actual), 1e-30)


def _step(model: ModelSpec, platform: Platform, configs: Columns, eff: Efficiency,
          coll: CollectiveModel, layout: StageLayout, *, pp: int, vp: int,
          frameworks: np.ndarray,
          framework: Callable[[str], FrameworkEfficiency]) -> dict:
    tp, cp, dp = _col(configs, "tp"), _col(configs, "cp"), _col(configs, "dp")
    ep, etp = _col(configs, "ep"), _col(configs, "etp")
    mbs, gbs, seq = _col(configs, "mbs"), _col(configs, "gbs"), _col(configs, "seq_len")
    recompute = configs["recompute"][:, None]
    sharding = configs["dp_sharding"][:, None]
    sp = _col(configs, "sequence_parallel", bool)
    tp_overlap = _col(configs, "tp_comm_overlap", bool)
    grad_overlap = _col(configs, "overlap_grad_reduce", bool)
    param_overlap = _col(configs, "overlap_param_gather", bool)
    grad_bytes = np.where(_col(configs, "grad_reduce_in_fp32", bool), 4.0, 2.0)
    precision = configs["precision"]
    pclass = per_value(precision[:, None], PRECISIONS.__getitem__).astype(str)
    domain = platform.nvlink_domain_size
    h = model.hidden_size
    gemms = layer_gemms(model)

    # ---- peaks ---------------------------------------------------------------------------
    ratio = np.where(pclass == "fp8", eff.fp8_ratio, np.where(pclass == "fp4", eff.fp4_ratio, 1.0))
    gemm_kernels = per_value(frameworks[:, None], lambda f: framework(f).gemm)
    attn_kernels = per_value(frameworks[:, None], lambda f: framework(f).attention)
    gemm_peak = per_value(pclass, platform.peak_flops) * ratio * gemm_kernels
    attn_class = np.where(pclass == "fp16", "fp16", "bf16")
    attn_peak = per_value(attn_class, platform.peak_flops) * eff.attention * attn_kernels
    hbm = platform.hbm_bandwidth_bytes_per_s * MEMORY_EFFICIENCY

    # ---- one micro-batch, forward, per layer kind (configs × 1) --------------------------
    rows = mbs * seq / cp                  # token rows of every GEMM (SP gathers the sequence)
    element = np.where(pclass == "fp8", 1.0, np.where(pclass == "fp4", 0.5, 2.0))
    clock = _GemmClock(eff, gemm_peak, element, hbm)
    kinds = sublayer_counts(model)
    t_attn_gemm = clock.time(gemms["attention"], rows, tp, kinds.attention)
    t_mlp_gemm = clock.time(gemms["mlp"], rows, tp, kinds.mlp)
    t_mamba_gemm = clock.time(gemms["mamba"], rows, tp, kinds.mamba)
    num_moe = kinds.moe
    t_moe_dense = clock.time(gemms["moe_dense"], rows, tp, num_moe)
    t_output_gemm = clock.time(gemms["output"], rows, tp)
    if model.is_moe:
        expert_rows = rows * model.moe_top_k * ep * etp / (tp * model.num_experts)
        local_experts = model.num_experts / ep
        t_experts = local_experts * clock.time(gemms["expert"], expert_rows, etp,
                                               num_moe * local_experts)
    else:
        t_experts = np.zeros_like(tp)
    core_flops = per_value(seq, lambda s: attention_core_flops_per_token(model, int(s)))
    t_core = rows * core_flops / tp / attn_peak
    if "attention" in configs and (configs["attention"] == "unfused").any():
        # Unfused: QKᵀ and PV as batched GEMMs over every key (the causal mask is applied
        # after the product, nothing is skipped), per head (M = N = seq, K = head dim), plus
        # the softmax passes over the s² scores: write scores, read them and write
        # probabilities forward (6 B per score); backward scales with the forward like fused
        # attention's does (ATTENTION_BACKWARD_RATIO).
        # The score GEMMs run in 16-bit whatever the weights' recipe (ParallelConfig refuses
        # unfused attention with context parallelism, so every GPU holds whole sequences).
        unfused = configs["attention"][:, None] == "unfused"
        heads = model.num_attention_heads / tp
        head_dim = float(model.attention_head_dim)
        score_peak = per_value(attn_class, platform.peak_flops) * gemm_kernels
        score_clock = _GemmClock(eff, score_peak, 2.0, hbm)
        gemm_core = np.zeros_like(seq)
        for s_value in np.unique(seq):
            one_head = score_clock.time((Gemm(head_dim, float(s_value), "none"),
                                         Gemm(float(s_value), head_dim, "none")),
                                        np.full_like(seq, s_value), np.ones_like(seq))
            gemm_core = np.where(seq == s_value, one_head * heads * mbs, gemm_core)
        softmax = rows * heads * seq * 6.0 / hbm
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
    to_s = rows / hbm                      # bytes per token -> seconds for the micro-batch
    t_e_attn, t_e_mlp, t_e_mamba, t_e_moe = (e * to_s for e in (e_attn, e_mlp, e_mamba, e_moe))
    t_loss = rows * model.vocab_size / tp * LOSS_BYTES_PER_LOGIT / hbm

    # ---- per stage (configs × pp) -------------------------------------------------------
    na, nm = layout.num_attention[None, :], layout.num_mamba[None, :]
    nl, nmoe = layout.num_mlp[None, :], layout.num_moe[None, :]
    nlayers = layout.num_layers[None, :]
    last = (np.arange(pp) == pp - 1)[None, :].astype(float)
    mtp = model.num_mtp_layers
    gemm_fwd = (na * t_attn_gemm + nm * t_mamba_gemm + nl * t_mlp_gemm
                + nmoe * (t_moe_dense + t_experts) + last * t_output_gemm * (1 + mtp))
    if mtp:
        gemm_fwd = gemm_fwd + last * mtp * clock.time((Gemm(2 * h, h, "none"),), rows, tp)
    attn_fwd = na * t_core + nm * t_scan
    mem_fwd = na * t_e_attn + nm * t_e_mamba + nl * t_e_mlp + nmoe * t_e_moe
    gemm_mb = 3.0 * gemm_fwd
    attn_mb = (1.0 + ATTENTION_BACKWARD_RATIO) * attn_fwd
    mem_mb = 3.0 * mem_fwd + last * t_loss * (1 + mtp)
    is_full = recompute == "full"
    is_sel = recompute == "selective"
    re_gemm = np.where(is_full, gemm_fwd - last * t_output_gemm * (1 + mtp), 0.0)
    re_attn = np.where(is_full | is_sel, na * t_core, 0.0) + np.where(is_full, nm * t_scan, 0.0)
    re_mem = np.where(is_full, mem_fwd, 0.0)
    host_layer = per_value(frameworks[:, None], lambda f: (
        eff.layer_overhead_s if framework(f).layer_overhead_s is None
        else framework(f).layer_overhead_s))
    host_mb = host_layer * nlayers * np.where(is_full, 4.0 / 3.0, 1.0)

    # ---- tensor parallel -----------------------------------------------------------------
    act_bytes = rows * h * ACT             # one micro-batch's hidden states (full sequence)
    tp_in = tp <= domain
    tp_local = np.minimum(tp, domain)
    pair = (coll.time(ALL_GATHER, act_bytes, tp, tp_in, platform, tp_local)
            + coll.time(REDUCE_SCATTER, act_bytes, tp, tp_in, platform, tp_local))
    pair = np.where(sp, pair, coll.time(RING_ALLREDUCE, act_bytes, tp, tp_in, platform,
                                        tp_local))
    # Per layer block: all-gather + reduce-scatter forward, again backward (and again in a full
    # recompute). Shared experts and latent projections are TP-split like an MLP; routed
    # experts with etp > 1 gather/scatter over the expert-TP group instead. The embedding
    # (reduce-scatter forward, all-gather backward) and each output layer (all-gather forward,
    # reduce-scatter backward) cost one pair, and are not recomputed.
    moe_shared_tp = 1.0 if (model.num_shared_experts or model.moe_latent_size) else 0.0
    if layout.num_moe.any():
        etp_in = etp <= domain
        etp_local = np.minimum(etp, domain)
        etp_pair = (coll.time(ALL_GATHER, act_bytes, etp, etp_in, platform, etp_local)
                    + coll.time(REDUCE_SCATTER, act_bytes, etp, etp_in, platform, etp_local))
    else:
        etp_pair = 0.0                     # no MoE layer: nmoe · etp_pair is 0 either way
    layer_comm = (na + nm + nl + nmoe * moe_shared_tp) * pair + nmoe * etp_pair
    edge_comm = (last * (1 + mtp) + (np.arange(pp) == 0)[None, :]) * pair
    tp_raw = 2.0 * layer_comm + edge_comm
    tp_re = np.where(is_full, layer_comm, 0.0)
    tp_all = tp_raw + tp_re
    tp_gemm = gemm_mb - nmoe * 3.0 * t_experts + re_gemm    # the GEMMs TP overlap hides under

    # ---- context parallel (ring attention) ---------------------------------------------------
    kv_bytes = rows * (model.kv_dim + model.v_dim) * ACT / tp
    cp_in = tp * cp <= domain
    step = coll.time(SEND_RECV, kv_bytes, np.full_like(cp, 2.0), cp_in, platform)
    cp_per_layer = np.where(cp > 1, (cp - 1) * step * (1 + 2), 0.0)  # fwd K/V, bwd K/V + dK/dV
    cp_re = np.where(is_full | is_sel, (cp - 1) * step, 0.0)
    cp_raw = na * (cp_per_layer + np.where(cp > 1, cp_re, 0.0))
    cp_attention = attn_mb + re_attn     # ring attention hides under the attention kernels
    if model.mamba_num_heads:
        # Mamba-2 context parallelism (Megatron-Core) swaps sequence for heads with an
        # all-to-all before the conv/scan (x, B, C, dt) and back after it (y), forward and
        # backward (and in a full recompute); nothing runs beside it.
        groups_state = 2 * max(model.mamba_num_groups, 1) * model.mamba_state_dim
        swap_bytes = rows * (2 * model.mamba_inner_size + groups_state
                             + model.mamba_num_heads) * ACT / tp
        swap = coll.time(ALL_TO_ALL, swap_bytes, cp, cp_in, platform)
        mamba_cp = nm * swap * (2.0 + np.where(is_full, 1.0, 0.0))
    else:
        mamba_cp = 0.0

    # ---- expert parallel (all-to-all) -------------------------------------------------------
    if model.is_moe:
        width = model.moe_latent_size or h
        token_bytes = rows / tp * width * ACT  # one copy of the GPU's tokens
        k = model.moe_top_k
        group = ep * etp
        inside = group <= domain
        # Off-domain traffic is deduplicated per destination domain (DeepEP / HybridEP, the
        # dispatchers NVIDIA's MoE recipes use across nodes): a token crosses the network once
        # per distinct remote domain among its k experts, then fans out over NVLink.
        domains = np.maximum(group / domain, 1.0)
        remote = np.where(inside, 0.0, (domains - 1) * (1 - (1 - 1 / domains) ** k))
        local = k * np.where(inside, 1.0, 1.0 / domains)
        a2a_in = coll.time(ALL_TO_ALL, token_bytes * (local + remote), ep, True, platform)
        a2a_net = np.where(inside, 0.0, coll.time(SEND_RECV, token_bytes * remote, 2.0, False,
                                                  platform))
        a2a = np.maximum(a2a_in, a2a_net)
        ep_raw = nmoe * a2a * (4.0 + np.where(is_full, 2.0, 0.0))
    else:
        ep_raw = np.zeros((len(tp), pp))

    # ---- pipeline send/recv -----------------------------------------------------------------
    if pp > 1:
        # Each TP rank sends its 1/tp shard: with sequence parallelism the activation is
        # already sharded; without it Megatron scatters before the send and all-gathers after.
        boundary = act_bytes / tp
        pp_in = tp * cp * dp * pp <= domain
        p2p = coll.time(SEND_RECV, boundary, np.full_like(tp, 2.0), pp_in, platform)
        gather = np.where((tp > 1) & ~sp, coll.time(ALL_GATHER, act_bytes, tp, tp_in, platform,
                                                    tp_local), 0.0)
        pp_raw = 2.0 * vp * (p2p + gather) * np.ones((1, pp))
    else:
        pp_raw = np.zeros((len(tp), pp))

    compute_mb = gemm_mb + attn_mb + mem_mb
    recompute_mb = re_gemm + re_attn + re_mem

    # ---- data parallel and optimizer ----------------------------------------------------------
    dense_params = (layout.dense_params + layout.embedding_params + layout.output_params)[
        None, :] / tp
    expert_params = layout.expert_params[None, :] / (ep * etp)
    dp_group = dp * cp
    # A stage without routed experts (a dense model, or MoE's dense first layers) has no expert
    # gradients to sync: a group of one costs nothing, where the latency of an empty collective
    # over the expert-data-parallel group would otherwise be charged.
    edp_group = np.where(expert_params > 0, np.maximum(dp * cp * tp / (ep * etp), 1.0), 1.0)
    dp_in = tp * cp * dp <= domain
    dp_local = np.clip(domain // (tp * 1.0), 1.0, dp_group)   # dp·cp group has stride tp
    edp_local = np.clip(domain // (ep * etp * 1.0), 1.0, edp_group)
    full = sharding == "full"
    shard_opt = sharding != "none"
    param_bytes = np.where(precision[:, None] == "mxfp8", 1.0, ACT)
    rs = (coll.time(REDUCE_SCATTER, dense_params * grad_bytes, dp_group, dp_in, platform,
                             dp_local)
          + coll.time(REDUCE_SCATTER, expert_params * grad_bytes, edp_group, dp_in,
                             platform, edp_local))
    ag = (coll.time(ALL_GATHER, dense_params * param_bytes, dp_group, dp_in, platform,
                             dp_local)
          + coll.time(ALL_GATHER, expert_params * param_bytes, edp_group, dp_in,
                             platform, edp_local))
    ar = (coll.time(RING_ALLREDUCE, dense_params * grad_bytes, dp_group, dp_in, platform,
                             dp_local)
          + coll.time(RING_ALLREDUCE, expert_params * grad_bytes, edp_group, dp_in,
                             platform, edp_local))
    fwd_mb = gemm_fwd + attn_fwd + mem_fwd
    bwd_mb = compute_mb - fwd_mb
    m = gbs / (mbs * dp)
    # FSDP gathers parameters before forward and backward and reduce-scatters gradients, every
    # micro-batch, prefetching under the compute of the neighbouring layers.
    fsdp_mb = np.where(full, 2.0 * ag + rs, 0.0)

    # ---- what overlap hides, per micro-batch ----------------------------------------------------
    # One budget: communication can hide under at most OVERLAP_EFFICIENCY of the micro-batch's
    # compute, each kind only under the kernels it overlaps with: TP under its GEMMs (when
    # tp_comm_overlap is on), the CP ring under attention, interleaved send/recv (Megatron turns
    # on overlap_p2p_comm whenever vp > 1; plain 1F1B waits for each transfer) and FSDP
    # prefetch (parameter all-gathers with overlap_param_gather, gradient reduce-scatters with
    # overlap_grad_reduce) under anything. What is left of the budget in the last micro-batch
    # is what the data-parallel gradient sync and parameter gather can hide under.
    budget = OVERLAP_EFFICIENCY * (compute_mb + recompute_mb)
    fsdp_hideable = np.where(full, np.where(param_overlap, 2.0 * ag, 0.0)
                             + np.where(grad_overlap, rs, 0.0), 0.0)
    hidden = {}
    for name, raw, under in (("tp", np.where(tp_overlap, tp_all, 0.0), tp_gemm),
                             ("cp", cp_raw, cp_attention),
                             ("pp", pp_raw if vp > 1 else np.zeros_like(pp_raw), compute_mb),
                             ("fsdp", fsdp_hideable, compute_mb + recompute_mb)):
        hidden[name] = np.minimum(np.minimum(raw, OVERLAP_EFFICIENCY * under), budget)
        budget = budget - hidden[name]
    tp_exposed = tp_all - hidden["tp"]
    cp_exposed = cp_raw - hidden["cp"] + mamba_cp
    pp_mb = pp_raw - hidden["pp"]
    fsdp_exposed_mb = fsdp_mb - hidden["fsdp"]
    device_mb = (compute_mb + recompute_mb + tp_exposed + cp_exposed + ep_raw + pp_mb
                 + fsdp_exposed_mb)
    overhead_mb = np.maximum(host_mb - device_mb, 0.0)   # the GPU waiting for launches
    microbatch = device_mb + overhead_mb
    grad_sync = np.where(shard_opt, rs, ar)
    grad_hidden = np.where(grad_overlap, np.minimum(np.minimum(
        grad_sync, OVERLAP_EFFICIENCY * bwd_mb), budget), 0.0)
    budget = budget - grad_hidden
    gather = np.where(shard_opt & ~full, ag, 0.0)
    gather_hidden = np.where(param_overlap, np.minimum(np.minimum(
        gather, OVERLAP_EFFICIENCY * fwd_mb), budget), 0.0)
    dp_exposed = np.where(full, 0.0, grad_sync - grad_hidden + gather - gather_hidden)
    dp_hidden = np.where(full, 0.0, grad_hidden + gather_hidden)

    local_params = dense_params + expert_params
    opt_params = np.where(shard_opt, dense_params / dp_group + expert_params / edp_group,
                          local_params)
    optimizer = opt_params * OPTIMIZER_BYTES_PER_PARAM / hbm

    # ---- assemble: the slowest stage sets the pace ---------------------------------------------
    slowest = np.argmax(microbatch, axis=1)
    pick = (np.arange(len(tp)), slowest)
    t_mb = microbatch[pick]
    bubble_mb = (pp - 1) / vp
    m1 = m[:, 0]
    tail = np.max(dp_exposed + optimizer, axis=1)
    dp_worst = dp_exposed[np.arange(len(tp)), np.argmax(dp_exposed + optimizer, axis=1)]
    step_time = (m1 + bubble_mb) * t_mb + tail
    fsdp_exp = fsdp_exposed_mb[pick]

    def per_step(x: np.ndarray) -> np.ndarray:
        return m1 * x[pick]

    return {
        "compute_s": per_step(compute_mb),
        "recompute_s": per_step(recompute_mb),
        "tp_comm_s": per_step(tp_exposed),
        "cp_comm_s": per_step(cp_exposed),
        "ep_comm_s": per_step(ep_raw),
        "pp_comm_s": per_step(pp_mb),
        "dp_comm_s": dp_worst + m1 * fsdp_exp,
        "bubble_s": bubble_mb * t_mb,
        "optimizer_s": tail - dp_worst,
        "overhead_s": per_step(overhead_mb),
        "gemm_s": per_step(gemm_mb + re_gemm),
        "attention_s": per_step(attn_mb + re_attn),
        "memory_bound_s": per_step(mem_mb + re_mem) + tail - dp_worst,
        "hidden_comm_s": per_step(sum(hidden.values())) + dp_hidden[pick],
        "step_time_s": step_time,
        "microbatch_s": t_mb,
        "forward_burst_s": fwd_mb[pick],
        "gemm_utilization": clock.utilization[:, 0],
        "num_microbatches": m1,
    }
