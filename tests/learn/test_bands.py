"""The p10-p90 band sized for stacks the data never saw: grouped cross-validation inside the
training rows (real XGBoost on the published runs), and the analytical fallback band."""

import json
import math

import numpy as np
import pandas as pd
import pytest

from advisor.learn.bands import KIND_METRIC, Z90, analytical_log_sd, band_scale, needed_scale
from advisor.learn.surrogate import (
    ArtifactError,
    load_throughput,
    train_throughput,
    write_metadata,
)
from advisor.learn.train import band_groups
from advisor.perf.calibration import load_calibration


def test_needed_scale_is_the_distance_in_half_widths():
    ratio = pd.DataFrame({"p10": [0.9, 0.9, 0.9], "p50": [1.0, 1.0, 1.0],
                          "p90": [1.1, 1.1, 1.1]})
    need = needed_scale(ratio, np.array([1.2, 1.0, 0.95]))
    assert need[0] == pytest.approx(math.log(1.2) / math.log(1.1))  # above: upper half-width
    assert need[1] == 0.0
    assert need[2] == pytest.approx(math.log(0.95) / math.log(0.9))  # below: lower half-width


@pytest.mark.slow
def test_band_scale_makes_a_held_out_series_fall_inside_more_often(ref, feats):
    """The scale comes from the training series only; on a series it never saw, the scaled
    band contains more of the measurements than the trees' own band."""
    series = ref.rows["series"].to_numpy()
    held = series == pd.Series(series).value_counts().index[0]  # the largest series
    fam, mfam = ref.rows["family"].to_numpy(), ref.rows["model_family"].to_numpy()
    train = feats[~held]
    scale, how = band_scale(train, fam[~held], mfam[~held], band_groups(ref.rows[~held]))
    assert scale > 1.0 and how["band_scale_groups"] >= 3 and how["band_scale_rows"] > 0
    surrogate = train_throughput(train, fam[~held], mfam[~held])
    test = feats[held]
    measured = (test["measured"] / test["analytical"]).to_numpy()

    def coverage() -> float:
        r = surrogate.predict_ratio(test, fam[held], mfam[held])
        ok = r["supported"].to_numpy()
        return float(((measured >= r["p10"]) & (measured <= r["p90"]))[ok].mean())

    narrow = coverage()
    surrogate.band_scale = scale
    assert coverage() > narrow


def test_too_few_groups_leave_the_band_as_the_trees_made_it(ref, feats):
    fam, mfam = ref.rows["family"].to_numpy(), ref.rows["model_family"].to_numpy()
    groups = np.where(np.arange(len(feats)) % 2 == 0, "a", "b")
    scale, how = band_scale(feats, fam, mfam, groups)
    assert scale == 1.0 and "fewer than" in how["band_scale_note"]


def test_band_scale_round_trips_and_a_bad_one_is_refused(ref, feats, tmp_path):
    fam, mfam = ref.rows["family"].to_numpy(), ref.rows["model_family"].to_numpy()
    s = train_throughput(feats.iloc[:120], fam[:120], mfam[:120])
    s.band_scale = 1.7
    s.save(tmp_path)
    assert load_throughput(tmp_path).band_scale == 1.7
    meta_path = tmp_path / "throughput.json"
    for bad in (0.5, "wide", 1e308):
        meta = json.loads(meta_path.read_text())
        meta["band_scale"] = bad
        meta_path.write_text(json.dumps(meta))
        # Edited by hand: the metadata's own hash no longer matches.
        with pytest.raises(ArtifactError, match="does not match its own hash"):
            load_throughput(tmp_path)
        # Written with a valid hash (as a buggy trainer would): the value itself is refused.
        write_metadata(meta_path, meta)
        with pytest.raises(ArtifactError, match="band_scale"):
            load_throughput(tmp_path)


def test_analytical_band_is_sized_by_the_series_held_out_error():
    shipped = load_calibration()
    # A calibration recording one pooled figure (before dense and MoE runs had their own):
    # half of the band is the 80th percentile of the held-out |log error|, 80 % inside.
    cal = shipped.__class__(**{**shipped.__dict__, "metrics": {
        k: v for k, v in shipped.metrics.items() if k not in KIND_METRIC.values()}})
    p80 = cal.metrics["loso_series_p80_abs_log_error"]
    assert analytical_log_sd(cal) == pytest.approx(p80 / Z90)
    # The error is heavier-tailed than a log-normal of its median: the band is wider.
    series = cal.metrics["loso_series_median_ape_pct"]
    assert analytical_log_sd(cal) > math.log1p(series / 100) / 0.6745
    # An older calibration file records single sources held out only: that figure sizes it.
    source = cal.metrics["loso_median_ape_pct"]
    older = cal.__class__(**{**cal.__dict__, "metrics": {"loso_median_ape_pct": source}})
    assert analytical_log_sd(older) == pytest.approx(math.log1p(source / 100) / 0.6745)
    assert analytical_log_sd(older) < analytical_log_sd(cal)  # a whole new stack errs more


def test_moe_runs_get_the_band_their_own_held_out_error_sizes():
    cal = load_calibration()
    dense, moe = (cal.metrics[KIND_METRIC[flag]] for flag in (False, True))
    assert analytical_log_sd(cal) == pytest.approx(dense / Z90)
    assert analytical_log_sd(cal, moe=True) == pytest.approx(moe / Z90)
    # Held out, MoE runs (one series measures their expert kernels) err more than dense ones,
    # and the pooled band sat between the two.
    assert moe > cal.metrics["loso_series_p80_abs_log_error"] > dense
    # A calibration that records only the pooled figure sizes both kinds by it.
    pooled = {k: v for k, v in cal.metrics.items() if k not in KIND_METRIC.values()}
    older = cal.__class__(**{**cal.__dict__, "metrics": pooled})
    assert analytical_log_sd(older, moe=True) == analytical_log_sd(older) == pytest.approx(
        cal.metrics["loso_series_p80_abs_log_error"] / Z90)
    # A family no run calibrated: never narrower than the kind's own band.
    assert analytical_log_sd(cal, calibrated=False, moe=True) >= analytical_log_sd(cal, moe=True)


def test_a_moe_model_gets_the_wider_analytical_band_in_predictions():
    from advisor.predict.predictor import Predictor

    frame = pd.DataFrame({"model": ["llama3-70b", "mixtral-8x22b"], "gpu": ["h100"] * 2,
                          "num_gpus": [64, 64], "seq_len": [4096] * 2, "gbs": [128] * 2,
                          "tp": [4, 2], "pp": [4, 4], "ep": [1, 8]})
    out = Predictor(None).predict(frame)
    width = np.log(out["pred_tokens_per_sec_per_gpu_p90"] / out["pred_tokens_per_sec_per_gpu_p10"])
    cal = load_calibration()
    assert width.iloc[1] / width.iloc[0] == pytest.approx(
        analytical_log_sd(cal, moe=True) / analytical_log_sd(cal), rel=1e-6)
    assert width.iloc[1] > width.iloc[0]


def test_uncalibrated_family_band_is_sized_by_the_family_held_out_error():
    cal = load_calibration()
    lofo = cal.metrics["lofo_median_ape_pct"]
    assert lofo > cal.metrics["loso_series_median_ape_pct"]  # a new family errs more
    assert analytical_log_sd(cal, calibrated=False) == pytest.approx(
        math.log1p(lofo / 100) / 0.6745)
    older = cal.__class__(**{**cal.__dict__, "metrics": {"loso_series_median_ape_pct": 18.0}})
    assert analytical_log_sd(older, calibrated=False) == analytical_log_sd(older)


def test_uncalibrated_platform_gets_the_wider_band_in_predictions():
    from advisor.predict.predictor import Predictor

    frame = pd.DataFrame({"model": ["llama3-70b"] * 2, "gpu": ["h100", "mi250"],
                          "num_gpus": [64, 64], "seq_len": [8192] * 2, "gbs": [128] * 2,
                          "tp": [4, 4], "pp": [4, 4]})
    out = Predictor(None).predict(frame)
    width = np.log(out["pred_tokens_per_sec_per_gpu_p90"] / out["pred_tokens_per_sec_per_gpu_p10"])
    assert list(out["pred_calibrated"]) == [True, False]
    # log widths scale with the held-out errors: whole families against whole series
    cal = load_calibration()
    assert width.iloc[1] / width.iloc[0] == pytest.approx(
        analytical_log_sd(cal, calibrated=False) / analytical_log_sd(cal), rel=1e-6)
    assert width.iloc[1] > width.iloc[0]
