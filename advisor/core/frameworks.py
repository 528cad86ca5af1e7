"""The training frameworks advisor models, under the names users write for them.

One table, read everywhere a framework is named (`predict --input` rows, `Predictor` frames,
`space.validate`): a spelling maps to one canonical name, and anything else gets one message
that lists every accepted name. The canonical names are the ones the calibration
(`advisor/catalog/calibration.toml`, `[framework.*]`), the surrogate's features and the step
model key on.
"""

from __future__ import annotations

from advisor.core.errors import ConfigError

DEFAULT = "megatron"
"""An empty framework cell means Megatron-Core, the framework the model is calibrated on."""

ALIASES: dict[str, tuple[str, ...]] = {
    # Megatron-Core and what runs it: NeMo 2 and Megatron-Bridge build Megatron-Core models
    # (NeMo docs: "NeMo 2.0 ... uses Megatron-Core"); MLPerf's `nemo` rows are read the same
    # way (advisor/data/mlperf.py).
    "megatron": ("megatron-lm", "megatron-core", "mcore", "nemo", "nemo2", "nemo-2",
                 "nemo-megatron", "megatron-bridge"),
    # TorchTitan runs PyTorch FSDP2 (fully_shard) for data parallelism; its FSDP2 spellings are
    # the framework itself.
    "torchtitan": ("titan", "torchtitan-fsdp2", "torchtitan-fsdp"),
    # NeMo AutoModel: Hugging Face models under PyTorch FSDP2 (NVIDIA-NeMo/Automodel).
    "automodel": ("nemo-automodel", "automodel-fsdp2", "nemo-automodel-fsdp2"),
    # A plain PyTorch FSDP / FSDP2 training loop.
    "pytorch-fsdp": ("fsdp", "fsdp2", "pytorch-fsdp2", "torch-fsdp", "torch-fsdp2"),
    # Frameworks of published and MLPerf rows (datasets/reference), each with its own kernel
    # factors where fitted (calibration.toml [framework.*]).
    "pytorch": ("torch",),
    "llm-foundry": ("llmfoundry", "mosaicml-llm-foundry"),
    "megatron-deepspeed": (),
    "deepspeed": (),
    "llmboost": (),
    "optimum-habana": (),
}
"""Canonical name -> the other spellings accepted for it (compared after `_spelling`)."""

CANONICAL: dict[str, str] = {alias: name for name, aliases in ALIASES.items()
                             for alias in (name, *aliases)}
"""Every accepted spelling -> its canonical name."""

PP_WITH_FSDP = ("torchtitan", "automodel", "pytorch-fsdp")
"""Frameworks that run FSDP (PyTorch FSDP2) with pipeline parallelism: TorchTitan and NeMo
AutoModel (DeepSeek-V3 on 256-1,024 H100, Kimi-K2 on 256 H100), and PyTorch's own
`torch.distributed.pipelining` with `fully_shard`. Megatron-FSDP does not."""

EAGER_BLOCKS = ("torchtitan",)
"""Frameworks whose transformer blocks run as eager PyTorch ops unless torch.compile fuses
them (`ParallelConfig.torch_compile`): TorchTitan writes RoPE and SwiGLU as PyTorch ops
(torchtitan/models/llama3/model/model.py: `apply_rotary_emb`, `FeedForward.forward`) and
compiles only when told (`--compile.enable`; CompileConfig.enable defaults to False).
Megatron-Core runs Transformer Engine's and Apex's fused kernels; NeMo AutoModel's and plain
FSDP loops' model code is not read here, so they are modelled with fused kernels."""

FLASH_ATTENTION_2 = ("llm-foundry", "deepspeed", "megatron-deepspeed")
"""Frameworks whose fused attention runs FlashAttention-2's kernels (or their Triton port)
rather than a cuDNN or Hopper-specific kernel, which Megatron-Core's Transformer Engine runs and
the families' fitted attention efficiency describes: llm-foundry's MPT models ("our models use
Flash Attention", scripts/train/benchmarking/README.md; `attn_impl: flash` or `triton`),
Hugging Face models under DeepSpeed as MLPerf's Llama 2 70B LoRA reference runs them
(mlcommons/training llama2_70b_lora/scripts/train.py: `use_flash_attn` defaults to True), and
Megatron-DeepSpeed's `--use-flash-attn`. PyTorch's `scaled_dot_product_attention` (TorchTitan,
FSDP loops, advisor's own workload) is not among them: on the H200 probe (torch 2.11,
datasets/probes/h200-power) its causal head-dim-128 kernel ran 4k tokens at a median 514
TFLOP/s (the middle half 512-517), cuDNN's and FlashAttention-3's class, where FlashAttention-2
reaches 319 (`tests/perf/test_attention_length.py`). NeMo AutoModel is left with Megatron-Core.
`advisor.perf.step_compute.FLASH_ATTENTION_2_SPEED` prices the difference per architecture."""


def _spelling(name: str) -> str:
    """`name` as compared: lower case, `_` and spaces read as `-` ("NeMo_AutoModel" ->
    "nemo-automodel")."""
    return "-".join(str(name).strip().lower().replace("_", " ").split())


def accepted() -> str:
    """Every accepted name, canonical first with its other spellings in brackets."""
    return "; ".join(f"{name} ({', '.join(aliases)})" if aliases else name
                     for name, aliases in ALIASES.items())


def find_framework(name: str) -> str | None:
    """The canonical name of `name` (empty -> `DEFAULT`), or None where advisor does not know
    it."""
    key = _spelling(name)
    return DEFAULT if key in ("", "nan", "none") else CANONICAL.get(key)


def canonical_framework(name: str) -> str:
    """The canonical name of `name`; raises `ConfigError` listing the accepted names."""
    found = find_framework(name)
    if found is None:
        raise ConfigError(f"framework {str(name).strip()!r} is not one advisor models; use one "
                          f"of: {accepted()}.")
    return found
