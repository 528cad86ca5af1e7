"""`ParallelConfig` (how one job is laid out on GPUs) and `Job` (what the user asks about).

`ParallelConfig` checks the rules it can check alone at construction; rules that need the model
or the platform live in `advisor.core.space.validate`.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from advisor.core import limits
from advisor.core.errors import ConfigError
from advisor.core.model import ModelSpec
from advisor.core.platform import Platform

RECOMPUTE = ("none", "selective", "full")
RECOMPUTE_MODULES = ("core_attn", "mla_up_proj", "layernorm", "mlp", "moe_act", "shared_experts",
                     "moe")
"""What selective recompute may recompute: Megatron-Core's `--recompute-modules` names
(`TransformerConfig.recompute_modules`, Megatron-Core 0.13+), in the order advisor writes them.
core_attn: the attention core (softmax statistics; the s² softmax output when unfused);
mla_up_proj: MLA's query/key/value up-projections from the latents; layernorm: the
pre-MLP norm of MoE layers (Transformer Engine fuses the other norms into the next GEMM, so
none is stored); mlp: the dense MLP (its input kept); moe_act: the experts' activation
function; shared_experts: the shared experts (their input kept); moe: the whole MoE layer
(its input kept; dispatch and combine run again)."""
DEFAULT_RECOMPUTE_MODULES = "core_attn"
"""Megatron-Core's default, what `recompute selective` alone means."""
MOE_RECOMPUTE_MODULES = "layernorm moe_act"
"""What NVIDIA's MoE recipes recompute when core attention alone is not enough: the MoE
layers' pre-MLP norm and the experts' activation function, no GEMM (Megatron-MoE-ModelZoo
best_practice/qwen3/run_h100_235b.sh and run_gb200_235b.sh: `--recompute-granularity selective
--recompute-modules moe_act layernorm`; Megatron-Bridge's launch_qwen235b.sh the same)."""
ATTENTION = ("flash", "unfused")
MOE_DISPATCHERS = ("auto", "alltoall", "deepep")
"""The MoE token dispatcher: auto (advisor's rule, `token_dispatcher`), alltoall
(Megatron-Core's `alltoall` dispatcher: NCCL/RCCL all-to-all, every remote copy of a token
crosses the network) or deepep (Megatron-Core's `flex` dispatcher with the DeepEP or HybridEP
backend: a token crosses the network once per remote NVLink domain among its experts and fans
out over NVLink there; NVIDIA only)."""
DISPATCHER_ALIASES = {"flex": "deepep", "hybridep": "deepep", "all-to-all": "alltoall",
                      "all_to_all": "alltoall", "a2a": "alltoall"}
"""Other spellings accepted on input (case-insensitive) for `MOE_DISPATCHERS`' names:
Megatron-Core's `--moe-token-dispatcher-type flex` and its `--moe-flex-dispatcher-backend`
names price alike (both deduplicate inter-node traffic)."""
DP_SHARDING = ("none", "optimizer", "full")
"""The one vocabulary for data-parallel sharding, in CLI values, tables, JSON and `--layout`:
none (plain DDP), optimizer (Megatron's distributed optimizer: optimizer state and, in
Megatron-Core, the gradient reduce-scatter sharded; ZeRO-1/2), full (parameters too: FSDP,
ZeRO-3)."""
SHARDING_ALIASES = {"ddp": "none", "zero0": "none", "zero1": "optimizer",
                    "zero-1": "optimizer", "zero2": "optimizer", "zero-2": "optimizer",
                    "distributed-optimizer": "optimizer", "fsdp": "full", "zero3": "full",
                    "zero-3": "full"}
"""Other spellings accepted on input (case-insensitive) for `DP_SHARDING`'s names."""
FINETUNE = ("none", "lora", "full")
"""none: pre-training; lora: LoRA adapters on a frozen base; full: every weight trained (the
same work per step as pre-training)."""
LORA_TARGETS = ("attention", "all-linear")
"""attention: one adapter on the fused QKV projection and one on the output projection (NeMo's
`linear_qkv` and `linear_proj`; the MLPerf Training llama2_70b_lora reference adapts the
attention projections at rank 16); all-linear: those plus the dense MLP (and shared-expert)
GEMMs."""
#: Precision recipe -> the tensor-core class whose peak it runs at.
PRECISIONS = {
    "bf16": "bf16", "fp16": "fp16", "16-bit": "bf16",
    "fp8": "fp8", "fp8-cs": "fp8", "fp8-row": "fp8", "fp8-block": "fp8", "mxfp8": "fp8",
    "nvfp4": "fp4",
}
"""The FP8 recipes by how they scale: per tensor (`fp8` with delayed scaling, `fp8-cs` with
current scaling: Transformer Engine's tensorwise), per row (`fp8-row`: torchao's rowwise, what
TorchTitan's float8 converter runs), per block (`fp8-block`: 128-wide blocks, DeepSeek-V3's) or
per 32 values (`mxfp8`)."""


def sharding_name(value: Any) -> Any:
    """`value` in `DP_SHARDING`'s vocabulary where it is one of its aliases (`zero1`, `FSDP`,
    `ddp`); anything else unchanged (the caller's check names it)."""
    if not isinstance(value, str):
        return value
    key = value.strip().lower()
    return SHARDING_ALIASES.get(key, key if key in DP_SHARDING else value)


def dispatcher_name(value: Any) -> Any:
    """`value` in `MOE_DISPATCHERS`' vocabulary where it is one of its aliases (`flex`,
    `hybridep`, `all-to-all`); anything else unchanged (the caller's check names it)."""
    if not isinstance(value, str):
        return value
    key = value.strip().lower()
    return DISPATCHER_ALIASES.get(key, key if key in MOE_DISPATCHERS else value)


def recompute_modules_name(value: Any) -> str:
    """`value` (names of `RECOMPUTE_MODULES` separated by spaces, commas or `+`, any case and
    order) in the one form tables and emitters use: the names in `RECOMPUTE_MODULES`' order,
    each once, separated by a space. Raises `ConfigError` naming what is unknown."""
    names = str(value).replace(",", " ").replace("+", " ").lower().split()
    unknown = [n for n in names if n not in RECOMPUTE_MODULES]
    if unknown or not names:
        what = f"{', '.join(map(repr, unknown))} unknown" if unknown else "empty"
        raise ConfigError(f"recompute_modules {str(value)!r}: {what}; list one or more of "
                          f"{', '.join(RECOMPUTE_MODULES)} (e.g. \"core_attn moe_act "
                          f"layernorm\").")
    return " ".join(m for m in RECOMPUTE_MODULES if m in names)


def recompute_label(recompute: str, modules: str | None = None) -> str:
    """How a summary writes the recompute choice: `none`, `full`, `selective`, or with other
    modules than the default `selective (layernorm moe_act)`."""
    if recompute == "selective" and modules and modules != DEFAULT_RECOMPUTE_MODULES:
        return f"selective ({modules})"
    return str(recompute)


def recompute_modules_cell(value: Any) -> str:
    """A table or CSV cell of `recompute_modules`: empty, NaN or `none` is the default
    (core_attn); anything else as `recompute_modules_name` reads it."""
    text = "" if value is None else str(value).strip()
    if text.lower() in ("", "nan", "<na>", "none"):   # pandas' empty cells read as text
        return DEFAULT_RECOMPUTE_MODULES
    return recompute_modules_name(text)


def _is_canonical_modules(value: str) -> bool:
    try:
        return recompute_modules_name(value) == value
    except ConfigError:
        return False


def finetune_label(obj: Any) -> str:
    """How a header says what a `ParallelConfig` or `Job` trains: "" for pre-training,
    `LoRA rank 16 (attention)` or `full fine-tuning`."""
    if obj.finetune == "lora":
        return f"LoRA rank {obj.lora_rank} ({obj.lora_targets})"
    return "full fine-tuning" if obj.finetune == "full" else ""


def divisors(n: int) -> list[int]:
    """Divisors of n in increasing order (O(√n))."""
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return sorted({*small, *(n // d for d in small)})


def _divisors_hint(n: int, limit: int = 12) -> str:
    ds = divisors(n)
    return "{" + ", ".join(map(str, ds[:limit])) + (", ..." if len(ds) > limit else "") + "}"


_LIMITS = {"num_gpus": limits.GPUS, "tp": limits.GPUS, "pp": limits.GPUS, "dp": limits.GPUS,
           "cp": limits.GPUS, "ep": limits.GPUS, "etp": limits.GPUS,
           "vp": limits.VIRTUAL_STAGES, "mbs": limits.GLOBAL_BATCH, "gbs": limits.GLOBAL_BATCH,
           "seq_len": limits.SEQUENCE, "lora_rank": limits.LORA_RANK}


def _check_common(obj: Any, counts: tuple[str, ...]) -> None:
    """Positive whole sizes within `advisor.core.limits` and a known precision: the rules
    `ParallelConfig` and `Job` share."""
    for key in counts:
        value = getattr(obj, key)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"{key} must be a positive whole number, got {value!r}.")
        limits.check_most(key, value, _LIMITS[key])
    if obj.precision not in PRECISIONS:
        raise ConfigError(f"precision {obj.precision!r} is unknown; use one of "
                          f"{', '.join(PRECISIONS)}.")


def _check_finetune(obj: Any) -> None:
    if obj.finetune not in FINETUNE:
        raise ConfigError(f"finetune {obj.finetune!r} is unknown; use one of "
                          f"{', '.join(FINETUNE)} (none = pre-training).")
    if obj.lora_targets not in LORA_TARGETS:
        raise ConfigError(f"lora_targets {obj.lora_targets!r} is unknown; use one of "
                          f"{', '.join(LORA_TARGETS)}.")


def _canonicalise(obj: Any, field: str, name_of: Any, allowed: tuple[str, ...],
                  hint: str) -> None:
    """Set `obj.field` (a frozen dataclass's) to its name in `allowed` (`name_of` reads the
    aliases), or raise `ConfigError` listing the names."""
    value = getattr(obj, field)
    if value in allowed:
        return
    canonical = name_of(value)
    if canonical not in allowed:
        raise ConfigError(f"{field} {value!r} is unknown; use one of {', '.join(allowed)} "
                          f"({hint}).")
    object.__setattr__(obj, field, canonical)


@dataclass(frozen=True)
class ParallelConfig:
    """One parallel layout and batch setting (Megatron-LM terms).

    World size = tp × pp × cp × dp. Expert layers re-fold the same GPUs as etp × ep × edp
    (Megatron's MoE parallel folding).
    """

    tp: int = 1
    """Tensor parallel: each layer's matrices split over tp GPUs (all-reduce per layer)."""
    pp: int = 1
    """Pipeline parallel: layers split into pp stages."""
    dp: int = 1
    """Data parallel replicas."""
    cp: int = 1
    """Context parallel: the sequence split over cp GPUs (ring attention)."""
    ep: int = 1
    """Expert parallel: MoE experts split over ep GPUs (all-to-all)."""
    etp: int = 1
    """Expert tensor parallel (MoE only). `make_config` and `predict --input` default it to tp,
    as Megatron-Core and NeMo 2 do when it is unset (Megatron-Bridge's MoE recipes set 1)."""
    vp: int = 1
    """Virtual pipeline stages per GPU (interleaved 1F1B); 1 = plain 1F1B."""
    mbs: int = 1
    """Micro-batch size (sequences per forward/backward)."""
    gbs: int = 1
    """Global batch size (sequences per optimizer step)."""
    seq_len: int = 4096
    precision: str = "bf16"
    """bf16, fp16, fp8 (per-tensor), fp8-cs, fp8-row, fp8-block, mxfp8, nvfp4."""
    recompute: str = "none"
    """Activation recomputation: none, selective (the `recompute_modules`), or full (every
    layer)."""
    recompute_modules: str = DEFAULT_RECOMPUTE_MODULES
    """What selective recompute recomputes (`RECOMPUTE_MODULES`, space-separated; Megatron-Core
    `--recompute-modules`); the default (core_attn) unless recompute is selective."""
    dp_sharding: str = "optimizer"
    """none (plain DDP), optimizer (distributed optimizer / ZeRO-1), full (FSDP / ZeRO-3)."""
    dp_shard_size: int = 0
    """Data-parallel ranks (of the dp × cp group) each shard spans, replicated across the
    groups: hybrid sharding (TorchTitan's HSDP `data_parallel_shard_degree`, Megatron-Core's
    `--num-distributed-optimizer-instances` = dp·cp / this, ZeRO within a node); 0 = the whole
    dp × cp group. Gradients reduce-scatter (and FSDP parameters all-gather) inside a group;
    the groups then all-reduce their shards. Needs dp_sharding optimizer or full."""
    sequence_parallel: bool = False
    """Shard norm/dropout activations over the TP group (needs tp > 1)."""
    overlap_grad_reduce: bool = False
    overlap_param_gather: bool = False
    tp_comm_overlap: bool = False
    ep_comm_overlap: bool = False
    """Overlap the MoE all-to-all of one micro-batch with the compute of another (Megatron-Core
    `--overlap-moe-expert-parallel-comm`: forward and backward of two micro-batches interleave,
    one more micro-batch in flight). Needs ep > 1, a virtual pipeline when pp > 1, and no full
    recompute."""
    grad_reduce_in_fp32: bool = False
    """Keep and reduce gradients in FP32 (4 B/param; Megatron-LM's default) instead of BF16
    (2 B/param; what NVIDIA's Megatron-Bridge/NeMo performance recipes set)."""
    attention: str = "flash"
    """Attention kernels: `flash` (fused, FlashAttention/cuDNN: no s² tensors, causal blocks
    skipped) or `unfused` (QKᵀ and PV as batched GEMMs with a fused softmax in between, storing
    the s² softmax output: Megatron-LM before flash attention, Megatron-DeepSpeed)."""
    torch_compile: bool = False
    """TorchTitan's `--compile.enable`: torch.compile fuses the elementwise kernels its eager
    blocks run one by one (RoPE's FP32 complex product, SwiGLU's activation and product;
    `advisor.perf.step_compute.eager_traffic`). Only frameworks that run eager PyTorch blocks
    (`advisor.core.frameworks.EAGER_BLOCKS`) take it: Megatron-Core's blocks run fused
    kernels (Transformer Engine, Apex) either way."""
    moe_dispatcher: str = "auto"
    """The MoE token dispatcher (`MOE_DISPATCHERS`): auto (DeepEP where the expert group
    leaves an NVIDIA NVLink domain, all-to-all elsewhere), alltoall or deepep. Needs ep > 1
    unless auto."""
    first_stage_layers: int = 0
    """Layers on the first pipeline stage of an uneven split (Megatron-LM
    `--decoder-first-pipeline-num-layers`); 0 = the even share."""
    last_stage_layers: int = 0
    """Layers on the last pipeline stage of an uneven split
    (`--decoder-last-pipeline-num-layers`); 0 = the even share. Heavier stages on cooler or
    less loaded GPUs: the last stage also carries the output layer and the loss."""

    finetune: str = "none"
    """none (pre-training), lora (adapters on a frozen base) or full (fine-tuning every
    weight: pre-training's work per step)."""
    lora_rank: int = 16
    """LoRA adapter rank r: each adapted d_in × d_out weight gains r·(d_in + d_out) trainable
    parameters (MLPerf llama2_70b_lora: 16). Ignored unless finetune is lora."""
    lora_targets: str = "attention"
    """Which GEMMs carry adapters (`LORA_TARGETS`)."""

    def __post_init__(self) -> None:
        _check_common(self, ("tp", "pp", "dp", "cp", "ep", "etp", "vp", "mbs", "gbs", "seq_len",
                             "lora_rank"))
        _check_finetune(self)
        limits.check_most("tp × pp × cp × dp (GPUs)", self.tp * self.pp * self.cp * self.dp,
                          limits.GPUS)
        if self.recompute not in RECOMPUTE:
            raise ConfigError(f"recompute {self.recompute!r} is unknown; use one of "
                              f"{', '.join(RECOMPUTE)}.")
        modules = recompute_modules_name(self.recompute_modules)
        object.__setattr__(self, "recompute_modules", modules)
        if modules != DEFAULT_RECOMPUTE_MODULES and self.recompute != "selective":
            raise ConfigError(f"recompute_modules {modules!r} applies only to recompute "
                              f"selective (recompute is {self.recompute}); set recompute "
                              f"selective or leave recompute_modules at "
                              f"{DEFAULT_RECOMPUTE_MODULES}.")
        if self.attention not in ATTENTION:
            raise ConfigError(f"attention {self.attention!r} is unknown; use one of "
                              f"{', '.join(ATTENTION)}.")
        if self.attention == "unfused" and self.cp > 1:
            raise ConfigError("context parallelism needs fused (flash) attention: Megatron's "
                              "ring attention runs inside Transformer Engine's fused kernels; "
                              "use attention flash or cp 1.")
        _canonicalise(self, "moe_dispatcher", dispatcher_name, MOE_DISPATCHERS,
                      "flex and hybridep price as deepep")
        if self.moe_dispatcher != "auto" and self.ep == 1:
            raise ConfigError(f"moe_dispatcher {self.moe_dispatcher} needs ep > 1: without "
                              f"expert parallelism no token is dispatched; use auto or raise "
                              f"ep.")
        _canonicalise(self, "dp_sharding", sharding_name, DP_SHARDING,
                      "none = DDP, optimizer = distributed optimizer / ZeRO-1, full = FSDP / "
                      "ZeRO-3")
        if self.vp > 1 and self.pp == 1:
            raise ConfigError(f"vp ({self.vp}) > 1 needs pp > 1: virtual pipeline stages "
                              f"interleave a pipeline; use vp 1 or raise pp.")
        if self.ep_comm_overlap:
            _check_ep_overlap(self)
        if self.sequence_parallel and self.tp == 1:
            raise ConfigError("sequence_parallel needs tp > 1: it shards activations over the "
                              "tensor-parallel group; turn it off or raise tp.")
        if self.gbs % (self.mbs * self.dp):
            fix = (f"try mbs in {_divisors_hint(self.gbs // self.dp)}"
                   if self.gbs % self.dp == 0 else f"make gbs a multiple of dp ({self.dp})")
            raise ConfigError(f"gbs ({self.gbs}) must be a multiple of mbs × dp ({self.mbs} × "
                              f"{self.dp} = {self.mbs * self.dp}); {fix}.")
        if self.cp > 1 and self.seq_len % (2 * self.cp):
            raise ConfigError(f"seq_len ({self.seq_len}) must be divisible by 2 × cp "
                              f"({2 * self.cp}): context parallelism splits each sequence "
                              f"into 2·cp chunks to balance causal attention.")
        for key in ("first_stage_layers", "last_stage_layers"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ConfigError(f"{key} must be a whole number ≥ 0 (0 = even split), got "
                                  f"{value!r}.")
            if value and self.pp == 1:
                raise ConfigError(f"{key} ({value}) needs pp > 1: it sets an uneven pipeline "
                                  f"split; use 0 or raise pp.")
        _check_shard_group(self)
        if self.overlap_param_gather and self.dp_sharding == "none":
            raise ConfigError("overlap_param_gather needs dp_sharding optimizer or full: "
                              "without a sharded optimizer there is no parameter all-gather.")

    @property
    def uneven(self) -> bool:
        """The pipeline split is uneven (first or last stage set)."""
        return bool(self.first_stage_layers or self.last_stage_layers)

    @property
    def world_size(self) -> int:
        return self.tp * self.pp * self.cp * self.dp

    @property
    def shard_group(self) -> int:
        """Data-parallel ranks one shard spans: `dp_shard_size`, or the whole dp × cp group."""
        return self.dp_shard_size or self.dp * self.cp

    @property
    def shard_replicas(self) -> int:
        """How many times each shard is replicated (1 without hybrid sharding)."""
        return self.dp * self.cp // self.shard_group

    @property
    def num_microbatches(self) -> int:
        """Micro-batches per pipeline per step: gbs / (mbs × dp)."""
        return self.gbs // (self.mbs * self.dp)

    @property
    def precision_class(self) -> str:
        return PRECISIONS[self.precision]

    def replace(self, **changes: Any) -> ParallelConfig:
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        # Every field is a plain value: a shallow copy is `dataclasses.asdict` at a tenth of
        # its cost (it deep-copies each value).
        return {name: getattr(self, name) for name in PARALLEL_FIELDS}


PARALLEL_FIELDS = tuple(f.name for f in dataclasses.fields(ParallelConfig))

_CHOICES = {"recompute": RECOMPUTE, "attention": ATTENTION, "dp_sharding": DP_SHARDING,
            "moe_dispatcher": MOE_DISPATCHERS,
            "precision": tuple(PRECISIONS), "finetune": FINETUNE, "lora_targets": LORA_TARGETS}


def _check_shard_group(config: ParallelConfig) -> None:
    """`dp_shard_size` divides the dp × cp group and shards something."""
    size = config.dp_shard_size
    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        raise ConfigError(f"dp_shard_size must be a whole number ≥ 0 (0 = the whole data-"
                          f"parallel group), got {size!r}.")
    if not size:
        return
    group = config.dp * config.cp
    if group % size:
        raise ConfigError(f"dp_shard_size ({size}) must divide dp × cp ({config.dp} × "
                          f"{config.cp} = {group}): each shard group is a slice of the data-"
                          f"parallel ranks; try one of {_divisors_hint(group)}.")
    if config.dp_sharding == "none" and size != group:
        raise ConfigError(f"dp_shard_size ({size}) needs dp_sharding optimizer or full: plain "
                          f"DDP shards nothing; shard the optimizer or leave dp_shard_size 0.")


def _check_ep_overlap(config: ParallelConfig) -> None:
    """Megatron-Core's rules for `--overlap-moe-expert-parallel-comm` (TransformerConfig,
    0.16) that the layout alone decides."""
    if config.ep == 1:
        raise ConfigError("ep_comm_overlap needs ep > 1: it overlaps the expert-parallel "
                          "all-to-all; turn it off or raise ep.")
    if config.pp > 1 and config.vp == 1:
        raise ConfigError(f"ep_comm_overlap with pp ({config.pp}) > 1 needs a virtual pipeline "
                          f"(vp > 1): Megatron-Core pairs the micro-batches in the interleaved "
                          f"schedule; raise vp or turn it off.")
    if config.recompute == "full":
        raise ConfigError("ep_comm_overlap does not run with full recompute (Megatron-Core "
                          "refuses it); use selective recompute or turn it off.")


def invalid_config_rows(cols) -> Any:
    """`ParallelConfig`'s own rules over a table of configurations at once (one array per
    field; a field left out takes its default): True where building the row would raise."""
    import numpy as np

    n = len(cols["tp"])
    defaults = ParallelConfig().to_dict()

    def col(name):
        return np.asarray(cols[name]) if name in cols else np.full(n, defaults[name])

    sizes = {k: col(k) for k in _LIMITS if k != "num_gpus"}
    bad = np.zeros(n, dtype=bool)
    for name, values in sizes.items():
        bad |= (values < 1) | (values > _LIMITS[name].most)
    tp, pp, cp, dp = (sizes[k] for k in ("tp", "pp", "cp", "dp"))
    # Products in floats: a beyond-the-limit row must not overflow into a valid one.
    bad |= tp.astype(float) * pp * cp * dp > limits.GPUS.most
    for name, allowed in _CHOICES.items():
        bad |= ~np.isin(col(name).astype(str), allowed)
    bad |= (col("attention").astype(str) == "unfused") & (cp > 1)
    bad |= (col("moe_dispatcher").astype(str) != "auto") & (sizes["ep"] == 1)
    modules = col("recompute_modules").astype(str)
    values, which = np.unique(modules, return_inverse=True)
    bad |= ~np.array([_is_canonical_modules(v) for v in values], dtype=bool)[which]
    bad |= (modules != DEFAULT_RECOMPUTE_MODULES) & (col("recompute").astype(str) != "selective")
    bad |= (sizes["vp"] > 1) & (pp == 1)
    ep_overlap = col("ep_comm_overlap").astype(bool)
    bad |= ep_overlap & ((sizes["ep"] == 1) | ((pp > 1) & (sizes["vp"] == 1))
                         | (col("recompute").astype(str) == "full"))
    bad |= col("sequence_parallel").astype(bool) & (tp == 1)
    bad |= sizes["gbs"] % np.maximum(sizes["mbs"] * dp, 1) != 0
    bad |= (cp > 1) & (sizes["seq_len"] % (2 * cp) != 0)
    for name in ("first_stage_layers", "last_stage_layers"):
        values = col(name)
        bad |= (values < 0) | ((values > 0) & (pp == 1))
    bad |= col("overlap_param_gather").astype(bool) & (col("dp_sharding").astype(str) == "none")
    shard = col("dp_shard_size")
    group = dp * cp
    bad |= (shard < 0) | ((shard > 0) & (group % np.maximum(shard, 1) != 0))
    bad |= (shard > 0) & (shard != group) & (col("dp_sharding").astype(str) == "none")
    return bad


@dataclass(frozen=True)
class Job:
    """What a user asks about: a model on a number of GPUs of one platform."""

    model: ModelSpec
    platform: Platform
    num_gpus: int
    seq_len: int
    gbs: int
    precision: str = "bf16"
    finetune: str = "none"
    """none (pre-training), lora or full fine-tuning (see `ParallelConfig.finetune`)."""
    lora_rank: int = 16
    lora_targets: str = "attention"

    def __post_init__(self) -> None:
        _check_common(self, ("num_gpus", "seq_len", "gbs", "lora_rank"))
        _check_finetune(self)
        if not self.platform.supports(PRECISIONS[self.precision]):
            raise ConfigError(
                f"{self.platform.name} cannot run {self.precision}: it has no "
                f"{PRECISIONS[self.precision]} tensor cores; use one of "
                f"{', '.join(p for p, c in PRECISIONS.items() if self.platform.supports(c))}.")


def default_seq_len(model: ModelSpec) -> int:
    """The model's native context, capped at 8192: long-context runs are an explicit choice."""
    return min(model.max_seq_len, 8192)


def default_gbs(model: ModelSpec, *, num_gpus: int, seq_len: int) -> int:
    """About 2M tokens per step (GPT-3 used 0.5-3.2M, Llama 2 4M), as a power of two, and at
    least num_gpus/2 sequences, so the batch grows with the job: each data-parallel replica
    keeps enough micro-batches to fill a pipeline (NVIDIA's Llama 3.1 405B recipes on 1,024
    H100 run GBS 512-1,536, published_runs.csv; 2M tokens alone would be GBS 256 there and
    force PP 32).
    """
    target_tokens = 2**21 if model.params.total >= 5e9 else 2**19
    gbs = max(1, target_tokens // seq_len)
    gbs = 1 << (gbs.bit_length() - 1)
    floor = max(1, num_gpus // 2)
    while gbs < floor:
        gbs *= 2
    return gbs


def make_job(model: ModelSpec, platform: Platform, *, num_gpus: int, seq_len: int | None = None,
             gbs: int | None = None, precision: str = "bf16", finetune: str = "none",
             lora_rank: int = 16, lora_targets: str = "attention") -> Job:
    """A `Job` with the documented defaults for sequence length and global batch."""
    seq_len = seq_len or default_seq_len(model)
    gbs = gbs or default_gbs(model, num_gpus=num_gpus, seq_len=seq_len)
    return Job(model=model, platform=platform, num_gpus=num_gpus, seq_len=seq_len, gbs=gbs,
               precision=precision, finetune=finetune, lora_rank=lora_rank,
               lora_targets=lora_targets)


def token_dispatcher(model: ModelSpec, config: ParallelConfig, platform: Platform) -> str:
    """The MoE token dispatcher advisor prices and emits: "deepep" (Megatron-Core's flex
    dispatcher with the DeepEP backend, as NVIDIA's H100/B200 MoE recipes run) where the
    expert-parallel group (ep × etp) leaves an NVIDIA platform's NVLink domain: it sends a token
    over the network once per remote node among its experts, at DeepEP's measured share of the
    NIC (`perf.collectives.EP_DISPATCH`). Elsewhere "alltoall" (NCCL/RCCL all-to-all over
    NVLink or xGMI); "none" without expert parallelism. A config that names its dispatcher
    (`ParallelConfig.moe_dispatcher`) gets that one."""
    if not model.is_moe or config.ep == 1:
        return "none"
    if config.moe_dispatcher != "auto":
        return config.moe_dispatcher
    if platform.vendor == "nvidia" and config.ep * config.etp > platform.nvlink_domain_size:
        return "deepep"
    return "alltoall"


def default_etp(model: ModelSpec, *, tp: int, cp: int, dp: int, ep: int) -> int:
    """Expert tensor parallelism when a run does not say: Megatron-Core's (and NeMo 2's)
    default, etp = tp, where the expert layout allows it (ep × etp must divide tp × cp × dp),
    else 1. Dense models: 1."""
    if not model.is_moe or (tp * cp * dp) % (ep * tp):
        return 1
    return tp


def make_config(job: Job, *, tp: int = 1, pp: int = 1, cp: int = 1, ep: int = 1,
                etp: int | None = None, vp: int = 1, mbs: int = 1, recompute: str = "none",
                dp_sharding: str = "optimizer", overlap: bool = True) -> ParallelConfig:
    """The `ParallelConfig` for `job` with these choices; dp is what the GPUs leave.

    `overlap` turns on what NVIDIA's tuned Megatron recipes run with: sequence parallelism and
    TP communication overlap when tp > 1, gradient-reduce overlap, and parameter-gather overlap
    with a sharded optimizer. `etp` None: `default_etp` (Megatron-Core's etp = tp).
    """
    if job.num_gpus % (tp * pp * cp):
        raise ConfigError(f"tp × pp × cp = {tp * pp * cp} does not divide {job.num_gpus} GPUs; "
                          f"pick sizes whose product divides it.")
    dp = job.num_gpus // (tp * pp * cp)
    dp_sharding = sharding_name(dp_sharding)
    if etp is None:
        etp = default_etp(job.model, tp=tp, cp=cp, dp=dp, ep=ep)
    return ParallelConfig(
        tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, etp=etp, vp=vp, mbs=mbs, gbs=job.gbs,
        seq_len=job.seq_len, precision=job.precision, finetune=job.finetune,
        lora_rank=job.lora_rank, lora_targets=job.lora_targets, recompute=recompute,
        dp_sharding=dp_sharding, sequence_parallel=tp > 1,
        overlap_grad_reduce=overlap,
        overlap_param_gather=overlap and dp_sharding != "none",
        tp_comm_overlap=overlap and tp > 1)
