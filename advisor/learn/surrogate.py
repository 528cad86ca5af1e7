"""The throughput surrogate: XGBoost quantile trees that learn log(measured / analytical)
tokens/s/GPU from `FEATURES`, with the support they were trained on.

Outside that support — a platform family or model family never measured — the prediction stays
analytical and says so; inside it but beyond the range of a key feature the band widens and the
row is flagged as extrapolation. Artifacts are the model in XGBoost's JSON format
(`<name>.model.json`, answered from by `trees.TreeEnsemble` without importing xgboost) plus a
JSON metadata file (never a pickle).
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from advisor.core.errors import AdvisorError
from advisor.core.table import Table
from advisor.learn.features import FEATURES
from advisor.learn.trees import TreeEnsemble, TreeModelError

if TYPE_CHECKING:
    import pandas as pd

QUANTILES = (0.1, 0.5, 0.9)
PARAMS = {"objective": "reg:quantileerror", "quantile_alpha": list(QUANTILES),
          "tree_method": "hist", "max_depth": 3, "eta": 0.05, "subsample": 0.8,
          "colsample_bytree": 0.8, "min_child_weight": 2.0, "lambda": 1.0, "nthread": 2}
ROUNDS = 400
RANGE_FEATURES = ("log2_gpus", "log10_params", "log2_seq_len", "log2_tp", "log2_pp", "log2_ep",
                  "log2_cp")
"""Beyond the trained range of these the band widens and the row is flagged."""
EXTRAPOLATION_WIDENING = 2.0
FORMAT_VERSION = 3
"""2: the band scale (`bands`) is part of the artifact; 3: the trees are XGBoost JSON
(`<name>.model.json`, was UBJSON `<name>.ubj`)."""
MODEL_SUFFIX = ".model.json"
MOST_BAND_SCALE = 10.0
"""A band widened more than tenfold says nothing; such a scale is damage, not calibration
(the bundled model's is 1.72)."""


class ArtifactError(AdvisorError):
    """A surrogate artifact that is missing, corrupted or from another version."""


@dataclass
class Support:
    families: list[str]
    model_families: list[str]
    ranges: dict[str, tuple[float, float]]

    def check(self, families: np.ndarray, model_families: np.ndarray,
              features: pd.DataFrame | Table) -> tuple[np.ndarray, np.ndarray]:
        """(supported, extrapolating) per row."""
        supported = np.isin(families, self.families) & np.isin(model_families,
                                                               self.model_families)
        outside = np.zeros(len(features), dtype=bool)
        for name, (low, high) in self.ranges.items():
            values = np.asarray(features[name])
            outside |= (values < low - 1e-9) | (values > high + 1e-9)
        return supported, outside


@dataclass
class ThroughputSurrogate:
    trees: TreeEnsemble
    support: Support
    metadata: dict = field(default_factory=dict)
    band_scale: float = 1.0
    """Factor on the trees' p10-p90 half-widths so the band holds for a software stack the
    data never saw (grouped cross-validation, `advisor.learn.bands`)."""

    def predict_ratio(self, features: pd.DataFrame | np.ndarray, families: np.ndarray,
                      model_families: np.ndarray) -> pd.DataFrame:
        """Columns p10, p50, p90 of measured/analytical, `supported`, `extrapolation`.

        `features` is a frame with the `FEATURES` columns, or a matrix of them in that order."""
        import pandas as pd

        names = list(FEATURES)
        if isinstance(features, np.ndarray):
            x, index = features, pd.RangeIndex(len(features))
        else:
            x = (features.to_numpy(dtype=float) if features.columns.tolist() == names
                 else features[names].to_numpy(dtype=float))
            index = features.index
        return pd.DataFrame(self.ratio_arrays(x, families, model_families), index=index)

    def ratio_arrays(self, x: np.ndarray, families: np.ndarray,
                     model_families: np.ndarray) -> dict[str, np.ndarray]:
        """`predict_ratio` for a matrix of the `FEATURES` columns (what the Predictor passes),
        as arrays."""
        names = list(FEATURES)
        x = x.astype(float, copy=False)
        raw = predict_quantiles(self, x)
        # Support.check's rule, read off the matrix.
        supported = (np.isin(families, self.support.families)
                     & np.isin(model_families, self.support.model_families))
        outside = np.zeros(len(x), dtype=bool)
        for name, (low, high) in self.support.ranges.items():
            values = x[:, names.index(name)]
            outside |= (values < low - 1e-9) | (values > high + 1e-9)
        mid = raw[:, 1]
        widen = np.where(outside, EXTRAPOLATION_WIDENING, 1.0) * self.band_scale
        low = mid - (mid - raw[:, 0]) * widen
        high = mid + (raw[:, 2] - mid) * widen
        return {"p10": np.exp(low), "p50": np.exp(mid), "p90": np.exp(high),
                "supported": supported, "extrapolation": outside & supported}

    def p50_bound(self, low: np.ndarray, high: np.ndarray, may_be_missing: np.ndarray
                  ) -> np.ndarray:
        """The largest median ratio (measured / analytical) any row whose `FEATURES` lie in
        [low, high] can get (`TreeEnsemble.max_outputs`): the median of the sorted quantile
        outputs is at most the median of their maxima. One box (features) gives a 0-d array,
        (boxes × features) one bound per box."""
        most = np.sort(self.trees.max_outputs(low, high, may_be_missing), axis=-1)
        return np.exp(most[..., QUANTILES.index(0.5)])

    def contributions(self, features: pd.DataFrame) -> pd.DataFrame:
        """SHAP values of the median model: how much each feature moves log(measured /
        analytical) for each row (columns = FEATURES; the rest is the bias)."""
        import pandas as pd

        return pd.DataFrame(self.contribution_matrix(features[list(FEATURES)].to_numpy(
            dtype=float)), columns=list(FEATURES), index=features.index)

    def contribution_matrix(self, x: np.ndarray) -> np.ndarray:
        """`contributions` for a matrix of the `FEATURES` columns (rows × FEATURES)."""
        return self.trees.contributions(x, QUANTILES.index(0.5))[:, :-1]

    def save(self, directory: Path, name: str = "throughput") -> None:
        directory.mkdir(parents=True, exist_ok=True)
        model_path = directory / f"{name}{MODEL_SUFFIX}"
        model_path.write_bytes(self.trees.raw)
        meta = dict(self.metadata)
        meta.update(format_version=FORMAT_VERSION, features=list(FEATURES),
                    band_scale=self.band_scale,
                    quantiles=list(QUANTILES), model_sha256=sha256_file(model_path),
                    support={"families": self.support.families,
                             "model_families": self.support.model_families,
                             "ranges": {k: list(v) for k, v in self.support.ranges.items()}})
        write_metadata(directory / f"{name}.json", meta)


def sha256_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def metadata_hash(meta: dict) -> str:
    """SHA-256 of the metadata's canonical JSON, leaving out the field that holds it: the band
    scale, support and quantiles change predictions as much as the trees do, so an edit to
    them is refused like an edit to the model."""
    body = {k: v for k, v in meta.items() if k != "metadata_sha256"}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":"))
                          .encode()).hexdigest()


def write_metadata(path: Path, meta: dict) -> None:
    meta = {**meta, "metadata_sha256": metadata_hash(meta)}
    path.write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")


def train_throughput(features: pd.DataFrame, families: np.ndarray, model_families: np.ndarray,
                     *, seed: int = 0, metadata: dict | None = None) -> ThroughputSurrogate:
    """Fit the quantile trees on rows with `features`, `analytical` and `measured` columns."""
    import pandas as pd
    import xgboost as xgb

    y = np.log(features["measured"].to_numpy() / features["analytical"].to_numpy())
    x = features[list(FEATURES)].to_numpy(dtype=float)
    data = xgb.DMatrix(x, label=y, feature_names=list(FEATURES))
    booster = xgb.train({**PARAMS, "seed": seed}, data, num_boost_round=ROUNDS)
    trees = TreeEnsemble(booster.save_raw("json"))
    ranges = {k: (float(features[k].min()), float(features[k].max())) for k in RANGE_FEATURES}
    support = Support(families=sorted(set(families)), model_families=sorted(set(model_families)),
                      ranges=ranges)
    meta = {"rows": int(len(features)), "seed": seed, "params": PARAMS, "rounds": ROUNDS,
            "versions": {"xgboost": xgb.__version__, "numpy": np.__version__,
                         "pandas": pd.__version__}, **(metadata or {})}
    return ThroughputSurrogate(trees=trees, support=support, metadata=meta)


def load_throughput(directory: Path, name: str = "throughput") -> ThroughputSurrogate:
    """Load an artifact written by `save`; refuses anything missing, altered or mismatched."""
    meta_path, model_path = directory / f"{name}.json", directory / f"{name}{MODEL_SUFFIX}"
    meta, trees, support = read_artifact(meta_path, model_path, FEATURES, FORMAT_VERSION)
    return ThroughputSurrogate(trees=trees, support=support, metadata=meta,
                               band_scale=read_band_scale(meta, meta_path))


def read_band_scale(meta: dict, meta_path: Path) -> float:
    """The artifact's band scale; an `ArtifactError` for anything but a number ≥ 1."""
    scale = meta.get("band_scale", 1.0)
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not (
            1.0 <= scale <= MOST_BAND_SCALE):
        raise ArtifactError(f"{meta_path}: band_scale {scale!r} is not a number in 1.."
                            f"{MOST_BAND_SCALE:g}; rebuild with `advisor train`.")
    return float(scale)


def predict_quantiles(owner, x: np.ndarray) -> np.ndarray:
    """The (rows × QUANTILES) predictions of `owner.trees`, sorted per row (quantile trees
    may cross)."""
    return np.sort(owner.trees.predict(x), axis=1)


def read_artifact(meta_path: Path, model_path: Path, features, format_version: int
                  ) -> tuple[dict, TreeEnsemble, Support]:
    """Metadata, trees and support of an artifact pair a surrogate's `save` wrote; an
    `ArtifactError` naming the file for anything missing, altered, damaged or written for
    another format, feature list or set of quantiles."""
    from advisor.core.files import JSON_LIMIT_BYTES, TABLE_LIMIT_BYTES, check_regular, read_bounded

    for p in (meta_path, model_path):
        if not p.is_file():
            raise ArtifactError(f"{p}: missing; rebuild the surrogates with `advisor train`.")
    try:
        meta = json.loads(read_bounded(meta_path, limit_bytes=JSON_LIMIT_BYTES,
                                       what="surrogate metadata", error=ArtifactError))
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as e:
        raise ArtifactError(f"{meta_path}: not valid JSON ({e}); rebuild with "
                            f"`advisor train`.") from None
    if not isinstance(meta, dict) or not isinstance(meta.get("support"), dict):
        raise ArtifactError(f"{meta_path}: not advisor surrogate metadata; rebuild with "
                            f"`advisor train`.")
    if meta.get("metadata_sha256") != metadata_hash(meta):
        raise ArtifactError(f"{meta_path}: does not match its own hash (altered or "
                            f"corrupted); rebuild with `advisor train`.")
    if (meta.get("format_version") != format_version or meta.get("features") != list(features)
            or meta.get("quantiles") != list(QUANTILES)):
        raise ArtifactError(f"{meta_path}: written for another advisor version (format "
                            f"{meta.get('format_version')}, {len(meta.get('features', []))} "
                            f"features); rebuild with `advisor train`.")
    # Bounded before it is read whole for its hash (a real one is about 1 MiB).
    check_regular(model_path, limit_bytes=TABLE_LIMIT_BYTES // 8, what="surrogate model",
                  error=ArtifactError)
    raw = model_path.read_bytes()
    if meta.get("model_sha256") != hashlib.sha256(raw).hexdigest():
        raise ArtifactError(f"{model_path}: does not match its metadata (altered or "
                            f"corrupted); rebuild with `advisor train`.")
    try:
        trees = TreeEnsemble(raw)
    except TreeModelError as e:
        raise ArtifactError(f"{model_path}: not a readable XGBoost JSON model ({str(e)[:80]}); "
                            f"rebuild with `advisor train`.") from None
    if trees.feature_names != list(features) or trees.num_targets != len(QUANTILES):
        raise ArtifactError(f"{model_path}: trees for {len(trees.feature_names)} features and "
                            f"{trees.num_targets} outputs, not the metadata's; rebuild with "
                            f"`advisor train`.")
    return meta, trees, _support(meta["support"], meta_path)


def _support(data: dict, meta_path: Path) -> Support:
    """The metadata's support, checked: lists of names, and [low, high] ranges of known
    features."""
    families, model_families = data.get("families"), data.get("model_families")
    ranges = data.get("ranges")
    names_ok = all(isinstance(v, list) and all(isinstance(x, str) for x in v)
                   for v in (families, model_families))
    ranges_ok = isinstance(ranges, dict) and all(
        k in RANGE_FEATURES and isinstance(v, list) and len(v) == 2
        and all(isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
                for x in v) and v[0] <= v[1] for k, v in ranges.items())
    if not (names_ok and ranges_ok):
        raise ArtifactError(f"{meta_path}: support is not lists of families and [low, high] "
                            f"feature ranges; rebuild with `advisor train`.")
    return Support(families=families, model_families=model_families,
                   ranges={k: tuple(v) for k, v in ranges.items()})
