"""Power and throttling surrogates: XGBoost quantile trees (p10/p50/p90) that learn what
campaign telemetry measured where the analytical power model (`advisor/perf/power.py`) is
wrong.

* `avg_power_w`, `peak_power_w`: log(measured / analytical) watts, as the throughput surrogate
  learns its ratio, so that the prior carries the physics and the trees the residual.
* `throttle_frac_power`, `throttle_frac_thermal`: the measured share of telemetry samples with
  the power-cap (resp. thermal) throttle reason set, learned directly, clipped to [0, 1]. Two
  targets, not their maximum: the collectors pool each reason over all GPUs' samples, so the
  maximum of the two is not the share of time throttled by either, the causes differ (demand
  above the cap against heat), the analytical model has a risk for each, and a row may have
  measured only one. A caller wanting one number takes the larger p50 (a lower bound on "any").
  The analytical `throttle_risk` is a probability, not a share of time, so it is a feature
  here, never the target's prior.

Features: the throughput surrogate's `FEATURES` plus the analytical power and thermal view
(`POWER_EXTRA`), built by `power_features` from an `analytical_table`. Support, range flags,
artifacts (XGBoost JSON trees + JSON metadata, never pickle) and their strict loading follow
`advisor/learn/surrogate.py`, and so does the band: its half-widths are scaled by the
factor that puts 80 % of a held-out source's runs inside (`power_band_scale`, by
`advisor.learn.bands`), once the runs come from enough sources to hold one out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from advisor.core.platform import Platform
from advisor.core.table import Table
from advisor.learn.features import FEATURES, reference_groups
from advisor.learn.surrogate import (
    EXTRAPOLATION_WIDENING,
    MODEL_SUFFIX,
    PARAMS,
    QUANTILES,
    RANGE_FEATURES,
    ROUNDS,
    ArtifactError,
    Support,
    predict_quantiles,
    read_artifact,
    read_band_scale,
    sha256_file,
    write_metadata,
)
from advisor.learn.trees import TreeEnsemble
from advisor.perf.calibration import Calibration

if TYPE_CHECKING:
    import pandas as pd

    from advisor.learn.fit import Reference

POWER_EXTRA = (
    "analytical_avg_power_frac",   # the prior's average power / TDP: comparable across GPUs
    "analytical_peak_power_frac",  # the prior's sampled peak / TDP
    "gemm_demand_frac",            # GEMM-phase demand / TDP: above 1 the prior expects capping
    "throttle_risk", "throttle_risk_power", "throttle_risk_thermal",  # the prior's risks, 0..1
    "thermal_margin_c",            # slowdown temperature − the prior's rear-GPU temperature
    "tdp_w",                       # the power limit itself (W)
    "liquid_cooled",               # 1 for cold plates: no chassis position effect
)
POWER_FEATURES = (*FEATURES, *POWER_EXTRA)
FORMAT_VERSION = 3
"""Raised whenever the artifact layout or target definitions change; older files are refused.
2: the band scale is part of the artifact; 3: the trees are XGBoost JSON."""


@dataclass(frozen=True)
class Target:
    column: str
    """The dataset column telemetry fills (the measurement learned)."""
    name: str
    """Artifact stem: models/<name>.model.json (the trees) and <name>.json (metadata)."""
    prior: str | None
    """Column of the `power_features` frame holding the analytical value the log-ratio is
    taken against; None: the measured fraction itself is learned."""


TARGETS = {t.column: t for t in (
    Target("avg_power_w", "avg_power", "analytical_avg_power_w"),
    Target("peak_power_w", "peak_power", "analytical_peak_power_w"),
    Target("throttle_frac_power", "throttle_power", None),
    Target("throttle_frac_thermal", "throttle_thermal", None),
)}


def power_features(features: pd.DataFrame, platform: Platform,
                   table: pd.DataFrame) -> pd.DataFrame:
    """`features` (from `group_features`, one platform) with `POWER_EXTRA` and the analytical
    watts (`analytical_avg_power_w`, `analytical_peak_power_w`) added; `table` is the aligned
    `analytical_table`."""
    import pandas as pd

    extra = pd.DataFrame(_power_extra(platform, table), index=features.index, dtype=float)
    return pd.concat([features[list(FEATURES)], extra], axis=1)


def power_feature_table(features: np.ndarray, platform: Platform,
                        table: Mapping[str, np.ndarray]) -> Table:
    """`power_features` from a matrix of the `FEATURES` columns and the aligned analytical
    arrays (what the Predictor has), as a `Table`."""
    n = len(features)
    columns = {name: features[:, j] for j, name in enumerate(FEATURES)}
    for name, values in _power_extra(platform, table).items():
        columns[name] = np.broadcast_to(np.asarray(values, dtype=float), (n,))
    return Table(columns, num_rows=n)


def _power_extra(platform: Platform, table) -> dict[str, np.ndarray | float]:
    tdp = platform.tdp_w

    def column(name: str) -> np.ndarray:
        return np.asarray(table[name])

    return {
        "analytical_avg_power_frac": column("avg_power_w") / tdp,
        "analytical_peak_power_frac": column("peak_power_w") / tdp,
        "gemm_demand_frac": column("gemm_power_demand_w") / tdp,
        "throttle_risk": column("throttle_risk"),
        "throttle_risk_power": column("throttle_risk_power"),
        "throttle_risk_thermal": column("throttle_risk_thermal"),
        "thermal_margin_c": platform.thermal_slowdown_c - column("temp_rear_c"),
        "tdp_w": float(tdp),
        "liquid_cooled": float(platform.cooling == "liquid"),
        "analytical_avg_power_w": column("avg_power_w"),
        "analytical_peak_power_w": column("peak_power_w"),
    }


def reference_power_features(ref: Reference, calibration: Calibration) -> pd.DataFrame:
    """`power_features` for every reference row, in `ref.rows` order."""
    import pandas as pd

    parts = [power_features(feats, platform, table)
             for platform, feats, table in reference_groups(ref, calibration)]
    return pd.concat(parts).loc[ref.rows.index]


def learned_value(target: Target, measured: np.ndarray, features: pd.DataFrame) -> np.ndarray:
    """What the trees learn for `measured`: its log ratio to the prior, or the fraction."""
    if target.prior:
        return np.log(measured / features[target.prior].to_numpy(dtype=float))
    return np.clip(measured, 0.0, 1.0)


def usable(target: Target, measured: np.ndarray) -> np.ndarray:
    """Rows whose measurement can be learned: finite, and positive where a log is taken (a
    0 W reading is a sensor gap, not a power)."""
    ok = np.isfinite(measured)
    return ok & (measured > 0) if target.prior else ok


@dataclass
class PowerSurrogate:
    target: Target
    trees: TreeEnsemble
    support: Support
    metadata: dict = field(default_factory=dict)
    band_scale: float = 1.0
    """Factor on the trees' p10-p90 half-widths (`power_band_scale`)."""

    def learned_bands(self, features: pd.DataFrame | Table, families: np.ndarray,
                      model_families: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(p10, p50, p90) in the learned space (log ratio or unclipped fraction), widened
        where a feature is beyond the trained range and scaled by `band_scale`; `supported`;
        `extrapolation`."""
        raw = predict_quantiles(self, _matrix(features, POWER_FEATURES))
        supported, outside = self.support.check(families, model_families, features)
        mid = raw[:, 1]
        widen = np.where(outside, EXTRAPOLATION_WIDENING, 1.0) * self.band_scale
        bands = np.stack([mid - (mid - raw[:, 0]) * widen, mid, mid + (raw[:, 2] - mid) * widen])
        return bands, supported, outside

    def predict(self, features: pd.DataFrame, families: np.ndarray,
                model_families: np.ndarray) -> pd.DataFrame:
        """Columns p10, p50, p90 in the target's units (W, or a fraction in [0, 1]),
        `supported` and `extrapolation`. Rows not `supported` (platform or model family never
        measured) must fall back to the analytical value."""
        import pandas as pd

        return pd.DataFrame(self.predict_arrays(features, families, model_families),
                            index=features.index)

    def predict_arrays(self, features: pd.DataFrame | Table, families: np.ndarray,
                       model_families: np.ndarray) -> dict[str, np.ndarray]:
        """`predict` as arrays (for a `power_feature_table` too)."""
        bands, supported, outside = self.learned_bands(features, families, model_families)
        if self.target.prior:
            bands = np.asarray(features[self.target.prior], dtype=float) * np.exp(bands)
        else:
            bands = np.clip(bands, 0.0, 1.0)
        return {"p10": bands[0], "p50": bands[1], "p90": bands[2],
                "supported": supported, "extrapolation": outside & supported}

    def error(self, features: pd.DataFrame, measured: np.ndarray, families: np.ndarray,
              model_families: np.ndarray) -> float:
        """Median-prediction error: MAPE (%) for watts, mean absolute error for fractions
        (a percentage of a zero fraction is undefined)."""
        p50 = self.predict(features, families, model_families)["p50"].to_numpy()
        if self.target.prior:
            return float(np.mean(np.abs(p50 / measured - 1.0)) * 100)
        return float(np.mean(np.abs(p50 - measured)))

    def save(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        model_path, meta_path = _paths(directory, self.target)
        model_path.write_bytes(self.trees.raw)
        meta = dict(self.metadata)
        meta.update(format_version=FORMAT_VERSION, features=list(POWER_FEATURES),
                    quantiles=list(QUANTILES), target=self.target.column,
                    prior=self.target.prior, band_scale=self.band_scale,
                    model_sha256=sha256_file(model_path),
                    support={"families": self.support.families,
                             "model_families": self.support.model_families,
                             "ranges": {k: list(v) for k, v in self.support.ranges.items()}})
        write_metadata(meta_path, meta)


def _matrix(features: pd.DataFrame | Table, names: tuple[str, ...]) -> np.ndarray:
    """The `names` columns of `features` as a float matrix (rows × names)."""
    if isinstance(features, Table):
        return np.column_stack([np.asarray(features[k], dtype=float) for k in names])
    return features[list(names)].to_numpy(dtype=float)


def _paths(directory: Path, target: Target) -> tuple[Path, Path]:
    return directory / f"{target.name}{MODEL_SUFFIX}", directory / f"{target.name}.json"


def train_power(column: str, features: pd.DataFrame, measured: np.ndarray, families: np.ndarray,
                model_families: np.ndarray, *, seed: int = 0,
                metadata: dict | None = None) -> PowerSurrogate:
    """Fit the quantile trees for `column` on rows of `power_features` and the measured values
    (every row must be `usable`: the caller drops the others)."""
    import pandas as pd
    import xgboost as xgb

    target = TARGETS[column]
    measured = np.asarray(measured, dtype=float)
    if not usable(target, measured).all():
        raise ValueError(f"{column}: {int((~usable(target, measured)).sum())} rows without a "
                         f"usable measurement; drop them before training.")
    y = learned_value(target, measured, features)
    x = features[list(POWER_FEATURES)].to_numpy(dtype=float)
    booster = xgb.train({**PARAMS, "seed": seed},
                        xgb.DMatrix(x, label=y, feature_names=list(POWER_FEATURES)),
                        num_boost_round=ROUNDS)
    support = Support(families=sorted(set(families)), model_families=sorted(set(model_families)),
                      ranges={k: (float(features[k].min()), float(features[k].max()))
                              for k in RANGE_FEATURES})
    meta = {"rows": int(len(features)), "seed": seed, "params": PARAMS, "rounds": ROUNDS,
            "target_definition": (f"log(measured / analytical) {column}" if target.prior
                                  else f"measured {column}, clipped to [0, 1]"),
            "versions": {"xgboost": xgb.__version__, "numpy": np.__version__,
                         "pandas": pd.__version__}, **(metadata or {})}
    return PowerSurrogate(target=target, trees=TreeEnsemble(booster.save_raw("json")),
                          support=support, metadata=meta)


def power_band_scale(column: str, features: pd.DataFrame, measured: np.ndarray,
                     families: np.ndarray, model_families: np.ndarray, groups: np.ndarray, *,
                     seed: int = 0) -> tuple[float, dict]:
    """The band factor for `column` from leave-one-group-out over `groups` (sources) of these
    usable runs, and how it was found (`advisor.learn.bands.grouped_scale`)."""
    from advisor.learn.bands import grouped_scale, half_widths_needed

    target = TARGETS[column]
    measured = np.asarray(measured, dtype=float)

    def needs(held: np.ndarray) -> np.ndarray:
        inner = train_power(column, features[~held], measured[~held], families[~held],
                            model_families[~held], seed=seed)
        test = features[held]
        bands, supported, _ = inner.learned_bands(test, families[held], model_families[held])
        y = learned_value(target, measured[held], test)
        return half_widths_needed(*bands[:, supported], y[supported])

    return grouped_scale(groups, needs)


def load_power_surrogate(directory: Path, column: str) -> PowerSurrogate:
    """Load the artifact for `column`; refuses anything missing, altered or mismatched."""
    target = TARGETS[column]
    model_path, meta_path = _paths(Path(directory), target)
    meta, trees, support = read_artifact(meta_path, model_path, POWER_FEATURES,
                                           FORMAT_VERSION)
    if meta.get("target") != column:
        raise ArtifactError(f"{meta_path}: holds the surrogate for {meta.get('target')!r}, "
                            f"not {column!r}; rebuild with `advisor train`.")
    return PowerSurrogate(target=target, trees=trees, support=support, metadata=meta,
                          band_scale=read_band_scale(meta, meta_path))


def load_power_surrogates(directory: Path) -> dict[str, PowerSurrogate]:
    """The power surrogates present in `directory`, keyed by dataset column; a target with
    neither file is absent (its predictions stay analytical), one with a single file or a
    damaged one raises `ArtifactError`."""
    directory = Path(directory)
    return {column: load_power_surrogate(directory, column)
            for column, target in TARGETS.items()
            if any(p.exists() for p in _paths(directory, target))}


def remove_artifacts(directory: Path, column: str) -> bool:
    """Delete `column`'s artifact files from `directory` (a stale model must not outlive the
    data that no longer supports it); True if there were any."""
    found = [p for p in _paths(Path(directory), TARGETS[column]) if p.exists()]
    for p in found:
        p.unlink()
    return bool(found)
