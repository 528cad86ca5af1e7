"""Read a Hugging Face `config.json` into a `ModelSpec`.

Field names differ per architecture (Llama/Mistral/Mixtral/Qwen2/Qwen3/Qwen3-MoE/DeepSeek-V3/
Nemotron-H/GPT-2/GPT-NeoX); each reader maps them onto the one `ModelSpec`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from advisor.core.errors import CatalogError
from advisor.core.model import ModelSpec

SUPPORTED = ("llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe",
             "deepseek_v3", "deepseek_v2", "kimi_k2", "gpt2", "gpt_neox", "nemotron_h",
             "gpt_oss", "llama4")


def model_from_hf_config(path: Path) -> ModelSpec:
    """Build a `ModelSpec` from a `config.json` (or a folder holding one)."""
    if path.is_dir():
        if not (path / "config.json").exists():
            raise CatalogError(f"{path}: a directory without a config.json; give a Hugging "
                               f"Face model folder (it holds config.json) or the file itself.")
        path = path / "config.json"
    from advisor.core.files import JSON_LIMIT_BYTES, read_bounded

    data = read_bounded(path, limit_bytes=JSON_LIMIT_BYTES, what="config.json",
                        error=CatalogError)
    try:
        raw = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise CatalogError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start}).") from None
    except json.JSONDecodeError as e:
        raise CatalogError(f"{path}: not valid JSON ({e.msg} at line {e.lineno}).") from None
    except ValueError as e:   # an integer of more digits than Python converts (4,300)
        raise CatalogError(f"{path}: not a model config ({str(e)[:100]}).") from None
    except RecursionError:
        raise CatalogError(f"{path}: JSON nested too deeply to be a model config.") from None
    if not isinstance(raw, dict):
        raise CatalogError(f"{path}: expected a JSON object with the model's fields.")
    cfg = raw.get("text_config") if isinstance(raw.get("text_config"), dict) else raw
    model_type = str(raw.get("model_type", cfg.get("model_type", ""))).lower()
    name = path.parent.name.lower() if path.name == "config.json" else path.stem.lower()
    try:
        fields = _read(cfg, model_type, path)
    except (TypeError, ValueError, OverflowError, AttributeError) as e:
        # e.g. "num_hidden_layers": "abc", [32] or Infinity; a nested field that is no table
        raise CatalogError(f"{path}: a size field is not a whole number "
                           f"({type(e).__name__}: {str(e)[:100]}).") from None
    fields.update(name=name or "hf-model", display_name=name, family=model_type or "hf",
                  path=str(path), sources={"architecture": str(path)})
    try:
        return ModelSpec(**fields)
    except TypeError as e:  # a reader produced a key ModelSpec lacks: a bug, not user input
        raise CatalogError(f"{path}: cannot map this config ({e}).") from None


def _get(cfg: dict[str, Any], path: Path, *keys: str, default: Any = None) -> Any:
    for key in keys:
        value = cfg.get(key)
        if value is not None:
            return value
    if default is None:
        raise CatalogError(f"{path}: missing field {keys[0]!r} (model_type "
                           f"{cfg.get('model_type', '?')!r}); advisor reads "
                           f"{', '.join(SUPPORTED)} configs.")
    return default


def _read(cfg: dict[str, Any], model_type: str, path: Path) -> dict[str, Any]:
    if model_type == "gpt2":
        hidden = _whole(_get(cfg, path, "n_embd"))
        return dict(
            num_layers=_whole(_get(cfg, path, "n_layer")), hidden_size=hidden,
            ffn_hidden_size=_whole(cfg.get("n_inner") or 4 * hidden),
            num_attention_heads=_whole(_get(cfg, path, "n_head")),
            num_kv_heads=_whole(_get(cfg, path, "n_head")),
            vocab_size=_whole(_get(cfg, path, "vocab_size")),
            max_seq_len=_whole(_get(cfg, path, "n_positions", "n_ctx")),
            tied_embeddings=bool(cfg.get("tie_word_embeddings", True)), gated_mlp=False,
            position_embedding="learned", norm="layernorm", attention_bias=True, mlp_bias=True)

    heads = _whole(_get(cfg, path, "num_attention_heads"))
    fields: dict[str, Any] = dict(
        num_layers=_whole(_get(cfg, path, "num_hidden_layers")),
        hidden_size=_whole(_get(cfg, path, "hidden_size")),
        ffn_hidden_size=_whole(_get(cfg, path, "intermediate_size", "intermediate_size_mlp",
                                 default=0)),
        num_attention_heads=heads,
        num_kv_heads=_whole(_get(cfg, path, "num_key_value_heads", default=heads)),
        vocab_size=_whole(_get(cfg, path, "vocab_size")),
        max_seq_len=_whole(_get(cfg, path, "max_position_embeddings", default=0)) or 4096,
        head_dim=_whole(cfg.get("head_dim") or 0),
        tied_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        attention_bias=bool(cfg.get("attention_bias", False)),
        rope_theta=float(cfg.get("rope_theta") or 0.0),
        mlp_bias=bool(cfg.get("mlp_bias", False)),
    )
    if model_type == "gpt_neox":
        fields.update(gated_mlp=False, norm="layernorm", attention_bias=True, mlp_bias=True,
                      tied_embeddings=False)
    if model_type in ("qwen2", "qwen2_moe"):
        fields["qkv_bias"] = True
    # Mixture of experts, whichever spelling the architecture uses.
    experts = _whole(cfg.get("num_local_experts") or cfg.get("n_routed_experts")
                  or cfg.get("num_experts") or 0)
    if experts:
        fields.update(
            num_experts=experts,
            moe_top_k=_whole(_get(cfg, path, "num_experts_per_tok", "experts_per_token")),
            moe_ffn_hidden_size=_whole(cfg.get("moe_intermediate_size")
                                    or cfg.get("intermediate_size") or 0),
            num_shared_experts=_whole(cfg.get("n_shared_experts") or 0),
            num_dense_layers=_whole(cfg.get("first_k_dense_replace") or 0),
            moe_layer_freq=_whole(cfg.get("moe_layer_freq") or cfg.get("decoder_sparse_step")
                               or cfg.get("interleave_moe_layer_step") or 1),
        )
        if cfg.get("shared_expert_intermediate_size"):  # Qwen2-MoE: one shared expert
            fields["num_shared_experts"] = 1
            fields["shared_expert_ffn_hidden_size"] = _whole(cfg["shared_expert_intermediate_size"])
        if model_type == "llama4":  # one shared expert of the routed size; dense layers differ
            fields["num_shared_experts"] = 1
            fields["ffn_hidden_size"] = _whole(cfg.get("intermediate_size_mlp")
                                            or fields["ffn_hidden_size"])
        if cfg.get("moe_latent_size"):
            fields["moe_latent_size"] = _whole(cfg["moe_latent_size"])
        if _whole(cfg.get("n_group") or 1) > 1 and cfg.get("topk_group"):  # DeepSeek-V2/V3
            fields.update(moe_router_num_groups=_whole(cfg["n_group"]),
                          moe_router_group_topk=_whole(cfg["topk_group"]))
        if cfg.get("moe_shared_expert_intermediate_size"):  # Nemotron-H
            fields["num_shared_experts"] = _whole(cfg.get("n_shared_experts") or 1)
            fields["shared_expert_ffn_hidden_size"] = _whole(
                cfg["moe_shared_expert_intermediate_size"])
    if cfg.get("kv_lora_rank"):  # multi-head latent attention (DeepSeek-V2/V3, Kimi-K2)
        fields.update(q_lora_rank=_whole(cfg.get("q_lora_rank") or 0),
                      kv_lora_rank=_whole(cfg["kv_lora_rank"]),
                      qk_nope_head_dim=_whole(_get(cfg, path, "qk_nope_head_dim")),
                      qk_rope_head_dim=_whole(_get(cfg, path, "qk_rope_head_dim")),
                      v_head_dim=_whole(_get(cfg, path, "v_head_dim")),
                      num_kv_heads=heads,
                      num_mtp_layers=_whole(cfg.get("num_nextn_predict_layers") or 0))
    if cfg.get("hybrid_override_pattern"):  # Nemotron-H: Mamba-2 / attention / MLP / MoE
        pattern = str(cfg["hybrid_override_pattern"])
        fields.update(layer_pattern=pattern, num_layers=len(pattern),
                      mamba_num_heads=_whole(_get(cfg, path, "mamba_num_heads")),
                      mamba_head_dim=_whole(_get(cfg, path, "mamba_head_dim")),
                      mamba_state_dim=_whole(_get(cfg, path, "ssm_state_size")),
                      mamba_num_groups=_whole(cfg.get("n_groups") or 1),
                      mamba_conv_kernel=_whole(cfg.get("conv_kernel") or 4))
        # Nemotron-H MLPs use squared ReLU (two matrices), not SwiGLU.
        fields["gated_mlp"] = str(cfg.get("mlp_hidden_act", "relu2")) in ("silu", "swiglu")
    if cfg.get("sliding_window") and isinstance(cfg.get("layer_types"), list):
        fields.update(sliding_window=_whole(cfg["sliding_window"]),
                      num_sliding_window_layers=sum(t == "sliding_attention"
                                                    for t in cfg["layer_types"]))
    if model_type == "gpt_oss":
        fields["qkv_bias"] = True
        fields["attention_bias"] = True
    if fields["ffn_hidden_size"] == 0 and not experts:
        raise CatalogError(f"{path}: missing field 'intermediate_size'.")
    return fields


def _whole(value: Any) -> int:
    """A size field as an int: 4096 or 4096.0; never truncates 4096.5 or reads "4096"."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    raise ValueError(f"{value!r} is not a whole number")
