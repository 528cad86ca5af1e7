"""The software release trend: how a family's measured throughput moved with the release of its
runs (`SoftwareTrend`), fitted with the families (`advisor.learn.fit.fit_all`)."""

import dataclasses

import numpy as np
import pandas as pd
import pytest

from advisor.learn.fit import (
    fit_all,
    load_reference,
    predict_reference,
    release_factor,
    release_year,
)
from advisor.perf.calibration import SoftwareTrend, load_calibration

LAYOUT = ["model", "gpu", "num_gpus", "precision", "seq_len", "gbs", "mbs", "tp", "pp", "cp",
          "ep", "vp", "dp_sharding", "recompute"]


@pytest.fixture(scope="module")
def reference(reference_csv, mlperf_csv):
    return load_reference(reference_csv, mlperf_csv)


@pytest.mark.parametrize(("software", "mlperf_round", "year"), [
    ("26.04.01", "", 2026 + 3.5 / 12),
    ("25.09", "", 2025 + 8.5 / 12),
    ("NGC MXNet 23.09, NGC PyTorch 23.09, NGC HugeCTR 23.09", "", 2023 + 8.5 / 12),
    ("Pytorch 24.09", "v5.0", 2025 + 5.5 / 12),     # a round's own date comes first
    ("PyTorch 2.6.0a0+gitfc899bf", "v4.1", 2024 + 10.5 / 12),
    ("NeMo 24.03.01 (the container the doc names)", "", 2024 + 2.5 / 12),
    # a stack without numbered containers, dated by its publication month (the first named)
    ("llm-foundry benchmark tables of 2023-09 (PR #543: opened 2023-08-22)", "", 2023 + 8.5 / 12),
])
def test_release_year_reads_containers_and_mlperf_rounds(software, mlperf_round, year):
    assert release_year(software, mlperf_round) == pytest.approx(year)


@pytest.mark.parametrize("software", ["", "ROCm 6.4.0-47", "CUDA 12.3", "LLMBoost 1.1.0",
                                      "99.99", "2023-13", "1.13.1-2023"])
def test_release_year_is_unknown_without_a_container_or_round(software):
    assert np.isnan(release_year(software))


def test_an_older_release_runs_slower_a_newer_one_as_the_newest_an_unknown_one_as_the_mean():
    trend = SoftwareTrend(rate_per_year=0.2, reference_year=2026.5, undated_year=2025.5)
    # the reference, a year older, a year newer, unknown, a team's own (current)
    factor = trend.factor([2026.5, 2025.5, 2027.5, np.nan, np.inf])
    assert factor == pytest.approx([1.0, np.exp(-0.2), 1.0, np.exp(-0.2), 1.0])


def test_blackwell_releases_of_one_job_and_layout_got_faster(reference_csv):
    """The measured direction the trend encodes: Megatron-Bridge ran the same Blackwell jobs in
    the same layouts release after release, and the later release is faster in most of them
    (the first against the last release of each)."""
    runs = pd.read_csv(reference_csv, keep_default_na=False)
    runs = runs[runs["source_name"].str.startswith("Megatron-Bridge")
                & runs["gpu"].isin(["b200", "gb200", "b300", "gb300"])
                & (runs["tokens_per_sec_per_gpu"] != "")].copy()
    runs["year"] = runs["software"].map(release_year)
    runs["tokens"] = runs["tokens_per_sec_per_gpu"].astype(float)
    gains = []
    for _, job in runs.groupby(LAYOUT):
        if job["year"].nunique() > 1:
            first, last = job.loc[job["year"].idxmin()], job.loc[job["year"].idxmax()]
            gains.append(np.log(last["tokens"] / first["tokens"]) / (last["year"] - first["year"]))
    assert len(gains) >= 30
    assert np.mean(np.array(gains) > 0) > 0.6
    assert np.median(gains) > 0.05
    # ... and the bundled calibration says the same of the family
    assert load_calibration().software["blackwell"].rate_per_year > 0.05


def test_reference_rows_are_priced_at_their_release(reference):
    """A run of the family's reference release is the step model's own figure (a new job is
    priced there); an older one is slower by the trend."""
    calibration = load_calibration()
    trend = calibration.software["blackwell"]
    rows = reference.rows
    blackwell = (rows["family"] == "blackwell").to_numpy()
    factor = release_factor(rows, calibration)
    years = rows["release_year"].to_numpy(float)
    newest = blackwell & (years == trend.reference_year)
    older = blackwell & (years < trend.reference_year - 0.5)
    assert newest.any() and older.any()
    assert factor[newest] == pytest.approx(1.0)
    assert (factor[older] < 1.0).all()
    assert (release_factor(rows[rows["family"] == "ampere"], calibration) == 1.0).all()
    unscaled = predict_reference(reference, calibration.__class__(
        **{**calibration.__dict__, "software": {}}))
    scaled = predict_reference(reference, calibration)
    assert (scaled / unscaled).to_numpy() == pytest.approx(factor)


@pytest.mark.slow
def test_the_fit_recovers_a_planted_release_trend(reference):
    """Hopper's dated runs made to move by 0.3 a year with their release (the bundled model's
    prediction, times the trend): the refit finds that rate, within the prior's pull."""
    calibration = load_calibration()
    rows = reference.rows
    hopper = reference.subset(((rows["family"] == "hopper")
                               & rows["release_year"].notna()).to_numpy())
    flat = dataclasses.replace(calibration, software={})
    years = hopper.rows["release_year"].to_numpy(float)
    planted = predict_reference(hopper, flat).to_numpy() * np.exp(0.3 * (years - years.max()))
    hopper.rows = hopper.rows.assign(measured=planted)
    fitted = fit_all(hopper, calibration.with_families({}).with_frameworks({}))
    assert fitted.software["hopper"].reference_year == pytest.approx(years.max())
    assert fitted.software["hopper"].rate_per_year == pytest.approx(0.3, abs=0.05)
