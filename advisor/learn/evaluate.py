"""Grouped cross-validation of the surrogate against the analytical model alone.

For each held-out group (a source, a model family, a platform) the analytical model is
recalibrated on the other rows, the surrogate trained on them, and both predict the held-out
rows: nothing about a held-out row reaches either model.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd

from advisor.learn.features import reference_features
from advisor.learn.surrogate import train_throughput
from advisor.perf.calibration import Calibration
from advisor.perf.fit import Reference, fit_all, kendall_by_group

SPLITS = {"source": "source", "model_family": "model_family", "platform": "platform"}


def cross_validate(ref: Reference, calibration: Calibration, by: str, *,
                   refit_analytical: bool = True,
                   progress: Callable[[str], None] | None = None) -> pd.DataFrame:
    """Per reference row: measured, analytical and surrogate predictions (p10/p50/p90) from
    models that never saw the row's group, and whether the surrogate supported it."""
    rows = ref.rows
    parts = []
    groups = rows[by].unique()
    for i, group in enumerate(groups, 1):
        if progress:
            progress(f"{by} {i}/{len(groups)}: {group}")
        held = (rows[by] == group).to_numpy()
        train_ref, test_ref = ref.subset(~held), ref.subset(held)
        cal = (fit_all(train_ref, calibration.with_families({}).with_frameworks({}))
               if refit_analytical else calibration)
        train = reference_features(train_ref, cal)
        test = reference_features(test_ref, cal)
        surrogate = train_throughput(train, train_ref.rows["family"].to_numpy(),
                                     train_ref.rows["model_family"].to_numpy())
        ratio = surrogate.predict_ratio(test, test_ref.rows["family"].to_numpy(),
                                        test_ref.rows["model_family"].to_numpy())
        base = test["analytical"]
        parts.append(pd.DataFrame({
            "group": group, "measured": test["measured"], "analytical": base,
            "surrogate": np.where(ratio["supported"], base * ratio["p50"], base),
            "p10": np.where(ratio["supported"], base * ratio["p10"], np.nan),
            "p90": np.where(ratio["supported"], base * ratio["p90"], np.nan),
            "supported": ratio["supported"], "extrapolation": ratio["extrapolation"]},
            index=test.index))
    return pd.concat(parts).loc[rows.index]


def summarise(ref: Reference, result: pd.DataFrame) -> dict:
    """MAPE, median APE, Kendall τ within (model, platform, GPU count) groups and p10-p90
    coverage, for the surrogate and the analytical model side by side."""
    rows = ref.rows
    out: dict = {"rows": int(len(result)), "supported_share": float(result["supported"].mean())}
    for name in ("surrogate", "analytical"):
        ape = (result[name] / result["measured"] - 1.0).abs() * 100
        tau = kendall_by_group(rows, result[name])
        out[name] = {"mape_pct": float(ape.mean()), "median_ape_pct": float(ape.median()),
                     "median_kendall_tau": float(tau["tau"].median()) if len(tau) else None}
    banded = result[result["supported"]]
    inside = (banded["measured"] >= banded["p10"]) & (banded["measured"] <= banded["p90"])
    out["surrogate"]["p10_p90_coverage"] = float(inside.mean()) if len(banded) else None
    return out
