"""Framework names: the spellings users write for a framework advisor models are that framework
(`advisor.core.frameworks`), everywhere a framework is read; anything else gets one message that
lists the accepted names."""

import pandas as pd
import pytest
from typer.testing import CliRunner

from advisor import Predictor, catalog
from advisor.cli import app
from advisor.core.errors import ConfigError
from advisor.core.frameworks import ALIASES, accepted, canonical_framework, find_framework
from advisor.core.parallel import ParallelConfig
from advisor.core.space import validate

H100 = catalog.load_platform("h100")
LLAMA8 = catalog.load_model("llama3-8b")
FSDP_PP = ParallelConfig(tp=1, pp=2, dp=4, mbs=1, gbs=64, seq_len=4096, dp_sharding="full",
                         recompute="full")
"""FSDP with pipelining: a layout Megatron refuses and FSDP2 frameworks run."""


@pytest.mark.parametrize("name,aliases", list(ALIASES.items()))
def test_every_alias_names_its_framework(name, aliases):
    for alias in (name, *aliases):
        assert canonical_framework(alias) == name
        assert canonical_framework(alias.upper().replace("-", "_")) == name


@pytest.mark.parametrize("spelling,name", [
    ("automodel-fsdp2", "automodel"), ("NeMo AutoModel", "automodel"),
    ("torchtitan-fsdp2", "torchtitan"), ("TorchTitan", "torchtitan"),
    ("fsdp2", "pytorch-fsdp"), ("Megatron-LM", "megatron"), ("NeMo 2", "megatron"),
    ("", "megatron"), ("  ", "megatron")])
def test_spellings_users_write(spelling, name):
    assert canonical_framework(spelling) == name


def test_unknown_framework_lists_every_accepted_name():
    assert find_framework("jax-maxtext") is None
    with pytest.raises(ConfigError) as e:
        canonical_framework("jax-maxtext")
    message = str(e.value)
    assert "'jax-maxtext'" in message and "\n" not in message
    for name, aliases in ALIASES.items():
        assert name in message and all(a in message for a in aliases)


@pytest.mark.parametrize("framework", ["automodel-fsdp2", "nemo-automodel", "torchtitan-fsdp2",
                                       "fsdp2", "pytorch-fsdp"])
def test_fsdp_with_pipeline_under_fsdp2_aliases(framework):
    validate(FSDP_PP, LLAMA8, H100, num_gpus=8, framework=framework)


@pytest.mark.parametrize("framework", ["megatron-lm", "nemo", "mcore"])
def test_megatron_aliases_still_refuse_fsdp_with_pipeline(framework):
    with pytest.raises(ConfigError, match="not supported by megatron"):
        validate(FSDP_PP, LLAMA8, H100, num_gpus=8, framework=framework)


def test_validate_refuses_unknown_framework_with_the_list():
    with pytest.raises(ConfigError, match="is not one advisor models; use one of: megatron"):
        validate(FSDP_PP, LLAMA8, H100, num_gpus=8, framework="automodle")


def _rows(frameworks):
    return pd.DataFrame([{"model": "llama3-8b", "gpu": "h100", "num_gpus": 8, "seq_len": 4096,
                          "gbs": 64, "mbs": 1, "tp": 1, "pp": 2, "cp": 1, "ep": 1, "vp": 1,
                          "precision": "bf16", "recompute": "full", "dp_sharding": "full",
                          "framework": f} for f in frameworks])


def test_predict_input_rows_read_aliases_as_their_framework(tmp_path):
    """`advisor predict --input`: an aliased row predicts as its framework's row does; an
    unknown one gets the list as its pred_error, the other rows still predict."""
    frameworks = ["automodel", "automodel-fsdp2", "torchtitan", "torchtitan-fsdp2",
                  "pytorch-fsdp", "fsdp2", "megatron-lm", "automodle"]
    src, dst = tmp_path / "rows.csv", tmp_path / "out.csv"
    _rows(frameworks).to_csv(src, index=False)
    r = CliRunner().invoke(app, ["predict", "--input", str(src), "--output", str(dst)])
    assert r.exit_code == 0, r.output
    out = pd.read_csv(dst, keep_default_na=False).set_index("framework")
    speed = pd.to_numeric(out["pred_tokens_per_sec_per_gpu"])
    assert out.loc["automodel-fsdp2", "pred_error"] == ""
    assert speed["automodel-fsdp2"] == speed["automodel"] > 0
    assert speed["torchtitan-fsdp2"] == speed["torchtitan"] > 0
    assert speed["fsdp2"] == speed["pytorch-fsdp"] > 0
    assert "not supported by megatron" in out.loc["megatron-lm", "pred_error"]
    assert out.loc["automodle", "pred_error"] == (
        f"framework 'automodle' is not one advisor models; use one of: {accepted()}.")


def test_predictor_frames_give_the_same_message():
    out = Predictor.load().predict(_rows(["automodel-fsdp2", "automodle"]))
    assert out["pred_error"].iloc[0] == "" and out["pred_tokens_per_sec_per_gpu"].iloc[0] > 0
    assert out["pred_error"].iloc[1] == (
        f"framework 'automodle' is not one advisor models; use one of: {accepted()}.")
