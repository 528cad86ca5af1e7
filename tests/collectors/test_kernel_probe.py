"""The kernel probe's code path, run for real on the CPU, and the check that reads it in the
step model's own terms."""

import dataclasses
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from benchmark_scripts import load_benchmark

from advisor.catalog import load_model, load_platform
from advisor.core.parallel import ParallelConfig
from advisor.perf.calibration import load_calibration
from advisor.perf.flops import Gemm, attention_core_flops_per_token, mamba_scan_flops_per_token
from advisor.perf.gemm import load_kernel_table
from advisor.perf.step import step_table
from advisor.perf.step_compute import ATTENTION_BACKWARD_RATIO, _GemmClock
from collectors import kernel_probe
from collectors.kernel_probe import BACKWARD_RATIO, SEQUENCES, SHRINK, TOKENS_PER_EXPERT, main

kernel_check = load_benchmark("kernel_check")


@pytest.fixture(scope="module")
def cpu_probe(tmp_path_factory) -> Path:
    pytest.importorskip("torch")
    out = tmp_path_factory.mktemp("kernel-probe")
    main(["--out", str(out), "--device", "cpu", "--small", "--repeats", "3"])
    return out


def test_probe_times_every_kernel_on_cpu(cpu_probe):
    kernels = pd.read_csv(cpu_probe / "kernels.csv")
    attention = kernels[kernels.kind == "attention"]
    assert sorted(attention.seq.unique()) == [s // SHRINK for s in SEQUENCES]
    assert set(attention.variant) == {"forward", "forward+backward"}
    experts = kernels[kernels.kind == "experts"]
    assert sorted(experts.tokens.unique()) == [max(t // SHRINK, 8) for t in TOKENS_PER_EXPERT]
    assert (kernels.seconds > 0).all()
    # a backward pass on top of the forward takes longer than the forward alone (summed over
    # the lengths: one short CPU timing may catch a hiccup)
    timed = attention.pivot(index="seq", columns="variant", values="seconds")
    assert timed["forward+backward"].sum() > timed["forward"].sum()
    # the Mamba-2 scan is Triton on CUDA: on a CPU it is recorded as missing, and why
    assert not (kernels.kind == "scan").any()
    facts = json.loads((cpu_probe / "device.json").read_text())
    assert "CUDA devices only" in facts["scan_missing"]


def test_probe_counts_attention_flops_as_the_step_model_does(cpu_probe):
    assert BACKWARD_RATIO == ATTENTION_BACKWARD_RATIO
    kernels = pd.read_csv(cpu_probe / "kernels.csv")
    model = load_model("llama3-8b")            # head dim 128, as the full-size probe
    forward = kernels[(kernels.kind == "attention") & (kernels.variant == "forward")]
    for row in forward.itertuples():
        per_token = (attention_core_flops_per_token(model, int(row.seq))
                     * row.heads / model.num_attention_heads
                     * row.head_dim / model.attention_head_dim)
        assert row.flop == pytest.approx(per_token * row.batch * row.seq)
    both = kernels[kernels.variant == "forward+backward"].set_index("seq").flop
    assert (both / forward.set_index("seq").flop).to_numpy() == pytest.approx(
        1 + ATTENTION_BACKWARD_RATIO)


def test_check_reads_expert_times_priced_by_the_step_model_as_its_calibrated_level():
    """Seconds the step model itself charges for the probe's expert GEMMs (its GEMM clock at
    the family's factors, a kernel per expert or one grouped kernel) read back as exactly the
    calibrated expert level."""
    platform = load_platform("h100")
    eff = load_calibration().efficiency(platform.family)
    clock = _GemmClock(load_kernel_table().kernel(platform, "bf16"),
                       np.array([[platform.full_clock_peak_flops("bf16") * eff.gemm]]), 2.0,
                       platform.hbm_bandwidth_bytes_per_s, platform.num_compute_units)
    experts, hidden, ffn = 8, kernel_probe.EXPERT_HIDDEN, kernel_probe.EXPERT_FFN
    fc1 = (Gemm(k=hidden, n=ffn, split="none"),)
    rows = []
    for tokens in TOKENS_PER_EXPERT:
        for variant, batch, launches in (("loop", 1.0, experts), ("grouped", experts, 1.0)):
            seconds = clock.passes(fc1, np.array([[float(tokens)]]), np.array([[1.0]]),
                                   batch=batch, launches=launches, speed=eff.expert_gemm).fwd
            rows.append({"kind": "experts", "variant": variant, "experts": experts,
                         "tokens": tokens, "hidden": hidden, "ffn": ffn,
                         "flop": 2.0 * experts * tokens * hidden * ffn,
                         "seconds": float(seconds[0, 0])})
    table = kernel_check.implied(pd.DataFrame(rows), "h100")
    assert table["implied"].to_numpy() == pytest.approx(eff.expert_gemm)
    summary = kernel_check.summary(table)
    assert summary["ratio"].to_numpy() == pytest.approx(1.0)


def test_probe_counts_scan_flops_as_the_step_model_does_at_nanos_shape():
    nano = load_model("nemotron-3-nano-30b-a3b")
    assert (kernel_probe.SCAN_HEADS * kernel_probe.SCAN_HEAD_DIM, kernel_probe.SCAN_STATE) == (
        nano.mamba_inner_size, nano.mamba_state_dim)
    assert kernel_probe.scan_flop(8192) == pytest.approx(
        8192 * mamba_scan_flops_per_token(nano))


@pytest.mark.parametrize("platform", ["h100", "b200"])
def test_check_reads_scan_times_priced_by_the_step_model_as_its_calibrated_factor(platform):
    """A model of Mamba layers alone (Nano's): the step model's attention time of one
    micro-batch is its scans forward and backward, which read back as the family's `scan`."""
    nano = load_model("nemotron-3-nano-30b-a3b")
    layers = 4
    mamba = dataclasses.replace(nano, name="mamba-only", num_layers=layers,
                                layer_pattern="M" * layers, num_experts=0, moe_top_k=0,
                                num_shared_experts=0)
    seq = 8192
    config = ParallelConfig(tp=1, pp=1, dp=1, mbs=1, gbs=1, seq_len=seq, precision="bf16")
    step = step_table(mamba, load_platform(platform), pd.DataFrame([config.to_dict()])).iloc[0]
    row = {"kind": "scan", "variant": "forward+backward", "batch": 1, "seq": seq,
           "flop": (1 + BACKWARD_RATIO) * kernel_probe.scan_flop(seq) * layers,
           "seconds": step["attention_s"]}
    table = kernel_check.implied(pd.DataFrame([row]), platform)
    scan = load_calibration().efficiency(load_platform(platform).family).scan
    assert table["implied"].iloc[0] == pytest.approx(scan)


def test_check_prints_a_probe_and_refuses_a_folder_without_one(cpu_probe, tmp_path, capsys):
    assert kernel_check.main(["--probe", str(cpu_probe)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("cpu as cpu") and "Median implied factor" in out
    assert "no Mamba-2 scan: the Mamba-2 scan kernels" in out
    with pytest.raises(SystemExit) as exit_:
        kernel_check.main(["--probe", str(tmp_path)])
    assert exit_.value.code == 2
    assert "python -m collectors.kernel_probe" in capsys.readouterr().err


@pytest.mark.parametrize(("name", "platform"), [("NVIDIA H100 80GB HBM3", "h100"),
                                                ("NVIDIA GB200", "gb200"),
                                                ("NVIDIA B200", "b200"),
                                                ("AMD Instinct MI300X", "mi300x"),
                                                ("NVIDIA A100-SXM4-80GB", "a100"),
                                                ("Some Accelerator", None)])
def test_device_names_map_to_catalog_platforms(name, platform):
    assert kernel_check.platform_of(name) == platform
