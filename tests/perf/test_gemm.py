"""The GEMM model against measured kernels (XLA's tables, MAMF), and each platform's peak
against its clock."""

from __future__ import annotations

import numpy as np
import pytest

from advisor.catalog import load_platform, platforms
from advisor.core.errors import CatalogError
from advisor.perf import gemm_fit
from advisor.perf.gemm import load_kernel_table


@pytest.fixture(scope="module")
def tables():
    return gemm_fit.load_tables()


@pytest.fixture(scope="module")
def score(tables):
    return gemm_fit.score_table(tables, load_kernel_table()).set_index(["platform", "format"])


@pytest.mark.parametrize("platform", ["h100", "b200", "mi300x"])
def test_kernels_reproduce_the_measured_bf16_table_within_10_percent(score, platform):
    assert score.loc[(platform, "bf16"), "median_ape_pct"] <= 10.0


def test_mi350_series_table_is_reproduced_within_12_percent(score):
    """The gfx950 table bends where no tile-and-wave model follows (its large shapes run faster
    at batch 4 than at batch 1 by up to 15 %): 11.6 % median, shown, not hidden."""
    assert score.loc[("mi355x", "bf16"), "median_ape_pct"] <= 12.0


def test_a_larger_gemm_measured_faster_counts_as_a_contradiction():
    import pandas as pd

    shapes = pd.DataFrame({"platform": "x", "format": "bf16", "b": 1, "m": 256, "n": 256,
                           "k": [256, 512, 1024], "measured_s": [10e-6, 4e-6, 8e-6]})
    row = gemm_fit.inversions(shapes).iloc[0]
    # 256 -> 512 runs in 0.4 of the time (a contradiction), 512 -> 1024 in twice the time
    assert row["doublings"] == 2 and row["faster_pct"] == 50.0
    assert row["fastest_ratio"] == pytest.approx(0.4)


def test_the_worst_fitted_table_is_the_one_that_contradicts_itself_most(tables, score):
    """MI300X FP8's table measures a larger GEMM more than 10 % faster in about one doubling in
    six (down to a quarter of the time): no kernel model whose time grows with the work follows
    that, which is why its median error stands apart. H100's BF16 table almost never does."""
    rates = gemm_fit.inversions(tables).set_index(["platform", "format"])["faster_pct"]
    assert rates.idxmax() == ("mi300x", "fp8") == score["median_ape_pct"].idxmax()
    assert rates[("mi300x", "fp8")] > 10.0 > 1.0 > rates[("h100", "bf16")]


def test_training_sized_gemms_are_reproduced_closely(score):
    nvidia = score.loc[[("h100", "bf16"), ("b200", "bf16"), ("b200", "fp8")]]
    assert (nvidia["large_median_ape_pct"] < 7.0).all()


def test_the_shipped_kernels_are_what_a_fresh_fit_gives(tables):
    shipped = load_kernel_table()
    for fit in gemm_fit.fit_all(tables):
        kernel = shipped.kernels[fit.arch][fit.fmt]
        assert (kernel.tile_m, kernel.tile_n) == (fit.kernel.tile_m, fit.kernel.tile_n)
        assert kernel.efficiency == pytest.approx(fit.kernel.efficiency, rel=1e-3)


def test_torch_matmul_measurements_the_fit_never_saw_land_near_the_model():
    """MAMF (torch matmul at its best shape) is 0.8-1.05 × the model on every device: XLA's
    own Blackwell kernels run below cuBLAS, which the family's end-to-end factor covers."""
    check = gemm_fit.mamf_check(load_kernel_table())
    assert len(check) >= 10
    assert check["ratio"].between(0.75, 1.1).all(), check


def test_a_gemm_one_tile_past_a_wave_pays_a_whole_wave():
    """Wave quantization: 143 tiles on H100's 132 SMs take two waves, 132 take one."""
    h100 = load_platform("h100")
    kernel = load_kernel_table().kernel(h100, "bf16")
    args = {"peak_flops_per_s": h100.full_clock_peak_flops("bf16"),
            "num_units": h100.num_compute_units,
            "hbm_bytes_per_s": h100.hbm_bandwidth_bytes_per_s, "element_bytes": 2.0}
    m, n = np.array([11.0 * kernel.tile_m]), 12.0 * kernel.tile_n     # 132 tiles: one wave
    full = kernel.seconds(m, n, 8192.0, **args)[0]
    past = kernel.seconds(m, n + kernel.tile_n, 8192.0, **args)[0]   # 143 tiles: two
    assert past > 1.8 * (full - kernel.launch_s)


def test_small_gemms_run_far_below_peak_and_large_ones_near_the_kernel_efficiency():
    h100 = load_platform("h100")
    kernel = load_kernel_table().kernel(h100, "bf16")
    peak = h100.full_clock_peak_flops("bf16")

    def speed(side: float) -> float:
        t = kernel.seconds(np.array([side]), side, side, peak_flops_per_s=peak,
                           num_units=h100.num_compute_units,
                           hbm_bytes_per_s=h100.hbm_bandwidth_bytes_per_s, element_bytes=2.0)
        return 2 * side ** 3 / t[0] / peak

    assert speed(256) < 0.05
    assert 0.9 * kernel.efficiency < speed(8192) <= kernel.efficiency


def test_hopper_datasheet_peak_is_stated_at_the_tensor_clock_not_the_maximum():
    h100 = load_platform("h100")
    assert h100.peak_clock_hz == 1.83e9 and h100.boost_clock_hz == 1.98e9
    assert h100.full_clock_peak_flops("bf16") == pytest.approx(1070.5e12, rel=1e-3)
    a100 = load_platform("a100")
    assert a100.full_clock_peak_flops("bf16") == a100.peak_flops("bf16")


def test_every_peak_is_units_times_a_power_of_two_per_clock_times_its_clock():
    checked = 0
    for platform in platforms().values():
        if not (platform.num_compute_units and platform.peak_clock_hz):
            continue
        per_clock = (platform.peak_flops("bf16")
                     / (platform.num_compute_units * platform.peak_clock_hz))
        nearest = 2 ** round(np.log2(per_clock))
        assert per_clock == pytest.approx(nearest, rel=2e-3), platform.name
        assert nearest >= 1024
        checked += 1
    assert checked >= 13


def test_a_peak_clock_above_the_maximum_clock_is_refused(tmp_path):
    from advisor.catalog import load_platform_override

    path = tmp_path / "fast.toml"
    path.write_text('base = "h100"\npeak_clock_hz = 2.5e9\n'
                    '[sources]\npeak_clock_hz = "typo"\n')
    with pytest.raises(CatalogError, match="peak_clock_hz .* is above boost_clock_hz"):
        load_platform_override(path)


def test_an_unknown_kernel_table_is_named(tmp_path):
    from advisor.catalog import load_platform_override

    path = tmp_path / "odd.toml"
    path.write_text('base = "h100"\ngemm_kernels = "sm_42"\n[sources]\ngemm_kernels = "a guess"\n')
    platform = load_platform_override(path)
    with pytest.raises(CatalogError, match="sm_42.*gemm_kernels.toml"):
        load_kernel_table().kernel(platform, "bf16")


def test_the_benchmark_prints_every_table_and_writes_nothing_unasked(capsys):
    from benchmark_scripts import load_benchmark

    bench = load_benchmark("gemm_check")
    before = bench.TARGET.read_text()
    import sys

    argv, sys.argv = sys.argv, ["gemm_check.py"]
    try:
        assert bench.main() == 0
    finally:
        sys.argv = argv
    out = capsys.readouterr().out
    assert "BF16 median error per device" in out and "MAMF" in out
    assert bench.TARGET.read_text() == before
