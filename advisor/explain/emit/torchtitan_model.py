"""A TorchTitan 0.3 config module for a model torchtitan ships no recipe for.

TorchTitan 0.3 has no TOML: a run is a Python config function returning `Trainer.Config`, found
by `--module <importable module> --config <function>` (`torchtitan.config.ConfigManager` imports
any fully qualified module). For a Llama-architecture model (RMSNorm, SwiGLU, RoPE, GQA, no
biases) advisor writes that module: torchtitan's own llama3 builders with the model's shape from
advisor's catalog (or its config.json), registered as a new llama3 flavour, inside the shipped
llama3 recipe's optimizer, data and checkpoint settings; FP8 (rowwise), MXFP8 and NVFP4 add
torchtitan's own torchao converters, as its llama3_405b, llama3_8b_mxfp8 and
llama3_debugmodel_nvfp4 recipes do. RoPE
takes the model's `rope_theta` (catalog or config.json) and, for Llama 3.1, its "llama3"
frequency scaling; an unknown base is said in a comment, never guessed.
"""

from __future__ import annotations

import re

from advisor.core.errors import ConfigError
from advisor.core.model import ModelSpec
from advisor.explain.emit import LLAMA3_SCALED_MODELS

#: advisor precision -> the converter torchtitan 0.3.0's llama3 recipes use for it (NVFP4: its
#: llama3_debugmodel_nvfp4, every in-layer Linear converted and the lm_head left in bf16).
CONVERTERS = {
    "fp8-row": "Float8LinearConverter.Config(filter_fqns=['lm_head'], model_compile_enabled=True)",
    "mxfp8": "MXFP8LinearConverter.Config(model_compile_enabled=True)",
    "nvfp4": "NVFP4LinearConverter.Config(fqns=['layers'], model_compile_enabled=True)",
}

NVFP4_BLOCK = 128
"""torchao's NVFP4 kernels need every local GEMM dimension to be a multiple of 128
(torchtitan 0.3.0 components/quantization/nvfp4.py `_NVFP4_BLOCK`: NVFP4Linear.Config refuses
the model's dimensions, the kernel the per-rank ones after TP)."""


def nvfp4_error(model: ModelSpec, tp: int) -> str | None:
    """Why torchtitan's NVFP4 Linears cannot run `model`'s in-layer GEMMs at `tp`, or None."""
    qkv = (model.num_attention_heads + 2 * model.num_kv_heads) * model.attention_head_dim
    dims = {"the hidden size": model.hidden_size,
            f"the fused QKV projection's width over tp {tp}": qkv // tp,
            f"the attention output's input over tp {tp}":
                model.num_attention_heads * model.attention_head_dim // tp,
            f"the MLP width over tp {tp}": (model.ffn_hidden_size or 0) // tp}
    bad = {what: n for what, n in dims.items() if n % NVFP4_BLOCK}
    if not bad:
        return None
    what, n = next(iter(bad.items()))
    return (f"precision nvfp4: torchtitan 0.3.0's NVFP4LinearConverter runs torchao's kernels, "
            f"which need every local GEMM dimension to be a multiple of {NVFP4_BLOCK}, and "
            f"{what} of {model.name} is {n}; pick another tp, or emit for megatron or nemo.")


LLAMA_FAMILIES = ("llama", "mistral")
"""Catalog families and Hugging Face `model_type`s built like Llama (the shape checks below
still apply: Mistral's sliding window, for one, is refused)."""

LLAMA3_ROPE_SCALING = {
    "scaling": "llama", "scaling_factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192}
"""Llama 3.1's config.json `rope_scaling` (rope_type llama3, factor 8.0, low_freq_factor 1.0,
high_freq_factor 4.0, original_max_position_embeddings 8192; tests/fixtures/hf_configs/
llama3.1-405b.json) in torchtitan 0.3.0's `RoPE.Config` fields (models/common/rope.py), as its
llama3 8B/70B/405B flavours set them (theta 500000, scaling "llama")."""


def module_name(model: ModelSpec) -> str:
    """The importable module the config is written to (`advisor_llama2_70b`)."""
    return "advisor_" + re.sub(r"\W", "_", model.name).strip("_").lower()


def function_name(model: ModelSpec) -> str:
    return re.sub(r"\W", "_", model.name).strip("_").lower()


def architecture_refusal(model: ModelSpec, gaps: list[str], precision: str = "bf16") -> str:
    """One sentence: why torchtitan cannot train `model` here, and what to do instead."""
    recipe = "recipe" if precision == "bf16" else f"{precision} recipe"
    return (f"torchtitan 0.3.0 has no {recipe} for {model.name} and advisor writes one only "
            f"for Llama-architecture models, which {model.name} is not ({'; '.join(gaps)}): "
            f"emit it for megatron or nemo instead.")


def llama_architecture_gaps(model: ModelSpec) -> list[str]:
    """What keeps `model` from torchtitan's llama3 builders (empty when it fits them)."""
    checks = [
        (model.family not in LLAMA_FAMILIES, f"family {model.family or model.name!r}"),
        (model.is_moe, "routed experts"),
        (model.is_mla, "multi-head latent attention"),
        (bool(model.layer_pattern), "Mamba layers"),
        (not model.gated_mlp, "a non-gated MLP (llama3 builds SwiGLU)"),
        (model.norm != "rmsnorm", f"{model.norm} (llama3 builds RMSNorm)"),
        (model.position_embedding != "rope",
         f"{model.position_embedding} positions (llama3 builds RoPE)"),
        (model.attention_bias or model.qkv_bias or model.mlp_bias, "linear biases"),
        (model.sliding_window > 0, "sliding-window attention"),
        (model.head_dim not in (0, model.hidden_size // model.num_attention_heads),
         f"head_dim {model.head_dim} ≠ hidden / heads (llama3 derives it)"),
    ]
    return [what for bad, what in checks if bad]


def rope_settings(model: ModelSpec) -> tuple[dict[str, object], str]:
    """(`RoPE.Config` keywords, a comment saying where they come from) for `model`: its
    `rope_theta`, plus Llama 3.1's scaling for the catalog's Llama 3.1 models. Nothing is
    written that advisor does not know: an unknown base leaves torchtitan's default, and the
    comment says so."""
    from_config_json = model.path.endswith(".json")
    if model.rope_theta <= 0:
        return {}, ("RoPE base: unknown to advisor, so torchtitan's default (theta 10000.0) "
                    "applies; set theta (and the scaling) from your checkpoint's config.json "
                    "(rope_theta, rope_scaling).")
    settings: dict[str, object] = {"theta": model.rope_theta}
    if from_config_json:
        return settings, ("RoPE base: rope_theta from the model's config.json; advisor does not "
                          "read its rope_scaling: if it has one, add torchtitan's scaling "
                          "fields here (Llama 3.1's: " + ", ".join(
                              f"{k}={v!r}" for k, v in LLAMA3_ROPE_SCALING.items()) + ").")
    if model.name in LLAMA3_SCALED_MODELS:
        settings.update(LLAMA3_ROPE_SCALING)
        return settings, ("RoPE: base and Llama 3.1's 'llama3' frequency scaling from the "
                          "model's config.json (advisor's catalog).")
    return settings, "RoPE: base from the model's config.json (advisor's catalog); no scaling."


def config_module(model: ModelSpec, precision: str) -> str:
    """Source of the config module for `model` trained in `precision`.

    Raises:
        ConfigError: the model is not Llama-architecture, or torchtitan has no converter for
            the precision.
    """
    gaps = llama_architecture_gaps(model)
    if gaps:
        raise ConfigError(architecture_refusal(model, gaps, precision))
    if precision not in ("bf16", *CONVERTERS):
        raise ConfigError(f"precision {precision} has no torchtitan 0.3.0 converter advisor "
                          f"can write (it writes {', '.join(CONVERTERS)} and bf16); use one of "
                          f"those or emit for megatron.")
    dim, heads = model.hidden_size, model.num_attention_heads
    flavor = f"advisor-{model.name}"
    converters = (f",\n        converters=[{CONVERTERS[precision]}]" if precision in CONVERTERS
                  else "")
    compile_line = ("    # torchao's converters need the model compiled (as the shipped "
                    "recipes set).\n    config.compile = CompileConfig(enable=True, "
                    "components=['model'])\n" if precision in CONVERTERS else "")
    if precision == "nvfp4":  # as torchtitan's llama3_debugmodel_nvfp4 sets it
        compile_line += '    config.parallelism.spmd_backend = "spmd_types"\n'
    # Plain words only in the docstring (a config.json directory's name could hold quotes).
    name = re.sub(r"[^\w.+ -]", "_", model.display_name or model.name)
    origin = "the model's config.json" if model.path.endswith(".json") else "advisor's catalog"
    rope, rope_note = rope_settings(model)
    rope_block = ("ROPE = dict(\n" + "".join(f"    {k}={v!r},\n" for k, v in rope.items())
                  + ")" if rope else "ROPE = {}")
    return f'''"""TorchTitan 0.3.0 config for {name}, written by advisor.

The shape comes from {origin}; the comment above ROPE says where its RoPE settings come from.
"""

from torchtitan.components.loss import ChunkedLossWrapper, CrossEntropyLoss
from torchtitan.components.quantization import (
    Float8LinearConverter,
    MXFP8LinearConverter,
    NVFP4LinearConverter,
)
from torchtitan.config import CompileConfig
from torchtitan.models import llama3
from torchtitan.models.common import ComplexRoPE, Embedding, Linear, RMSNorm
from torchtitan.models.llama3 import config_registry

FLAVOR = {flavor!r}
# {rope_note}
{rope_block}
DIM, VOCAB = {dim}, {model.vocab_size}


def _model(attn_backend="flex", tp_gemm_backend="default"):
    return llama3.Llama3Model.Config(
        dim=DIM,
        vocab_size=VOCAB,
        enable_weight_tying={model.tied_embeddings},
        tok_embeddings=Embedding.Config(num_embeddings=VOCAB, embedding_dim=DIM,
                                        param_init=llama3._EMBEDDING_INIT),
        norm=RMSNorm.Config(normalized_shape=DIM, param_init=llama3._NORM_INIT),
        lm_head=Linear.Config(in_features=DIM, out_features=VOCAB,
                              param_init=llama3._output_linear_init(DIM)),
        layers=llama3._build_llama3_layers(
            fuse_qkv=True,
            n_layers={model.num_layers},
            dim=DIM,
            n_heads={heads},
            n_kv_heads={model.num_kv_heads},
            hidden_dim={model.ffn_hidden_size},
            rope=ComplexRoPE.Config(dim=DIM // {heads}, max_seq_len={model.max_seq_len},
                                    **ROPE),
            attn_backend=attn_backend,
            tp_gemm_backend=tp_gemm_backend,
        ),
    )


llama3.llama3_configs[FLAVOR] = _model


def {function_name(model)}():
    """The shipped llama3_70b recipe (optimizer, data, checkpointing) with this model."""
    config = config_registry.llama3_70b()
    config.model_spec = llama3.model_registry(FLAVOR{converters})
{compile_line}    config.loss = ChunkedLossWrapper.Config(
        loss_fn=CrossEntropyLoss.Config(global_vocab_size=VOCAB))
    config.hf_assets_path = {"./assets/hf/" + model.name!r}  # your tokenizer
    return config
'''
