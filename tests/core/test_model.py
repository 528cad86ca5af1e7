import pytest

from advisor import catalog
from advisor.core.errors import CatalogError
from advisor.core.model import ModelSpec

MODELS = sorted(catalog.models().values(), key=lambda m: m.name)


@pytest.mark.parametrize("model", MODELS, ids=[m.name for m in MODELS])
def test_total_params_match_published_count(model):
    # Exact published counts within 3 %; counts that are only the name's rounded size ("8B")
    # within 10 % (`published_params_nominal`).
    tolerance = 0.10 if model.published_params_nominal else 0.03
    ratio = model.params.total / model.published_total_params
    assert abs(ratio - 1) <= tolerance, f"{model.name}: {ratio:.3f}"


MOE = [m for m in MODELS if m.published_active_params]


@pytest.mark.parametrize("model", MOE, ids=[m.name for m in MOE])
def test_active_params_match_published_count(model):
    active = model.params.active
    if model.published_active_excludes_embedding:
        active -= model.params.embedding
    tolerance = 0.20 if model.published_params_nominal else 0.03
    ratio = active / model.published_active_params
    assert abs(ratio - 1) <= tolerance, f"{model.name}: {ratio:.3f}"


def test_moe_active_is_less_than_total():
    for m in MOE:
        assert m.params.active < m.params.total


def test_dense_active_equals_total():
    m = catalog.load_model("70b")
    assert m.params.active == m.params.total


def test_deepseek_first_layers_are_dense():
    m = catalog.load_model("deepseek-v3")
    kinds = [s.ffn for s in m.sublayers]
    assert kinds[: m.num_dense_layers] == ["mlp"] * m.num_dense_layers
    assert kinds[m.num_dense_layers:] == ["moe"] * (m.num_layers - m.num_dense_layers)


def test_hybrid_pattern_sets_layer_kinds():
    m = catalog.load_model("nemotron-3-nano-30b-a3b")
    assert len(m.sublayers) == len(m.layer_pattern) == m.num_layers
    assert {s.mixer for s in m.sublayers} >= {"mamba", "attention"}


def _spec(**kw):
    base = dict(name="t", num_layers=2, hidden_size=64, ffn_hidden_size=128,
                num_attention_heads=4, num_kv_heads=4, vocab_size=100, max_seq_len=32)
    return ModelSpec(**{**base, **kw})


def test_kv_heads_must_divide_heads():
    with pytest.raises(CatalogError, match="num_kv_heads"):
        _spec(num_kv_heads=3)


def test_layer_pattern_length_must_match_layers():
    with pytest.raises(CatalogError, match="layer_pattern"):
        _spec(layer_pattern="*-*")


def test_hand_counted_small_model():
    # 2 layers, h=64, MHA, SwiGLU 128, RMSNorm, untied, vocab 100:
    # attention 4·64² = 16384; MLP 3·64·128 = 24576; 2 norms 128 -> 41088 per layer;
    # embeddings 2·6400; final norm 64.
    assert _spec().params.total == 2 * 41088 + 12800 + 64
