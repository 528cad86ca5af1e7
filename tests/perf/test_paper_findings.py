"""The findings of Go et al., MICRO 2025 (the project's paper notes, findings 1-6), each computed on
the paper's testbeds (32 H200 / 64 H100, 100 Gb/s InfiniBand: `examples/paper-*-cluster.toml`)
and asserting the direction the paper measured. A finding the model does not reproduce is an
xfail that says why: never tuned away."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from benchmark_scripts import load_benchmark

from advisor import catalog
from advisor.core.parallel import make_config, make_job
from advisor.perf.analytical import predict_config

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
SEQ = {"gpt3-175b": 2048, "llama3-70b": 8192, "mixtral-8x22b": 4096}


def _h200():
    return catalog.load_platform_override(EXAMPLES / "paper-h200-cluster.toml")


def _predict(model_name: str, *, gpus: int = 32, platform=None, **knobs):
    platform = platform or _h200()
    model = catalog.load_model(model_name)
    job = make_job(model, platform, num_gpus=gpus, seq_len=SEQ[model_name], gbs=128)
    split = {k: knobs.pop(k) for k in ("first_stage_layers", "last_stage_layers") if k in knobs}
    config = make_config(job, **knobs).replace(**split)
    return predict_config(model, platform, config)


def test_finding2_tp_pp_sends_are_small_and_slow():
    # TP+PP: the send/recv of every stage boundary goes as tp small messages; at pp 16 the
    # pipeline's exposed point-to-point time exceeds pp 4's although each message is smaller.
    deep, shallow = (_predict("gpt3-175b", tp=2, pp=16), _predict("gpt3-175b", tp=8, pp=4))
    assert deep.step.pp_comm_s > shallow.step.pp_comm_s


@pytest.mark.parametrize("tp,pp", [(8, 4), (2, 16)])
def test_finding3_peak_power_rises_with_micro_batch(tp, pp):
    peaks = [_predict("gpt3-175b", tp=tp, pp=pp, mbs=m).power.peak_power_w for m in (1, 2, 4, 8)]
    # Never down by more than 0.05 %: a GEMM's speed (and so its draw) moves in whole waves of
    # tiles over the SMs, which a micro-batch step can cross the wrong way (754.15 -> 754.08 W).
    assert all(b > a * 0.9995 for a, b in itertools.pairwise(peaks)) and peaks[-1] > peaks[0] + 1


@pytest.mark.xfail(strict=True, reason=(
    "a die's temperature follows its average power (seconds of thermal mass), and at a fixed "
    "GBS a bigger micro-batch leaves fewer micro-batches, so a pipeline's bubble grows and the "
    "average falls while every burst sits at the 700 W cap: the model's peak temperature falls "
    "with MBS in 10 of the paper's 15 layouts, every one with PP > 1, and rises where there is "
    "no pipeline (FSDP, EP alone; benchmarks/paper_findings.py F6). The paper's rise needs heat "
    "the cap does not bound (HBM power, the burst excursions) that the model does not carry "
    "into temperature"))
def test_finding3_peak_temperature_rises_with_micro_batch():
    temps = [_predict("gpt3-175b", tp=2, pp=16, mbs=m).power.peak_temp_c for m in (1, 2, 4, 8)]
    assert temps == sorted(temps) and temps[-1] > temps[0]


def test_finding3_pipeline_heavy_layouts_get_burstier_with_micro_batch():
    # "High power, low output": at GBS 128 a bigger micro-batch leaves fewer micro-batches, so a
    # deep pipeline's average falls further below its peak.
    small, big = (_predict("gpt3-175b", tp=2, pp=16, mbs=m).power for m in (1, 8))
    assert big.peak_power_w - big.avg_power_w > small.peak_power_w - small.avg_power_w


@pytest.mark.xfail(strict=True, reason=(
    "the model's throttling is the chance of thermal slowdown and the expected loss of clock, "
    "both set by average power: deeper pipelines idle longer in their bubble (GPT3-175B 2 % of "
    "the step at PP 4, 17 % at PP 32), so both fall with depth (benchmarks/paper_findings.py "
    "F9). The paper read throttling from the SM clock dipping below its maximum, which every "
    "burst after a bubble does as the cap catches it, so more stage transitions count more: "
    "a per-burst clock transient the model averages away"))
def test_finding4_throttling_grows_with_pipeline_depth():
    powers = [_predict("gpt3-175b", tp=tp, pp=pp).power for tp, pp in ((8, 4), (4, 8), (2, 16))]
    for measure in ("throttle_risk", "throttle_loss"):
        values = [getattr(w, measure) for w in powers]
        assert values == sorted(values) and values[-1] > values[0]


def test_finding4_overlap_raises_peak_temperature():
    on, off = (_predict("llama3-70b", tp=4, pp=4, overlap=o).power for o in (True, False))
    assert on.peak_temp_c > off.peak_temp_c


def test_finding4_rear_slots_hotter_and_clocked_lower():
    result = _predict("llama3-70b", tp=4, pp=4)
    power = result.power
    assert power.temp_rear_c > power.temp_front_c
    assert power.min_clock_frac < 1.0
    # the straggler sits in the rear row (slots 4-7 of hgx-air)
    assert power.straggler_slot >= 4


@pytest.mark.xfail(strict=True, reason=(
    "full recompute adds forward GEMMs at the same demand, so the share of the step in capped "
    "bursts grows for every layout (expected loss 11.2 % -> 11.6 %, thermal risk 0.15 % -> "
    "0.19 %); the model has no mechanism by which recompute lowers throttling for deep-PP "
    "GPT3-175B"))
def test_finding4_recompute_lowers_throttling_for_deep_pp_gpt3():
    none, full = (_predict("gpt3-175b", tp=2, pp=16, recompute=r).power for r in ("none", "full"))
    assert full.throttle_risk < none.throttle_risk
    assert full.throttle_loss < none.throttle_loss


def test_finding4_recompute_raises_throttling_for_llama3_tp8_fsdp():
    none, full = (_predict("llama3-70b", tp=8, pp=1, dp_sharding="full", recompute=r).power
                  for r in ("none", "full"))
    assert full.throttle_risk > none.throttle_risk


def test_finding5_llama3_pp4_21_19_split_beats_even():
    # The direction holds, by a hair: +0.02 % samples/MJ since the attention and GEMM ceilings
    # (1f6bca6; -0.1 % before), where the paper measured +4 %. With 21/19 the first stage (21
    # layers and the embedding) all but ties the last (20 layers and the 128K-vocab output layer).
    even = _predict("llama3-70b", tp=4, pp=4).power.samples_per_mj
    uneven = _predict("llama3-70b", tp=4, pp=4, first_stage_layers=21,
                      last_stage_layers=19).power.samples_per_mj
    assert uneven > even


def test_finding5_gpt3_pp8_13_11_split_loses():
    even = _predict("gpt3-175b", tp=4, pp=8).power.samples_per_mj
    uneven = _predict("gpt3-175b", tp=4, pp=8, first_stage_layers=13,
                      last_stage_layers=11).power.samples_per_mj
    assert uneven < even


def _h100():
    return catalog.load_platform_override(EXAMPLES / "paper-h100-cluster.toml")


def _job_tokens_per_s(breakdown, gpus: int) -> float:
    return breakdown.step.tokens_per_sec_per_gpu * gpus


@pytest.mark.parametrize("model_name, h200, h100", [
    ("gpt3-175b", dict(tp=2, pp=16), dict(tp=2, pp=32)),
    ("mixtral-8x22b", dict(tp=1, pp=4, ep=8), dict(tp=1, pp=8, ep=8)),
])
def test_finding1_scale_up_wins_energy_efficiency_where_communication_bound(model_name, h200,
                                                                            h100):
    # 32 H200 against 64 H100 (the H100 cluster doubles PP): samples per MJ
    up = _predict(model_name, gpus=32, **h200).power.samples_per_mj
    out = _predict(model_name, gpus=64, platform=_h100(), **h100).power.samples_per_mj
    assert up > out


def test_finding1_scale_out_leads_compute_bound_llama3():
    up = _predict("llama3-70b", gpus=32, tp=8, pp=2)
    out = _predict("llama3-70b", gpus=64, platform=_h100(), tp=8, pp=4)
    assert _job_tokens_per_s(out, 64) > _job_tokens_per_s(up, 32)


@pytest.mark.xfail(strict=True, reason=(
    "64 H100 at TP2-PP32 need full recompute to fit 80 GB, and still run about 1.3x the job "
    "throughput of 32 H200 at TP2-PP16: each H100 computes half the layers per micro-batch at "
    "the same speed, while the point-to-point of the extra pipeline boundaries is under a "
    "fifth of that compute even with one 100 Gb/s NIC per node instead of one per GPU (0.9x; "
    "benchmarks/paper_findings.py F1). The model has no cost that grows with the number of "
    "nodes a pipeline crosses beyond each boundary's transfer; the paper's H200 lead needs one"))
def test_finding1_scale_up_wins_throughput_for_gpt3_tp2_pp16():
    up = _predict("gpt3-175b", gpus=32, tp=2, pp=16)
    # without recompute this layout needs about 90 GB of the H100's 80
    out = _predict("gpt3-175b", gpus=64, platform=_h100(), tp=2, pp=32, recompute="full")
    assert out.memory.fits
    assert _job_tokens_per_s(up, 32) > _job_tokens_per_s(out, 64)


def _degraded(watts: float):
    return catalog.with_conditions(_h200(), degraded_nodes=1, degraded_power_w=watts)


def test_finding6_a_degraded_node_slows_the_whole_job():
    # One of four nodes held at 200 W: the synchronous job runs at that node's pace, far worse
    # than losing its quarter of the GPUs (a 1.33x longer step).
    healthy = _predict("llama3-70b", tp=4, pp=4)
    degraded = _predict("llama3-70b", tp=4, pp=4, platform=_degraded(200))
    assert degraded.step.step_time_s > 1.5 * healthy.step.step_time_s
    assert degraded.power.degraded_loss > 0.3


@pytest.mark.xfail(strict=True, reason=(
    "the model lets a power limit lower the SM clock to 30 % at most (min_clock_frac) and "
    "stretches only the clock-bound share of compute, so a node held at 200 W slows the job "
    "about 2x; the paper's fault (over 4x) also cut clocks below that floor (the hardware "
    "power brake) and slowed memory-bound work"))
def test_finding6_a_power_fault_is_over_four_times_slower():
    healthy = _predict("llama3-70b", tp=4, pp=4)
    degraded = _predict("llama3-70b", tp=4, pp=4, platform=_degraded(200))
    assert degraded.step.step_time_s > 4 * healthy.step.step_time_s


def test_the_findings_benchmark_counts_what_the_xfails_say():
    """benchmarks/paper_findings.py, whose figures the xfails above cite: 32 H200 lead only
    where 64 H100 double an already deep pipeline, peak temperature falls with the micro-batch
    wherever there is a pipeline, and the F9 table prints."""
    bench = load_benchmark("paper_findings")
    assert bench.finding1(None) <= 2
    assert bench.finding6() >= 8
    bench.finding9()
