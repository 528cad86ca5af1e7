"""AMD Instinct MI350X and MI355X (CDNA 4): in the catalog with every number sourced, their
derived peaks consistent with the CU count and clock they are derived from, their chassis, and
both `advisor predict` and `advisor recommend` work on them."""

import json

import pytest
from typer.testing import CliRunner

from advisor import catalog
from advisor.cli import app
from advisor.perf.thermal import chassis_for

NEW = ("mi350x", "mi355x")
NUM_CUS = 256
"""ROCm GPU specifications: MI350X and MI355X '256 (32 per XCD)' compute units."""
FP8_FLOP_PER_CLOCK_PER_CU = 8192
"""AMD ISSCC 2026 (MI355X): dense FP8 per CU per clock, doubled from CDNA 3's 4,096."""


@pytest.mark.parametrize("name", NEW)
def test_loads_with_its_datasheet_figures(name):
    p = catalog.load_platform(name)
    assert p.vendor == "amd" and p.family == "cdna4"
    assert p.hbm_bytes == 288e9 and p.hbm_bandwidth_bytes_per_s == 8e12
    assert p.num_gpus_per_node == 8 and p.nvlink_domain_size == 8
    assert catalog.load_platform(f"instinct-{name}").name == name


def test_board_power_and_cooling():
    mi350x, mi355x = (catalog.load_platform(n) for n in NEW)
    assert (mi350x.tdp_w, mi350x.cooling) == (1000, "air")
    assert (mi355x.tdp_w, mi355x.cooling) == (1400, "liquid")


@pytest.mark.parametrize("name", NEW)
def test_peaks_follow_from_cus_and_clock(name):
    """The catalog's dense peaks are what their sources derive: 256 CUs x 8,192 FP8 FLOP per
    clock x the peak engine clock; FP16/BF16 half of that, MXFP4 twice."""
    p = catalog.load_platform(name)
    fp8 = NUM_CUS * FP8_FLOP_PER_CLOCK_PER_CU * p.boost_clock_hz
    assert p.peak_flops("fp8") == pytest.approx(fp8, rel=1e-4)
    assert p.peak_flops("bf16") == pytest.approx(fp8 / 2, rel=1e-4)
    assert p.peak_flops("fp16") == pytest.approx(fp8 / 2, rel=1e-4)
    assert p.peak_flops("fp4") == pytest.approx(fp8 * 2, rel=1e-4)
    assert "tf32" not in p.peak_flops_per_s   # CDNA 4 dropped TF32 matrix hardware


@pytest.mark.parametrize("name", NEW)
def test_stand_ins_say_they_are_placeholders(name):
    p = catalog.load_platform(name)
    for key in ("idle_power_w", "thermal_slowdown_c", "thermal_shutdown_c", "memory_max_c",
                "intra_domain_latency_s", "inter_node_latency_s"):
        assert p.sources[key].startswith("placeholder:"), key
    for key in ("fp8", "bf16", "fp16", "fp4"):
        assert p.sources[f"peak_flops_per_s.{key}"].startswith("derived:"), key


def test_each_sits_in_its_own_chassis():
    air = chassis_for(catalog.load_platform("mi350x"))
    liquid = chassis_for(catalog.load_platform("mi355x"))
    assert air.name == "ubb-air-mi350x" and air.num_slots == 8
    assert any(u >= 0 for u in air.upstream)            # rear modules breathe front exhaust
    assert liquid.name == "ubb-liquid-mi355x" and liquid.num_slots == 8
    assert all(u < 0 for u in liquid.upstream) and liquid.preheat_share == 0


@pytest.mark.parametrize("name", NEW)
def test_predict_runs(name):
    r = CliRunner().invoke(app, ["predict", "--model", "70b", "--platform", name, "--gpus", "64",
                                 "--tp", "4", "--pp", "2", "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["calibrated"] is False   # no CDNA 4 run has been measured
    assert out["figures"]["fits"]["value"] is True
    assert out["figures"]["tokens_per_sec_per_gpu"]["value"] > 0
    assert out["figures"]["avg_power_w"]["value"] <= catalog.load_platform(name).tdp_w


def test_recommend_runs_on_mi355x():
    r = CliRunner().invoke(app, ["recommend", "--model", "70b", "--gpus", "64", "--platform",
                                 "mi355x", "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    best = out["choices"][0]["predicted"]
    assert out["platform"] == "mi355x" and out["num_feasible"] > 0
    assert best["fits"] and best["memory_gb"] <= 288 and best["calibrated"] is False
