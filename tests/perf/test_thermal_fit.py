"""The thermal constants (`advisor/perf/thermal_fit.py`) fitted on the per-GPU V100 measurements
in datasets/reference/thermal reproduce what those measurements show, and the shipped
thermal_fit.toml is that fit."""

import subprocess
import sys
import tomllib
from importlib import resources

import numpy as np
import pytest

from advisor.core.errors import CatalogError
from advisor.data.reference import reference_path
from advisor.perf import thermal_fit as tf
from advisor.perf.power_params import load_power_params

THERMAL_DIR = reference_path("thermal")
SIZES = np.array(tf.SUBSET_SIZES)


@pytest.fixture(scope="module")
def reference() -> tf.ThermalReference:
    return tf.load_reference(THERMAL_DIR)


@pytest.fixture(scope="module")
def fitted(reference) -> tf.ThermalFit:
    return tf.fit(reference)


def test_hotter_gpus_clock_lower_at_the_power_cap(fitted, reference):
    # README: about -1.25 % per 10 C (duplicate rows counted twice); -1.18 % once.
    assert -1.5e-3 < fitted.clock_frac_per_c_at_cap < -1.0e-3
    capped = reference.sgemm[reference.sgemm["pwr"] > tf.CAP_MIN_W]
    hot, cool = capped[capped["temp"] >= 72], capped[capped["temp"] <= 60]
    assert hot["freq"].median() < cool["freq"].median() - 15


def test_devices_1_and_3_run_hotter_than_0_and_2_at_equal_power(fitted):
    offset = fitted.slot_offset_c
    assert offset[0] == 0.0 and len(offset) == 4
    assert min(offset[1], offset[3]) > max(offset[0], offset[2]) + 4.0
    assert 5.0 < fitted.rear_minus_front_c < 8.0  # README: about 6-7 C
    assert 0.1 < fitted.rear_preheat_share < 0.4


def test_temperature_rises_with_power_and_spreads_between_gpus(fitted):
    assert fitted.resistance_c_per_w_v100 > 0
    assert fitted.rise_at_limit_c_v100 == pytest.approx(300 * fitted.resistance_c_per_w_v100)
    assert 30 < fitted.rise_at_limit_c_v100 < 70
    assert 10 < fitted.temp_intercept_c_v100 < 35  # near a machine room's inlet air
    assert fitted.temp_run_sigma_c < fitted.temp_sigma_c < 8


def test_temperature_spread_splits_into_node_and_gpu_levels(fitted, reference):
    """Runs hold the four GPUs of one node: node level and GPU-within-node level add in
    quadrature to the GPU-to-GPU spread (measured 2.94 and 4.06 C: 5.01 C against 4.99 C)."""
    total, gpu, node = fitted.temp_sigma_c, fitted.temp_sigma_gpu_c, fitted.temp_sigma_node_c
    assert 0 < gpu < node < total
    assert np.hypot(gpu, node) == pytest.approx(total, rel=0.03)
    levels = tf.node_spread(reference.training, tf.fit_temperature(reference.training)[3])
    assert (levels.num_nodes, levels.num_runs) == (88, 625)    # 34 BERT + 84 ResNet, 30 in both
    # Removing run-to-run noise lowers both (measured 3.06 -> 2.94 and 4.58 -> 4.06 C).
    assert levels.sigma_gpu_c < levels.sigma_gpu_raw_c < levels.sigma_gpu_c + 0.5
    assert levels.sigma_node_c < levels.sigma_node_means_c < levels.sigma_node_c + 1.0
    # Per workload (measured within node 2.28 / 3.50 C, node 3.53 / 4.71 C): ResNet-50's nodes
    # spread more; the pooled figures lie between.
    split = {w: tf.node_spread(f, tf.fit_temperature(f)[3])
             for w, f in reference.training.groupby("workload")}
    bert, resnet = split["bert"], split["resnet50"]
    assert bert.sigma_gpu_c < gpu < resnet.sigma_gpu_c
    assert bert.sigma_node_c < node < resnet.sigma_node_c


def test_node_split_needs_all_four_gpus_of_each_run(reference):
    training = reference.training.iloc[1:]
    with pytest.raises(ValueError, match="4 GPUs of one node"):
        tf.node_spread(training, tf.fit_temperature(training)[3])


def test_power_model_leakage_is_the_thermal_fit():
    """power.toml's leakage_per_c is thermal_fit.toml's (as written, 4 significant digits), and
    that was derived with the static share and exponent power.toml ships now."""
    power, shipped = load_power_params(), tf.load_thermal_fit()
    assert power.leakage_per_c == float(f"{shipped.leakage_per_c:.4g}")
    inputs = tomllib.loads((resources.files("advisor.catalog") / "thermal_fit.toml")
                           .read_text(encoding="utf-8"))["inputs"]
    assert inputs["static_share"] == power.static_share
    assert inputs["clock_power_exponent"] == power.clock_power_exponent
    assert inputs["leakage_reference_c"] == power.leakage_reference_c


def test_leakage_reproduces_the_measured_clock_slope_at_the_cap():
    """Busy power static·(1 + k·ΔT) + dynamic·φ^a held at the limit: the clock falls with
    temperature as measured. The full-clock demand is static(T) + dynamic (dynamic fixed: a
    demand held fixed while static grows would fall three times slower)."""
    p, shipped = load_power_params(), tf.load_thermal_fit()
    limit_w, k, t0 = 300.0, shipped.leakage_per_c, p.leakage_reference_c

    def clock(temp_c: float) -> float:
        static_w = limit_w * p.static_share * (1.0 + k * (temp_c - t0))
        dynamic_w = 240.0  # V100 SGEMM: clock ~0.89 of 1530 MHz at 300 W
        return float(p.capped_clock(static_w, static_w + dynamic_w, limit_w))

    median_c = 66.0
    slope = np.log(clock(median_c + 0.5) / clock(median_c - 0.5))
    assert slope == pytest.approx(shipped.clock_frac_per_c_at_cap, rel=5e-3)


def test_expected_slowest_is_zero_for_one_gpu_and_grows_with_n():
    n = np.array([1, 2, 4, 10, 100, 1000, 10_000, 1_000_000])
    e = tf.expected_max_normal(n)
    assert e[0] == 0.0
    assert np.all(np.diff(e) > 0)
    # Exact: 1/sqrt(pi) for two; tabulated order-statistic means (Harter 1961) for the rest.
    # variability.max_of_normals, measured: within 5e-7 of the table up to n = 10, 2.1e-6 at
    # 100, 4.1e-6 at 1000 (its A&S 7.1.26 normal CDF, |error| < 1.5e-7, limits the far tail).
    assert e[1:4] == pytest.approx([1 / np.sqrt(np.pi), 1.029375, 1.538753], abs=1e-6)
    assert e[4:6] == pytest.approx([2.507594, 3.241436], abs=1e-5)
    assert tf.expected_slowest(n, 0.02) == pytest.approx(0.02 * e)
    assert tf.expected_slowest(np.array([[1, 4], [16, 64]]), 0.01).shape == (2, 2)
    with pytest.raises(ValueError, match="at least 1"):
        tf.expected_max_normal(0)


def test_expected_max_matches_scipy_quadrature():
    """Against adaptive quadrature with scipy's exact normal: measured errors 8e-10 (n = 3),
    6.5e-7 (50), 2.2e-5 (4096), 1.9e-4 (1e6: 4e-5 of the value; slowest-of-N at σ = 2 % is
    off by 4e-6, far below anything the model resolves)."""
    from scipy import integrate, stats

    tolerance = {3: 1e-8, 50: 2e-6, 4096: 5e-5, 1_000_000: 3e-4}
    for n, tol in tolerance.items():
        exact = integrate.quad(lambda x, n=n: x * n * stats.norm.pdf(x)
                               * np.exp((n - 1) * stats.norm.logcdf(x)), -12, 12,
                               points=[np.sqrt(2 * np.log(n))], limit=500, epsabs=1e-12)[0]
        assert tf.expected_max_normal(n) == pytest.approx(exact, abs=tol), n


def test_subset_check_slowest_of_n(fitted, reference):
    """Random subsets of the measured GPUs: at the power cap the normal form holds (measured
    ratios 0.98, 1.02, 1.09, 1.26 for N = 4, 16, 64, 256); with the four GPUs that run hot
    below the cap the tail is heavier and the formula underestimates (1.16 ... 3.17)."""
    predicted = tf.expected_slowest(SIZES, fitted.gpu_speed_sigma)
    at_cap = tf.subset_slowest(tf.per_gpu_log_time(reference.sgemm, at_cap_only=True))
    every = tf.subset_slowest(tf.per_gpu_log_time(reference.sgemm))
    ratio = at_cap / predicted
    assert np.all(np.abs(ratio[:3] - 1.0) < 0.15) and abs(ratio[3] - 1.0) < 0.35, ratio
    assert np.all(every >= at_cap) and np.all(np.diff(every / predicted) > 0)
    shipped = tomllib.loads((resources.files("advisor.catalog") / "thermal_fit.toml")
                            .read_text(encoding="utf-8"))["subset_check"]
    assert shipped["num_gpus"] == SIZES.tolist()
    for key, value in (("predicted", predicted), ("measured_all", every),
                       ("measured_at_cap", at_cap)):
        assert shipped[key] == pytest.approx(value, rel=1e-3), key


def test_shipped_thermal_fit_is_the_fit(fitted):
    shipped = tf.load_thermal_fit()
    for key in tf.FITTED:
        assert getattr(shipped, key) == pytest.approx(getattr(fitted, key), rel=1e-3,
                                                      abs=1e-6), key


def test_thermal_fit_value_without_source_is_rejected(tmp_path, monkeypatch):
    text = (resources.files("advisor.catalog") / "thermal_fit.toml").read_text(encoding="utf-8")
    (tmp_path / "thermal_fit.toml").write_text(
        text.replace('\ntemp_sigma_c = "fit:', '\nnot_a_key = "fit:'), encoding="utf-8")
    monkeypatch.setattr(tf.resources, "files", lambda package: tmp_path)
    with pytest.raises(CatalogError, match=r"temp_sigma_c has no entry in \[sources\]"):
        tf.load_thermal_fit.__wrapped__()


def test_loading_the_fit_imports_neither_pandas_nor_scipy():
    code = ("import sys\n"
            "from advisor.perf.thermal_fit import expected_slowest, load_thermal_fit\n"
            "expected_slowest(1024, load_thermal_fit().gpu_speed_sigma)\n"
            "heavy = {'pandas', 'scipy'} & set(sys.modules)\n"
            "assert not heavy, heavy\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
