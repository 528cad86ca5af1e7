"""NeMo 2 recipe overrides (NeMo-Run CLI `key=value` form) for a `ParallelConfig`.

Names follow NeMo 2's recipes and performance scripts (`scripts/performance/helpers.py`):
`MegatronStrategy` takes the parallel sizes (the same names as megatron-core's
`ModelParallelConfig`), its `ddp` is a megatron-core `DistributedDataParallelConfig`,
`model.config` is the model's `TransformerConfig`, `optim.config` is megatron-core's
`OptimizerConfig`, and `trainer.plugins` is the `MegatronMixedPrecision` plugin.
"""

from __future__ import annotations

from advisor.emit import check_fits, gpus_label, node_layout, refuse_lora, shell_command
from advisor.emit.megatron import FP8_RECIPES, model_args, pipeline_extra_layers
from advisor.errors import ConfigError
from advisor.model import ModelSpec
from advisor.parallel import Job, ParallelConfig

_RECOMPUTE = {"none": (None, None, None), "selective": ("selective", None, None),
              "full": ("full", "uniform", 1)}


def nemo_factory(model: ModelSpec) -> str:
    """The NeMo 2 recipe name this model's name suggests: llama3.1-405b -> llama31_405b."""
    return model.name.lower().replace(".", "").replace("-", "_")


def nemo_overrides(config: ParallelConfig, job: Job) -> list[str]:
    """`key=value` overrides (Python literals) that set `config` on a NeMo 2 pretrain recipe.

    Every layout field is set explicitly, because the recipes carry their own (e.g. llama3_70b
    defaults to tp 4, pp 4, vp 5, cp 2).

    Raises:
        ConfigError: `config` does not fit `job`, or NeMo 2 cannot express a setting.
    """
    check_fits(config, job)
    refuse_lora("nemo", config)
    model_args(job.model, seq_len=config.seq_len)  # the same model limits as Megatron-LM
    nodes, per_node = node_layout(job)
    values: dict[str, object] = {
        "trainer.num_nodes": nodes, "trainer.devices": per_node,
        "trainer.strategy.tensor_model_parallel_size": config.tp,
        "trainer.strategy.pipeline_model_parallel_size": config.pp,
        "trainer.strategy.virtual_pipeline_model_parallel_size": config.vp if config.vp > 1
        else None,
        "trainer.strategy.context_parallel_size": config.cp,
        "trainer.strategy.sequence_parallel": config.sequence_parallel,
    }
    if job.model.is_moe:
        values["trainer.strategy.expert_model_parallel_size"] = config.ep
        values["trainer.strategy.expert_tensor_parallel_size"] = config.etp
        if config.ep > 1:
            values["model.config.moe_token_dispatcher_type"] = "alltoall"
    if config.uneven:
        # megatron-core's uneven split (TransformerConfig); it excludes the embedding/loss
        # accounting, so both are turned off explicitly.
        values["model.config.num_layers_in_first_pipeline_stage"] = (
            config.first_stage_layers or None)
        values["model.config.num_layers_in_last_pipeline_stage"] = (
            config.last_stage_layers or None)
        values["model.config.account_for_loss_in_pipeline_split"] = False
        values["model.config.account_for_embedding_in_pipeline_split"] = False
    elif config.pp > 1:
        extra = pipeline_extra_layers(job.model, config.pp * config.vp)
        values["model.config.account_for_loss_in_pipeline_split"] = extra >= 1
        values["model.config.account_for_embedding_in_pipeline_split"] = extra == 2
    values.update({"data.micro_batch_size": config.mbs, "data.global_batch_size": config.gbs,
                   "data.seq_length": config.seq_len, "model.config.seq_length": config.seq_len})
    granularity, method, num_layers = _RECOMPUTE[config.recompute]
    values.update({"model.config.recompute_granularity": granularity,
                   "model.config.recompute_method": method,
                   "model.config.recompute_num_layers": num_layers})
    values.update(_precision(config))  # before _sharding: a new plugin resets its fields
    values.update(_sharding(config))
    if config.attention == "unfused":
        values["model.config.attention_backend"] = "unfused"
    return [f"{key}={_literal(value)}" for key, value in values.items()]


def nemo_command(config: ParallelConfig, job: Job) -> str:
    """A `nemo llm pretrain --factory ...` command for `config`."""
    overrides = nemo_overrides(config, job)
    factory = nemo_factory(job.model)
    comments = [f"NeMo 2 (NeMo-Run CLI) for {gpus_label(job)}.",
                f"--factory must name the pretrain recipe for {job.model.name}; "
                f"'{factory}' is derived from the model name.",
                "The recipe must configure trainer.strategy.ddp as a "
                "DistributedDataParallelConfig (NeMo's LLM recipes do)."]
    if config.tp_comm_overlap:
        comments.append("tp_comm_overlap: add MegatronCommOverlapCallback(tp_comm_overlap=True) "
                        "to trainer.callbacks (the recipe's *_performance variant does); "
                        "overrides cannot add a callback.")
    return shell_command(comments, [["nemo", "llm", "pretrain", "--factory", factory],
                                    *([o] for o in overrides)])


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
    else:
        values["optim.config.use_distributed_optimizer"] = config.dp_sharding == "optimizer"
    return values


def _precision(config: ParallelConfig) -> dict[str, object]:
    if config.precision == "nvfp4":
        raise ConfigError("NeMo 2's precision recipes (bf16_mixed, fp16_mixed, "
                          "bf16_with_fp8_*_mixed, bf16_with_mxfp8_mixed) have no NVFP4 recipe; "
                          "emit for megatron (--fp4-format e2m1) or use precision mxfp8.")
    values: dict[str, object] = {
        "trainer.plugins": "fp16_mixed" if config.precision == "fp16" else "bf16_mixed"}
    if config.precision in FP8_RECIPES:
        values["trainer.plugins.fp8"] = "hybrid"
        values["trainer.plugins.fp8_recipe"] = FP8_RECIPES[config.precision]
    return values


def _literal(value: object) -> str:
    """NeMo-Run reads override values as Python literals; bare words stay strings."""
    return "None" if value is None else str(value)
