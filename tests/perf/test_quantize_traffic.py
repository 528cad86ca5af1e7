"""Quantizing GEMM operands for FP8 and FP4 recipes (`quantized_elements`, `QUANTIZE_BYTES`):
each weight GEMM's input in the forward and its output gradient in the backward are read in
BF16 and written as the row-wise and column-wise low-precision copies the GEMMs read. The
traffic grows with a GEMM's width, its math with the product of its dimensions: fine-grained
experts pay a far larger share than a dense model's wide GEMMs."""

import numpy as np
import pandas as pd
import pytest

from advisor import catalog
from advisor.perf.calibration import load_calibration
from advisor.perf.flops import layer_gemms
from advisor.perf.step import step_table
from advisor.perf.step_compute import MEMORY_EFFICIENCY, QUANTIZE_BYTES, quantized_elements

H100 = catalog.load_platform("h100")
ONE = np.ones((1, 1))


def test_norm_fed_inputs_are_quantized_by_the_norm_and_the_router_stays_bf16():
    """Llama 3 8B: the QKV and FC1 inputs come from the norm (Transformer Engine's
    LayerNormLinear writes them in FP8), the output projection's and FC2's do not; every
    output gradient is quantized. Qwen3-30B-A3B: each of the top-8 copies of a token is
    quantized for both expert GEMMs, the router's is not."""
    llama = catalog.load_model("llama3-8b")            # h 4096, q 4096, kv 1024, FFN 14,336
    q = quantized_elements(llama, layer_gemms(llama), ONE, ONE)
    assert q["attention"][0].item() == 4096                    # the output projection's input
    assert q["attention"][1].item() == (4096 + 2 * 1024) + 4096
    assert q["mlp"][0].item() == 14336
    assert q["mlp"][1].item() == 2 * 14336 + 4096
    half = quantized_elements(llama, layer_gemms(llama), 2 * ONE, ONE)
    assert half["mlp"][0].item() == 14336 / 2 and half["mlp"][1].item() == 14336 + 4096

    qwen = catalog.load_model("qwen3-30b-a3b")         # h 2048, 128 experts top-8, FFN 768
    moe = quantized_elements(qwen, layer_gemms(qwen), ONE, ONE)["moe"]
    assert moe[0].item() == 8 * (2048 + 768)
    assert moe[1].item() == 8 * (2 * 768 + 2048)


def _rows(precision: str, **layout) -> pd.DataFrame:
    base = dict(tp=1, pp=1, cp=1, ep=1, etp=1, vp=1, mbs=1, recompute="none",
                dp_sharding="optimizer", sequence_parallel=False, overlap_grad_reduce=True,
                overlap_param_gather=True, tp_comm_overlap=False, grad_reduce_in_fp32=False,
                attention="flash", precision=precision)
    return pd.DataFrame([base | layout])


def _quantize_per_gemm_second(model: str, **layout) -> float:
    """FP8's extra HBM-bound seconds over BF16's, per second of FP8 GEMMs."""
    fp8, bf16 = (step_table(catalog.load_model(model), H100, _rows(p, **layout),
                            calibration=load_calibration(), framework="megatron")
                 for p in ("fp8", "bf16"))
    return float((fp8["memory_bound_s"] - bf16["memory_bound_s"]).iloc[0]
                 / fp8["gemm_s"].iloc[0])


def test_fine_grained_experts_pay_a_larger_share_than_wide_dense_gemms():
    """Qwen3-30B-A3B's 768-wide experts quantize more per second of GEMMs than Llama 3 70B's
    28,672-wide MLP on TP 4 (per FLOP eight times more; per second less, as its expert GEMMs
    run slower per FLOP than dense ones)."""
    moe = _quantize_per_gemm_second("qwen3-30b-a3b", dp=16, ep=16, gbs=1024, seq_len=4096)
    dense = _quantize_per_gemm_second("llama3-70b", tp=4, dp=16, gbs=128, seq_len=8192)
    assert moe > 1.3 * dense > 0


def test_fp8_adds_the_quantization_bytes_and_nothing_else_to_the_hbm_bound_time():
    """Llama 3 8B on one H100, 16 micro-batches of 8,192 tokens: FP8's HBM-bound time exceeds
    BF16's by exactly 4 B per quantized element at the bandwidth elementwise kernels reach."""
    model = catalog.load_model("llama3-8b")
    layout = dict(dp=1, gbs=16, seq_len=8192)
    fp8, bf16 = (step_table(model, H100, _rows(p, **layout), calibration=load_calibration(),
                            framework="megatron")["memory_bound_s"].iloc[0]
                 for p in ("fp8", "bf16"))
    q = quantized_elements(model, layer_gemms(model), ONE, ONE)
    per_token = sum(q[kind][i].item() for kind in ("attention", "mlp") for i in (0, 1))
    tokens = 16 * 8192 * model.num_layers
    seconds = QUANTIZE_BYTES["fp8"] * per_token * tokens / (
        H100.hbm_bandwidth_bytes_per_s * MEMORY_EFFICIENCY)
    assert fp8 - bf16 == pytest.approx(seconds, rel=1e-6)
