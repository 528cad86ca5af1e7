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
  per micro-batch (forward + backward; a third more with full recompute), a MoE layer
  `expert_overhead_s` more per local expert (a grouped GEMM launching each expert's GEMMs).
  The GPU waits only when the CPU is slower than the GPU work it launches, so a micro-batch
  takes the longer of the two and the breakdown shows the difference as overhead (small models,
  small micro-batches, high TP and many local experts become launch-bound).
* recompute — the extra forward: all layers (full) or, selective, the `recompute_modules`
  (`advisor.perf.recompute`): the attention core by default; a recomputed dense MLP, shared
  experts or MoE layer runs its GEMMs and collectives again (a MoE layer its dispatch and
  combine too); norms and the experts' activation re-read their input from HBM. Their few
  extra kernel launches are not added to the host time.
* TP/SP — per tensor-parallel block an all-gather and a reduce-scatter of the micro-batch's
  activations forward and again backward; `tp_comm_overlap` hides up to `OVERLAP_EFFICIENCY` of
  the block's GEMM time. Without it, Megatron still runs each block's backward input-gradient
  reduce beside the weight-gradient GEMM of the same linear (`ASYNC_DGRAD_FRAMEWORKS`).
* CP — ring attention passes each K/V chunk cp − 1 times (gradients too, backward), hidden under
  the attention kernels it feeds.
* EP — all-to-all dispatch and combine forward and backward, on NVLink while ep·etp fits the
  domain, else the off-node share over the network; `ep_comm_overlap` (Megatron-Core's
  combined 1F1B: one micro-batch's forward beside another's backward) hides it under up to
  `OVERLAP_EFFICIENCY` of the micro-batch's compute.
* PP — one send/recv of the boundary activation per micro-batch and virtual stage, each way;
  TP ranks send their 1/tp shards as separate small messages (paper finding 2: TP+PP send/recv
  under-uses bandwidth) at point-to-point efficiency.

Per step: m × the slowest stage's micro-batch time plus the fill and drain, one pass (a 1/vp
chunk when interleaved) of every other stage (`timeline.fill_drain`: the 1F1B / interleaved
bubble, (pp − 1)/vp micro-batches when stages are equal), then the data-parallel gradient
reduce-scatter and parameter all-gather (all-reduce without a sharded optimizer; FSDP gathers
per micro-batch) with overlap hiding up to the last micro-batch's backward / first forward, then
the optimizer step from HBM traffic.

Compute is priced in `step_compute` and communication in `step_comm`; this module overlaps the
two and assembles the step.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from advisor.core.model import ModelSpec
from advisor.core.parallel import PRECISIONS
from advisor.core.platform import Platform
from advisor.perf.calibration import (
    Calibration,
    Efficiency,
    FrameworkEfficiency,
    load_calibration,
)
from advisor.perf.collectives import CollectiveModel
from advisor.perf.columns import (
    Columns,
    config_columns,
    num_rows,
    per_value,
    pipeline_groups,
    take,
)
from advisor.perf.finetune import is_lora, stage_adapter_params
from advisor.perf.flops import core_flops_per_token, model_flops_per_token
from advisor.perf.layout import StageLayout, stage_layout
from advisor.perf.memory import EAGER_FRAMEWORKS, shard_groups
from advisor.perf.power import POWER_COLUMNS, power_thermal
from advisor.perf.recompute import Recompute
from advisor.perf.step_comm import DataParallel, data_parallel, micro_batch_comm
from advisor.perf.step_compute import MEMORY_EFFICIENCY, StageLayers, stage_compute
from advisor.perf.timeline import StageTimeline, fill_drain

if TYPE_CHECKING:
    import pandas as pd

OVERLAP_EFFICIENCY = 0.8
"""Share of the concurrent compute that communication can hide behind when overlap is on (the
NCCL kernels take SMs and HBM bandwidth from the compute they overlap). placeholder."""
OPTIMIZER_BYTES_PER_PARAM = 32.0
"""Adam step with FP32 master weights: read master, m, v (12 B) and the gradient (4 B), write
master, m, v (12 B) and the 16-bit parameter (2 B), plus the gradient-norm read (2 B)."""

ASYNC_DGRAD_FRAMEWORKS = ("megatron", "megatron-deepspeed")
"""Frameworks whose tensor-parallel linears reduce the backward input gradient asynchronously
while the weight gradient computes, without `tp_comm_overlap`: Megatron-Core's
`LinearWithGradAccumulationAndAsyncCommunication` (all-reduce, or reduce-scatter with sequence
parallelism) and Megatron-DeepSpeed's copy of it (`async_grad_allreduce`, on unless
`--no-async-tensor-model-parallel-allreduce`)."""

DEFAULT_FRAMEWORK = "megatron"
"""Whose kernels run the step: Megatron-Core with Transformer Engine (Megatron-LM, NeMo,
Megatron-Bridge) is the reference; other frameworks' kernels scale the compute efficiencies by
their calibrated `[framework]` factor (1 where none was fitted)."""

COMPONENTS = ("compute_s", "recompute_s", "tp_comm_s", "cp_comm_s", "ep_comm_s", "pp_comm_s",
              "dp_comm_s", "bubble_s", "optimizer_s", "overhead_s", "throttle_s")
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
    import pandas as pd

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
    collectives = calibration.collectives.for_platform(platform)
    columns = COMPONENTS + PHASES + POWER_COLUMNS + (
        "step_time_s", "microbatch_s", "num_microbatches", "forward_burst_s",
        "gemm_utilization")
    out = {c: np.zeros(n) for c in columns}
    for pp, vp, first, last, idx in pipeline_groups(cols):
        part = _step(model, platform, take(cols, idx), eff, collectives,
                     stage_layout(model, pp, vp, first=first, last=last), pp=pp, vp=vp,
                     frameworks=frameworks if idx is None else frameworks[idx],
                     framework=functools.partial(calibration.framework, family=platform.family))
        for c, v in part.items():
            if idx is None:
                out[c][:] = v
            else:
                out[c][idx] = v
    tokens = cols["gbs"].astype(float) * cols["seq_len"].astype(float)
    world = (cols["tp"] * cols["pp"] * cols["cp"] * cols["dp"]).astype(float)
    out["tokens_per_sec_per_gpu"] = tokens / out["step_time_s"] / world
    flops = per_value(cols["seq_len"], lambda s: model_flops_per_token(model, int(s)))
    lora = is_lora(cols, n)
    if lora.any():
        # The work a frozen base does: no weight-gradient GEMMs (a third of their FLOPs).
        cores = per_value(cols["seq_len"], lambda s: core_flops_per_token(model, int(s)))
        flops = np.where(lora, flops - (flops / 3.0 - cores), flops)
    out["tflops_per_gpu"] = out["tokens_per_sec_per_gpu"] * flops / 1e12
    peak = per_value(cols["precision"], lambda p: platform.peak_flops(PRECISIONS[p]))
    out["mfu"] = out["tflops_per_gpu"] * 1e12 / peak
    out["calibrated"] = np.full(n, eff.calibrated)
    out["samples_per_mj"] = cols["gbs"].astype(float) / (
        out["avg_power_w"] * out["step_time_s"] * world / 1e6)
    for c in ("straggler_stage", "straggler_slot"):
        out[c] = out[c].astype(int)
    return out


EAGER_GRAD_CAST_BYTES = 8.0
"""HBM bytes per trainable parameter and micro-batch of eager autocast's gradient cast: the
weight-gradient GEMM writes BF16 (2 B), the cast's backward reads it and writes FP32 (2 + 4)."""
EAGER_GRAD_ADD_BYTES = 12.0
"""...and of adding it to the accumulated FP32 gradient on every micro-batch after the first
(`AccumulateGrad` steals the first: read 4 + 4, write 4)."""


def _step(model: ModelSpec, platform: Platform, configs: Columns, eff: Efficiency,
          coll: CollectiveModel, layout: StageLayout, *, pp: int, vp: int,
          frameworks: np.ndarray, framework: Callable[[str], FrameworkEfficiency],
          detail: bool = False) -> dict:
    tp, cp, dp = _col(configs, "tp"), _col(configs, "cp"), _col(configs, "dp")
    ep, etp = _col(configs, "ep"), _col(configs, "etp")
    mbs, gbs, seq = _col(configs, "mbs"), _col(configs, "gbs"), _col(configs, "seq_len")
    recompute = Recompute.of(configs)
    sharding = configs["dp_sharding"][:, None]
    sp = _col(configs, "sequence_parallel", bool)
    tp_overlap = _col(configs, "tp_comm_overlap", bool)
    ep_overlap = (_col(configs, "ep_comm_overlap", bool) if "ep_comm_overlap" in configs
                  else np.zeros_like(tp_overlap))
    grad_overlap = _col(configs, "overlap_grad_reduce", bool)
    param_overlap = _col(configs, "overlap_param_gather", bool)
    grad_bytes = np.where(_col(configs, "grad_reduce_in_fp32", bool), 4.0, 2.0)
    precision = configs["precision"]
    pclass = per_value(precision[:, None], PRECISIONS.__getitem__).astype(str)
    rows = mbs * seq / cp                  # token rows of every GEMM (SP gathers the sequence)

    # ---- one micro-batch per stage (configs × pp): compute, then communication ---------------
    layers = StageLayers.of(layout, pp)
    lora = is_lora(configs, len(tp))[:, None]
    compute = stage_compute(model, platform, layers, eff=eff, frameworks=frameworks,
                            framework=framework, rows=rows, tp=tp, ep=ep, etp=etp, mbs=mbs,
                            seq=seq, sp=sp, pclass=pclass, recompute=recompute,
                            attention=configs.get("attention"),
                            lora=lora if lora.any() else None,
                            lora_targets=configs.get("lora_targets"))
    gemm_fwd, attn_fwd = compute.gemm_fwd_s, compute.attention_fwd_s
    mem_fwd = compute.memory_fwd_s
    gemm_mb, attn_mb, mem_mb = compute.gemm_s, compute.attention_s, compute.memory_s
    re_gemm, re_attn = compute.recompute_gemm_s, compute.recompute_attention_s
    re_mem = compute.recompute_memory_s
    compute_mb = gemm_mb + attn_mb + mem_mb
    recompute_mb = re_gemm + re_attn + re_mem
    comm = micro_batch_comm(model, platform, coll, layers, pp=pp, vp=vp, rows=rows, tp=tp,
                            cp=cp, dp=dp, ep=ep, etp=etp, sp=sp, recompute=recompute,
                            dispatcher=configs.get("moe_dispatcher"))
    tp_all, cp_raw, mamba_cp = comm.tp_s, comm.cp_ring_s, comm.cp_mamba_s
    ep_raw, pp_raw = comm.ep_s, comm.pp_s
    shard = shard_groups(configs, dp * cp)
    data = data_parallel(layout, platform, coll, tp=tp, cp=cp, dp=dp, ep=ep, etp=etp,
                         precision=precision, grad_bytes=grad_bytes, shard=shard)
    full = sharding == "full"
    if lora.any():
        # LoRA: only the adapters' gradients sync and only they are re-gathered after the
        # optimizer step; FSDP still gathers the frozen base before every use.
        tuned = data_parallel(layout, platform, coll, tp=tp, cp=cp, dp=dp, ep=ep, etp=etp,
                              precision=precision, grad_bytes=grad_bytes, shard=shard,
                              trainable=stage_adapter_params(model, layout,
                                                             ranks=configs["lora_rank"],
                                                             targets=configs["lora_targets"]))
        data = DataParallel(
            dense_params=np.where(lora, tuned.dense_params, data.dense_params),
            expert_params=np.where(lora, tuned.expert_params, data.expert_params),
            dense_group=data.dense_group, expert_group=np.where(lora, 1.0, data.expert_group),
            reduce_scatter_s=np.where(lora, tuned.reduce_scatter_s, data.reduce_scatter_s),
            all_gather_s=np.where(lora & ~full, tuned.all_gather_s, data.all_gather_s),
            all_reduce_s=np.where(lora, tuned.all_reduce_s, data.all_reduce_s))
    rs, ag, ar = data.reduce_scatter_s, data.all_gather_s, data.all_reduce_s
    shard_opt = sharding != "none"
    m = gbs / (mbs * dp)
    # Eager PyTorch under autocast over FP32 weights (`EAGER_FRAMEWORKS`; its workload wraps a
    # model in FSDP only where dp > 1 and it shards fully or also splits TP/PP): each micro-
    # batch's weight gradients come out in BF16 and are cast to FP32 (write 2 B, read 2, write
    # 4 per trainable parameter), and every micro-batch after the first adds them to the
    # accumulated FP32 gradients (read 4 + 4, write 4). Megatron fuses the accumulation into the
    # weight-gradient GEMM (gradient_accumulation_fusion); a fixed cost per micro-batch the
    # H200 campaign measured as 15 ms at either sequence length (benchmarks/campaign_check.py).
    eager = np.isin(frameworks, EAGER_FRAMEWORKS)[:, None]
    autocast = eager & ~((dp > 1) & (full | (tp * pp > 1)))
    if autocast.any():
        trainable = data.dense_params + data.expert_params
        accumulate = np.where(autocast, trainable * (
            EAGER_GRAD_CAST_BYTES + EAGER_GRAD_ADD_BYTES * (m - 1) / m)
            / (platform.hbm_bandwidth_bytes_per_s * MEMORY_EFFICIENCY), 0.0)
        mem_mb = mem_mb + accumulate
        compute_mb = compute_mb + accumulate
    fwd_mb = gemm_fwd + attn_fwd + mem_fwd
    bwd_mb = compute_mb - fwd_mb
    # FSDP gathers parameters before forward and backward and reduce-scatters gradients, every
    # micro-batch, prefetching under the compute of the neighbouring layers.
    fsdp_mb = np.where(full, 2.0 * ag + rs, 0.0)
    # TorchTitan 0.3.0 has no ZeRO-1: `dp_sharding optimizer` runs as FSDP2 with
    # reshard_after_forward never (the emitter's form), which gathers parameters once per step
    # but reduce-scatters gradients in every micro-batch's backward (no gradient-sync skip for
    # accumulation), where Megatron's distributed optimizer reduces once per step.
    titan_zero1 = (frameworks[:, None] == "torchtitan") & (sharding == "optimizer")
    fsdp_mb = np.where(titan_zero1, rs, fsdp_mb)

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
                             + np.where(grad_overlap, rs, 0.0),
                             np.where(titan_zero1 & grad_overlap, rs, 0.0))
    # Without tp_comm_overlap, Megatron still hides each block's backward input-gradient
    # reduce under the weight-gradient GEMM of the same linear (`ASYNC_DGRAD_FRAMEWORKS`).
    cover, dgrad = compute.wgrad_cover_s, comm.tp_dgrad_s
    tp_async = np.where(np.isin(frameworks, ASYNC_DGRAD_FRAMEWORKS)[:, None], sum(
        count * np.minimum(dgrad, OVERLAP_EFFICIENCY * cover[kind])
        for kind, count in (("attention", layers.attention), ("mlp", layers.mlp),
                            ("mamba", layers.mamba))), 0.0)
    hidden = {}
    cp_attention = attn_mb + re_attn     # ring attention hides under the attention kernels
    for name, raw, under in (("tp", np.where(tp_overlap, tp_all, tp_async), compute.tp_gemm_s),
                             ("cp", cp_raw, cp_attention),
                             ("pp", pp_raw if vp > 1 else np.zeros_like(pp_raw), compute_mb),
                             ("ep", np.where(ep_overlap, ep_raw, 0.0),
                              compute_mb + recompute_mb),
                             ("fsdp", fsdp_hideable, compute_mb + recompute_mb)):
        hidden[name] = np.minimum(np.minimum(raw, OVERLAP_EFFICIENCY * under), budget)
        budget = budget - hidden[name]
    tp_exposed = tp_all - hidden["tp"]
    cp_exposed = cp_raw - hidden["cp"] + mamba_cp
    pp_mb = pp_raw - hidden["pp"]
    ep_exposed = ep_raw - hidden["ep"]
    fsdp_exposed_mb = fsdp_mb - hidden["fsdp"]
    device_mb = (compute_mb + recompute_mb + tp_exposed + cp_exposed + ep_exposed + pp_mb
                 + fsdp_exposed_mb)
    overhead_mb = np.maximum(compute.host_s - device_mb, 0.0)   # the GPU waiting for launches
    microbatch = device_mb + overhead_mb
    grad_sync = np.where(titan_zero1, 0.0, np.where(shard_opt, rs, ar))  # titan: per micro-batch
    grad_hidden = np.where(grad_overlap, np.minimum(np.minimum(
        grad_sync, OVERLAP_EFFICIENCY * bwd_mb), budget), 0.0)
    budget = budget - grad_hidden
    gather = np.where(shard_opt & ~full, ag, 0.0)
    gather_hidden = np.where(param_overlap, np.minimum(np.minimum(
        gather, OVERLAP_EFFICIENCY * fwd_mb), budget), 0.0)
    dp_exposed = np.where(full, 0.0, grad_sync - grad_hidden + gather - gather_hidden)
    dp_hidden = np.where(full, 0.0, grad_hidden + gather_hidden)

    # ---- optimizer: the Adam step streams the GPU's shard from HBM -----------------------------
    dense_params, expert_params = data.dense_params, data.expert_params
    local_params = dense_params + expert_params
    opt_params = np.where(shard_opt, dense_params / data.dense_group
                          + expert_params / data.expert_group, local_params)
    hbm = platform.hbm_bandwidth_bytes_per_s * MEMORY_EFFICIENCY
    optimizer = opt_params * OPTIMIZER_BYTES_PER_PARAM / hbm

    # ---- assemble: the slowest stage sets the pace, at its slowest GPU's clock ----------------
    n = len(tp)
    m1 = m[:, 0]

    def stages(x: np.ndarray) -> np.ndarray:
        return np.broadcast_to(x, (n, pp)).astype(float)

    tail_stage = stages(dp_exposed + optimizer)
    interleaved_mb = tp_exposed + cp_exposed + ep_exposed + pp_mb + fsdp_exposed_mb
    timeline = StageTimeline(
        gemm_s=stages(m * (gemm_mb + re_gemm)),
        attention_s=stages(m * (attn_mb + re_attn)),
        memory_s=stages(m * (mem_mb + re_mem) + optimizer),
        # what runs under the steady stretch's compute (the DP sync hides under the last
        # micro-batch only: no part of the sustained burst)
        hidden_comm_s=stages(m * sum(hidden.values())),
        exposed_comm_s=stages(m * interleaved_mb + dp_exposed),
        interleaved_comm_s=stages(m * interleaved_mb),
        host_wait_s=stages(m * overhead_mb),
        # 1F1B gathers a stage's waiting at the fill and drain: its micro-batches run back to
        # back in between, one sustained burst.
        burst_s=stages(m * (compute_mb + recompute_mb)),
        microbatch_s=stages(microbatch),
        microbatch_compute_s=stages(compute_mb + recompute_mb),
        tail_s=tail_stage, num_microbatches=m1, virtual_stages=vp,
        gemm_utilization=np.broadcast_to(compute.gemm_utilization, (n, pp))[:, 0],
        gpus_per_stage=(tp * cp * dp)[:, 0])
    world = (tp * cp * dp)[:, 0] * pp
    power = power_thermal(platform, timeline, num_gpus=world,
                          tokens_per_step=(gbs * seq)[:, 0], detail=detail)
    slowest = np.argmax(microbatch, axis=1)
    pick = (np.arange(n), slowest)
    t_mb = microbatch[pick]
    worst = np.argmax(tail_stage, axis=1)
    tail = tail_stage[np.arange(n), worst]
    dp_worst = stages(dp_exposed)[np.arange(n), worst]
    fsdp_exp = fsdp_exposed_mb[pick]

    def per_step(x: np.ndarray) -> np.ndarray:
        return m1 * x[pick]

    out = {
        "compute_s": per_step(compute_mb),
        "recompute_s": per_step(recompute_mb),
        "tp_comm_s": per_step(tp_exposed),
        "cp_comm_s": per_step(cp_exposed),
        "ep_comm_s": per_step(ep_exposed),
        "pp_comm_s": per_step(pp_mb),
        "dp_comm_s": dp_worst + m1 * fsdp_exp,
        "bubble_s": fill_drain(stages(microbatch), vp),
        "optimizer_s": tail - dp_worst,
        "overhead_s": per_step(overhead_mb),
        "gemm_s": per_step(gemm_mb + re_gemm),
        "attention_s": per_step(attn_mb + re_attn),
        "memory_bound_s": per_step(mem_mb + re_mem) + tail - dp_worst,
        "hidden_comm_s": per_step(sum(hidden.values())) + dp_hidden[pick],
        "microbatch_s": t_mb,
        "forward_burst_s": fwd_mb[pick],
        "gemm_utilization": timeline.gemm_utilization,
        "num_microbatches": m1,
    }
    out.update(power)   # step_time_s (throttled), throttle_s and the power/thermal columns
    if detail:
        out["timeline"] = timeline
    return out


def step_detail(model: ModelSpec, platform: Platform, configs: Columns, *,
                calibration: Calibration | None = None,
                framework: str = DEFAULT_FRAMEWORK) -> dict:
    """`step_arrays`' columns for configurations of one pipeline shape, plus the per-stage
    `timeline` and the per-GPU state (`gpus`, a `power.GpuState`)."""
    calibration = calibration or load_calibration()
    groups = pipeline_groups(cols := dict(configs))
    if len(groups) != 1:
        raise ValueError("step_detail takes configurations of one pipeline shape")
    pp, vp, first, last, _ = groups[0]
    n = num_rows(cols)
    frameworks = (cols["framework"].astype(str) if "framework" in cols
                  else np.full(n, framework))
    return _step(model, platform, cols, calibration.efficiency(platform.family),
                 calibration.collectives.for_platform(platform),
                 stage_layout(model, pp, vp, first=first, last=last),
                 pp=pp, vp=vp, frameworks=frameworks,
                 framework=functools.partial(calibration.framework, family=platform.family),
                 detail=True)
