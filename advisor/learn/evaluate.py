"""Grouped cross-validation of the surrogate against the analytical model alone.

For each held-out group (a source, a model family, a platform) the analytical model is
recalibrated on the other rows, the surrogate trained on them, and both predict the held-out
rows: nothing about a held-out row reaches either model.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd

from advisor.core.errors import AdvisorError
from advisor.learn.bands import Z90, analytical_log_sds, at_least, band_scale
from advisor.learn.features import group_features, reference_features
from advisor.learn.fit import Reference, fit_all, kendall_by_group
from advisor.learn.surrogate import train_throughput
from advisor.learn.train import band_groups, learnable
from advisor.perf.calibration import Calibration, load_calibration

SPLITS = {"source": "source", "series": "series", "model_family": "model_family",
          "platform": "platform", "mlperf_submitter": "submitter", "mlperf_round": "round"}
"""`series` holds out every release of a publication series at once (Megatron-Bridge 25.09 …
26.08 together): releases share configurations, so `source` alone is optimistic.
`mlperf_submitter` and `mlperf_round` hold out the MLPerf submissions of one submitter (one
round) at a time, training on everything else, the other MLPerf rows included; only MLPerf rows
are scored. Submitters rerun NVIDIA's and AMD's configurations, so a held-out submitter's twins
stay in training: optimistic next to `source`, which holds all MLPerf rows out at once."""

DEFAULT_SPLITS = ("source", "series", "model_family", "platform")
"""What `advisor evaluate` runs without `--by`."""


def cross_validate(ref: Reference, calibration: Calibration, by: str, *,
                   refit_analytical: bool = True,
                   progress: Callable[[str], None] | None = None) -> pd.DataFrame:
    """Per reference row: measured, analytical and surrogate predictions (p10/p50/p90) from
    models that never saw the row's group, and whether the surrogate supported it. Each fold's
    band is scaled by grouped cross-validation inside its own training rows (`bands`), and
    rows the surrogate does not support carry the analytical band, as `Predictor` gives them.
    Rows whose `by` value is empty (the published rows under `submitter`) are never held out
    and not in the result."""
    rows = ref.rows
    parts = []
    groups = [g for g in rows[by].unique() if g != ""]
    if not groups:
        raise AdvisorError(f"no row has a {by}: nothing to hold out (the MLPerf splits need "
                           f"datasets/mlperf.parquet, `advisor dataset import-mlperf`).")
    # Unsupported rows get the Predictor's analytical band (sized by the bundled calibration's
    # leave-one-series-out error of dense or of MoE runs: not refitted per fold).
    log_sd = analytical_log_sds(calibration, rows["moe"].astype(bool))
    for i, group in enumerate(groups, 1):
        if progress:
            progress(f"{by} {i}/{len(groups)}: {group}")
        held = (rows[by] == group).to_numpy()
        if held.all():
            raise AdvisorError(f"only one {by} in the data: nothing to train on when it is "
                               f"held out.")
        fit_ref, test_ref = ref.subset(~held), ref.subset(held)
        cal = (fit_all(fit_ref, calibration.with_families({}).with_frameworks({}))
               if refit_analytical else calibration)
        train_ref = fit_ref.subset(learnable(fit_ref.rows))   # LoRA calibrates, never trains
        train = reference_features(train_ref, cal)
        test = reference_features(test_ref, cal)
        families = train_ref.rows["family"].to_numpy()
        model_families = train_ref.rows["model_family"].to_numpy()
        surrogate = train_throughput(train, families, model_families)
        surrogate.band_scale, _ = band_scale(train, families, model_families,
                                             band_groups(train_ref.rows))
        ratio = surrogate.predict_ratio(test, test_ref.rows["family"].to_numpy(),
                                        test_ref.rows["model_family"].to_numpy())
        base = test["analytical"]
        ok = ratio["supported"].to_numpy() & learnable(test_ref.rows)
        mid = np.where(ok, base * ratio["p50"], base)
        # As the Predictor: a stack the fold's calibration never saw gets no narrower a band
        # than an unseen series.
        unseen = np.array([not cal.knows_stack(fw, fam) for fw, fam in
                           zip(test_ref.rows["framework"], test_ref.rows["family"], strict=True)])
        sd = log_sd[held]
        spread = np.exp(Z90 * sd)
        low, high = at_least(np.where(ok, base * ratio["p10"], base / spread), mid,
                             np.where(ok, base * ratio["p90"], base * spread), unseen, sd)
        parts.append(pd.DataFrame({
            "group": group, "measured": test["measured"], "analytical": base,
            "surrogate": mid, "p10": low, "p90": high,
            "supported": ok, "extrapolation": ratio["extrapolation"] | unseen},
            index=test.index))
    return pd.concat(parts).loc[rows.index[rows[by] != ""]]


def summarise(ref: Reference, result: pd.DataFrame) -> dict:
    """MAPE, median APE, Kendall τ within (model, platform, GPU count) groups and p10-p90
    coverage, for the surrogate and the analytical model side by side; `by_family` has MAPE
    and median APE per platform family."""
    rows = ref.rows.loc[result.index]
    out: dict = {"rows": int(len(result)), "supported_share": float(result["supported"].mean())}
    for name in ("surrogate", "analytical"):
        ape = (result[name] / result["measured"] - 1.0).abs() * 100
        tau = kendall_by_group(rows, result[name])
        out[name] = {"mape_pct": float(ape.mean()), "median_ape_pct": float(ape.median()),
                     "median_kendall_tau": float(tau["tau"].median()) if len(tau) else None,
                     "by_family": {family: {"rows": int(len(part)),
                                            "mape_pct": float(part.mean()),
                                            "median_ape_pct": float(part.median())}
                                   for family, part in ape.groupby(rows["family"])}}
    inside = (result["measured"] >= result["p10"]) & (result["measured"] <= result["p90"])
    supported = result["supported"].to_numpy(dtype=bool)
    out["surrogate"]["p10_p90_coverage"] = float(inside.mean())
    out["surrogate"]["p10_p90_coverage_supported"] = (float(inside[supported].mean())
                                                      if supported.any() else None)
    return out


def vtrain_leave_one_job_out(frame: pd.DataFrame, calibration: Calibration | None = None,
                             *, progress: Callable[[str], None] | None = None) -> pd.DataFrame:
    """vTrain's single-node sweeps, one job (model, GPU count, global batch) held out at a
    time: the surrogate learns from the other jobs' runs on top of the zero-shot analytical
    prior (nothing from vTrain in it). Per row: measured and predicted iteration time (ms)."""
    from advisor.catalog import load_platform
    from advisor.perf.analytical import analytical_table
    from advisor.perf.vtrain import FRAMEWORK, JOB, vtrain_groups

    calibration = calibration or load_calibration()
    calibration = calibration.with_frameworks(
        {k: v for k, v in calibration.frameworks.items() if k != FRAMEWORK})
    platform = load_platform("a100")
    parts = []
    for model, part, configs in vtrain_groups(frame):
        table = analytical_table(model, platform, configs, calibration=calibration,
                                 framework=FRAMEWORK)
        feats = group_features(model, platform, configs, table, framework=FRAMEWORK)
        feats["analytical"] = table["tokens_per_sec_per_gpu"].to_numpy()
        feats["measured"] = (part["gbs"] * part["seq_len"] / (part["measured_ms"] / 1e3)
                             / part["num_gpus"]).to_numpy()
        feats["model_name"] = model.name
        parts.append(feats)
    feats = pd.concat(parts).loc[frame.index]
    job = frame[list(JOB)].astype(str).agg("|".join, axis=1)
    out = pd.DataFrame(index=frame.index, columns=["analytical_ms", "surrogate_ms"],
                       dtype=float)
    jobs = job.unique()
    for i, key in enumerate(jobs, 1):
        if progress and i % 24 == 0:
            progress(f"vTrain job {i}/{len(jobs)}")
        held = (job == key).to_numpy()
        fam = np.full(len(feats), "ampere")
        surrogate = train_throughput(feats[~held], fam[~held],
                                     feats["model_name"].to_numpy()[~held])
        ratio = surrogate.predict_ratio(feats[held], fam[held],
                                        feats["model_name"].to_numpy()[held])
        tokens = (frame.loc[held, "gbs"] * frame.loc[held, "seq_len"]).to_numpy()
        gpus = frame.loc[held, "num_gpus"].to_numpy()
        base = feats.loc[held, "analytical"].to_numpy()
        learned = np.where(ratio["supported"], base * ratio["p50"], base)
        out.loc[held, "analytical_ms"] = tokens / (base * gpus) * 1e3
        out.loc[held, "surrogate_ms"] = tokens / (learned * gpus) * 1e3
    return out
