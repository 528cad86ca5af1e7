"""NeMo 2 recipe overrides (NeMo-Run CLI `key=value` form) for a `ParallelConfig`.

Names follow NeMo 2's recipes and performance scripts (`scripts/performance/helpers.py`):
`MegatronStrategy` takes the parallel sizes (the same names as megatron-core's
`ModelParallelConfig`), its `ddp` is a megatron-core `DistributedDataParallelConfig`,
`model.config` is the model's `TransformerConfig`, `optim.config` is megatron-core's
`OptimizerConfig`, and `trainer.plugins` is the `MegatronMixedPrecision` plugin.

Checked against NeMo's own machinery (tests/explain/test_emit.py): NeMo-Run's CLI parser applies
the overrides to the real recipe, and the resulting configuration is read back. The parser
cannot replace the precision plugin by name (`trainer.plugins=bf16_mixed` fails: its type is a
Union of Lightning plugin classes), so the overrides set the fields of the recipe's own
`bf16_mixed()` plugin to the values NeMo's precision factories use.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from advisor.core.errors import ConfigError
from advisor.core.interleaving import group_size
from advisor.core.model import ModelSpec
from advisor.core.parallel import Job, ParallelConfig, token_dispatcher
from advisor.explain.emit import check_fits, gpus_label, node_layout, shell_command
from advisor.explain.emit.megatron import (
    DEEPEP_NOTE,
    FP8_RECIPES,
    ROWWISE_REFUSAL,
    model_args,
    pipeline_extra_layers,
    pipeline_split,
    split_note,
)

_RECOMPUTE = {"none": (None, None, None), "selective": ("selective", None, None),
              "full": ("full", "uniform", 1)}


NEMO_RECIPES = {
    "llama2-7b": "llama2_7b", "llama3-8b": "llama3_8b", "llama3-70b": "llama3_70b",
    "llama3.1-8b": "llama31_8b", "llama3.1-70b": "llama31_70b", "llama3.1-405b": "llama31_405b",
    "llama4-scout": "llama4_e16", "mixtral-8x7b": "mixtral_8x7b", "mixtral-8x22b": "mixtral_8x22b",
    "qwen3-8b": "qwen3_8b", "qwen3-32b": "qwen3_32b", "qwen3-30b-a3b": "qwen3_30b_a3b",
    "qwen3-235b-a22b": "qwen3_235b_a22b", "deepseek-v3": "deepseek_v3", "gpt3-175b": "gpt3_175b",
    "nemotron-3-8b": "nemotron3_8b", "nemotron-22b": "nemotron3_22b",
    "nemotron-4-15b": "nemotron4_15b", "nemotron-4-340b": "nemotron4_340b",
}
"""Catalog model -> the NeMo 2.7.3 recipe (`nemo.collections.llm.recipes.<name>`, registered as
`nemo llm pretrain --factory <name>`) that builds that model: the same layers, widths, heads and
experts (tests/explain/test_emit.py builds each one with NeMo-Run and compares)."""

NO_FINETUNE_RECIPE = ("gpt3_175b",)
"""Recipes of `NEMO_RECIPES` and `GENERIC_BASES` without a `finetune_recipe` in NeMo 2.7.3."""

GENERIC_BASES = (
    ("deepseek_v3", "multi-head latent attention with routed and shared experts",
     lambda m: m.is_mla and m.is_moe),
    ("mixtral_8x7b", "a Llama-style MoE (RMSNorm, SwiGLU experts, RoPE, no biases)",
     lambda m: m.is_moe and not m.is_mla and _llama_style(m)),
    ("llama3_8b", "a Llama-style dense model (RMSNorm, SwiGLU, RoPE, no biases)",
     lambda m: not m.is_moe and not m.is_mla and _llama_style(m)),
    ("gpt3_175b", "a GPT-style dense model (LayerNorm, GELU, learned positions, biases)",
     lambda m: (not m.is_moe and not m.is_mla and m.norm == "layernorm" and not m.gated_mlp
                and m.position_embedding == "learned" and m.attention_bias and m.mlp_bias)),
)
"""(NeMo 2.7.3 recipe, its architecture, which models have it) for a model NeMo ships no recipe
for: the recipe of the same architecture with the model's shape set on `model.config` (the
generic route; the command says so)."""


def _llama_style(model: ModelSpec) -> bool:
    return (model.norm == "rmsnorm" and model.gated_mlp and model.position_embedding == "rope"
            and not (model.attention_bias or model.mlp_bias or model.qkv_bias))


@dataclass(frozen=True)
class NemoRecipe:
    """The NeMo 2.7.3 recipe a command names, and for the generic route what it stands in for."""

    factory: str
    generic: str = ""
    """Empty: the model's own recipe. Else the architecture the stand-in recipe shares with the
    model (its shape is set on `model.config`)."""


def nemo_recipe(model: ModelSpec) -> NemoRecipe:
    """The model's own NeMo 2.7.3 recipe (`NEMO_RECIPES`; a config.json model has none), else
    the generic route's recipe of the same architecture (`GENERIC_BASES`).

    Raises:
        ConfigError: NeMo 2.7.3 has neither.
    """
    if model.name in NEMO_RECIPES and not model.path.endswith(".json"):
        return NemoRecipe(NEMO_RECIPES[model.name])
    for factory, architecture, fits in GENERIC_BASES:
        if fits(model):
            return NemoRecipe(factory, architecture)
    raise ConfigError(f"NeMo 2.7.3 ships no recipe for {model.name}, and none of the same "
                      f"architecture to set its shape on (advisor's generic route covers "
                      f"{'; '.join(a for _, a, _ in GENERIC_BASES)}); emit it for megatron.")


def nemo_factory(model: ModelSpec) -> str:
    """The `--factory` name: the model's own NeMo 2.7.3 recipe, or the generic route's
    (`nemo_recipe`); always one the installed NeMo registers."""
    return nemo_recipe(model).factory


def model_identifier(model: ModelSpec) -> str:
    """The model's name as a Python identifier (llama3.1-405b -> llama31_405b): anything else
    in a name (a config.json directory's `$`, quotes, spaces) becomes `_`, so it is safe in a
    shell line and a file name."""
    return re.sub(r"[^a-z0-9_]", "_", model.name.lower().replace(".", "").replace("-", "_"))


FLOAT_ROPE_BASE = ("deepseek_v3",)
"""Generic bases whose config types `rotary_base` float (NeMo's DeepSeekConfig; GPTConfig types
it int): NeMo-Run's parser reads the value by that type."""


def shape_values(model: ModelSpec, factory: str) -> dict[str, object]:
    """`model.config` fields that give the generic route's recipe (`factory`) the model's shape:
    layers, widths, heads, RoPE base, MLA ranks and experts, as Megatron-LM's shape flags set
    them (`megatron.model_args`). The vocabulary stays the tokenizer's, as in every NeMo
    recipe."""
    ffn = model.ffn_hidden_size or model.moe_ffn_hidden_size
    values: dict[str, object] = {
        "num_layers": model.num_layers, "hidden_size": model.hidden_size,
        "ffn_hidden_size": ffn, "num_attention_heads": model.num_attention_heads,
        "share_embeddings_and_output_weights": model.tied_embeddings}
    if model.position_embedding == "rope" and model.rope_theta > 0:
        whole = float(model.rope_theta).is_integer() and factory not in FLOAT_ROPE_BASE
        values["rotary_base"] = int(model.rope_theta) if whole else float(model.rope_theta)
    if model.is_mla:
        values.update(kv_lora_rank=model.kv_lora_rank, q_lora_rank=model.q_lora_rank or None,
                      qk_head_dim=model.qk_nope_head_dim,
                      qk_pos_emb_head_dim=model.qk_rope_head_dim, v_head_dim=model.v_head_dim)
    else:
        values.update(num_query_groups=model.num_kv_heads, kv_channels=model.attention_head_dim)
    if model.is_moe:
        pattern = [int(s.ffn == "moe") for s in model.sublayers]
        values.update(
            num_moe_experts=model.num_experts, moe_router_topk=model.moe_top_k,
            moe_ffn_hidden_size=model.moe_ffn_hidden_size,
            moe_shared_expert_intermediate_size=model.num_shared_experts * model.shared_ffn_size
            or None,
            moe_layer_freq=1 if all(pattern) else pattern,
            # Without group-limited routing: one group of every expert, the same routing
            # (Kimi-K2's config.json says n_group 1, topk_group 1); deepseek_v3's config types
            # these int, so NeMo-Run's parser cannot read None.
            moe_router_num_groups=model.moe_router_num_groups or 1,
            moe_router_group_topk=model.moe_router_group_topk or 1)
    return {f"model.config.{k}": v for k, v in values.items()}


def nemo_overrides(config: ParallelConfig, job: Job) -> list[str]:
    """`key=value` overrides (Python literals) that set `config` on a NeMo 2 pretrain recipe.

    Every layout field is set explicitly, because the recipes carry their own (e.g. llama3_70b
    defaults to tp 4, pp 4, vp 5, cp 2).

    Raises:
        ConfigError: `config` does not fit `job`, NeMo 2 cannot express a setting, or `config`
            fine-tunes (NeMo-Run's CLI cannot set LoRA's fields: `nemo_finetune_script`).
    """
    if config.finetune != "none":
        raise ConfigError(f"finetune {config.finetune}: NeMo-Run's CLI cannot set a "
                          f"fine-tuning recipe's PEFT and DDP fields; advisor writes a NeMo-Run "
                          f"script instead (emit('nemo', ...) or nemo_finetune_script).")
    return [f"{key}={_literal(value)}" for key, value in nemo_values(config, job).items()]


def nemo_values(config: ParallelConfig, job: Job) -> dict[str, object]:
    """The recipe fields (dotted paths from the recipe) and values that set `config`: what
    `nemo_overrides` writes for the CLI and `nemo_finetune_script` assigns in Python. A value
    "torch.<dtype>" names a torch dtype.

    Raises:
        ConfigError: `config` does not fit `job`, or NeMo 2 cannot express a setting.
    """
    check_fits(config, job)
    model_args(job.model, seq_len=config.seq_len)  # the same model limits as Megatron-LM
    recipe = nemo_recipe(job.model)
    nodes, per_node = node_layout(job)
    group = group_size(config.num_microbatches, config.pp) if config.vp > 1 else config.pp
    values: dict[str, object] = {
        "trainer.num_nodes": nodes, "trainer.devices": per_node,
        "trainer.strategy.tensor_model_parallel_size": config.tp,
        "trainer.strategy.pipeline_model_parallel_size": config.pp,
        "trainer.strategy.virtual_pipeline_model_parallel_size": config.vp if config.vp > 1
        else None,
        # Megatron-Core's default group is pp micro-batches; another count needs its own.
        "trainer.strategy.microbatch_group_size_per_vp_stage": group if group != config.pp
        else None,
        "trainer.strategy.context_parallel_size": config.cp,
        "trainer.strategy.sequence_parallel": config.sequence_parallel,
    }
    if job.model.is_moe:
        values["trainer.strategy.expert_model_parallel_size"] = config.ep
        values["trainer.strategy.expert_tensor_parallel_size"] = config.etp
        # As NVIDIA's MoE recipes run: one grouped GEMM over the local experts; all-to-all
        # dispatch, which advisor prices.
        values["model.config.moe_grouped_gemm"] = True
        dispatcher = token_dispatcher(job.model, config, job.platform)
        if dispatcher == "alltoall":
            values["model.config.moe_token_dispatcher_type"] = "alltoall"
        elif dispatcher == "deepep":
            # Megatron-Core overlaps shared experts only beside the alltoall dispatcher.
            values["model.config.moe_token_dispatcher_type"] = "flex"
            values["model.config.moe_flex_dispatcher_backend"] = "deepep"
            values["model.config.moe_shared_expert_overlap"] = False
        # Set either way: a recipe's own choice would otherwise survive. Megatron-Core refuses
        # the shared-expert overlap beside it.
        values["model.config.overlap_moe_expert_parallel_comm"] = config.ep_comm_overlap
        if config.ep_comm_overlap:
            values["model.config.moe_shared_expert_overlap"] = False
    if recipe.generic:  # the stand-in recipe gets the model's shape
        values.update(shape_values(job.model, recipe.factory))
    values.update(_pipeline_split(config, job))
    values.update({"data.micro_batch_size": config.mbs, "data.global_batch_size": config.gbs,
                   "data.seq_length": config.seq_len, "model.config.seq_length": config.seq_len})
    granularity, method, num_layers = _RECOMPUTE[config.recompute]
    # recompute_modules too: a recipe's own list (deepseek_v3: mla_up_proj, layernorm) would
    # otherwise survive.
    values.update({"model.config.recompute_granularity": granularity,
                   "model.config.recompute_method": method,
                   "model.config.recompute_num_layers": num_layers,
                   "model.config.recompute_modules": config.recompute_modules.split()
                   if granularity == "selective" else None})
    # The model advisor priced: its MTP layers (deepseek_v3's recipe adds one when asked) and
    # FP32 Adam moments (deepseek_v3 turns on the precision-aware optimizer's BF16 moments).
    values["model.config.mtp_num_layers"] = job.model.num_mtp_layers or None
    values["optim.config.use_precision_aware_optimizer"] = False
    values.update(_precision(config))  # before _sharding: a new plugin resets its fields
    values.update(_sharding(config))
    if config.attention == "unfused":
        # NeMo-Run's parser has no reader for the AttnBackend enum
        # (model.config.attention_backend=unfused fails to parse).
        raise ConfigError("NeMo-Run's CLI cannot set model.config.attention_backend (an enum "
                          "its parser does not read); set AttnBackend.unfused in the recipe's "
                          "Python, or emit for megatron (--attention-backend unfused).")
    return values


def nemo_command(config: ParallelConfig, job: Job) -> str:
    """A `nemo llm pretrain --factory ...` command for `config`; for a fine-tuning job, the
    NeMo-Run script that builds NeMo's fine-tuning recipe and the torchrun line that runs it
    (`advisor.explain.emit.nemo_finetune`)."""
    if config.finetune != "none":
        from advisor.explain.emit.nemo_finetune import nemo_finetune_command

        return nemo_finetune_command(config, job)
    overrides = nemo_overrides(config, job)
    recipe = nemo_recipe(job.model)
    factory = recipe.factory
    comments = [f"NeMo 2 (NeMo-Run CLI) for {gpus_label(job)}."]
    if recipe.generic:
        comments.append(generic_note(job.model, recipe))
    else:
        comments.append(f"--factory {factory}: NeMo 2.7.3's pretrain recipe for "
                        f"{job.model.name}.")
    comments += split_note(config, job.model)
    dispatcher = token_dispatcher(job.model, config, job.platform)
    if dispatcher == "deepep":
        comments.append(DEEPEP_NOTE.format(group=config.ep * config.etp))
    elif dispatcher == "alltoall":
        comments.append("MoE recipes that add DeepEPCallback (deepseek_v3 does) switch the "
                        "token dispatcher to DeepEP's flex dispatcher on H100/B200 at setup; "
                        "advisor priced the all-to-all dispatcher: drop that callback to run "
                        "what was predicted.")
    if config.tp_comm_overlap:
        comments.append("tp_comm_overlap: add MegatronCommOverlapCallback(tp_comm_overlap=True) "
                        "to trainer.callbacks (the recipe's *_performance variant does); "
                        "overrides cannot add a callback.")
    return shell_command(comments, [["nemo", "llm", "pretrain", "--factory",
                                     shlex.quote(factory)],
                                    *([shlex.quote(o)] for o in overrides)])


def generic_note(model: ModelSpec, recipe: NemoRecipe) -> str:
    """The comment that says a command takes the generic route, and what that leaves out."""
    unmodelled = "RoPE scaling, the router's scoring" if model.is_moe else "RoPE scaling"
    return (f"Generic route: NeMo 2.7.3 ships no recipe for {model.name}; this starts from "
            f"{recipe.factory}'s, the same architecture ({recipe.generic}), with "
            f"{model.name}'s layers, widths, heads{', experts' if model.is_moe else ''} and "
            f"RoPE base set on model.config. What advisor does not model stays "
            f"{recipe.factory}'s: {unmodelled} and the tokenizer, so the vocabulary (advisor "
            f"priced {model.vocab_size:,}).")


def _pipeline_split(config: ParallelConfig, job: Job) -> dict[str, object]:
    """The pipeline split, on `trainer.strategy` (the strategy copies its own values over
    `model.config` at setup); set every time, because recipes carry their own (deepseek_v3:
    3 and 2 layers on the first and last stage)."""
    first, last = pipeline_split(config, job.model)
    # megatron-core's uneven split excludes the embedding/loss accounting.
    extra = 0 if first or last or config.pp == 1 else pipeline_extra_layers(
        job.model, config.pp, config.vp)
    return {"trainer.strategy.num_layers_in_first_pipeline_stage": first or None,
            "trainer.strategy.num_layers_in_last_pipeline_stage": last or None,
            "trainer.strategy.account_for_loss_in_pipeline_split": extra >= 1,
            "trainer.strategy.account_for_embedding_in_pipeline_split": extra == 2}


def _sharding(config: ParallelConfig) -> dict[str, object]:
    values: dict[str, object] = {
        "trainer.strategy.ddp.overlap_grad_reduce": config.overlap_grad_reduce,
        "trainer.strategy.ddp.overlap_param_gather": config.overlap_param_gather,
        # The precision plugin copies its grad_reduce_in_fp32 onto the DDP config, so set both.
        "trainer.strategy.ddp.grad_reduce_in_fp32": config.grad_reduce_in_fp32,
        "trainer.plugins.grad_reduce_in_fp32": config.grad_reduce_in_fp32,
    }
    if config.dp_sharding == "full":
        # What NeMo's performance scripts set for Megatron-FSDP (set_mcore_fsdp_configs).
        values.update({"trainer.strategy.fsdp": "megatron",
                       "trainer.strategy.ddp.data_parallel_sharding_strategy":
                           "optim_grads_params",
                       "model.config.init_model_with_meta_device": True,
                       "model.config.gradient_accumulation_fusion": False})
    # Megatron-FSDP runs with the distributed optimizer too (megatron-core 0.16's guide).
    values["optim.config.use_distributed_optimizer"] = config.dp_sharding != "none"
    if config.shard_replicas > 1:
        values["trainer.strategy.ddp.num_distributed_optimizer_instances"] = \
            config.shard_replicas
    return values


_LOW_PRECISION = {
    # NeMo 2.7's factories (nemo/collections/llm/recipes/precision/mixed_precision.py):
    # bf16_with_fp8_mixed
    "fp8": {"fp8": "hybrid", "fp8_margin": 0, "fp8_amax_history_len": 1024,
            "fp8_amax_compute_algo": "max", "fp8_param_gather": True},
    # bf16_with_fp8_current_scaling_mixed (its first and last layer stay BF16)
    "fp8-cs": {"fp8": "hybrid", "first_last_layers_bf16": True,
               "num_layers_at_start_in_bf16": 1, "num_layers_at_end_in_bf16": 1,
               "fp8_param_gather": True},
    # bf16_with_fp8_subchannel_scaling_mixed
    "fp8-block": {"fp8": "hybrid", "fp8_param_gather": False},
    # bf16_with_mxfp8_mixed
    "mxfp8": {"fp8": "e4m3", "fp8_param_gather": True,
              "reuse_grad_buf_for_mxfp8_param_ag": True},
}


def _precision(config: ParallelConfig) -> dict[str, object]:
    """Fields of the recipe's `bf16_mixed()` plugin, set to what NeMo's factory for the
    precision sets (the parser cannot swap the plugin itself)."""
    if config.precision == "fp16":
        # fp16_mixed()'s fields (its grad_reduce_in_fp32 comes from the config, below).
        return {"trainer.plugins.precision": "16-mixed",
                "trainer.plugins.params_dtype": "torch.float16",
                "trainer.plugins.pipeline_dtype": "torch.float16"}
    # BF16 sets nothing: the recipe's plugin is bf16_mixed() already, and the parser reads
    # None for its str-typed fp8/fp4 fields as the string 'None'.
    values: dict[str, object] = {}
    if config.precision == "fp8-row":
        raise ConfigError(ROWWISE_REFUSAL)
    if config.precision in _LOW_PRECISION:
        values.update({f"trainer.plugins.{k}": v
                       for k, v in _LOW_PRECISION[config.precision].items()})
        values["trainer.plugins.fp8_recipe"] = FP8_RECIPES[config.precision]
    elif config.precision == "nvfp4":
        # MegatronMixedPrecision's fp4 fields (NeMo 2.7), as Megatron-LM's --fp4-format e2m1
        # --fp4-recipe nvfp4.
        values.update({"trainer.plugins.fp4": "e2m1", "trainer.plugins.fp4_recipe": "nvfp4"})
    return values


def _literal(value: object) -> str:
    """NeMo-Run reads override values as Python literals; bare words stay strings.

    A list of strings is written `"['a','b']"`: NeMo-Run's `TypeParser.parse` strips the
    enclosing double quotes and `parse_list` reads the rest with `ast.literal_eval`
    (nemo_run 0.11 `cli/cli_parser.py`). The double quotes keep the inner quotes through
    `nemo ... --lazy`, which joins argv with spaces and splits it again with `shlex`
    (`cli/api.py`, `cli/lazy.py`): a bare `['core_attn']` arrives there as `[core_attn]`, which
    `literal_eval` refuses ("Failed to parse '[core_attn]' as typing.Optional[List[str]]").
    """
    if isinstance(value, list):
        return '"[' + ",".join(f"'{v}'" if isinstance(v, str) else str(v) for v in value) + ']"'
    return "None" if value is None else str(value)
