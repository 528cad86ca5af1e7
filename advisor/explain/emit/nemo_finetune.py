"""A NeMo-Run script for a fine-tuning job (LoRA or full), and the torchrun line that runs it.

NeMo 2 fine-tunes through a model's `finetune_recipe` (`nemo llm finetune --factory F`), but
its CLI cannot set what advisor priced: NeMo-Run 0.11's parser does not resolve the string
annotations of `LoRA`'s fields (`peft.dim=16` fails with "Unsupported type: int"), and the
fine-tuning trainer has no `DistributedDataParallelConfig` for `trainer.strategy.ddp.*` to
land on. So advisor writes the recipe in Python: NeMo's own `finetune_recipe` with sequences
packed to the job's length (at micro-batch 1, the only size NeMo packs at; otherwise every
sample padded to it), a megatron-core DDP config, the adapter rank and targets, and
every field `nemo_values` sets for pre-training, assigned on the recipe; `run.run(...,
direct=True)` then runs it in each torchrun process. Checked by importing the script and
reading the recipe it builds, data module included (tests/perf/test_finetune.py).
"""

from __future__ import annotations

import shlex

from advisor.core.errors import ConfigError
from advisor.core.parallel import Job, ParallelConfig
from advisor.explain.emit import gpus_label, node_layout, shell_command, torchrun_words
from advisor.explain.emit.nemo import (
    NO_FINETUNE_RECIPE,
    generic_note,
    model_identifier,
    nemo_recipe,
    nemo_values,
)

#: advisor's LoRA targets -> NeMo's module names (`nemo.collections.llm.peft.LoRA`; its
#: default is all four).
TARGET_MODULES = {"attention": ["linear_qkv", "linear_proj"],
                  "all-linear": ["linear_qkv", "linear_proj", "linear_fc1", "linear_fc2"]}

DDP = ("run.Config(DistributedDataParallelConfig, check_for_nan_in_grad=True,\n"
       "                                            average_in_collective=True)")
"""The DDP config NeMo's pre-training recipes give `MegatronStrategy` (its other fields are
set from the layout below)."""


def script_name(job: Job) -> str:
    """The file the script is written to (`advisor_finetune_llama3_70b.py`)."""
    return f"advisor_finetune_{model_identifier(job.model)}.py"


def nemo_finetune_script(config: ParallelConfig, job: Job) -> str:
    """Python source of a NeMo-Run script whose `recipe()` builds NeMo's fine-tuning recipe
    for `config` and whose `__main__` runs it in-process.

    Raises:
        ConfigError: `config` does not fit `job`, is not a fine-tuning job, or NeMo cannot
            express a setting (LoRA targets on MLA, routed experts or Mamba mixers).
    """
    if config.finetune == "none":
        raise ConfigError("a pre-training config: use nemo_command (nemo llm pretrain).")
    _refuse(config, job)
    values = nemo_values(config, job)
    nodes, per_node = node_layout(job)
    chosen = nemo_recipe(job.model)
    factory = chosen.factory
    peft = "'lora'" if config.finetune == "lora" else "None"
    packed = packs(config)
    lines = [f"recipe = {factory}.finetune_recipe(",
             f"    num_nodes={nodes}, num_gpus_per_node={per_node}, peft_scheme={peft},",
             f"    seq_length={config.seq_len}, packed_sequence={packed})",
             f"recipe.trainer.strategy.ddp = {DDP}"]
    if not packed:
        # Every sample padded to seq_len: the micro-batch of mbs × seq_len tokens advisor
        # priced (GPTSFTDataset's pad_to_max_length; unpadded, it pads to the longest sample).
        lines.append("recipe.data.dataset_kwargs = {'pad_to_max_length': True}")
    if chosen.generic:  # the stand-in recipe would restore its own model's weights
        lines.append(f"recipe.resume.restore_config.path = {BASE_CHECKPOINT!r}")
    if config.finetune == "lora":
        lines += [f"recipe.peft.dim = {config.lora_rank}",
                  f"recipe.peft.target_modules = {TARGET_MODULES[config.lora_targets]!r}"]
    lines += [f"recipe.{key} = {_python(value)}" for key, value in values.items()]
    what = (f"LoRA (rank {config.lora_rank} on {', '.join(TARGET_MODULES[config.lora_targets])})"
            if config.finetune == "lora" else "Full")
    kind = _kind(config)
    uses_torch = any(isinstance(v, str) and v.startswith("torch.") for v in values.values())
    body = "\n".join(f"    {line}" for line in lines)
    return (f'"""{kind} fine-tuning of {job.model.name} on {job.num_gpus} x '
            f'{job.platform.name}, as advisor predicted it.\n\n'
            f"{what} fine-tuning, written by advisor: NeMo's {factory} fine-tuning\n"
            f"recipe with the layout, batch and precision advisor priced. Run it in every "
            f"process of a\ntorchrun launch.\n"
            f'"""\n\n'
            f"import nemo_run as run\n"
            + ("import torch\n" if uses_torch else "")
            + f"from megatron.core.distributed import DistributedDataParallelConfig\n"
            f"from nemo.collections.llm.recipes import {factory}\n\n\n"
            f"def recipe() -> run.Partial:\n"
            f'    """NeMo\'s {factory} fine-tuning recipe with advisor\'s settings."""\n'
            f"{body}\n"
            f"    return recipe\n\n\n"
            f'if __name__ == "__main__":\n'
            f"    run.run(recipe(), direct=True)\n")


def nemo_finetune_command(config: ParallelConfig, job: Job) -> str:
    """Shell that writes `nemo_finetune_script` beside the launch, then runs it under
    torchrun."""
    script = nemo_finetune_script(config, job)
    name = script_name(job)
    chosen = nemo_recipe(job.model)
    restore = (f"set recipe.resume.restore_config.path in the script to your NeMo checkpoint "
               f"of {job.model.name} (llm.import_ckpt)" if chosen.generic else
               "the recipe restores the base model from nemo://<Hugging Face id>: import it "
               "first (llm.import_ckpt)")
    comments = [
        f"NeMo 2 {_kind(config)} fine-tuning for {gpus_label(job)}: a NeMo-Run script (its "
        f"CLI cannot set LoRA's rank or targets), written here and run on every node.",
        generic_note(job.model, chosen) if chosen.generic else
        f"NeMo 2.7.3's {chosen.factory} fine-tuning recipe for {job.model.name}.",
        f"Before running: {restore}, and swap the recipe's SQuAD data module for your dataset "
        + (f"(packed to {config.seq_len} tokens, as advisor priced)." if packs(config) else
           f"(each sample padded to {config.seq_len} tokens, as advisor priced: NeMo packs "
           f"sequences only at micro-batch 1, and this layout runs {config.mbs})."),
    ]
    if config.tp_comm_overlap:
        comments.append("tp_comm_overlap: add MegatronCommOverlapCallback(tp_comm_overlap=True) "
                        "to recipe.trainer.callbacks in the script.")
    return (shell_command(comments, [["cat", ">", shlex.quote(name), "<<'EOF'"]])
            + f"{script}EOF\n" + shell_command([], [torchrun_words(job), [shlex.quote(name)]]))


def packs(config: ParallelConfig) -> bool:
    """Whether the script packs sequences: NeMo packs only at micro-batch 1
    (`FineTuningDataModule.validate_batch_size_for_packed_sequence` raises "Micro batch size
    should be 1 when training with packed sequence")."""
    return config.mbs == 1


def _kind(config: ParallelConfig) -> str:
    return "LoRA" if config.finetune == "lora" else "full"


BASE_CHECKPOINT = "<your NeMo checkpoint of the model>"
"""Where the generic route's script restores the base weights from: the stand-in recipe's own
(nemo://<its Hugging Face id>) are another model's, so the user names theirs."""


def _refuse(config: ParallelConfig, job: Job) -> None:
    model = job.model
    factory = nemo_recipe(model).factory
    if factory in NO_FINETUNE_RECIPE:
        raise ConfigError(f"NeMo 2.7.3's {factory} recipe, the one for {model.name}, has no "
                          f"finetune_recipe; fine-tune it fully with megatron, or pick a model "
                          f"NeMo fine-tunes.")
    if config.finetune != "lora":
        return
    if model.is_mla:
        raise ConfigError(f"{model.name} uses multi-head latent attention: NeMo's LoRA names "
                          f"its projections differently (linear_q_*_proj, linear_kv_*_proj), "
                          f"which advisor does not write; emit a model with standard attention.")
    if config.lora_targets == "all-linear" and model.is_moe:
        raise ConfigError(f"lora_targets all-linear on {model.name}: NeMo's linear_fc1/linear_fc2 "
                          f"targets adapt the routed experts too, which advisor prices frozen; "
                          f"use lora_targets attention.")
    if config.lora_targets == "all-linear" and model.layer_pattern:
        raise ConfigError(f"lora_targets all-linear on {model.name}: NeMo names Mamba mixers' "
                          f"projections differently (in_proj, out_proj); use lora_targets "
                          f"attention.")


def _python(value: object) -> str:
    """A Python expression for a `nemo_values` value ("torch.float16" is the dtype)."""
    if isinstance(value, str) and value.startswith("torch."):
        return value
    return repr(value)
