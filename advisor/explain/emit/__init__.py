"""Launch configurations for training frameworks, written from one `ParallelConfig`.

`emit(kind, config, job)` returns a ready-to-edit shell command for Megatron-LM, NeMo 2 or
TorchTitan. Each emitter refuses, with a `ConfigError`, what its framework cannot express rather
than emitting something that runs differently. No framework is imported here: emitting is string
work, and `advisor` never imports torch.
"""

from __future__ import annotations

import importlib
import math
import shlex

from advisor.core.errors import ConfigError
from advisor.core.parallel import Job, ParallelConfig

EMITTERS = ("megatron", "nemo", "torchtitan")
"""Frameworks `emit` can write a launch configuration for."""


def emit(kind: str, config: ParallelConfig, job: Job) -> str:
    """The launch command that runs `config` for `job` under framework `kind`.

    Args:
        kind: One of `EMITTERS`.
        config: The parallel layout and batch settings to emit.
        job: The model, platform and GPU count `config` was chosen for.

    Returns:
        A multi-line shell command; `#` lines above it say what to check before running.

    Raises:
        ConfigError: `kind` is unknown, `config` does not fit `job`, or the framework cannot
            express one of its settings.
    """
    if kind not in EMITTERS:
        raise ConfigError(f"emitter {kind!r} is unknown; use one of {', '.join(EMITTERS)}.")
    module = importlib.import_module(f"advisor.explain.emit.{kind}")
    return power_limit_comments(job) + getattr(module, f"{kind}_command")(config, job)


LLAMA3_SCALED_MODELS = ("llama3.1-8b", "llama3.1-70b", "llama3.1-405b")
"""Catalog models whose config.json carries Llama 3.1's RoPE scaling (rope_type llama3, factor
8.0, low_freq_factor 1.0, high_freq_factor 4.0, original_max_position_embeddings 8192: their
`rope_theta` source; Llama 2's and Llama 3's have rope_scaling null). `ModelSpec` has no
scaling field, so a config.json model's scaling is not known to the emitters."""


SET_POWER_LIMIT = {"nvidia": "nvidia-smi -pl {w}", "amd": "amd-smi set --power-cap {w}"}
"""How each vendor's tool sets a GPU's power limit in watts (as root; on every node):
nvidia-smi(1) -pl needs administrator privileges and a value between the Min and Max Power
Limit it reports."""

KEEP_POWER_LIMIT = {"nvidia": "nvidia-smi -pm 1"}
"""What keeps a power limit set: without persistence mode the NVIDIA driver releases the
device's state when no client holds it (nvidia-persistenced(1)), and the limit with it."""


def power_limit_comments(job: Job) -> str:
    """`#` lines saying how to set the power limit the prediction assumed, where it is not the
    board's default (comments: the emitted command itself runs only the framework).

    Raises:
        ConfigError: the limit is outside the range the vendor's tool sets on the part
            (`Platform.power_limit_range_w`).
    """
    platform = job.platform
    limit = platform.power_limit_w
    if limit is None or limit == platform.tdp_w:
        return ""
    least, most = platform.power_limit_range_w
    if not least <= limit <= most:
        raise ConfigError(f"the prediction assumes a {limit:.0f} W power limit, outside the "
                          f"{least:.0f}-{most:.0f} W {platform.name} accepts (the vendor's "
                          f"tool refuses it); predict at a limit in that range "
                          f"(--power-limit-w).")
    how = SET_POWER_LIMIT.get(platform.vendor)
    if how is None:
        return f"# Predicted with every GPU's power limit at {limit:.0f} W.\n"
    keep = KEEP_POWER_LIMIT.get(platform.vendor)
    lost = (" The limit needs root, and the driver forgets it when it unloads unless "
            "persistence mode is on (the first line)." if keep else " The limit needs root.")
    return (f"# Predicted with every GPU's power limit at {limit:.0f} W (board default "
            f"{platform.tdp_w:.0f} W; {platform.name} accepts {least:.0f}-{most:.0f} W): "
            f"before launching, on every node, as root:\n"
            + (f"#   {keep}\n" if keep else "")
            + f"#   {how.format(w=f'{limit:.0f}')}\n"
            f"#{lost} Back to {platform.tdp_w:.0f} W after the job "
            f"({how.format(w=f'{platform.tdp_w:.0f}')}).\n")


def check_fits(config: ParallelConfig, job: Job, framework: str = "megatron") -> None:
    """Raise `ConfigError` unless `config` is a valid layout of `job` under `framework`'s rules
    (`advisor.core.space.validate`: TorchTitan's pipeline schedules are
    torch.distributed.pipelining's, Megatron-LM's and NeMo's Megatron-Core's)."""
    from advisor.core.space import validate  # pandas: only when emitting

    if config.gbs != job.gbs or config.seq_len != job.seq_len:
        raise ConfigError(f"config has gbs {config.gbs}, seq_len {config.seq_len} but the job "
                          f"has gbs {job.gbs}, seq_len {job.seq_len}; build the config with "
                          f"advisor.core.parallel.make_config(job, ...).")
    validate(config, job.model, job.platform, num_gpus=job.num_gpus, framework=framework)


LORA_HINTS = {
    "megatron": "Megatron-LM's pretrain_gpt.py has no LoRA flags (adapters come from NeMo or "
                "Megatron-Bridge PEFT)",
    "torchtitan": "torchtitan 0.3.0's LoRAConverter ships only in a debug-model recipe "
                  "(llama3_debugmodel_float8_emulate_lora) and advisor writes no LoRA config "
                  "module for it",
}


def refuse_lora(kind: str, config: ParallelConfig) -> None:
    """Raise `ConfigError` for a LoRA configuration: `kind` has no adapters (NeMo has)."""
    if config.finetune == "lora":
        raise ConfigError(f"finetune lora: {LORA_HINTS[kind]}; the prediction stands, but "
                          f"emit it for nemo, or launch it with your framework's PEFT recipe (rank "
                          f"{config.lora_rank}, targets {config.lora_targets}).")


def node_layout(job: Job) -> tuple[int, int]:
    """(nodes, processes per node) for `job`: whole nodes, or one partial node.

    Raises:
        ConfigError: the GPUs span several nodes but do not fill them evenly.
    """
    per_node = job.platform.num_gpus_per_node
    if job.num_gpus <= per_node:
        return 1, job.num_gpus
    if job.num_gpus % per_node:
        raise ConfigError(f"{job.num_gpus} GPUs do not fill whole {job.platform.name} nodes of "
                          f"{per_node}; use a multiple of {per_node} GPUs.")
    return job.num_gpus // per_node, per_node


def torchrun_words(job: Job) -> list[str]:
    """`torchrun` and its launch flags; multi-node jobs rendezvous at $MASTER_ADDR."""
    nodes, per_node = node_layout(job)
    words = ["torchrun", f"--nproc-per-node={per_node}", f"--nnodes={nodes}"]
    if nodes > 1:
        words += ["--node-rank=$NODE_RANK", "--master-addr=$MASTER_ADDR", "--master-port=29500"]
    return words


def shell_command(comments: list[str], lines: list[list[str]]) -> str:
    """Comment lines, then one command whose `lines` are joined with backslash continuations.
    Words are written as given: callers quote what they did not choose (`shlex.quote`,
    `pairs`); a comment is kept on its line whatever it holds."""
    body = " \\\n    ".join(" ".join(words) for words in lines if words)
    return "".join(f"# {_one_line(c)}\n" for c in comments) + body + "\n"


def _one_line(text: str) -> str:
    return " ".join(text.splitlines())


def pairs(args: list[str]) -> list[list[str]]:
    """Group a flat argument list into shell-quoted `--flag [value]` lines (a negative number
    is a value)."""
    lines: list[list[str]] = []
    for word in args:
        if (word.startswith("-") and not word.lstrip("-").isdigit()) or not lines:
            lines.append([shlex.quote(word)])
        else:
            lines[-1].append(shlex.quote(word))
    return lines


def gpus_label(job: Job) -> str:
    """`llama3-70b on 64 × h200 (8 node(s))`, for comment lines."""
    nodes = math.ceil(job.num_gpus / job.platform.num_gpus_per_node)
    return f"{job.model.name} on {job.num_gpus} × {job.platform.name} ({nodes} node(s))"
