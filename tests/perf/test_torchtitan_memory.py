"""TorchTitan's memory as its code keeps it: per-op selective checkpointing and an FP32 loss."""

from __future__ import annotations

import pandas as pd
import pytest

from advisor.catalog import load_model, load_platform
from advisor.core.parallel import make_config, make_job
from advisor.perf.memory import EAGER_LOGIT_BYTES, memory_table
from advisor.perf.memory_activations import (
    ACT_BYTES,
    activation_bytes_per_token,
    op_sac_bytes_per_token,
)

LLAMA = load_model("llama3.1-8b")
H100 = load_platform("h100")


def _memory(framework: str, recompute: str, mbs: int = 2) -> pd.Series:
    job = make_job(LLAMA, H100, num_gpus=8, seq_len=8192, gbs=16)
    config = make_config(job, mbs=mbs, dp_sharding="full", recompute=recompute).to_dict()
    return memory_table(LLAMA, platform=H100,
                        configs=pd.DataFrame([{**config, "framework": framework}])).iloc[0]


def test_op_sac_keeps_the_block_input_and_every_other_matmul_output():
    """wq, wk, wv, wo, w1, w3, w2 run in that order; the odd ones are saved."""
    import numpy as np

    one = np.ones((1, 1))
    sac = op_sac_bytes_per_token(LLAMA, tp=one, sp=one)
    h, f = LLAMA.hidden_size, LLAMA.ffn_hidden_size
    kept = sac["attention"][0, 0] + sac["mlp"][0, 0]
    assert kept == pytest.approx(ACT_BYTES * (h + LLAMA.q_dim + LLAMA.v_dim + f + h))
    full = activation_bytes_per_token(LLAMA, tp=one, sp=one, etp=one, cp=one)
    assert 0.3 < kept / (full["attention"][0, 0] + full["mlp"][0, 0]) < 0.5


def test_torchtitan_selective_recompute_holds_less_than_megatrons():
    titan = _memory("torchtitan", "selective")
    megatron = _memory("megatron", "selective")
    none = _memory("torchtitan", "none")
    assert titan["activations_bytes"] < 0.75 * megatron["activations_bytes"]
    assert titan["activations_bytes"] < none["activations_bytes"]
    assert titan["total_bytes"] < H100.memory_capacity_bytes < megatron["total_bytes"]


def test_torchtitans_loss_keeps_fp32_logits_and_their_gradients():
    """Full recompute keeps only each layer's input, so the loss is what separates them."""
    titan, megatron = _memory("torchtitan", "full"), _memory("megatron", "full")
    tokens = 2 * 8192
    from advisor.perf.memory import LOGIT_BYTES

    extra = (EAGER_LOGIT_BYTES - LOGIT_BYTES) * LLAMA.vocab_size * tokens
    assert titan["activations_bytes"] - megatron["activations_bytes"] == pytest.approx(
        extra, rel=0.05)
