"""Per-GPU memory: weights, gradients, optimizer state, activations, and a reserve.

Vectorised over a table of configurations (one row per `ParallelConfig`); the heaviest pipeline
stage decides whether a configuration fits. Conventions (Megatron-Core mixed precision):

* 16-bit weights (2 B/param), gradients in BF16 (2 B/param) or FP32 (4 B/param) by
  `grad_reduce_in_fp32`, FP32 master weights plus Adam moments (12 B/param). Megatron's
  distributed optimizer shards the 12 B over the data-parallel group: 6 + 12/d bytes per
  parameter ("Distributed Optimizer", Megatron-LM docs, docs/source/api-guide/
  dist_optimizer.md; its "6 + 12/d" assumes FP32 gradients). FSDP
  (ZeRO-3) shards everything and keeps two layers unsharded in flight (current + prefetch).
* FP8/FP4 recipes: Transformer Engine caches a low-precision copy of each weight across
  micro-batches (`is_first_microbatch`): +1 B/param (FP8: one byte; NVFP4: two 4-bit copies,
  row- and column-wise, plus scales: 1.125 B). With a sharded optimizer, per-tensor FP8 and
  NVFP4 weights are kept and all-gathered in low precision only (`PARAM_GATHER_BYTES`).
* Dropout, where a run has it (the `dropout` column; Megatron-LM's default is 0.1): one-byte
  masks of the residual branches, and of the attention probabilities with unfused attention.
* Activations follow Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large
  Transformer Models", arXiv 2205.05198, §4) term by term, generalised to GQA/MLA attention,
  gated MLPs, MoE and Mamba-2 mixers, with fused (Flash) attention: no s² softmax tensors are
  stored, which is what every framework in the catalog runs. Dropout is off unless the
  `dropout` column says otherwise (LLM pre-training recipes set it to 0). Sequence
  parallelism divides the hidden-size-wide tensors by tp; context parallelism divides every
  token tensor by cp.
* Pipeline in-flight micro-batches: stage s of 1F1B holds min(pp − s, m); interleaved stage s
  holds (2(pp − s − 1) + (vp − 1)·pp + 1)/vp, which is pp·(1 + (pp − 1)/(pp·vp)) on the first
  stage (Korthikanti et al. 2022, §4.2.3).
* The last stage holds the FP32 softmax of one micro-batch's logits for the loss, times
  (1 + MTP modules).
* LoRA fine-tuning (`advisor/perf/finetune.py`): the frozen base keeps its weights but no
  gradients or optimizer state; the adapters (16-bit weights) carry both, sharded like any
  other parameter. With FP8 (delayed, tensorwise or blockwise scaling) the frozen base is
  stored in FP8 only, 1 B/param (NeMo's `fp8_params`, on with FP8 in the MLPerf llama2_70b_lora
  implementation; transpose cache off). A frozen GEMM computes no weight gradient, so
  Transformer Engine saves no input for it (`Linear` keeps its input only when the weight
  requires a gradient): an MLP without adapters keeps its norm input and the activation
  function's input, which FP8 runs store in FP8 (`fp8_activation_input_store`, set by the
  MLPerf LoRA configs: FP8_ACTIVATION=True). Attention keeps what it keeps in training (its
  adapters read the QKV input; the output projection's input is the attention output).
* Stored activations are 16-bit (FP8 recipes keep BF16 activations between layers), except
  what a GEMM keeps of its input for the weight gradient, which FP8/FP4 recipes keep quantised
  (`GEMM_INPUT_BYTES`), and every
  MoE expert gets its even share of tokens (the force-balanced routing of NVIDIA's benchmarks);
  real routing imbalance needs headroom this model does not add.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import TYPE_CHECKING

import numpy as np

from advisor.core.interleaving import TORCH_PIPELINING, group_sizes
from advisor.core.model import ModelSpec
from advisor.core.parallel import PRECISIONS, ParallelConfig
from advisor.core.platform import Platform
from advisor.perf.columns import (
    Columns,
    columns_of,
    config_columns,
    num_rows,
    per_value,
    pipeline_groups,
    take,
)
from advisor.perf.finetune import is_lora, stage_adapter_params
from advisor.perf.layout import stage_layout
from advisor.perf.memory_activations import (
    ACT_BYTES,
    FP32_BYTES,
    OP_SAC_FRAMEWORKS,
    eager_bytes_per_token,
    op_sac_bytes_per_token,
)
from advisor.perf.memory_activations import (
    activation_bytes_per_token as _activation_bytes_per_token,
)
from advisor.perf.memory_activations import (
    frozen_mlp_bytes_per_token as _frozen_mlp_bytes_per_token,
)
from advisor.perf.recompute import Recompute

if TYPE_CHECKING:
    import pandas as pd

WEIGHT_BYTES = 2.0
GRAD_BYTES = {False: 2.0, True: 4.0}
"""By `grad_reduce_in_fp32`: NVIDIA's performance recipes keep the gradient buffer in BF16
(Megatron-Bridge `cfg.ddp.grad_reduce_in_fp32 = False`); Megatron-LM's default is FP32."""
OPTIMIZER_BYTES = 12.0
NVFP4_PARAM_BYTES = 2 * (0.5 + 1 / 16)
"""An NVFP4 weight as Transformer Engine keeps it (`NVFP4Tensor`): 4-bit E2M1 values plus one
E4M3 scale per 16 values (NVFP4BlockScaling), row-wise for the forward GEMM and column-wise for
the backward's data-gradient GEMM: 2 × (0.5 + 1/16) = 1.125 B per parameter."""
LOW_PRECISION_WEIGHT_CACHE_BYTES = {"bf16": 0.0, "fp16": 0.0, "fp8": 1.0,
                                    "fp4": NVFP4_PARAM_BYTES}
"""The low-precision copy Transformer Engine caches across micro-batches next to the 16-bit
weight when the weights are not gathered in low precision (FP8: the quantised weight; NVFP4:
both orientations, `NVFP4_PARAM_BYTES`)."""
PARAM_GATHER_BYTES = {"fp8": 2.0, "fp8-cs": 2.0, "nvfp4": NVFP4_PARAM_BYTES}
"""Bytes per weight where the distributed optimizer all-gathers the weights in low precision
and no 16-bit copy exists (Megatron-Core `fp8_param` / `--fp8-param-gather`, `fp4_param` /
`--fp4-param-gather`, transformer_config.py: "keep the parameters in fp8/fp4 precision to save
memory"; NeMo's FP8 and FP8 current-scaling precision plugins set `fp8_param_gather=True`, the
MLPerf Llama 3.1 405B configs set FP8_PARAM_GATHER). Per-tensor FP8 (`Float8Tensor`) holds the
1-byte data and its 1-byte transpose, which Hopper's FP8 GEMMs (TN layout only) need for the
backward; NVFP4 holds both orientations. The FP32 master copy stays in the optimizer state.
Blockwise FP8 is not gathered in FP8 (NeMo's `fp8_param_gather=False` for it); MXFP8 keeps its
own layout (`MXFP8_PARAM_BYTES`)."""
FROZEN_FP8_PARAM_BYTES = 1.0
"""A LoRA run's frozen base in FP8 (see the module docstring); an NVFP4 run's frozen base is
stored in NVFP4 (`NVFP4_PARAM_BYTES`: its data gradient still needs the column-wise copy)."""
FP8_STORAGE = ("fp8", "fp8-cs", "fp8-block")
"""Precisions whose frozen LoRA base and activation-function input are stored in FP8 (MXFP8
keeps its own two-copy layout, MXFP8_PARAM_BYTES)."""
FP8_ACTIVATION_STORAGE = (*FP8_STORAGE, "nvfp4")
"""Precisions whose LoRA MLP keeps its activation-function input in FP8. NVFP4 is included on
an assumption, not a config file: the MLPerf NVFP4 LoRA submissions run the same
implementation as the FP8 ones with the GEMM recipe switched, and FP8_ACTIVATION is a setting of
that implementation, not of the recipe (issue 29's held-out NVFP4 LoRA rows are the check)."""
MXFP8_PARAM_BYTES = 2.0
"""MXFP8 recipes keep the weights only in MXFP8, row- and column-wise (1 B each, plus one scale
per 32 values), with no BF16 copy: Megatron-Bridge turns on `fp8_param_gather` for MXFP8
("perf-optimal, = MLM", Megatron-Bridge performance configs)."""
GEMM_INPUT_BYTES = {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "fp4": 1.0}
"""Bytes per element a GEMM keeps of its input for the weight gradient, by precision class.
Transformer Engine's `Linear`, `LayerNormLinear` and `GroupedLinear` quantise the input for
the forward GEMM and keep the quantised copy, reduced to the usage the backward needs (the
column-wise copy for the weight-gradient GEMM: `update_usage(rowwise_usage=False)` in
transformer_engine/pytorch/module/linear.py), not the 16-bit input: 1 B per element for the FP8
recipes (per-tensor, current-scaling, blockwise, MXFP8; their scales are one per 32 or more
values). NVFP4 keeps 4-bit data plus a scale per 16 values, 0.56 B; 1 B is used for it as an
upper bound, since this model has no NVFP4 measurement to check the layout against. LoRA rows
keep their own accounting (`advisor/perf/finetune.py`)."""
LOGIT_BYTES = 6.0
"""Bytes per vocabulary entry and token at the loss: Megatron's `compute_language_model_loss`
calls `vocab_parallel_cross_entropy(logits.float(), ...)` while the caller still holds the 16-bit
logits (2 B), and the cross-entropy computes its FP32 softmax in place on that copy (4 B) and
keeps it for backward; in backward the FP32 gradient (the same buffer, in place) is cast back to
16 bits (2 B) before it is freed. The peak of the last stage holds both, 6 B."""
MEGATRON_LOSS_FRAMEWORKS = ("megatron", "megatron-deepspeed")
"""Frameworks whose loss is Megatron's `vocab_parallel_cross_entropy(logits.float())`
(`LOGIT_BYTES`); a row without a framework is Megatron-Core, advisor's reference."""
OTHER_LOGIT_BYTES = 4.0
"""The loss of other frameworks: an FP32 softmax per vocabulary entry and token, the figure this
model used before it was checked against Megatron-LM's peaks; not checked against a measurement
of theirs (llm-foundry's default fused cross-entropy keeps less; TorchTitan's `.float()` loss is
`FLOAT_LOSS_FRAMEWORKS`')."""
DROPOUT_MASK_BYTES = 1.0
"""A dropout mask is one byte per element (`torch.bool`/uint8)."""
EAGER_FRAMEWORKS = ("pytorch",)
"""Frameworks whose runs are eager PyTorch under `torch.autocast(bfloat16)` over FP32 weights,
stepped by `torch.optim.AdamW` as constructed by default (the foreach implementation on CUDA):
advisor's own workload (`collectors.workload`, framework `pytorch`). Their memory differs from
Megatron-Core's in every term (`_stage_memory`, `eager_bytes_per_token`):

* FP32 weights (4 B), which are also the master copy; FP32 gradients (4 B), created by the
  first backward (`zero_grad(set_to_none=True)` drops them each step); Adam's two FP32 moments
  (8 B), sharded over data parallelism by `ZeroRedundancyOptimizer` or FSDP;
* autocast's BF16 copy of every GEMM weight (2 B), cached from its first use until the
  autocast region (forward and backward of every micro-batch) ends (`torch.autocast`: "the
  cache of casted weights is cleared on exiting the outermost autocast region");
* the optimizer step as its own peak: activations are gone, the gradients are all there, and
  the foreach step materialises `torch._foreach_sqrt(exp_avg_sq)`, an FP32 copy of the second
  moment of every parameter at once (torch/optim/adam.py, `_multi_tensor_adam`);
* the loss `F.cross_entropy(logits.float())`: log_softmax's saved FP32 output, the FP32
  gradient nll_loss hands it and the FP32 gradient it returns, 12 B per vocabulary entry and
  token at once (`EAGER_LOGIT_BYTES`).

Checked on this project's H200 campaign (`python benchmarks/campaign_check.py`): the
optimizer-step peak alone is 20 B per parameter, 55.9 GB for its 2.80 B-parameter model, where
the four runs with the smallest activations measured 56.0-56.3 GB."""
EAGER_WEIGHT_BYTES = 4.0
EAGER_AUTOCAST_CACHE_BYTES = 2.0
EAGER_GRAD_BYTES = 4.0
EAGER_OPTIMIZER_BYTES = 8.0
EAGER_STEP_TEMP_BYTES = 4.0
EAGER_LOGIT_BYTES = 12.0
"""Bytes per vocabulary entry and token at an eager PyTorch loss's peak (`EAGER_FRAMEWORKS`)."""
FLOAT_LOSS_FRAMEWORKS = ("torchtitan",)
"""Frameworks whose loss is PyTorch's cross-entropy on an FP32 copy of the logits, as the eager
workload's (`EAGER_LOGIT_BYTES`)."""
RESERVE_FIXED_BYTES = 1.0 * 2**30
"""CUDA context (~0.5 GiB with lazy module loading) plus NCCL communicator buffers (~0.5 GiB for
the TP/PP/DP/EP groups). placeholder: typical values, not measured here; to be replaced by
campaign peak-memory measurements (issue 6). The driver's own reservation is already outside
`Platform.memory_capacity_bytes`."""
RESERVE_FRACTION = 0.05
"""Caching-allocator fragmentation, as a fraction of the activations: weights, the contiguous
gradient buffer and optimizer shards are allocated once and do not fragment; activations churn
every micro-batch. placeholder: PyTorch's allocator typically wastes a few percent (reserved −
allocated); replace with campaign data."""


@dataclass(frozen=True)
class MemoryBreakdown:
    """Per-GPU memory of the heaviest pipeline stage, in bytes."""

    weights_bytes: float
    gradients_bytes: float
    optimizer_bytes: float
    activations_bytes: float
    """Stored activations of the in-flight micro-batches, plus the output logits."""
    reserve_bytes: float
    """CUDA context, NCCL buffers and allocator fragmentation."""
    total_bytes: float
    capacity_bytes: float
    fits: bool
    stage: int
    """Which pipeline stage is heaviest (0 = first)."""

    @property
    def headroom_bytes(self) -> float:
        return self.capacity_bytes - self.total_bytes

    def to_dict(self) -> dict[str, float | bool | int]:
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d["headroom_bytes"] = self.headroom_bytes
        return d


COLUMNS = ("weights_bytes", "gradients_bytes", "optimizer_bytes", "activations_bytes",
           "reserve_bytes", "total_bytes", "capacity_bytes", "fits", "stage")


def estimate_memory(model: ModelSpec, *, parallel: ParallelConfig,
                    platform: Platform) -> MemoryBreakdown:
    """Per-GPU memory for one configuration."""
    table = memory_arrays(model, platform=platform, cols=columns_of([parallel]))
    row = {k: np.asarray(v).ravel()[0] for k, v in table.items()}
    return MemoryBreakdown(**{c: (bool(row[c]) if c == "fits" else int(row[c]) if c == "stage"
                                  else float(row[c])) for c in COLUMNS})


def memory_table(model: ModelSpec, *, platform: Platform, configs: pd.DataFrame) -> pd.DataFrame:
    """Per-GPU memory for every row of `configs` (columns named as `ParallelConfig` fields).

    Returns a frame aligned with `configs` with the `MemoryBreakdown` columns.
    """
    import pandas as pd

    return pd.DataFrame(memory_arrays(model, platform=platform, cols=config_columns(configs)),
                        index=configs.index)


NOT_READ = ("tp_comm_overlap", "overlap_grad_reduce", "overlap_param_gather")
"""Configuration columns the memory model does not read (overlap changes when communication
runs, not what is held; `ep_comm_overlap` does hold one more chunk and is read): layouts that
differ only in these take the same memory (`space_memory`)."""


def space_memory(model: ModelSpec, *, platform: Platform, cols: Columns
                 ) -> dict[str, np.ndarray]:
    """`memory_arrays` (heaviest stage) for a configuration space, each run of neighbouring rows
    that differ only in `NOT_READ` computed once (`space_table` puts a layout's overlap on and
    off side by side: half the work)."""
    n = num_rows(cols)
    same = np.ones(max(n - 1, 0), dtype=bool)
    for key, values in cols.items():
        if key not in NOT_READ:
            values = np.asarray(values)
            same &= values[1:] == values[:-1]
    first = np.concatenate([[True], ~same]) if n else np.zeros(0, dtype=bool)
    if first.all():
        return memory_arrays(model, platform=platform, cols=cols)
    which = np.cumsum(first) - 1
    part = memory_arrays(model, platform=platform,
                         cols={k: v[first] for k, v in cols.items()})
    return {k: v[which] if np.ndim(v) and len(v) == int(first.sum()) else v
            for k, v in part.items()}


def memory_arrays(model: ModelSpec, *, platform: Platform, cols: Columns,
                  stage: str = "heaviest", framework: str | None = None
                  ) -> dict[str, np.ndarray]:
    """`memory_table`'s columns, from and to arrays.

    `stage`: "heaviest" (what decides whether a layout fits) or "last" (the last pipeline
    stage: the rank Megatron-LM logs memory from, for comparing with its measurements).
    `framework`: every row's framework, where `cols` has no `framework` column (the loss keeps
    different buffers in each; None = Megatron-Core, advisor's reference).
    """
    if stage not in ("heaviest", "last"):
        raise ValueError(f"stage {stage!r}: use 'heaviest' or 'last'.")
    n = num_rows(cols)
    if framework is not None and "framework" not in cols:
        column = np.empty(n, dtype=object)
        column[:] = framework
        cols = {**cols, "framework": column}
    out = {c: np.zeros(n) for c in COLUMNS}
    for pp, vp, first, last, idx in pipeline_groups(cols):
        part = _stage_memory(model, take(cols, idx), pp=pp, vp=vp, first=first, last=last,
                             at=stage)
        for c, v in part.items():
            if idx is None:
                out[c][:] = v
            else:
                out[c][idx] = v
    capacity = platform.memory_capacity_bytes
    out["capacity_bytes"][:] = capacity
    out["fits"] = out["total_bytes"] <= capacity
    out["stage"] = out["stage"].astype(int)
    return out


def _col(configs: Columns, name: str) -> np.ndarray:
    return configs[name][:, None]  # (configs, 1): broadcasts against stages


def _selective(model: ModelSpec, stored: dict, per_token: dict, scores: np.ndarray,
               recompute: Recompute) -> dict:
    """What each layer kind stores per token under selective recompute of `recompute`'s
    modules (Megatron-Core `--recompute-modules`): core_attn drops what the attention core
    keeps (the softmax statistics, fused; the softmax output, unfused); mla_up_proj the
    up-projected Q, K and V (the latents stay); layernorm the output of each norm that is its
    own module (a MoE layer's pre-MLP norm, MLA's input norm; Transformer Engine fuses the
    others into the next GEMM, which keeps no separate copy); moe_act the experts' activation
    output; shared_experts the shared experts' tensors; mlp and moe keep only the module's
    input (and the norm before it)."""
    out = dict(stored)
    module = recompute.module
    norm = per_token["norm_output"]
    out["attention"] = (
        out["attention"] - np.where(module("core_attn"), per_token["attention_stats"] + scores,
                                    0.0)
        - np.where(module("mla_up_proj") & model.is_mla, per_token["attention_qkv"], 0.0)
        - np.where(module("layernorm") & model.is_mla, norm, 0.0))
    out["mlp"] = np.where(module("mlp"), per_token["layer_input"], out["mlp"])
    if model.is_moe:
        kept_input = per_token["layer_input"] + norm
        partial = (out["moe"] - np.where(module("moe_act"), per_token["moe_act"], 0.0)
                   - np.where(module("shared_experts"), per_token["shared_experts"], 0.0))
        out["moe"] = (np.where(module("moe"), kept_input, partial)
                      - np.where(module("layernorm"), norm, 0.0))
    return out


def shard_groups(configs: Columns, dp_group: np.ndarray) -> np.ndarray:
    """Ranks each shard spans per configuration: `dp_shard_size` where set, else the whole
    dp × cp group."""
    if "dp_shard_size" not in configs:
        return dp_group
    size = np.asarray(configs["dp_shard_size"]).astype(int).reshape(np.shape(dp_group))
    return np.where(size > 0, size, dp_group)


def _stage_memory(model: ModelSpec, configs: Columns, *, pp: int, vp: int, first: int = 0,
                  last: int = 0, at: str = "heaviest") -> dict[str, np.ndarray]:
    layout = stage_layout(model, pp, vp, first=first, last=last)
    tp, cp, dp = _col(configs, "tp"), _col(configs, "cp"), _col(configs, "dp")
    ep, etp = _col(configs, "ep"), _col(configs, "etp")
    mbs, gbs, seq = _col(configs, "mbs"), _col(configs, "gbs"), _col(configs, "seq_len")
    sharding, recompute = _col(configs, "dp_sharding"), _col(configs, "recompute")
    sp = np.where(_col(configs, "sequence_parallel").astype(bool), tp, 1)

    # ---- parameters held by one GPU of each stage (configs × stages) -------------------------
    dense = (layout.dense_params + layout.embedding_params + layout.output_params)[None, :] / tp
    expert = layout.expert_params[None, :] / (ep * etp)
    params = dense + expert
    dp_group = dp * cp                     # non-expert parameters replicate over dp × cp
    edp_group = np.maximum(dp * cp * tp // (ep * etp), 1)  # expert data-parallel size
    # Hybrid sharding shards over `dp_shard_size` ranks and replicates across the groups.
    replicas = dp_group // shard_groups(configs, dp_group)
    sharded = dense / (dp_group // replicas) + expert / np.maximum(edp_group // replicas, 1)
    full = sharding == "full"
    shard_opt = sharding != "none"
    cache = per_value(_col(configs, "precision"), lambda p: LOW_PRECISION_WEIGHT_CACHE_BYTES.get(
        PRECISIONS.get(p))).astype(float)  # NaN for an unknown precision
    precision = _col(configs, "precision")
    # With a sharded optimizer the low-precision recipes keep the weights only in their
    # low-precision form and all-gather them that way (`--fp8-param-gather`,
    # `--fp4-param-gather`): no 16-bit copy, no separate cache.
    gathered = per_value(precision, lambda p: PARAM_GATHER_BYTES.get(p, np.nan)).astype(float)
    weight_bytes = np.where(precision == "mxfp8", MXFP8_PARAM_BYTES, WEIGHT_BYTES + cache)
    weight_bytes = np.where(shard_opt & ~np.isnan(gathered), gathered, weight_bytes)
    # FSDP keeps two layers unsharded (current + prefetch): 16-bit params and 32-bit grads.
    biggest = np.maximum(layout.max_layer_dense_params / tp
                         + layout.max_layer_expert_params / (ep * etp),
                         max(layout.embedding_params[0], layout.output_params[-1]) / tp)
    fsdp_buffers = np.where(full, 2 * biggest * (WEIGHT_BYTES + GRAD_BYTES[True]), 0.0)
    weights = np.where(full, sharded * weight_bytes, params * weight_bytes)
    grad_bytes = np.where(_col(configs, "grad_reduce_in_fp32").astype(bool),
                          GRAD_BYTES[True], GRAD_BYTES[False])
    grads = np.where(full, sharded * grad_bytes, params * grad_bytes) + fsdp_buffers
    optimizer = np.where(shard_opt, sharded, params) * OPTIMIZER_BYTES
    lora = is_lora(configs, len(tp))[:, None]
    fp8_storage = np.isin(precision, FP8_STORAGE)
    if lora.any():
        weights = np.where(lora & fp8_storage, np.where(full, sharded, params)
                           * FROZEN_FP8_PARAM_BYTES, weights)
        weights = np.where(lora & (precision == "nvfp4"), np.where(full, sharded, params)
                           * NVFP4_PARAM_BYTES, weights)
        adapters = stage_adapter_params(model, layout, ranks=configs["lora_rank"],
                                        targets=configs["lora_targets"]) / tp
        adapters_sharded = adapters / dp_group
        weights = np.where(lora, weights + np.where(full, adapters_sharded, adapters)
                           * WEIGHT_BYTES, weights)
        grads = np.where(lora, np.where(full, adapters_sharded, adapters) * grad_bytes
                         + fsdp_buffers, grads)
        optimizer = np.where(lora, np.where(shard_opt, adapters_sharded, adapters)
                             * OPTIMIZER_BYTES, optimizer)

    eager = ((np.isin(_col(configs, "framework"), EAGER_FRAMEWORKS) if "framework" in configs
              else np.zeros(tp.shape, dtype=bool)) & ~lora)
    if eager.any():
        held = np.where(full, sharded, params)
        # Every weight but the input embedding feeds a GEMM (norm weights are negligible);
        # FSDP's BF16 mixed-precision policy computes with BF16 weights, so autocast casts none.
        gemm = np.where(full, 0.0, params - layout.embedding_params[None, :] / tp)
        master = held * EAGER_WEIGHT_BYTES
        weights = np.where(eager, master + gemm * EAGER_AUTOCAST_CACHE_BYTES, weights)
        eager_grads = held * EAGER_GRAD_BYTES
        grads = np.where(eager, eager_grads + fsdp_buffers, grads)
        moments = np.where(shard_opt, sharded, params) * EAGER_OPTIMIZER_BYTES
        optimizer = np.where(eager, moments, optimizer)

    # ---- activations --------------------------------------------------------------------------
    tokens = mbs * seq / cp                # tokens of one micro-batch on one GPU
    gemm_input = per_value(precision, lambda p: GEMM_INPUT_BYTES.get(PRECISIONS.get(p))
                           ).astype(float)
    gemm_input = np.where(lora | np.isnan(gemm_input), ACT_BYTES, gemm_input)
    per_token = _activation_bytes_per_token(model, tp=tp, sp=sp, etp=etp, cp=cp,
                                            gemm_input=gemm_input)
    if eager.any():
        eager_token = eager_bytes_per_token(model, tp=tp, sp=sp)
        for kind in ("attention", "mlp"):
            per_token[kind] = np.where(eager, eager_token[kind], per_token[kind])
    stored = {k: v.copy() for k, v in per_token.items()}
    if lora.any():
        fp8_act = np.isin(precision, FP8_ACTIVATION_STORAGE)
        stored["mlp"] = np.where(lora & (_col(configs, "lora_targets") == "attention"),
                                 _frozen_mlp_bytes_per_token(model, tp=tp, sp=sp, fp8=fp8_act),
                                 stored["mlp"])
    # Unfused attention stores the BF16 softmax output, heads × seq values per token (the
    # 5as/h term of Korthikanti et al. with dropout off).
    unfused = _col(configs, "attention") == "unfused" if "attention" in configs else False
    scores = np.where(unfused, ACT_BYTES * model.num_attention_heads * seq / tp, 0.0)
    stored["attention"] = stored["attention"] + scores
    selective = Recompute.of(configs) if np.any(recompute == "selective") else None
    if selective is not None:
        stored = _selective(model, stored, per_token, scores, selective)
    # TorchTitan's selective recompute is per op (`op_sac_bytes_per_token`); it rebuilds one
    # block at a time in the backward.
    op_sac = ((np.isin(_col(configs, "framework"), OP_SAC_FRAMEWORKS) if "framework" in configs
               else np.zeros(tp.shape, dtype=bool)) & (recompute == "selective"))
    if op_sac.any():
        sac = op_sac_bytes_per_token(model, tp=tp, sp=sp)
        for kind in ("attention", "mlp"):
            stored[kind] = np.where(op_sac, sac[kind], stored[kind])
    if "dropout" in configs:
        # Megatron's fused bias-dropout-add keeps a one-byte mask of the residual branch after
        # attention and after the MLP (Korthikanti et al. 2022 §4: sbh each); unfused attention
        # also keeps the attention-dropout mask (1 B) and its output (2 B) per score. Fused
        # attention regenerates its dropout from the RNG state and stores nothing.
        drop = np.asarray(configs["dropout"], dtype=float)[:, None] > 0
        mask = np.where(drop, DROPOUT_MASK_BYTES * model.hidden_size / sp, 0.0)
        for kind in ("attention", "mlp", "moe", "mamba"):
            stored[kind] = stored[kind] + mask
        stored["attention"] = stored["attention"] + np.where(
            drop & unfused, (DROPOUT_MASK_BYTES + ACT_BYTES) * model.num_attention_heads * seq
            / tp, 0.0)
    layer_input = np.where(eager, FP32_BYTES, ACT_BYTES) * model.hidden_size / sp
    per_mb_stage = (layout.num_attention * stored["attention"] + layout.num_mamba
                    * stored["mamba"] + layout.num_mlp * stored["mlp"] + layout.num_moe
                    * stored["moe"]) * tokens
    per_mb_full = layout.num_layers * layer_input * tokens
    # Full recompute keeps each layer's input, plus one layer's activations while recomputing.
    working_layer = np.maximum.reduce([per_token["attention"] + scores + per_token["mlp"],
                                       per_token["mamba"], per_token["moe"]
                                       + per_token["attention"] + scores]) * tokens
    is_full = recompute == "full"
    per_mb = np.where(is_full, per_mb_full, per_mb_stage)
    working = np.where(is_full, working_layer, 0.0)
    working = np.where(op_sac, (per_token["attention"] + per_token["mlp"]) * tokens, working)
    if selective is not None:
        # A checkpointed MLP or MoE layer rebuilds one layer's tensors at a time.
        working = working + tokens * np.maximum(
            np.where(selective.module("moe") & (layout.num_moe > 0)[None, :], per_token["moe"],
                     0.0),
            np.where(selective.module("mlp") & (layout.num_mlp > 0)[None, :], per_token["mlp"],
                     0.0))
    m = gbs // (mbs * dp)                  # micro-batches per step
    stage = np.arange(pp)[None, :]
    ep_overlap = (_col(configs, "ep_comm_overlap").astype(bool) if "ep_comm_overlap" in configs
                  else np.zeros(m.shape, dtype=bool)).astype(int)
    if vp > 1:
        # Megatron's interleaved warm-up: stage s holds 2(pp−s−1) + (vp−1)·N + 1 model-chunk
        # micro-batches, i.e. that ÷ vp in whole-stage units (N = pp, the default group: stage
        # 0 holds pp + (pp−1)/vp, as in Korthikanti et al. §4.2.3); a larger group N, which a
        # micro-batch count that is no multiple of pp needs, holds more
        # (`advisor.core.interleaving`; torch's interleaved rounds alike).
        torch_pp = (np.isin(_col(configs, "framework"), TORCH_PIPELINING)
                    if "framework" in configs else np.zeros(m.shape, dtype=bool))
        group = np.where(torch_pp, group_sizes(m, pp, torch_pipelining=True),
                         group_sizes(m, pp, torch_pipelining=False))
        group = np.where(group > 0, group, pp)
        # EP all-to-all overlap runs one more chunk's forward in the warm-up (Megatron-Core
        # schedules.py: num_warmup_microbatches + 1).
        in_flight = np.minimum(2 * (pp - stage - 1) + (vp - 1) * group + 1 + ep_overlap,
                               m * vp) / vp
    else:
        # ... and without a pipeline pairs each forward with the previous backward: two
        # micro-batches in flight.
        in_flight = np.minimum(pp - stage + ep_overlap, m).astype(float)
    activations = per_mb * in_flight + working
    activations = activations + (stage == 0) * ACT_BYTES * model.hidden_size / sp * tokens
    logit_bytes = LOGIT_BYTES
    if "framework" in configs:
        framework = np.asarray(configs["framework"], dtype=object)[:, None]
        logit_bytes = np.where(np.isin(framework, MEGATRON_LOSS_FRAMEWORKS), LOGIT_BYTES,
                               OTHER_LOGIT_BYTES)
        # TorchTitan's loss is the eager one: cross_entropy(logits.float()) (torchtitan 0.3.0
        # components/loss.py), as the collectors' workload runs it.
        logit_bytes = np.where(np.isin(framework, FLOAT_LOSS_FRAMEWORKS), EAGER_LOGIT_BYTES,
                               logit_bytes)
    logit_bytes = np.where(eager, EAGER_LOGIT_BYTES, logit_bytes)
    logits = logit_bytes * model.vocab_size / tp * tokens * (1 + model.num_mtp_layers)
    activations = activations + (stage == pp - 1) * logits

    if eager.any():
        # Eager PyTorch peaks at one of two moments (`EAGER_FRAMEWORKS`); the columns describe
        # the heavier. In forward and backward: without gradients if none exists yet (one
        # micro-batch, no pipeline, no DDP bucket). At the optimizer step: no activations and
        # no autocast cache, every gradient, the moments and the foreach temporary.
        no_grads_yet = (m == 1) & (pp == 1) & ((dp == 1) | full)
        grads = np.where(eager & no_grads_yet, fsdp_buffers, grads)
        step_optimizer = moments * (1 + EAGER_STEP_TEMP_BYTES / EAGER_OPTIMIZER_BYTES)
        at_step = eager & (master + eager_grads + step_optimizer
                           > weights + grads + optimizer + activations)
        weights = np.where(at_step, master, weights)
        grads = np.where(at_step, eager_grads, grads)
        optimizer = np.where(at_step, step_optimizer, optimizer)
        activations = np.where(at_step, 0.0, activations)
        fsdp_buffers = np.where(at_step, 0.0, fsdp_buffers)

    tensors = weights + grads + optimizer + activations
    reserve = RESERVE_FIXED_BYTES + RESERVE_FRACTION * (activations + fsdp_buffers)
    total = tensors + reserve
    heaviest = np.argmax(total, axis=1) if at == "heaviest" else np.full(len(tp), pp - 1)
    pick = (np.arange(len(tp)), heaviest)
    return {"weights_bytes": weights[pick], "gradients_bytes": grads[pick],
            "optimizer_bytes": optimizer[pick], "activations_bytes": activations[pick],
            "reserve_bytes": reserve[pick], "total_bytes": total[pick],
            "stage": heaviest.astype(float)}
