"""Megatron-LM `pretrain_gpt.py` flags for a `ParallelConfig`.

Flag names follow Megatron-LM's `megatron/training/arguments.py` for megatron-core 0.16; each
flag that lands in a megatron-core dataclass (`TransformerConfig`, `DistributedDataParallelConfig`)
is checked against the installed package by `tests/explain/test_emit.py`.
"""

from __future__ import annotations

from advisor.core.errors import ConfigError
from advisor.core.interleaving import group_size
from advisor.core.model import ModelSpec
from advisor.core.parallel import (
    DEFAULT_RECOMPUTE_MODULES,
    Job,
    ParallelConfig,
    token_dispatcher,
)
from advisor.explain.emit import (
    LLAMA3_SCALED_MODELS,
    check_fits,
    gpus_label,
    pairs,
    refuse_lora,
    shell_command,
    torchrun_words,
)
from advisor.perf.layout import end_stage_layers, stage_layer_counts

#: Precisions whose weights the memory model keeps only in low precision under a sharded
#: optimizer (advisor.perf.memory.PARAM_GATHER_BYTES, MXFP8_PARAM_BYTES), and the arguments.py
#: flag that does so: `--fp8-param-gather` (dest fp8_param_gather, which also sets
#: TransformerConfig.fp8_param), `--fp4-param-gather` (dest fp4_param).
LOW_PRECISION_PARAM_GATHER = {"fp8": "--fp8-param-gather", "fp8-cs": "--fp8-param-gather",
                              "mxfp8": "--fp8-param-gather", "nvfp4": "--fp4-param-gather"}
#: advisor precision -> `--fp8-recipe` (TransformerConfig.fp8_recipe; megatron.core.enums).
ROWWISE_REFUSAL = ("precision fp8-row (per-row scaling, torchao's rowwise) has no Transformer "
                   "Engine recipe (delayed, tensorwise, blockwise, mxfp8): use fp8-cs "
                   "(tensorwise) or fp8-block, or emit it for torchtitan.")
FP8_RECIPES = {"fp8": "delayed", "fp8-cs": "tensorwise", "fp8-block": "blockwise",
               "mxfp8": "mxfp8"}
_POSITIONS = {"rope": "rope", "learned": "learned_absolute", "none": "none"}


def megatron_args(config: ParallelConfig, job: Job) -> list[str]:
    """The `pretrain_gpt.py` arguments that set `job`'s model and `config`'s layout.

    Raises:
        ConfigError: `config` does not fit `job`, or Megatron-LM cannot express a setting.
    """
    check_fits(config, job)
    refuse_lora("megatron", config)
    return [*model_args(job.model, seq_len=config.seq_len), *_rope_args(job.model),
            *_parallel_args(config, job), *_batch_args(config),
            *_memory_args(config), *_precision_args(config)]


DEEPEP_NOTE = ("Expert parallelism spans {group} GPUs across nodes: the flex dispatcher with "
               "DeepEP (one network copy of a token per node, as advisor priced) needs the "
               "deep_ep package (DeepEP) installed.")

FULL_FINETUNE_ARGS = ("--finetune", "--load", "<base checkpoint dir>")
"""Megatron-LM's flags for starting from trained weights (arguments.py: --finetune loads the
model only, without optimizer or RNG state, and sets the iteration to 0)."""


def megatron_command(config: ParallelConfig, job: Job) -> str:
    """A `torchrun ... pretrain_gpt.py` command for `config`; data, tokenizer and training-length
    flags are left to `$DATA_ARGS` and `$TRAIN_ARGS`, with examples in the comment lines."""
    args = megatron_args(config, job)
    env = []
    if (config.tp > 1 or config.cp > 1) and config.dp_sharding != "full":
        # arguments.py asserts it for TP/CP before Blackwell; Megatron-FSDP asserts the opposite.
        env = ["CUDA_DEVICE_MAX_CONNECTIONS=1"]
    comments = [f"Megatron-LM (megatron-core 0.16) for {gpus_label(job)}; run from a Megatron-LM "
                f"checkout on every node.",
                f"Set DATA_ARGS (e.g. '--mock-data --tokenizer-type NullTokenizer --vocab-size "
                f"{job.model.vocab_size}') and TRAIN_ARGS (e.g. '--train-iters 100 --lr 3e-4')."]
    comments += split_note(config, job.model)
    if token_dispatcher(job.model, config, job.platform) == "deepep":
        comments.append(DEEPEP_NOTE.format(group=config.ep * config.etp))
    if config.finetune == "full":
        comments.append(f"Full fine-tuning: add {' '.join(FULL_FINETUNE_ARGS)} to TRAIN_ARGS "
                        f"(the base weights, with a fresh optimizer and iteration count).")
    return shell_command(comments, [env + torchrun_words(job) + ["pretrain_gpt.py"],
                                    *pairs(args), ["$DATA_ARGS", "$TRAIN_ARGS"]])


def model_args(model: ModelSpec, *, seq_len: int) -> list[str]:
    """Flags for the model's shape (shared with the NeMo emitter's checks)."""
    if model.layer_pattern:
        raise ConfigError(f"{model.name} is a hybrid (Mamba) stack: it trains with Megatron-LM's "
                          f"pretrain_mamba.py and --hybrid-override-pattern, which this emitter "
                          f"does not write; use a transformer-only model.")
    if model.sliding_window:
        raise ConfigError(f"{model.name} mixes sliding-window and full attention layers, which "
                          f"this emitter does not write (--window-size per layer); use a model "
                          f"with full attention only.")
    if model.position_embedding not in _POSITIONS:
        raise ConfigError(f"{model.name} uses {model.position_embedding} positions; megatron-core "
                          f"supports {', '.join(_POSITIONS)} only.")
    ffn = model.ffn_hidden_size or model.moe_ffn_hidden_size
    args = ["--num-layers", str(model.num_layers), "--hidden-size", str(model.hidden_size),
            "--ffn-hidden-size", str(ffn), "--num-attention-heads", str(model.num_attention_heads),
            "--seq-length", str(seq_len),
            "--max-position-embeddings", str(max(model.max_seq_len, seq_len)),
            "--position-embedding-type", _POSITIONS[model.position_embedding],
            "--normalization", "RMSNorm" if model.norm == "rmsnorm" else "LayerNorm"]
    if model.gated_mlp:
        args.append("--swiglu")
    if not model.tied_embeddings:
        args.append("--untie-embeddings-and-output-weights")
    if not (model.attention_bias or model.mlp_bias):
        args.append("--disable-bias-linear")
        if model.qkv_bias:
            args.append("--add-qkv-bias")
    if model.is_mla:
        args += ["--multi-latent-attention", "--kv-lora-rank", str(model.kv_lora_rank),
                 "--qk-head-dim", str(model.qk_nope_head_dim),
                 "--qk-pos-emb-head-dim", str(model.qk_rope_head_dim),
                 "--v-head-dim", str(model.v_head_dim)]
        if model.q_lora_rank:
            args += ["--q-lora-rank", str(model.q_lora_rank)]
    else:
        if model.attention_head_dim * model.num_attention_heads != model.hidden_size:
            args += ["--kv-channels", str(model.attention_head_dim)]
        if model.num_kv_heads < model.num_attention_heads:
            args += ["--group-query-attention", "--num-query-groups", str(model.num_kv_heads)]
    if model.is_moe:
        args += _moe_args(model)
    if model.num_mtp_layers:
        # The MTP layers advisor prices (Megatron-Core places them on the last pipeline stage):
        # arguments.py's --mtp-num-layers (type int, default None: no MTP), dest
        # TransformerConfig.mtp_num_layers.
        args += ["--mtp-num-layers", str(model.num_mtp_layers)]
    return args


def _rope_args(model: ModelSpec) -> list[str]:
    """The model's RoPE base (Megatron-LM's --rotary-base defaults to 10000) and Llama 3.1's
    scaling: --use-rope-scaling applies megatron-core's llama3 scaling (factor 8 by default,
    low/high frequency factors 1 and 4 over 8192 positions: RotaryEmbedding._apply_scaling),
    Llama 3.1's config.json values. An unknown base (rope_theta 0) writes nothing."""
    if model.position_embedding != "rope" or model.rope_theta <= 0:
        return []
    if not float(model.rope_theta).is_integer():
        raise ConfigError(f"{model.name} has rope_theta {model.rope_theta}, but Megatron-LM's "
                          f"--rotary-base takes a whole number; emit for nemo or torchtitan.")
    args = ["--rotary-base", str(int(model.rope_theta))]
    if model.name in LLAMA3_SCALED_MODELS and not model.path.endswith(".json"):
        args.append("--use-rope-scaling")
    return args


def _moe_args(model: ModelSpec) -> list[str]:
    if model.moe_latent_size:
        raise ConfigError(f"{model.name} routes experts in a latent space (moe_latent_size), "
                          f"which this emitter does not write.")
    # --moe-grouped-gemm: the local experts run as one grouped GEMM, as NVIDIA's MoE recipes
    # run them (megatron-core's default is a loop of per-expert GEMMs).
    args = ["--num-experts", str(model.num_experts), "--moe-router-topk", str(model.moe_top_k),
            "--moe-ffn-hidden-size", str(model.moe_ffn_hidden_size), "--moe-grouped-gemm"]
    if model.moe_top_k == 1:  # TransformerConfig: softmax over one expert has zero gradient
        args.append("--moe-router-pre-softmax")
    if model.moe_router_num_groups:  # group-limited routing, as the model was trained
        args += ["--moe-router-num-groups", str(model.moe_router_num_groups),
                 "--moe-router-group-topk", str(model.moe_router_group_topk)]
    if model.num_shared_experts:  # the total width of all shared experts, as Megatron asks
        args += ["--moe-shared-expert-intermediate-size",
                 str(model.num_shared_experts * model.shared_ffn_size)]
    pattern = [int(s.ffn == "moe") for s in model.sublayers]
    if not all(pattern):
        args += ["--moe-layer-freq", layer_pattern(pattern)]
    return args


def layer_pattern(bits: list[int]) -> str:
    """Megatron's list expression for a 0/1 pattern, run-length coded: `([0]*3+[1]*58)`."""
    runs: list[list[int]] = []
    for bit in bits:
        if runs and runs[-1][0] == bit:
            runs[-1][1] += 1
        else:
            runs.append([bit, 1])
    return "(" + "+".join(f"[{bit}]*{n}" for bit, n in runs) + ")"


def pipeline_extra_layers(model: ModelSpec, pp: int, vp: int) -> int:
    """0, 1 (the loss stage) or 2 (embedding and loss) pipeline "layers" that make the split of
    pp × vp chunks even.

    Raises:
        ConfigError: no such count exists (with vp 1 `pipeline_split` splits unevenly instead).
    """
    from advisor.core.space import vp_choices

    for extra in (0, 1, 2):
        if (model.num_layers + extra) % (pp * vp) == 0:
            return extra
    valid = ", ".join(map(str, vp_choices(model, pp)))
    raise ConfigError(f"{model.num_layers} layers of {model.name} do not split evenly over "
                      f"pp × vp = {pp} × {vp} stages, even counting the embedding and loss as "
                      f"layers; with pp {pp} use vp in {{{valid}}} (with vp 1 the end stages "
                      f"take the difference).")


def pipeline_split(config: ParallelConfig, model: ModelSpec) -> tuple[int, int]:
    """(first, last) stage layers a command sets: `config`'s uneven split, else where no even
    split exists advisor's (`advisor.perf.layout.end_stage_layers`, the one it priced: 7/8/…/8/6
    for 61 layers on PP 8); (0, 0) for an even split."""
    if config.uneven:
        return config.first_stage_layers, config.last_stage_layers
    if config.vp == 1:
        return end_stage_layers(model.num_layers, config.pp)
    return 0, 0


def split_note(config: ParallelConfig, model: ModelSpec) -> list[str]:
    """A comment line for advisor's own uneven split (none for an even or a chosen one)."""
    if config.uneven or pipeline_split(config, model) == (0, 0):
        return []
    counts = stage_layer_counts(model.num_layers, config.pp)
    return [f"{model.num_layers} layers do not split evenly over pp {config.pp}: "
            f"{counts[0]} on the first stage, {counts[1]} on each middle one and {counts[-1]} "
            f"on the last (it also runs the output layer and loss), as advisor priced."]


DISPATCHER_ARGS = {"alltoall": ["--moe-token-dispatcher-type", "alltoall"],
                   "deepep": ["--moe-token-dispatcher-type", "flex",
                              "--moe-flex-dispatcher-backend", "deepep"]}
"""Megatron-Core's flags for each `parallel.token_dispatcher` (the one advisor priced)."""


def _parallel_args(config: ParallelConfig, job: Job) -> list[str]:
    model = job.model
    args = ["--tensor-model-parallel-size", str(config.tp),
            "--pipeline-model-parallel-size", str(config.pp),
            "--context-parallel-size", str(config.cp)]
    if model.is_moe:
        args += ["--expert-model-parallel-size", str(config.ep),
                 "--expert-tensor-parallel-size", str(config.etp)]
        args += DISPATCHER_ARGS.get(token_dispatcher(model, config, job.platform), [])
    if config.vp > 1:
        args += ["--num-virtual-stages-per-pipeline-rank", str(config.vp)]
        group = group_size(config.num_microbatches, config.pp)
        if group != config.pp:  # micro-batches per step not a multiple of pp
            args += ["--microbatch-group-size-per-virtual-pipeline-stage", str(group)]
    first, last = pipeline_split(config, model)
    if first or last:
        # Megatron-Core's uneven split: the named end stages, the rest even in between; it
        # cannot be combined with counting the embedding or loss as layers (TransformerConfig).
        if first:
            args += ["--decoder-first-pipeline-num-layers", str(first)]
        if last:
            args += ["--decoder-last-pipeline-num-layers", str(last)]
    elif config.pp > 1:
        extra = pipeline_extra_layers(model, config.pp, config.vp)
        # The loss stage (output GEMM + loss) is the heavier one, so it is counted first.
        if extra >= 1:
            args.append("--account-for-loss-in-pipeline-split")
        if extra == 2:
            args.append("--account-for-embedding-in-pipeline-split")
    if config.sequence_parallel:
        args.append("--sequence-parallel")
    if config.tp_comm_overlap:
        if not config.sequence_parallel:
            raise ConfigError("tp_comm_overlap needs sequence_parallel in Megatron-LM "
                              "(arguments.py); turn sequence_parallel on or tp_comm_overlap off.")
        args.append("--tp-comm-overlap")
    if config.ep_comm_overlap:
        args.append("--overlap-moe-expert-parallel-comm")
    return args


def _batch_args(config: ParallelConfig) -> list[str]:
    return ["--micro-batch-size", str(config.mbs), "--global-batch-size", str(config.gbs)]


def _memory_args(config: ParallelConfig) -> list[str]:
    args = {"none": [], "selective": ["--recompute-granularity", "selective"],
            "full": ["--recompute-granularity", "full", "--recompute-method", "uniform",
                     "--recompute-num-layers", "1"]}[config.recompute]
    if config.recompute == "selective" and config.recompute_modules != DEFAULT_RECOMPUTE_MODULES:
        args += ["--recompute-modules", *config.recompute_modules.split()]
    if config.dp_sharding == "optimizer":
        args.append("--use-distributed-optimizer")
    elif config.dp_sharding == "full":
        # arguments.py: Megatron-FSDP only saves the fsdp_dtensor checkpoint format; megatron-
        # core 0.16's Megatron-FSDP guide also asks for the distributed optimizer and no
        # gradient-accumulation fusion (the fused wgrad kernel writes main_grad, which
        # Megatron-FSDP's sharded buffers replace).
        args += ["--use-megatron-fsdp", "--data-parallel-sharding-strategy",
                 "optim_grads_params", "--ckpt-format", "fsdp_dtensor",
                 "--use-distributed-optimizer", "--no-gradient-accumulation-fusion"]
    if config.shard_replicas > 1:
        # DistributedDataParallelConfig.num_distributed_optimizer_instances: the distributed
        # optimizer (or Megatron-FSDP) shards over dp·cp / N ranks and all-reduces across the
        # N instances.
        args += ["--num-distributed-optimizer-instances", str(config.shard_replicas)]
    if config.overlap_param_gather and not config.overlap_grad_reduce:
        raise ConfigError("overlap_param_gather needs overlap_grad_reduce in Megatron-LM "
                          "(arguments.py); turn overlap_grad_reduce on.")
    if config.overlap_grad_reduce:
        args.append("--overlap-grad-reduce")
    if config.overlap_param_gather:
        args.append("--overlap-param-gather")
    if config.attention == "unfused":
        args += ["--attention-backend", "unfused"]
    return args


def _precision_args(config: ParallelConfig) -> list[str]:
    if config.precision == "fp8-row":
        raise ConfigError(ROWWISE_REFUSAL)
    if config.precision == "fp16":
        return ["--fp16"] + (["--accumulate-allreduce-grads-in-fp32"]
                             if config.grad_reduce_in_fp32 else [])
    # BF16 training accumulates and reduces gradients in FP32 unless told otherwise
    # (arguments.py turns --accumulate-allreduce-grads-in-fp32 on by itself).
    args = ["--bf16", "--accumulate-allreduce-grads-in-fp32" if config.grad_reduce_in_fp32
            else "--grad-reduce-in-bf16"]
    if config.precision in FP8_RECIPES:
        args += ["--fp8-format", "hybrid", "--fp8-recipe", FP8_RECIPES[config.precision]]
    elif config.precision == "nvfp4":
        args += ["--fp4-format", "e2m1", "--fp4-recipe", "nvfp4"]
    if config.dp_sharding != "none" and config.precision in LOW_PRECISION_PARAM_GATHER:
        args.append(LOW_PRECISION_PARAM_GATHER[config.precision])
    return args
