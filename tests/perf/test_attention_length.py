"""Fused causal attention runs slower per FLOP on short sequences: its fixed work per head and
block, the causal diagonal's partly masked blocks and the last wave amortise over the sequence
(`ATTENTION_HALF_SPEED_TOKENS`), and context parallelism hands each kernel seq / CP tokens.
A framework that runs FlashAttention-2's kernels, not cuDNN's, runs them slower on Hopper
(`FLASH_ATTENTION_2_SPEED`), as the same paper measured."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from advisor.catalog import load_model, load_platform
from advisor.core.frameworks import FLASH_ATTENTION_2
from advisor.core.parallel import make_config, make_job
from advisor.perf.calibration import load_calibration
from advisor.perf.flops import attention_core_flops_per_token
from advisor.perf.step import step_table
from advisor.perf.step_compute import ATTENTION_HALF_SPEED_TOKENS, FLASH_ATTENTION_2_SPEED

LENGTHS = np.array([512, 1024, 2048, 4096, 8192, 16384])
CAUSAL_HDIM128_H100_TFLOPS = {
    "cuDNN": [315, 410, 484, 518, 529, 539],
    "FlashAttention-2": [191, 260, 298, 319, 333, 335],
    "FlashAttention-3": [292, 423, 521, 579, 602, 616],
}
"""Forward speed of causal attention, head dim 128, batch × sequence 16k tokens, on an H100
SXM5 at the sequence lengths `LENGTHS`: Shah et al. 2024, FlashAttention-3
(arXiv:2407.08608), Figure 5 (the bars' printed values)."""
BACKWARD_HDIM128_H100_TFLOPS = {
    "cuDNN": [305, 408, 465, 499, 518, 516],
    "FlashAttention-2": [214, 260, 291, 310, 318, 322],
}
"""Backward speed at head dim 128 on the same H100 and lengths: the same paper, Figure 6."""


def speed(length: np.ndarray) -> np.ndarray:
    """The model's speed of a fused attention kernel on `length` tokens, per long-sequence
    speed."""
    return length / (length + ATTENTION_HALF_SPEED_TOKENS)


@pytest.mark.parametrize("kernel", sorted(CAUSAL_HDIM128_H100_TFLOPS))
def test_speed_against_length_follows_the_measured_kernels(kernel):
    measured = np.asarray(CAUSAL_HDIM128_H100_TFLOPS[kernel], float)
    # Each kernel's speed relative to its own at 16k tokens, from 1k tokens up (training
    # sequences): within 8 % of the measurement.
    relative = measured / measured[-1]
    predicted = speed(LENGTHS) / speed(LENGTHS[-1])
    at_least_1k = LENGTHS >= 1024
    assert np.max(np.abs(predicted[at_least_1k] / relative[at_least_1k] - 1)) < 0.08
    # ...and slower on shorter sequences, as measured.
    assert np.all(np.diff(predicted) > 0) and np.all(np.diff(measured) > 0)


def _attention_seconds_per_flop(seq: int, cp: int) -> float:
    model, platform = load_model("llama3-8b"), load_platform("h100")
    job = make_job(model, platform, num_gpus=8 * cp, seq_len=seq, gbs=8)
    config = make_config(job, tp=1, cp=cp, mbs=1)
    table = step_table(model, platform, pd.DataFrame([config.to_dict()]))
    tokens_per_gpu = job.gbs * seq / (8 * cp)
    flops = tokens_per_gpu * attention_core_flops_per_token(model, seq)
    return float(table["attention_s"].iloc[0]) / flops


def test_the_step_model_prices_short_kernels_slower_and_context_parallel_ones_shorter():
    at_2k, at_16k = _attention_seconds_per_flop(2048, 1), _attention_seconds_per_flop(16384, 1)
    assert at_2k / at_16k == pytest.approx(speed(16384) / speed(2048), rel=1e-6)
    # Context parallelism of 4 on 16k tokens: each kernel sees 4k of them.
    with_cp = _attention_seconds_per_flop(16384, 4)
    assert with_cp / at_16k == pytest.approx(speed(16384) / speed(4096), rel=1e-6)


@pytest.mark.parametrize("measured", [CAUSAL_HDIM128_H100_TFLOPS, BACKWARD_HDIM128_H100_TFLOPS],
                         ids=["forward", "backward"])
def test_flash_attention_2_runs_at_its_measured_share_of_cudnn_on_hopper(measured):
    ratio = (np.asarray(measured["FlashAttention-2"], float)
             / np.asarray(measured["cuDNN"], float))[LENGTHS >= 1024]
    assert np.max(np.abs(ratio / FLASH_ATTENTION_2_SPEED["hopper"] - 1)) < 0.05


@pytest.mark.parametrize("platform, speed_of_flash2", [
    ("h100", FLASH_ATTENTION_2_SPEED["hopper"]), ("h200", FLASH_ATTENTION_2_SPEED["hopper"]),
    ("a100", 1.0), ("b200", 1.0)])
def test_a_flash_attention_2_framework_runs_attention_at_that_speed(platform, speed_of_flash2):
    # No framework fitted: every one runs at Megatron-Core's kernel factors but for its
    # attention kernel.
    calibration = load_calibration().with_frameworks({})
    model, gpu = load_model("llama3-8b"), load_platform(platform)
    job = make_job(model, gpu, num_gpus=8, seq_len=8192, gbs=8)
    configs = pd.DataFrame([make_config(job, tp=1, mbs=1).to_dict()])
    attention = {framework: float(step_table(model, gpu, configs, framework=framework,
                                             calibration=calibration)["attention_s"].iloc[0])
                 for framework in ("megatron", "llm-foundry")}
    assert attention["megatron"] / attention["llm-foundry"] == pytest.approx(speed_of_flash2,
                                                                             rel=1e-6)


def test_llm_foundry_on_hopper_fits_no_attention_factor_beyond_its_kernels_speed():
    """Fitted on llm-foundry's 77 H100 runs without the kernel's speed, its attention factor
    came out 0.61: the published runs found FlashAttention-2's measured share of cuDNN (0.62)
    on their own. With it priced, nothing is left for the factor to carry."""
    attention = load_calibration().frameworks["llm-foundry@hopper"].attention
    assert abs(np.log(attention)) < np.log(1.15)


H200_PROBE = Path(__file__).resolve().parents[2] / "datasets" / "probes" / "h200-power"


def test_pytorch_sdpa_ran_a_hopper_kernel_not_flash_attention_2():
    """The H200 power probe (torch 2.11) timed `scaled_dot_product_attention`, causal, head dim
    128, on 4k-token sequences back to back: its speed is cuDNN's and FlashAttention-3's class
    on Hopper, well above FlashAttention-2's (319 TFLOP/s at 4k, Figure 5), even with the clock
    held down by the 700 W cap; so the frameworks that attend through it (TorchTitan, FSDP
    loops, advisor's own workload) are not priced at FlashAttention-2's speed."""
    kernels = pd.read_csv(H200_PROBE / "kernels.csv.gz")
    attention = kernels[kernels["phase"] == "kind-attention"]
    tflops = float((attention["flop"] / attention["duration_s"]).median()) / 1e12
    flash2_at_4k = CAUSAL_HDIM128_H100_TFLOPS["FlashAttention-2"][list(LENGTHS).index(4096)]
    assert tflops > 1.3 * flash2_at_4k
    assert not {"pytorch", "torchtitan", "pytorch-fsdp"} & set(FLASH_ATTENTION_2)
