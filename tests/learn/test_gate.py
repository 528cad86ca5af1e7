"""The refit gate: cells of family × precision × dense/MoE, and what counts as worse."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from advisor.learn import gate


def _rows(n: int, *, family: str, precision: str, moe: bool, measured: float) -> pd.DataFrame:
    return pd.DataFrame({"family": family, "precision": precision, "moe": moe,
                         "measured": measured}, index=[f"{family}-{precision}-{moe}-{i}"
                                                       for i in range(n)])


def _table(hopper_bf16_error: float, blackwell_fp8_error: float) -> pd.DataFrame:
    rows = pd.concat([_rows(12, family="hopper", precision="bf16", moe=False, measured=100.0),
                      _rows(4, family="hopper", precision="fp8-cs", moe=True, measured=100.0),
                      _rows(20, family="blackwell", precision="mxfp8", moe=False,
                            measured=100.0)])
    predicted = pd.Series(100.0, index=rows.index)
    predicted[rows.index.str.startswith("hopper-bf16")] = 100.0 * (1 + hopper_bf16_error)
    predicted[rows.index.str.startswith("blackwell")] = 100.0 * (1 - blackwell_fp8_error)
    return gate.cell_table(rows, predicted)


def test_precision_classes_group_the_recipes():
    assert [gate.precision_class(p) for p in ("bf16", "fp16", "16-bit", "fp8-cs", "mxfp8",
                                              "fp8-block", "nvfp4")] == \
        ["bf16", "bf16", "bf16", "fp8", "fp8", "fp8", "fp4"]


def test_cells_carry_rows_and_signed_error():
    table = _table(0.10, 0.05)
    hopper = table.loc[("hopper", "bf16", "dense")]
    assert hopper["rows"] == 12 and hopper["mape"] == pytest.approx(10.0)
    assert hopper["signed_median"] == pytest.approx(10.0)         # predicted too fast
    assert table.loc[("blackwell", "fp8", "dense"), "signed_median"] == pytest.approx(-5.0)
    assert table.loc[("all", "", ""), "rows"] == 36


def test_a_worse_gated_cell_fails_and_a_small_one_does_not():
    before, after = _table(0.10, 0.05), _table(0.12, 0.05)
    worse = gate.regressions(gate.compare(before, after))
    assert len(worse) == 1 and worse[0].startswith("hopper × bf16 × dense (12 rows)")
    # Within a point: passes.
    assert not gate.regressions(gate.compare(before, _table(0.105, 0.05)))
    # A 4-row cell may move freely.
    small = _table(0.10, 0.05)
    small.loc[("hopper", "fp8", "moe"), "mape"] += 20.0
    assert not gate.regressions(gate.compare(before, small))


def test_better_cells_pass_and_the_baseline_round_trips(tmp_path):
    before, after = _table(0.10, 0.05), _table(0.02, 0.01)
    assert not gate.regressions(gate.compare(before, after))
    path = tmp_path / "baseline.json"
    gate.write_baseline(path, before, commit="abc1234", note="test")
    table, meta = gate.read_baseline(path)
    assert meta == {"commit": "abc1234", "note": "test"}
    pd.testing.assert_frame_equal(table[["rows", "mape"]].astype(float),
                                  before[["rows", "mape"]].astype(float))


def test_error_by_gpu_count_bins_every_job_once():
    rows = pd.DataFrame({"num_gpus": [8, 8, 64, 512, 1024, 16384],
                         "measured": [100.0] * 6})
    predicted = pd.Series([110.0, 90.0, 100.0, 120.0, 80.0, 100.0], index=rows.index)
    table = gate.scale_table(rows, predicted)
    assert table["rows"].sum() == 6
    assert table.loc["1-8", "rows"] == 2 and table.loc["1-8", "mape"] == pytest.approx(10.0)
    assert table.loc["257-1024", "rows"] == 2
    assert table.loc["1025+", "signed_median"] == pytest.approx(0.0)


@pytest.mark.plot
def test_gate_figures_draw_every_run_and_the_band(ref, tmp_path):
    # `calibrate.py --gate --plots DIR` on the reference runs; the shipped calibration's own
    # predictions stand in for the held-out ones (the refit takes minutes).
    import json

    from benchmark_scripts import load_benchmark

    from advisor.learn.fit import predict_reference
    from advisor.perf.calibration import load_calibration

    calibrate = load_benchmark("calibrate")
    calibration = load_calibration()
    predicted = predict_reference(ref, calibration)
    half_width = calibrate.band_half_widths(calibration, ref.rows)
    paths = calibrate.gate_plots(ref.rows, predicted, half_width, tmp_path)
    assert [p.name for p in paths] == ["gate-predicted-vs-measured.png",
                                       "gate-error-by-gpus.png", "gate-band-coverage.png"]
    for path in paths:
        data = path.read_bytes()
        assert data[:4] == b"\x89PNG" and 10_000 < len(data) < 200_000
    index = json.loads((tmp_path / "figures.json").read_text(encoding="utf-8"))
    assert [f["file"] for f in index] == [p.name for p in paths]
    moe = ref.rows["moe"].astype(bool)
    # Dense and MoE runs each get the half-width of their kind's held-out error.
    for kind, rows in (("dense", ~moe), ("MoE", moe)):
        assert f"{kind} exp(±{half_width[rows].iloc[0]:.3f})" in index[2]["alt"]
    assert half_width[moe].iloc[0] > half_width[~moe].iloc[0]
    inside = np.abs(np.log(predicted / ref.rows["measured"])) <= half_width
    assert 0.5 < inside.mean() < 1.0  # the band holds most runs, not all


def test_band_coverage_counts_runs_inside_each_kinds_band():
    from benchmark_scripts import load_benchmark

    calibrate = load_benchmark("calibrate")
    rows = pd.DataFrame({"measured": [100.0] * 6, "family": ["hopper"] * 4 + ["blackwell"] * 2,
                         "moe": [False, False, True, True, True, False]})
    # log errors 0.1, 0.3, 0.3, 0.6, 0.1, 0.05 against half-widths 0.2 (dense) and 0.5 (MoE)
    predicted = pd.Series(100.0 * np.exp([0.1, -0.3, 0.3, -0.6, 0.1, 0.05]), index=rows.index)
    half_width = pd.Series(np.where(rows["moe"], 0.5, 0.2), index=rows.index)
    table = calibrate.band_coverage(rows, predicted, half_width)
    assert table.loc[("all", ""), "rows"] == 6
    assert table.loc[("all", ""), "inside_pct"] == pytest.approx(100 * 4 / 6, abs=0.05)
    assert table.loc[("hopper", "dense"), "inside_pct"] == pytest.approx(50.0)
    assert table.loc[("hopper", "moe"), "inside_pct"] == pytest.approx(50.0)
    assert table.loc[("blackwell", "moe"), "inside_pct"] == pytest.approx(100.0)
    assert table.loc[("hopper", "moe"), "half_width"] == pytest.approx(0.5)


def test_series_band_metrics_size_each_kind_with_enough_runs():
    from benchmark_scripts import load_benchmark

    from advisor.learn.bands import KIND_METRIC
    from advisor.learn.stack import MIN_KIND_ROWS

    calibrate = load_benchmark("calibrate")
    rng = np.random.default_rng(0)

    def rows_of(n_moe: int) -> tuple[pd.DataFrame, pd.Series]:
        n = 60 + n_moe
        moe = np.r_[np.zeros(60, bool), np.ones(n_moe, bool)]
        rows = pd.DataFrame({"measured": 100.0, "moe": moe, "finetune": "none",
                             "series": np.where(np.arange(n) % 3, "a", "b"),
                             "platform": "h100", "model": np.where(moe, "m", "d")})
        error = rng.normal(0.0, np.where(moe, 0.4, 0.1))
        return rows, pd.Series(100.0 * np.exp(error), index=rows.index)

    rows, predicted = rows_of(MIN_KIND_ROWS)
    out = calibrate.series_band_metrics(rows, predicted)
    error = np.abs(np.log(predicted / rows["measured"]))
    for flag, key in KIND_METRIC.items():
        assert out[key] == pytest.approx(np.quantile(error[rows["moe"] == flag], 0.8), abs=1e-4)
    assert out[KIND_METRIC[True]] > out["loso_series_p80_abs_log_error"] > out[KIND_METRIC[False]]
    # Too few MoE runs to size their own band: the pooled figure serves them.
    out = calibrate.series_band_metrics(*rows_of(MIN_KIND_ROWS - 1))
    assert KIND_METRIC[True] not in out and KIND_METRIC[False] in out
