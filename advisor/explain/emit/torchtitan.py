"""TorchTitan 0.3 launch flags for a `ParallelConfig`.

TorchTitan 0.3's `torchtitan.train` loads a config function (`--module <model> --config
<function>`, which returns a `Trainer.Config`) through `torchtitan.config.ConfigManager`, then
applies `--section.field value` flags to it with tyro; activation checkpointing is a tyro
subcommand (`activation-checkpoint:{none,selective,full}`). The flag set is frozen upstream (new
settings go into config functions), but 0.3.0 still reads every flag written here.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from advisor.core.errors import ConfigError
from advisor.core.model import ModelSpec
from advisor.core.parallel import DEFAULT_RECOMPUTE_MODULES, Job, ParallelConfig
from advisor.explain.emit import (
    check_fits,
    gpus_label,
    pairs,
    refuse_lora,
    shell_command,
    torchrun_words,
)
from advisor.explain.emit.megatron import pipeline_extra_layers, pipeline_split, split_note
from advisor.explain.emit.torchtitan_model import (
    CONVERTERS,
    config_module,
    function_name,
    module_name,
    nvfp4_error,
)
from advisor.perf.layout import stage_layer_counts

#: advisor model -> (module, config function) of a bf16 recipe in torchtitan 0.3.0's own
#: `torchtitan/models/*/config_registry.py` (llama3_405b is left out: it trains in float8).
RECIPES = {
    "llama3-8b": ("llama3", "llama3_8b"), "llama3.1-8b": ("llama3", "llama3_8b"),
    "llama3-70b": ("llama3", "llama3_70b"), "llama3.1-70b": ("llama3", "llama3_70b"),
    "qwen3-32b": ("qwen3", "qwen3_32b"), "qwen3-30b-a3b": ("qwen3", "qwen3_30b_a3b"),
    "deepseek-v3": ("deepseek_v3", "deepseek_v3_671b"),
    "gpt-oss-120b": ("gpt_oss", "gpt_oss_120b"),
}


#: (advisor model, precision) -> torchtitan 0.3.0 config functions that train it in low
#: precision with torchao's converters: Float8LinearConverter scales per row (its
#: `recipe_name` is rowwise or rowwise_with_gw_hp, default rowwise: advisor's fp8-row),
#: MXFP8LinearConverter is MXFP8 (components/quantization/float8.py, config_registry.py of each
#: model).
LOW_PRECISION_RECIPES = {
    ("llama3-8b", "mxfp8"): ("llama3", "llama3_8b_mxfp8"),
    ("llama3.1-8b", "mxfp8"): ("llama3", "llama3_8b_mxfp8"),
    ("llama3.1-405b", "fp8-row"): ("llama3", "llama3_405b"),
    ("deepseek-v3", "fp8-row"): ("deepseek_v3", "deepseek_v3_671b_float8"),
}


@dataclass(frozen=True)
class TitanRecipe:
    """Where `torchtitan.train` finds the config function (`--module`, `--config`)."""

    module: str
    function: str
    source: str = ""
    """The config module to write as `<module>.py` beside the launch, when torchtitan ships
    none for the model (`advisor.explain.emit.torchtitan_model`); empty for a shipped recipe."""


def torchtitan_recipe(model: ModelSpec, precision: str = "bf16") -> TitanRecipe:
    """torchtitan 0.3.0's recipe for `model` in `precision` (bf16, or a float8/MXFP8 recipe the
    version ships), else a config module advisor writes for a Llama-architecture model (bf16,
    or with torchtitan's own fp8-row, MXFP8 or NVFP4 converter: `CONVERTERS`).

    Raises:
        ConfigError: neither a shipped recipe nor a written module can train it.
    """
    if precision in ("bf16", "fp16") and model.name in RECIPES:
        return TitanRecipe(*RECIPES[model.name])
    if (model.name, precision) in LOW_PRECISION_RECIPES:
        return TitanRecipe(*LOW_PRECISION_RECIPES[(model.name, precision)])
    if precision in ("fp8", "fp8-cs"):
        raise ConfigError(f"precision {precision} scales per tensor; torchtitan 0.3.0's float8 "
                          f"converter scales per row (Float8LinearConverter recipes rowwise and "
                          f"rowwise_with_gw_hp): use fp8-row, or emit it for megatron or nemo.")
    if precision not in ("bf16", *CONVERTERS):
        shipped = ", ".join(dict.fromkeys(f"{f} ({p})" for (_, p), (_, f)
                                          in LOW_PRECISION_RECIPES.items()))
        raise ConfigError(f"precision {precision} has no torchtitan 0.3.0 converter for "
                          f"{model.name} (its low-precision recipes are {shipped}, and advisor "
                          f"writes modules for {', '.join(CONVERTERS)} and bf16): use one of "
                          f"those precisions, or emit for megatron.")
    return TitanRecipe(module_name(model), function_name(model), config_module(model, precision))


def torchtitan_args(config: ParallelConfig, job: Job) -> list[str]:
    """`torchtitan.train` arguments: the recipe, then flags overriding its layout and batch.

    Returns:
        `--module`, `--config`, `--section.field value` flags, and the activation-checkpoint
        subcommand last (tyro reads flags after a subcommand as the subcommand's own).

    Raises:
        ConfigError: `config` does not fit `job`, or torchtitan cannot express a setting.
    """
    # torchtitan's rules: FSDP2 pipelines, and torch.distributed.pipelining's interleaved
    # schedule (M // pp rounds that must divide M; `advisor.core.interleaving`).
    check_fits(config, job, framework="torchtitan")
    refuse_lora("torchtitan", config)
    recipe = torchtitan_recipe(job.model, config.precision)
    _refuse(config)
    if config.precision == "nvfp4" and nvfp4_error(job.model, config.tp):
        raise ConfigError(nvfp4_error(job.model, config.tp))
    args = ["--module", recipe.module, "--config", recipe.function]
    args += _degrees(config, job)
    async_tp = config.tp > 1 and config.tp_comm_overlap
    if config.torch_compile or async_tp:
        # The TP overlap advisor priced is torchtitan's async TP, which runs under
        # torch.compile only (CompileConfig: "Async TP requires 'model' in
        # --compile.components and --compile.enable"; deepseek_v3_671b's recipe compiles the
        # loss alone).
        args += ["--compile.enable",
                 *(["--compile.enable_async_tensor_parallel"] if async_tp else []),
                 "--compile.components", "model,loss"]
    else:
        # Stated either way: some recipes compile (llama3_405b, the MXFP8 and NVFP4 ones).
        args.append("--compile.no-enable")
    local_batch = config.gbs // config.dp if config.pp > 1 else config.mbs
    args += ["--training.local_batch_size", str(local_batch),
             "--training.global_batch_size", str(config.gbs),
             "--training.seq_len", str(config.seq_len),
             "--training.mixed_precision_param", "bfloat16"]
    if config.pp > 1 or config.ep > 1:
        # Trainer.Config refuses its default CUDA graphs with PP, and with EP dispatchers that
        # synchronise with the host (the recipes' default ones).
        args.append("--training.disable_cuda_graphs")
    if config.pp > 1:
        first_less, last_less, per_stage = stage_weights(config, job.model)
        args += ["--parallelism.pipeline_parallel_schedule",
                 "Interleaved1F1B" if config.vp > 1 else "1F1B",
                 "--parallelism.pipeline_parallel_microbatch_size", str(config.mbs),
                 "--parallelism.pipeline_parallel_layers_per_stage", str(per_stage),
                 "--parallelism.pipeline_parallel_first_stage_less_layers", str(first_less),
                 "--parallelism.pipeline_parallel_last_stage_less_layers", str(last_less)]
    return args + [f"activation-checkpoint:{config.recompute}"]


def stage_weights(config: ParallelConfig, model: ModelSpec) -> tuple[int, int, int]:
    """torchtitan 0.3.0's (pipeline_parallel_first_stage_less_layers,
    pipeline_parallel_last_stage_less_layers, pipeline_parallel_layers_per_stage) for
    `config`'s split. torchtitan's `_generate_llm_fqn_per_model_part` gives every (virtual)
    stage layers_per_stage layers, less the weights on the first and the last: Megatron's
    embedding/loss accounting for an even split, and for an uneven one (`pipeline_split`) the
    end stages' difference from the middle ones (negative where an end stage holds more).

    Raises:
        ConfigError: an uneven split with vp > 1, which the weights cannot express.
    """
    first, last = pipeline_split(config, model)
    if not (first or last):
        extra = pipeline_extra_layers(model, config.pp, config.vp)
        return (int(extra == 2), int(extra >= 1),
                (model.num_layers + extra) // (config.pp * config.vp))
    if config.vp > 1:
        raise ConfigError(f"an uneven pipeline split with vp {config.vp} (first stage "
                          f"{first or 'even'}, last {last or 'even'} layers, each over its "
                          f"{config.vp} virtual "
                          f"stages) has no torchtitan 0.3.0 flags: its stage weights lighten "
                          f"only the first and the last virtual stage, and "
                          f"parallelism.module_fqns_per_model_part (each virtual stage's "
                          f"modules) is set in a config function, not on the command line; "
                          f"use vp 1, or emit for megatron or nemo.")
    counts = stage_layer_counts(model.num_layers, config.pp, first=first, last=last)
    per = max(counts[1:-1] or counts)
    return per - counts[0], per - counts[-1], per


FULL_FINETUNE_ARGS = ("--checkpoint.initial-load-path", "<base checkpoint dir>")
"""torchtitan's flag for starting from trained weights (CheckpointManager.Config)."""


def torchtitan_command(config: ParallelConfig, job: Job) -> str:
    """A `torchrun ... -m torchtitan.train` command for `config`."""
    args = torchtitan_args(config, job)
    comments = [f"TorchTitan 0.3.0 for {gpus_label(job)}; the recipe keeps its own data and "
                f"optimizer settings."]
    comments += split_note(config, job.model)
    if config.dp_sharding == "optimizer":
        comments.append(f"dp_sharding optimizer (ZeRO-1) has no torchtitan form: written as "
                        f"FSDP that keeps parameters gathered from forward to backward "
                        f"(fsdp_reshard_after_forward never). It gathers once per step but "
                        f"reduce-scatters gradients in each of the {config.num_microbatches} "
                        f"micro-batches (Megatron reduces once per step); advisor's "
                        f"torchtitan prediction prices that.")
    if config.recompute == "selective":
        comments.append("torchtitan's selective AC saves matmul outputs and recomputes the rest; "
                        "Megatron's recomputes core attention.")
    if not config.grad_reduce_in_fp32:
        comments.append("grad_reduce_in_fp32 off: torchtitan reduces gradients in float32 "
                        "(training.mixed_precision_reduce accepts only float32).")
    if config.finetune == "full":
        comments.append(f"Full fine-tuning: add {' '.join(FULL_FINETUNE_ARGS)} (the base "
                        f"weights only; --checkpoint.initial-load-model-only is on by default).")
    if config.tp > 1 and config.tp_comm_overlap:
        comments.append("tp_comm_overlap is torchtitan's async TP, which needs torch.compile: "
                        "both are on (--compile.enable "
                        "--compile.enable_async_tensor_parallel, the model compiled)"
                        + ("." if config.torch_compile else
                           "; advisor priced the blocks eager (torch_compile off), so compiled "
                           "they run a little faster than predicted."))
    command = shell_command(comments, [torchrun_words(job) + ["-m", "torchtitan.train"],
                                       *pairs(args[:-1]), [shlex.quote(args[-1])]])
    recipe = torchtitan_recipe(job.model, config.precision)
    if not recipe.source:
        return command
    # No shipped recipe: the config module first, written beside the launch and importable
    # from it (every node needs the file: a shared directory, or write it on each).
    return (f"# torchtitan 0.3.0 ships no recipe for {job.model.name}: this writes one "
            f"({recipe.module}.py, torchtitan's llama3 builders with the model's shape) and "
            f"puts it on PYTHONPATH.\n"
            f"cat > {recipe.module}.py <<'EOF'\n{recipe.source}EOF\n"
            f"export PYTHONPATH=\"$PWD${{PYTHONPATH:+:$PYTHONPATH}}\"\n" + command)


def _refuse(config: ParallelConfig) -> None:
    if config.precision == "fp16":
        raise ConfigError("precision fp16 has no torchtitan flag: 0.3.0 trains bfloat16 or "
                          "float32 (training.mixed_precision_param); use bf16.")
    if config.attention == "unfused":
        raise ConfigError("attention unfused has no torchtitan flag: the recipe's model picks "
                          "its attention kernels (SDPA/flex); use attention flash.")
    if config.pp > 1 and config.vp == 1 and config.num_microbatches < config.pp:
        raise ConfigError(f"{config.num_microbatches} micro-batches per step on pp {config.pp}: "
                          f"torchtitan's 1F1B schedule (torch's Schedule1F1B) needs at least as "
                          f"many micro-batches as stages; lower mbs or raise gbs to give "
                          f"{config.pp} or more, or emit for megatron or nemo.")
    if config.ep_comm_overlap:
        raise ConfigError("ep_comm_overlap, Megatron-Core's overlap of one micro-batch's MoE "
                          "all-to-all with another's compute (the one advisor priced), has no "
                          "torchtitan 0.3.0 flag; turn it off, or emit for megatron or nemo.")
    if config.moe_dispatcher != "auto":
        raise ConfigError(f"moe_dispatcher {config.moe_dispatcher} has no torchtitan 0.3.0 "
                          f"flag: the model spec in the recipe picks its token dispatcher; "
                          f"leave it auto, or emit for megatron or nemo.")
    if config.recompute_modules != DEFAULT_RECOMPUTE_MODULES:
        raise ConfigError(f"recompute_modules {config.recompute_modules!r} has no torchtitan "
                          f"0.3.0 flag: its selective activation checkpointing picks by op "
                          f"(activation_checkpoint.mode selective), not by module; use recompute "
                          f"selective or full, or emit for megatron or nemo.")
    if config.etp > 1:
        raise ConfigError(f"etp ({config.etp}) has no torchtitan 0.3.0 equivalent: experts are "
                          f"sharded by expert_parallel_degree and FSDP only; use etp 1.")


def _degrees(config: ParallelConfig, job: Job) -> list[str]:
    shard, replicate = (1, config.dp) if config.dp_sharding == "none" else (config.dp, 1)
    if config.shard_replicas > 1:
        # HSDP: FSDP shards over dp_shard × cp and replicates across dp_replicate.
        if config.shard_group % config.cp:
            raise ConfigError(f"torchtitan shards over dp_shard × cp: dp_shard_size "
                              f"({config.shard_group}) must be a multiple of cp ({config.cp}); "
                              f"pick a multiple of {config.cp} or cp 1.")
        shard = config.shard_group // config.cp
        replicate = config.dp // shard
    # ParallelismConfig: experts borrow the dp_shard × cp × tp ranks (efsdp = that / ep).
    if job.model.is_moe and (shard * config.cp * config.tp) % config.ep:
        raise ConfigError(f"torchtitan needs ep ({config.ep}) to divide dp_shard × cp × tp "
                          f"({shard} × {config.cp} × {config.tp}); with dp_sharding none "
                          f"dp_shard is 1: use dp_sharding optimizer or full, or a smaller ep.")
    args = ["--parallelism.data_parallel_shard_degree", str(shard),
            "--parallelism.data_parallel_replicate_degree", str(replicate),
            "--parallelism.tensor_parallel_degree", str(config.tp),
            "--parallelism.pipeline_parallel_degree", str(config.pp),
            "--parallelism.context_parallel_degree", str(config.cp),
            "--parallelism.expert_parallel_degree", str(config.ep)]
    if config.tp > 1:
        args.append("--parallelism." + ("" if config.sequence_parallel else "no_")
                    + "enable_sequence_parallel")
    if config.dp_sharding != "none":
        args += ["--parallelism.fsdp_reshard_after_forward",
                 "never" if config.dp_sharding == "optimizer" else "always"]
    return args
