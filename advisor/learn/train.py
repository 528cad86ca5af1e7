"""Build the surrogate artifacts from the measurement datasets, reproducibly."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from advisor.dataset import DatasetError, load
from advisor.learn.features import reference_features
from advisor.learn.surrogate import train_throughput
from advisor.perf.calibration import load_calibration
from advisor.perf.fit import reference_from_frame

POWER_TARGETS = ("avg_power_w", "peak_power_w", "throttle_frac_power", "throttle_frac_thermal")
"""Learned only from rows that measured them (campaign rows); never from numbers the
analytical model produced."""
MIN_ROWS = 30


@dataclass
class TrainReport:
    rows_used: int
    rows_skipped: int
    skipped_reasons: dict[str, int]
    targets: dict[str, str]
    """Per target: "trained on N rows" or "no data: ..."."""
    data_sha256: str
    output: Path


def data_hash(frame: pd.DataFrame) -> str:
    """Order-independent hash of the training rows: every cell but `collected_at` (when a row
    was imported is provenance, not data)."""
    ordered = (frame.drop(columns=["collected_at"], errors="ignore").sort_values("run_id")
               .reset_index(drop=True).astype("string").fillna(""))
    return hashlib.sha256(pd.util.hash_pandas_object(ordered, index=False).values.tobytes()
                          ).hexdigest()


def train(datasets: list[Path], output: Path, *, seed: int = 0) -> TrainReport:
    """Train every target the data supports and write the artifacts to `output`."""
    frames = [load(p) for p in datasets]
    data = pd.concat(frames, ignore_index=True).drop_duplicates("run_id", keep="last")
    ref = reference_from_frame(data)
    if len(ref.rows) < MIN_ROWS:
        raise DatasetError(f"only {len(ref.rows)} usable runs (need {MIN_ROWS}: catalog model "
                           f"and platform, a valid layout, measured tokens/s); skipped: "
                           f"{len(ref.skipped)}.")
    reasons = ref.skipped["why"].str.split(";").str[0].str.slice(0, 80).value_counts().to_dict()
    calibration = load_calibration()
    features = reference_features(ref, calibration)
    digest = data_hash(data)
    targets = {}
    surrogate = train_throughput(
        features, ref.rows["family"].to_numpy(), ref.rows["model_family"].to_numpy(), seed=seed,
        metadata={"target": "log(measured / analytical) tokens_per_sec_per_gpu",
                  "data_sha256": digest, "datasets": [str(p) for p in datasets],
                  "rows_used": int(len(ref.rows))})
    in_sample = _in_sample(features, ref, surrogate)
    surrogate.metadata["in_sample_mape_pct"] = in_sample
    surrogate.save(output)
    targets["tokens_per_sec_per_gpu"] = (f"trained on {len(ref.rows)} rows "
                                         f"(in-sample MAPE {in_sample:.1f} %)")
    for target in POWER_TARGETS:
        measured = int(data[target].notna().sum()) if target in data else 0
        targets[target] = (f"no data: {measured} measured rows (need {MIN_ROWS}); predictions "
                           f"stay analytical" if measured < MIN_ROWS else
                           f"{measured} measured rows: training not implemented yet; "
                           f"predictions stay analytical")
    return TrainReport(rows_used=int(len(ref.rows)), rows_skipped=int(len(ref.skipped)),
                       skipped_reasons={str(k): int(v) for k, v in reasons.items()},
                       targets=targets, data_sha256=digest, output=output)


def _in_sample(features: pd.DataFrame, ref, surrogate) -> float:
    ratio = surrogate.predict_ratio(features, ref.rows["family"].to_numpy(),
                                    ref.rows["model_family"].to_numpy())
    pred = features["analytical"] * ratio["p50"]
    return float(np.mean(np.abs(pred / features["measured"] - 1.0)) * 100)
