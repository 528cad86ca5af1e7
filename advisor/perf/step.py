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
from collections.abc import Callable, Iterator
from dataclasses import dataclass, fields, replace
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
from advisor.perf.step_comm import DataParallel, StageComm, data_parallel, micro_batch_comm
from advisor.perf.step_compute import (
    MEMORY_EFFICIENCY,
    StageCompute,
    StageLayers,
    stage_compute,
)
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
    eff = calibration.efficiency(platform.family)
    columns = COMPONENTS + PHASES + POWER_COLUMNS + (
        "step_time_s", "microbatch_s", "num_microbatches", "forward_burst_s",
        "gemm_utilization")
    out = _gather(_by_pipeline_shape(model, platform, cols, calibration, framework), columns, n)
    out.update(_rates(model, platform, cols, out["step_time_s"]))
    world = (cols["tp"] * cols["pp"] * cols["cp"] * cols["dp"]).astype(float)
    out["calibrated"] = np.full(n, eff.calibrated)
    out["samples_per_mj"] = cols["gbs"].astype(float) / (
        out["avg_power_w"] * out["step_time_s"] * world / 1e6)
    for c in ("straggler_stage", "straggler_slot"):
        out[c] = out[c].astype(int)
    return out


NOMINAL_COLUMNS = tuple(c for c in COMPONENTS if c != "throttle_s") + (
    "step_time_s", "num_microbatches", "gemm_utilization", "tokens_per_sec_per_gpu", "mfu")
"""What `nominal_arrays` gives: the step, its breakdown and its rates at full clock."""


def nominal_arrays(model: ModelSpec, platform: Platform, cols: Columns, *,
                   calibration: Calibration | None = None,
                   framework: str = DEFAULT_FRAMEWORK) -> dict[str, np.ndarray]:
    """`step_arrays`' `NOMINAL_COLUMNS` at full clock, before the power model: no power cap,
    slowest-of-N, thermal or degraded-node loss. Those only lengthen the step (clocks at or
    below their maximum, losses at or above zero) and change none of its components, so
    `step_arrays`' `step_time_s` is never shorter, its rates never higher and each component's
    share of the step never larger: bounds at a third of the full model's cost (the search
    prunes with them)."""
    out = _gather(_by_pipeline_shape(model, platform, cols, calibration or load_calibration(),
                                     framework, power=False),
                  NOMINAL_COLUMNS[:-2], num_rows(cols))
    return out | _rates(model, platform, cols, out["step_time_s"])


def _gather(parts: Iterator[tuple[np.ndarray | None, dict]], columns: tuple[str, ...],
            n: int) -> dict[str, np.ndarray]:
    """`columns` of every pipeline shape's part, back in the rows' order."""
    out = {c: np.zeros(n) for c in columns}
    for idx, part in parts:
        for c in columns:
            if idx is None:
                out[c][:] = part[c]
            else:
                out[c][idx] = part[c]
    return out


def _rates(model: ModelSpec, platform: Platform, cols: Columns, step_s: np.ndarray
           ) -> dict[str, np.ndarray]:
    """Tokens/s per GPU, TFLOP/s per GPU and MFU of steps taking `step_s`."""
    n = num_rows(cols)
    tokens = cols["gbs"].astype(float) * cols["seq_len"].astype(float)
    world = (cols["tp"] * cols["pp"] * cols["cp"] * cols["dp"]).astype(float)
    tokens_per_s = tokens / step_s / world
    flops = per_value(cols["seq_len"], lambda s: model_flops_per_token(model, int(s)))
    lora = is_lora(cols, n)
    if lora.any():
        # The work a frozen base does: no weight-gradient GEMMs (a third of their FLOPs).
        cores = per_value(cols["seq_len"], lambda s: core_flops_per_token(model, int(s)))
        flops = np.where(lora, flops - (flops / 3.0 - cores), flops)
    tflops = tokens_per_s * flops / 1e12
    peak = per_value(cols["precision"], lambda p: platform.peak_flops(PRECISIONS[p]))
    return {"tokens_per_sec_per_gpu": tokens_per_s, "tflops_per_gpu": tflops,
            "mfu": tflops * 1e12 / peak}


def _by_pipeline_shape(model: ModelSpec, platform: Platform, cols: Columns,
                       calibration: Calibration, framework: str, *, power: bool = True
                       ) -> Iterator[tuple[np.ndarray | None, dict]]:
    """`_step` for the configurations of each pipeline shape (pp, vp, end stages) in `cols`:
    (their rows, None for all, and its columns)."""
    n = num_rows(cols)
    frameworks = (cols["framework"].astype(str) if "framework" in cols
                  else np.full(n, framework))
    eff = calibration.efficiency(platform.family)
    collectives = calibration.collectives.for_platform(platform)
    for pp, vp, first, last, idx in pipeline_groups(cols):
        yield idx, _step(model, platform, take(cols, idx), eff, collectives,
                         stage_layout(model, pp, vp, first=first, last=last), pp=pp, vp=vp,
                         frameworks=frameworks if idx is None else frameworks[idx],
                         framework=functools.partial(calibration.framework,
                                                     family=platform.family),
                         power=power)


EAGER_GRAD_CAST_BYTES = 8.0
"""HBM bytes per trainable parameter and micro-batch of eager autocast's gradient cast: the
weight-gradient GEMM writes BF16 (2 B), the cast's backward reads it and writes FP32 (2 + 4)."""
EAGER_GRAD_ADD_BYTES = 12.0
"""...and of adding it to the accumulated FP32 gradient on every micro-batch after the first
(`AccumulateGrad` steals the first: read 4 + 4, write 4)."""


@dataclass(frozen=True)
class _Knobs:
    """One configuration per row, as (configs × 1) columns that broadcast against stages."""

    tp: np.ndarray
    cp: np.ndarray
    dp: np.ndarray
    ep: np.ndarray
    etp: np.ndarray
    mbs: np.ndarray
    gbs: np.ndarray
    seq: np.ndarray
    recompute: Recompute
    sharding: np.ndarray
    sp: np.ndarray
    tp_overlap: np.ndarray
    ep_overlap: np.ndarray
    grad_overlap: np.ndarray
    param_overlap: np.ndarray
    grad_bytes: np.ndarray
    precision: np.ndarray
    pclass: np.ndarray
    rows: np.ndarray
    """Token rows of every GEMM (SP gathers the sequence)."""
    lora: np.ndarray

    @classmethod
    def of(cls, configs: Columns) -> _Knobs:
        tp, cp, mbs, seq = (_col(configs, k) for k in ("tp", "cp", "mbs", "seq_len"))
        tp_overlap = _col(configs, "tp_comm_overlap", bool)
        precision = configs["precision"]
        return cls(
            tp=tp, cp=cp, dp=_col(configs, "dp"), ep=_col(configs, "ep"),
            etp=_col(configs, "etp"), mbs=mbs, gbs=_col(configs, "gbs"), seq=seq,
            recompute=Recompute.of(configs), sharding=configs["dp_sharding"][:, None],
            sp=_col(configs, "sequence_parallel", bool), tp_overlap=tp_overlap,
            ep_overlap=(_col(configs, "ep_comm_overlap", bool) if "ep_comm_overlap" in configs
                        else np.zeros_like(tp_overlap)),
            grad_overlap=_col(configs, "overlap_grad_reduce", bool),
            param_overlap=_col(configs, "overlap_param_gather", bool),
            grad_bytes=np.where(_col(configs, "grad_reduce_in_fp32", bool), 4.0, 2.0),
            precision=precision,
            pclass=per_value(precision[:, None], PRECISIONS.__getitem__).astype(str),
            rows=mbs * seq / cp, lora=is_lora(configs, len(tp))[:, None])

    @property
    def full(self) -> np.ndarray:
        """FSDP: parameters, gradients and optimizer state sharded."""
        return self.sharding == "full"

    @property
    def shard_opt(self) -> np.ndarray:
        return self.sharding != "none"

    @property
    def microbatches(self) -> np.ndarray:
        return self.gbs / (self.mbs * self.dp)


@dataclass(frozen=True)
class _Work:
    """One micro-batch's device work per stage (configs × pp), in seconds."""

    compute: StageCompute
    gemm: np.ndarray
    attention: np.ndarray
    memory: np.ndarray
    recompute: np.ndarray
    forward: np.ndarray
    """The forward pass alone (what a parameter gather can hide under)."""

    @property
    def total(self) -> np.ndarray:
        """Compute without recompute."""
        return self.gemm + self.attention + self.memory

    @property
    def backward(self) -> np.ndarray:
        return self.total - self.forward


@dataclass(frozen=True)
class _Traffic:
    """Each micro-batch's collectives per stage before any overlap, and the step's data-
    parallel ones."""

    comm: StageComm
    data: DataParallel
    fsdp: np.ndarray
    """FSDP's (or TorchTitan's ZeRO-1 form's) gathers and reduce-scatters per micro-batch."""
    titan_zero1: np.ndarray


@dataclass(frozen=True)
class _Overlap:
    """What overlap hid and what stays exposed, per micro-batch and stage."""

    hidden: dict[str, np.ndarray]
    tp: np.ndarray
    cp: np.ndarray
    pp: np.ndarray
    ep: np.ndarray
    fsdp: np.ndarray
    overhead: np.ndarray
    """The GPU waiting for the host's launches."""
    dp_exposed: np.ndarray
    dp_hidden: np.ndarray

    @property
    def interleaved(self) -> np.ndarray:
        """Exposed communication between a micro-batch's kernels."""
        return self.tp + self.cp + self.ep + self.pp + self.fsdp


def _step(model: ModelSpec, platform: Platform, configs: Columns, eff: Efficiency,
          coll: CollectiveModel, layout: StageLayout, *, pp: int, vp: int,
          frameworks: np.ndarray, framework: Callable[[str], FrameworkEfficiency],
          detail: bool = False, power: bool = True) -> dict:
    """The step of configurations sharing one pipeline shape: compute, communication and
    overlap, optimizer, then the stage timeline that the power model runs and the breakdown.
    Without `power`: the step at full clock, with no expected loss, and its breakdown
    (`nominal_arrays`)."""
    knobs = _Knobs.of(configs)
    layers = StageLayers.of(layout, pp)
    # Layouts that differ only in sharding, overlap or data parallelism run the same kernels:
    # each distinct micro-batch is priced once (a space has several layouts per kernel set).
    first, inverse = _distinct(configs, frameworks, COMPUTE_KEYS)
    part = take(configs, first)
    work = _expand(_compute(model, platform, layers, _Knobs.of(part), part, eff=eff,
                            frameworks=frameworks[first], framework=framework), inverse)
    traffic = _traffic(model, platform, coll, layout, layers, knobs, configs, pp=pp, vp=vp,
                       frameworks=frameworks)
    work = _eager_gradient_accumulation(work, traffic.data, knobs, platform, frameworks,
                                        pp=pp)
    overlap = _overlap(work, traffic, knobs, layers, frameworks=frameworks, vp=vp)
    optimizer = _optimizer_s(traffic.data, knobs, platform)
    timeline = _timeline(work, overlap, optimizer, knobs, pp=pp, vp=vp)
    if not power:
        return {"step_time_s": timeline.step_time(),
                **_breakdown(work, overlap, optimizer, timeline, knobs, pp=pp, vp=vp)}
    thermal = power_thermal(platform, timeline, num_gpus=(knobs.tp * knobs.cp * knobs.dp)[:, 0]
                            * pp, tokens_per_step=(knobs.gbs * knobs.seq)[:, 0], detail=detail)
    out = _breakdown(work, overlap, optimizer, timeline, knobs, pp=pp, vp=vp)
    out.update(thermal)   # step_time_s (throttled), throttle_s and the power/thermal columns
    if detail:
        out["timeline"] = timeline
    return out


COMPUTE_KEYS = ("tp", "cp", "ep", "etp", "mbs", "seq_len", "sequence_parallel", "precision",
                "recompute", "recompute_modules", "attention", "torch_compile", "finetune",
                "lora_rank", "lora_targets")
"""The configuration columns one micro-batch's kernels depend on (`stage_compute`'s inputs,
with the stage's layers and the framework); the rest (dp, sharding, overlap, ...) change only
communication and the schedule."""


def _distinct(configs: Columns, frameworks: np.ndarray, keys: tuple[str, ...]
              ) -> tuple[np.ndarray, np.ndarray]:
    """(the first row of each distinct combination of `keys` and framework, each row's
    combination): `rows[first][inverse]` gives back every row's values."""
    n = len(frameworks)
    code, size = np.zeros(n, dtype=np.int64), 1
    for values in (frameworks, *(np.asarray(configs[k]) for k in keys if k in configs)):
        values = values.ravel()
        if not n or (values == values[0]).all():   # one value (the common case): no code
            continue
        if values.dtype.kind in "biuf":
            which = np.unique(values, return_inverse=True)[1].ravel()
            count = int(which.max()) + 1
        else:                                       # strings: a dict beats sorting objects
            seen: dict = {}
            which = np.fromiter((seen.setdefault(v, len(seen)) for v in values.tolist()),
                                dtype=np.int64, count=n)
            count = len(seen)
        code, size = code * count + which, size * count
        if size > 2 ** 40:                          # renumber before the product overflows
            code = np.unique(code, return_inverse=True)[1].ravel()
            size = int(code.max()) + 1
    _, first, inverse = np.unique(code, return_index=True, return_inverse=True)
    return first, inverse.ravel()


def _expand(work: _Work, inverse: np.ndarray) -> _Work:
    """`work` priced for distinct micro-batches, back to one row per configuration."""
    def rows(x):
        if isinstance(x, dict):
            return {k: rows(v) for k, v in x.items()}
        if isinstance(x, np.ndarray) and x.ndim and x.shape[0] > 1:
            return x[inverse]
        return x     # one row (or a scalar): broadcasts as it is
    compute = work.compute
    return _Work(type(compute)(**{f.name: rows(getattr(compute, f.name))
                                  for f in fields(compute)}),
                 **{f.name: rows(getattr(work, f.name)) for f in fields(work)
                    if f.name != "compute"})


def _compute(model: ModelSpec, platform: Platform, layers: StageLayers, k: _Knobs,
             configs: Columns, *, eff: Efficiency, frameworks: np.ndarray,
             framework: Callable[[str], FrameworkEfficiency]) -> _Work:
    """One micro-batch's kernels per stage (`step_compute`)."""
    compute = stage_compute(model, platform, layers, eff=eff, frameworks=frameworks,
                            framework=framework, rows=k.rows, tp=k.tp, ep=k.ep, etp=k.etp,
                            mbs=k.mbs, seq=k.seq, sp=k.sp, pclass=k.pclass,
                            recompute=k.recompute, attention=configs.get("attention"),
                            compiled=configs.get("torch_compile"),
                            lora=k.lora if k.lora.any() else None,
                            lora_targets=configs.get("lora_targets"),
                            dropout=configs.get("dropout"))
    return _Work(compute, gemm=compute.gemm_s, attention=compute.attention_s,
                 memory=compute.memory_s,
                 recompute=(compute.recompute_gemm_s + compute.recompute_attention_s
                            + compute.recompute_memory_s),
                 forward=compute.gemm_fwd_s + compute.attention_fwd_s + compute.memory_fwd_s)


def _traffic(model: ModelSpec, platform: Platform, coll: CollectiveModel, layout: StageLayout,
             layers: StageLayers, k: _Knobs, configs: Columns, *, pp: int, vp: int,
             frameworks: np.ndarray) -> _Traffic:
    """Every collective before overlap (`step_comm`): per micro-batch and stage, and the
    data-parallel ones per step."""
    comm = micro_batch_comm(model, platform, coll, layers, pp=pp, vp=vp, rows=k.rows, tp=k.tp,
                            cp=k.cp, dp=k.dp, ep=k.ep, etp=k.etp, sp=k.sp,
                            recompute=k.recompute, dispatcher=configs.get("moe_dispatcher"))
    shard = shard_groups(configs, k.dp * k.cp)
    data = data_parallel(layout, platform, coll, tp=k.tp, cp=k.cp, dp=k.dp, ep=k.ep, etp=k.etp,
                         precision=k.precision, grad_bytes=k.grad_bytes, shard=shard)
    full, lora = k.full, k.lora
    if lora.any():
        # LoRA: only the adapters' gradients sync and only they are re-gathered after the
        # optimizer step; FSDP still gathers the frozen base before every use.
        tuned = data_parallel(layout, platform, coll, tp=k.tp, cp=k.cp, dp=k.dp, ep=k.ep,
                              etp=k.etp, precision=k.precision, grad_bytes=k.grad_bytes,
                              shard=shard,
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
    # FSDP gathers parameters before forward and backward and reduce-scatters gradients, every
    # micro-batch, prefetching under the compute of the neighbouring layers.
    fsdp = np.where(full, 2.0 * data.all_gather_s + data.reduce_scatter_s, 0.0)
    # TorchTitan 0.3.0 has no ZeRO-1: `dp_sharding optimizer` runs as FSDP2 with
    # reshard_after_forward never (the emitter's form), which gathers parameters once per step
    # but reduce-scatters gradients in every micro-batch's backward (no gradient-sync skip for
    # accumulation), where Megatron's distributed optimizer reduces once per step.
    titan_zero1 = (frameworks[:, None] == "torchtitan") & (k.sharding == "optimizer")
    fsdp = np.where(titan_zero1, data.reduce_scatter_s, fsdp)
    return _Traffic(comm, data, fsdp, titan_zero1)


def _eager_gradient_accumulation(work: _Work, data: DataParallel, k: _Knobs,
                                 platform: Platform, frameworks: np.ndarray, *,
                                 pp: int) -> _Work:
    """`work` with eager PyTorch's gradient casts and accumulation added to the HBM-bound
    kernels. Eager PyTorch under autocast over FP32 weights (`EAGER_FRAMEWORKS`; its workload
    wraps a model in FSDP only where dp > 1 and it shards fully or also splits TP/PP): each
    micro-batch's weight gradients come out in BF16 and are cast to FP32 (write 2 B, read 2,
    write 4 per trainable parameter), and every micro-batch after the first adds them to the
    accumulated FP32 gradients (read 4 + 4, write 4). Megatron fuses the accumulation into the
    weight-gradient GEMM (gradient_accumulation_fusion); a fixed cost per micro-batch the H200
    campaign measured as 15 ms at either sequence length (benchmarks/campaign_check.py)."""
    eager = np.isin(frameworks, EAGER_FRAMEWORKS)[:, None]
    autocast = eager & ~((k.dp > 1) & (k.full | (k.tp * pp > 1)))
    if not autocast.any():
        return work
    m = k.microbatches
    trainable = data.dense_params + data.expert_params
    accumulate = np.where(autocast, trainable * (
        EAGER_GRAD_CAST_BYTES + EAGER_GRAD_ADD_BYTES * (m - 1) / m)
        / (platform.hbm_bandwidth_bytes_per_s * MEMORY_EFFICIENCY), 0.0)
    return replace(work, memory=work.memory + accumulate)


def _overlap(work: _Work, traffic: _Traffic, k: _Knobs, layers: StageLayers, *,
             frameworks: np.ndarray, vp: int) -> _Overlap:
    """What overlap hides, per micro-batch. One budget: communication can hide under at most
    OVERLAP_EFFICIENCY of the micro-batch's compute, each kind only under the kernels it
    overlaps with: TP under its GEMMs (when tp_comm_overlap is on), the CP ring under
    attention, interleaved send/recv (Megatron turns on overlap_p2p_comm whenever vp > 1;
    plain 1F1B waits for each transfer) and FSDP prefetch (parameter all-gathers with
    overlap_param_gather, gradient reduce-scatters with overlap_grad_reduce) under anything.
    What is left of the budget in the last micro-batch is what the data-parallel gradient sync
    and parameter gather can hide under."""
    comm, data, compute = traffic.comm, traffic.data, work.compute
    rs, ag, ar = data.reduce_scatter_s, data.all_gather_s, data.all_reduce_s
    full, titan_zero1 = k.full, traffic.titan_zero1
    busy = work.total + work.recompute
    budget = OVERLAP_EFFICIENCY * busy
    fsdp_hideable = np.where(full, np.where(k.param_overlap, 2.0 * ag, 0.0)
                             + np.where(k.grad_overlap, rs, 0.0),
                             np.where(titan_zero1 & k.grad_overlap, rs, 0.0))
    # Without tp_comm_overlap, Megatron still hides each block's backward input-gradient
    # reduce under the weight-gradient GEMM of the same linear (`ASYNC_DGRAD_FRAMEWORKS`).
    cover, dgrad = compute.wgrad_cover_s, comm.tp_dgrad_s
    tp_async = np.where(np.isin(frameworks, ASYNC_DGRAD_FRAMEWORKS)[:, None], sum(
        count * np.minimum(dgrad, OVERLAP_EFFICIENCY * cover[kind])
        for kind, count in (("attention", layers.attention), ("mlp", layers.mlp),
                            ("mamba", layers.mamba))), 0.0)
    hidden = {}
    # ring attention hides under the attention kernels
    cp_attention = work.attention + compute.recompute_attention_s
    pp_raw = comm.pp_s
    for name, raw, under in (("tp", np.where(k.tp_overlap, comm.tp_s, tp_async),
                              compute.tp_gemm_s),
                             ("cp", comm.cp_ring_s, cp_attention),
                             ("pp", pp_raw if vp > 1 else np.zeros_like(pp_raw), work.total),
                             ("ep", np.where(k.ep_overlap, comm.ep_s, 0.0), busy),
                             ("fsdp", fsdp_hideable, busy)):
        hidden[name] = np.minimum(np.minimum(raw, OVERLAP_EFFICIENCY * under), budget)
        budget = budget - hidden[name]
    tp = comm.tp_s - hidden["tp"]
    cp = comm.cp_ring_s - hidden["cp"] + comm.cp_mamba_s
    pp = pp_raw - hidden["pp"]
    ep = comm.ep_s - hidden["ep"]
    fsdp = traffic.fsdp - hidden["fsdp"]
    device = busy + tp + cp + ep + pp + fsdp
    overhead = np.maximum(compute.host_s - device, 0.0)
    grad_sync = np.where(titan_zero1, 0.0, np.where(k.shard_opt, rs, ar))  # titan: per mb
    grad_hidden = np.where(k.grad_overlap, np.minimum(np.minimum(
        grad_sync, OVERLAP_EFFICIENCY * work.backward), budget), 0.0)
    budget = budget - grad_hidden
    gather = np.where(k.shard_opt & ~full, ag, 0.0)
    gather_hidden = np.where(k.param_overlap, np.minimum(np.minimum(
        gather, OVERLAP_EFFICIENCY * work.forward), budget), 0.0)
    return _Overlap(hidden, tp=tp, cp=cp, pp=pp, ep=ep, fsdp=fsdp, overhead=overhead,
                    dp_exposed=np.where(full, 0.0, grad_sync - grad_hidden + gather
                                        - gather_hidden),
                    dp_hidden=np.where(full, 0.0, grad_hidden + gather_hidden))


def _optimizer_s(data: DataParallel, k: _Knobs, platform: Platform) -> np.ndarray:
    """The Adam step, streaming the GPU's shard of the optimizer state from HBM."""
    dense, expert = data.dense_params, data.expert_params
    params = np.where(k.shard_opt, dense / data.dense_group + expert / data.expert_group,
                      dense + expert)
    return params * OPTIMIZER_BYTES_PER_PARAM / (platform.hbm_bandwidth_bytes_per_s
                                                 * MEMORY_EFFICIENCY)


def _timeline(work: _Work, ov: _Overlap, optimizer: np.ndarray, k: _Knobs, *, pp: int,
              vp: int) -> StageTimeline:
    """Each stage's step as the power model runs it (configs × pp)."""
    n, m = len(k.tp), k.microbatches
    compute = work.compute

    def stages(x: np.ndarray) -> np.ndarray:
        return np.broadcast_to(x, (n, pp)).astype(float)

    busy = work.total + work.recompute
    return StageTimeline(
        gemm_s=stages(m * (work.gemm + compute.recompute_gemm_s)),
        attention_s=stages(m * (work.attention + compute.recompute_attention_s)),
        memory_s=stages(m * (work.memory + compute.recompute_memory_s) + optimizer),
        # what runs under the steady stretch's compute (the DP sync hides under the last
        # micro-batch only: no part of the sustained burst)
        hidden_comm_s=stages(m * sum(ov.hidden.values())),
        exposed_comm_s=stages(m * ov.interleaved + ov.dp_exposed),
        interleaved_comm_s=stages(m * ov.interleaved),
        host_wait_s=stages(m * ov.overhead),
        # 1F1B gathers a stage's waiting at the fill and drain: its micro-batches run back to
        # back in between, one sustained burst.
        burst_s=stages(m * busy),
        microbatch_s=stages(busy + ov.interleaved + ov.overhead),
        microbatch_compute_s=stages(busy),
        tail_s=stages(ov.dp_exposed + optimizer), num_microbatches=m[:, 0], virtual_stages=vp,
        gemm_utilization=np.broadcast_to(compute.gemm_utilization, (n, pp))[:, 0],
        gpus_per_stage=(k.tp * k.cp * k.dp)[:, 0])


def _breakdown(work: _Work, ov: _Overlap, optimizer: np.ndarray, tl: StageTimeline,
               k: _Knobs, *, pp: int, vp: int) -> dict[str, np.ndarray]:
    """The step's components: the slowest stage sets the pace (the power model then runs it at
    its slowest GPU's clock)."""
    n = len(k.tp)
    m1 = tl.num_microbatches
    microbatch = tl.microbatch_s
    slowest = np.argmax(microbatch, axis=1)
    pick = (np.arange(n), slowest)
    worst = np.argmax(tl.tail_s, axis=1)
    tail = tl.tail_s[np.arange(n), worst]
    dp_worst = np.broadcast_to(ov.dp_exposed, (n, pp))[np.arange(n), worst]
    compute = work.compute

    def per_step(x: np.ndarray) -> np.ndarray:
        return m1 * np.broadcast_to(x, (n, pp))[pick]

    return {
        "compute_s": per_step(work.total),
        "recompute_s": per_step(work.recompute),
        "tp_comm_s": per_step(ov.tp),
        "cp_comm_s": per_step(ov.cp),
        "ep_comm_s": per_step(ov.ep),
        "pp_comm_s": per_step(ov.pp),
        "dp_comm_s": dp_worst + per_step(ov.fsdp),
        "bubble_s": fill_drain(microbatch, vp),
        "optimizer_s": tail - dp_worst,
        "overhead_s": per_step(ov.overhead),
        "gemm_s": per_step(work.gemm + compute.recompute_gemm_s),
        "attention_s": per_step(work.attention + compute.recompute_attention_s),
        "memory_bound_s": per_step(work.memory + compute.recompute_memory_s) + tail - dp_worst,
        "hidden_comm_s": (per_step(sum(ov.hidden.values()))
                          + np.broadcast_to(ov.dp_hidden, (n, pp))[pick]),
        "microbatch_s": microbatch[pick],
        "forward_burst_s": np.broadcast_to(work.forward, (n, pp))[pick],
        "gemm_utilization": tl.gemm_utilization,
        "num_microbatches": m1,
    }


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
