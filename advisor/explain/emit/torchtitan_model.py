"""A TorchTitan 0.3 config module for a model torchtitan ships no recipe for.

TorchTitan 0.3 has no TOML: a run is a Python config function returning `Trainer.Config`, found
by `--module <importable module> --config <function>` (`torchtitan.config.ConfigManager` imports
any fully qualified module). For a Llama-architecture model (RMSNorm, SwiGLU, RoPE, GQA, no
biases) advisor writes that module: torchtitan's own llama3 builders with the model's shape from
advisor's catalog (or its config.json), registered as a new llama3 flavour, inside the shipped
llama3 recipe's optimizer, data and checkpoint settings; FP8 (tensorwise) and MXFP8 add
torchtitan's own torchao converters, as its llama3_405b and llama3_8b_mxfp8 recipes do.
"""

from __future__ import annotations

import re

from advisor.core.errors import ConfigError
from advisor.core.model import ModelSpec

#: advisor precision -> the converter torchtitan 0.3.0's llama3 recipes use for it.
CONVERTERS = {
    "fp8-cs": "Float8LinearConverter.Config(filter_fqns=['lm_head'], model_compile_enabled=True)",
    "mxfp8": "MXFP8LinearConverter.Config(model_compile_enabled=True)",
}


LLAMA_FAMILIES = ("llama", "mistral")
"""Catalog families and Hugging Face `model_type`s built like Llama (the shape checks below
still apply: Mistral's sliding window, for one, is refused)."""


def module_name(model: ModelSpec) -> str:
    """The importable module the config is written to (`advisor_llama2_70b`)."""
    return "advisor_" + re.sub(r"\W", "_", model.name).strip("_").lower()


def function_name(model: ModelSpec) -> str:
    return re.sub(r"\W", "_", model.name).strip("_").lower()


def llama_architecture_gaps(model: ModelSpec) -> list[str]:
    """What keeps `model` from torchtitan's llama3 builders (empty when it fits them)."""
    checks = [
        (model.family not in LLAMA_FAMILIES,
         f"model family {model.family or model.name!r}, not Llama's (its own torchtitan module,"
         f" if any, builds it: Qwen3 adds QK normalisation)"),
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


def config_module(model: ModelSpec, precision: str) -> str:
    """Source of the config module for `model` trained in `precision`.

    Raises:
        ConfigError: the model is not Llama-architecture, or torchtitan has no converter for
            the precision.
    """
    gaps = llama_architecture_gaps(model)
    if gaps:
        raise ConfigError(f"torchtitan 0.3.0 ships no recipe for {model.name}, and advisor "
                          f"writes config modules only for Llama-architecture models (it has "
                          f"{', '.join(gaps)}); write a config function returning "
                          f"Trainer.Config with the model's own builders, or emit for megatron "
                          f"or nemo.")
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
    name = model.display_name or model.name
    return f'''"""TorchTitan 0.3.0 config for {name}, written by advisor.

The shape is advisor's ({model.path or 'catalog'}); RoPE is not part of it: set ROPE_THETA and
the scaling to your checkpoint's config.json (rope_theta, rope_scaling) before training.
"""

from torchtitan.components.loss import ChunkedLossWrapper, CrossEntropyLoss
from torchtitan.components.quantization import Float8LinearConverter, MXFP8LinearConverter
from torchtitan.config import CompileConfig
from torchtitan.models import llama3
from torchtitan.models.common import ComplexRoPE, Embedding, Linear, RMSNorm
from torchtitan.models.llama3 import config_registry

FLAVOR = {flavor!r}
ROPE_THETA = 10000.0
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
                                    theta=ROPE_THETA, scaling="none"),
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
    config.hf_assets_path = "./assets/hf/{model.name}"  # your tokenizer
    return config
'''
