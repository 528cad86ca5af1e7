"""Kernel factors per stack (a framework on one platform family), and what a framework no run
calibrated gets."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from advisor.perf.calibration import (
    STACK_SEPARATOR,
    FrameworkEfficiency,
    load_calibration,
)


@pytest.fixture(scope="module")
def calibration():
    return load_calibration()


def test_a_framework_is_fitted_per_platform_family(calibration):
    stacks = {k for k in calibration.frameworks if STACK_SEPARATOR in k}
    assert {"llm-foundry@ampere", "llm-foundry@hopper"} <= stacks
    a100 = calibration.framework("llm-foundry", "ampere")
    h100 = calibration.framework("llm-foundry", "hopper")
    assert a100 is calibration.frameworks["llm-foundry@ampere"]
    assert (a100.gemm, a100.attention) != (h100.gemm, h100.attention)


def test_an_uncalibrated_framework_runs_like_the_fitted_stacks(calibration):
    """TorchTitan, NeMo AutoModel or a plain FSDP loop get the geometric mean of the fitted
    stacks, which run below Megatron-Core's tuned recipes, not Megatron-Core's own factors."""
    stacks = [f for k, f in calibration.frameworks.items() if STACK_SEPARATOR in k]
    titan = calibration.framework("torchtitan", "hopper")
    assert titan == calibration.uncalibrated_framework()
    assert titan.gemm == pytest.approx(np.exp(np.mean([np.log(f.gemm) for f in stacks])))
    assert titan.gemm < 1.0
    assert calibration.framework("megatron", "hopper") == FrameworkEfficiency()


def test_a_frameworks_gemms_run_near_the_measured_kernels(calibration):
    """Every framework calls the GEMM kernels the tables time, so however few runs fitted a
    stack, its GEMM factor stays inside the band torch matmul reaches against them (MAMF:
    0.8-1.05, `benchmarks/gemm_check.py`) give or take the prior's width; MLPerf's two
    DeepSpeed LoRA runs on H100 fitted 0.54 under a wide prior, one of the three stacks whose
    mean llm-foundry got when held out."""
    stacks = {k: f for k, f in calibration.frameworks.items() if STACK_SEPARATOR in k}
    assert len(stacks) >= 4
    for key, stack in stacks.items():
        assert 0.7 <= stack.gemm <= 1.1, (key, stack.gemm)
    assert 0.75 <= calibration.uncalibrated_framework().gemm < 1.0


def test_megatron_deepspeed_keeps_megatrons_kernels_and_vtrains_host_time(calibration):
    forked = calibration.framework("megatron-deepspeed", "ampere")
    assert (forked.gemm, forked.attention) == (1.0, 1.0)
    assert forked.layer_overhead_s == calibration.frameworks["megatron-deepspeed"] \
        .layer_overhead_s
    assert forked.layer_overhead_s is not None and forked.layer_overhead_s > 1e-3


def test_a_stack_without_its_own_host_time_takes_the_frameworks(calibration):
    import dataclasses

    extra = {"megatron-deepspeed@ampere": FrameworkEfficiency(gemm=0.9, attention=0.8)}
    cal = dataclasses.replace(calibration, frameworks=calibration.frameworks | extra)
    stack = cal.framework("megatron-deepspeed", "ampere")
    assert (stack.gemm, stack.attention) == (0.9, 0.8)
    assert stack.layer_overhead_s == calibration.frameworks["megatron-deepspeed"] \
        .layer_overhead_s


def test_an_uncalibrated_stack_gets_at_least_the_band_of_an_unseen_series(calibration):
    """The learned band is sized on stacks the data has; a framework no run calibrated on this
    family (TorchTitan here) is as far from them as a publication series never seen."""
    from advisor.catalog import load_model, load_platform
    from advisor.core.parallel import make_config, make_job
    from advisor.learn.bands import Z90, analytical_log_sd
    from advisor.predict.predictor import Predictor

    job = make_job(load_model("llama3-8b"), load_platform("h100"), num_gpus=8)
    config = make_config(job, tp=1, dp_sharding="full")
    frame = pd.DataFrame([{**config.to_dict(), "model": "llama3-8b", "gpu": "h100",
                           "framework": fw} for fw in ("megatron", "torchtitan")])
    out = Predictor.load().predict(frame)
    width = out["pred_tokens_per_sec_per_gpu_p90"] / out["pred_tokens_per_sec_per_gpu_p10"]
    series = np.exp(2 * Z90 * analytical_log_sd(calibration))
    assert width[1] >= series * (1 - 1e-9)
    assert bool(out["pred_extrapolation"][1])
    assert calibration.knows_stack("megatron", "hopper")
    assert not calibration.knows_stack("torchtitan", "hopper")
