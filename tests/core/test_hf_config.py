import json

import pytest

from advisor import catalog
from advisor.core.errors import CatalogError
from advisor.core.hf_config import model_from_hf_config


@pytest.mark.parametrize("name", ["llama3.1-405b", "mixtral-8x7b", "qwen3-30b-a3b",
                                  "nemotron-3-nano-30b-a3b"])
def test_published_config_matches_catalog_counts(fixtures, name):
    spec = model_from_hf_config(fixtures / "hf_configs" / f"{name}.json")
    ref = catalog.load_model(name)
    assert spec.params.total == pytest.approx(ref.params.total, rel=0.005)
    assert spec.params.active == pytest.approx(ref.params.active, rel=0.005)
    assert spec.num_layers == ref.num_layers


def test_model_option_accepts_a_config_path(fixtures):
    spec = catalog.load_model(str(fixtures / "hf_configs" / "mixtral-8x7b.json"))
    assert spec.num_experts == 8 and spec.moe_top_k == 2


def test_gpt2_field_names(tmp_path):
    # GPT-2 small's shape (openai-community/gpt2): 124,439,808 parameters with tied embeddings.
    cfg = {"model_type": "gpt2", "n_layer": 12, "n_embd": 768, "n_head": 12,
           "vocab_size": 50257, "n_positions": 1024, "n_inner": None}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    spec = model_from_hf_config(tmp_path)
    assert spec.params.total == 124_439_808


def test_gpt_neox_field_names(tmp_path):
    # Pythia-160M's shape (EleutherAI/pythia-160m): 162,322,944 parameters, untied.
    cfg = {"model_type": "gpt_neox", "num_hidden_layers": 12, "hidden_size": 768,
           "intermediate_size": 3072, "num_attention_heads": 12, "vocab_size": 50304,
           "max_position_embeddings": 2048, "tie_word_embeddings": False}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    assert model_from_hf_config(tmp_path).params.total == 162_322_944


def test_malformed_json_is_one_clear_error(tmp_path):
    f = tmp_path / "config.json"
    f.write_text("{not json")
    with pytest.raises(CatalogError, match="not valid JSON"):
        model_from_hf_config(f)


def test_missing_field_is_named(tmp_path):
    f = tmp_path / "config.json"
    f.write_text(json.dumps({"model_type": "llama", "hidden_size": 64}))
    with pytest.raises(CatalogError, match="missing field .num_attention_heads"):
        model_from_hf_config(f)


def test_missing_file(tmp_path):
    with pytest.raises(CatalogError, match="no such file"):
        model_from_hf_config(tmp_path / "nope.json")


@pytest.mark.parametrize("field,value", [("num_hidden_layers", "abc"),
                                         ("num_attention_heads", [32]),
                                         ("intermediate_size", -5)])
def test_odd_field_values_are_clear_errors(tmp_path, field, value):
    cfg = {"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64,
           "intermediate_size": 128, "num_attention_heads": 4, "vocab_size": 100}
    cfg[field] = value
    f = tmp_path / "config.json"
    f.write_text(json.dumps(cfg))
    with pytest.raises(CatalogError):
        model_from_hf_config(f)


LLAMA_TINY = {"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64,
              "intermediate_size": 128, "num_attention_heads": 4, "vocab_size": 100}


@pytest.mark.parametrize("changes,message", [
    ({"hidden_size": 64.5}, "64.5 is not a whole number"),       # was truncated to 64
    ({"hidden_size": 16, "num_attention_heads": 64}, "must divide hidden_size"),  # was NaN
    ({"hidden_size": 4096, "num_attention_heads": 48}, "must divide hidden_size"),  # kv 85
    ({"num_hidden_layers": True}, "not a whole number"),
    ({"vocab_size": "100"}, "not a whole number"),
    ({"rope_theta": float("inf")}, "rope_theta must be a finite number"),
])
def test_degenerate_geometry_is_refused(tmp_path, changes, message):
    f = tmp_path / "config.json"
    f.write_text(json.dumps({**LLAMA_TINY, **changes}))
    with pytest.raises(CatalogError, match=message):
        model_from_hf_config(f)


def test_whole_float_sizes_and_explicit_head_dim_are_accepted(tmp_path):
    f = tmp_path / "config.json"
    f.write_text(json.dumps({**LLAMA_TINY, "hidden_size": 64.0, "num_attention_heads": 48,
                             "num_key_value_heads": 8, "head_dim": 16, "rope_theta": 5e5}))
    model = model_from_hf_config(f)
    assert (model.hidden_size, model.attention_head_dim, model.rope_theta) == (64, 16, 5e5)


def test_model_paths_that_are_no_config_say_what_they_are(tmp_path):
    (tmp_path / "empty").mkdir()
    (tmp_path / "zero").symlink_to("/dev/zero")
    with pytest.raises(CatalogError, match="a directory without a config.json"):
        catalog.load_model(str(tmp_path / "empty"))
    with pytest.raises(CatalogError, match="not a regular file"):
        catalog.load_model(str(tmp_path / "zero"))
    with pytest.raises(CatalogError, match="no such file or directory"):
        catalog.load_model(str(tmp_path / "missing"))


def test_group_limited_routing_is_read(tmp_path, fixtures):
    # DeepSeek-V3's config.json (huggingface.co/deepseek-ai/DeepSeek-V3), as the catalog cites it.
    cfg = {"model_type": "deepseek_v3", "hidden_size": 7168, "intermediate_size": 18432,
           "moe_intermediate_size": 2048, "num_hidden_layers": 61, "first_k_dense_replace": 3,
           "n_routed_experts": 256, "n_shared_experts": 1, "num_experts_per_tok": 8,
           "n_group": 8, "topk_group": 4, "num_attention_heads": 128,
           "num_key_value_heads": 128, "q_lora_rank": 1536, "kv_lora_rank": 512,
           "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
           "vocab_size": 129280, "max_position_embeddings": 163840,
           "num_nextn_predict_layers": 1, "tie_word_embeddings": False}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    spec = model_from_hf_config(tmp_path)
    ref = catalog.load_model("deepseek-v3")
    assert (spec.moe_router_num_groups, spec.moe_router_group_topk) == (
        ref.moe_router_num_groups, ref.moe_router_group_topk) == (8, 4)
    # n_group 1 (Nemotron 3 Nano) is no limit.
    nano = model_from_hf_config(fixtures / "hf_configs" / "nemotron-3-nano-30b-a3b.json")
    assert nano.moe_router_num_groups == 0
