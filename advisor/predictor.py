"""`Predictor`: what schedulers and the CLI import — analytical model plus learned surrogate,
vectorised.

    from advisor import Predictor
    p = Predictor.load()                       # bundled artifacts (models/)
    p.predict(frame)                           # DataFrame: model, gpu + ParallelConfig columns

Every learned quantity comes with p10/p90; where the surrogate has no support (a platform family
or model family it never saw, or no trained artifact) the prediction is the analytical one, with
a band from the analytical model's own cross-validated error, and `pred_source` says so.
"""

from __future__ import annotations

import importlib.util
import math
from dataclasses import dataclass, fields
from pathlib import Path

import numpy as np
import pandas as pd

from advisor.errors import AdvisorError, ConfigError

Z90 = 1.2816
"""Standard-normal quantile of 0.9: p10/p90 = median · exp(∓Z90 · σ) for a log-normal error."""
JOB_COLUMNS = ("model", "gpu")


@dataclass(frozen=True)
class Predicted:
    """The Predictor's values for one configuration: one row of `Predictor.predict` without
    the `pred_` prefix."""

    step_time_s: float
    tokens_per_sec_per_gpu: float
    tokens_per_sec_per_gpu_p10: float
    tokens_per_sec_per_gpu_p90: float
    tflops_per_gpu: float
    mfu: float
    memory_gb: float
    fits: bool
    avg_power_w: float
    peak_power_w: float
    energy_j_per_token: float
    throttle_risk: float
    source: str
    """surrogate, or analytical where the data has no support."""
    power_source: str
    extrapolation: bool
    calibrated: bool

    @classmethod
    def from_row(cls, row) -> Predicted:
        values = {}
        for f in fields(cls):
            value = row[f"pred_{f.name}"]
            value = value.item() if hasattr(value, "item") else value
            values[f.name] = (bool(value) if f.type == "bool" else str(value)
                              if f.type == "str" else float(value))
        return cls(**values)


def bundled_models_dir() -> Path:
    """Where the shipped artifacts are: inside an installed wheel (advisor/_models), else the
    checkout's models/ directory. advisor/_models is data only (no __init__.py), so it is a
    namespace package: its location comes from the import system, not `resources.files`
    (whose MultiplexedPath is not a filesystem path)."""
    try:
        spec = importlib.util.find_spec("advisor._models")
    except ModuleNotFoundError:
        spec = None
    if spec is not None and spec.submodule_search_locations:
        return Path(next(iter(spec.submodule_search_locations)))
    return Path(__file__).resolve().parents[1] / "models"


class Predictor:
    """Predictions for many configurations at once (see module docstring)."""

    def __init__(self, surrogate=None, calibration=None, *, path: Path | None = None) -> None:
        from advisor.perf.calibration import load_calibration

        self.surrogate = surrogate
        self.calibration = calibration or load_calibration()
        self.path = path
        median_ape = self.calibration.metrics.get("loso_median_ape_pct", 15.0)
        # Log-normal error whose median |log ratio| matches the analytical model's median APE
        # under leave-one-source-out: median |Z| = 0.6745 σ.
        self.analytical_log_sd = math.log1p(median_ape / 100.0) / 0.6745

    @classmethod
    def load(cls, path: str | Path | None = None) -> Predictor:
        """The bundled surrogates (`path=None`) or those in a directory written by
        `advisor train`. A bundle without a throughput artifact predicts analytically."""
        from advisor.learn.surrogate import load_throughput

        directory = Path(path) if path is not None else bundled_models_dir()
        if path is not None and not directory.is_dir():
            raise AdvisorError(f"{directory}: no such directory of surrogate artifacts.")
        surrogate = (load_throughput(directory) if (directory / "throughput.json").exists()
                     or path is not None else None)
        return cls(surrogate, path=directory)

    def predict(self, configs: pd.DataFrame | list) -> pd.DataFrame:
        """`pred_*` columns for every configuration, in input order: a DataFrame with `model`,
        `gpu` (catalog names, or `ModelSpec` / `Platform` objects) and `ParallelConfig`
        columns, optional `framework` and `software`; or a list of (ParallelConfig, Job)
        pairs. Rows that cannot be predicted get `pred_error` and the others are predicted."""
        frame, objects = _as_frame(configs)
        index = frame.index
        frame = frame.reset_index(drop=True)
        if frame.empty:
            return pd.DataFrame({"pred_error": pd.Series(dtype=str)}, index=index)
        parts = []
        for key, part in frame.groupby(["model", "gpu", "framework"], sort=False,
                                       dropna=False):
            try:
                model, platform = _resolve(key[0], key[1], objects)
                parts.append(self._predict_group(model, platform, key[2], part))
            except (AdvisorError, KeyError, ValueError, TypeError) as e:
                message = str(e) if isinstance(e, AdvisorError) else (
                    f"cannot predict this row: {type(e).__name__}: {e}")
                parts.append(pd.DataFrame({"pred_error": message}, index=part.index))
        out = pd.concat(parts).reindex(frame.index)
        out["pred_error"] = out["pred_error"].fillna("")
        out.index = index
        return out

    def contributions(self, model, platform, configs: pd.DataFrame, *,
                      framework: str = "megatron") -> pd.DataFrame | None:
        """The surrogate's SHAP values (log-ratio units, one column per feature) for
        configurations of one model on one platform; None without a surrogate (callers use
        them only for rows whose `pred_source` is surrogate)."""
        from advisor.learn.features import group_features
        from advisor.parallel import PARALLEL_FIELDS
        from advisor.perf.analytical import analytical_table

        if self.surrogate is None:
            return None
        configs = configs[list(PARALLEL_FIELDS)].reset_index(drop=True)
        table = analytical_table(model, platform, configs, calibration=self.calibration,
                                 framework=framework)
        feats = group_features(model, platform, configs, table, framework=framework,
                               software="")
        return self.surrogate.contributions(feats)

    def _predict_group(self, model, platform, framework: str,
                       part: pd.DataFrame) -> pd.DataFrame:
        from advisor.learn.features import group_features
        from advisor.parallel import PARALLEL_FIELDS
        from advisor.perf.analytical import analytical_table

        configs = part[list(PARALLEL_FIELDS)]
        invalid = _invalid(model, configs)
        if invalid.any():
            good = part[~invalid]
            bad = pd.DataFrame({"pred_error": _why_invalid(model, platform,
                                                           configs[invalid])},
                               index=part.index[invalid])
            if good.empty:
                return bad
            return pd.concat([self._predict_group(model, platform, framework, good)
                              .assign(pred_error=""), bad])
        table = analytical_table(model, platform, configs, calibration=self.calibration,
                                 framework=framework)
        tps = table["tokens_per_sec_per_gpu"].to_numpy()
        n = len(part)
        source = np.full(n, "analytical", dtype=object)
        low = tps * math.exp(-Z90 * self.analytical_log_sd)
        high = tps * math.exp(Z90 * self.analytical_log_sd)
        extrapolation = np.zeros(n, dtype=bool)
        learned = tps.copy()
        if self.surrogate is not None:
            feats = group_features(model, platform, configs, table, framework=framework,
                                   software=part["software"].to_numpy())
            ratio = self.surrogate.predict_ratio(
                feats, np.full(n, platform.family), np.full(n, model.family or model.name))
            ok = ratio["supported"].to_numpy()
            learned = np.where(ok, tps * ratio["p50"].to_numpy(), tps)
            low = np.where(ok, tps * ratio["p10"].to_numpy(), low)
            high = np.where(ok, tps * ratio["p90"].to_numpy(), high)
            source = np.where(ok, "surrogate", source)
            extrapolation = ratio["extrapolation"].to_numpy() | ~ok
        else:
            extrapolation[:] = True
        scale = learned / tps
        gpus = (configs["tp"] * configs["pp"] * configs["cp"] * configs["dp"]).to_numpy()
        step = table["step_time_s"].to_numpy() / scale
        avg = table["avg_power_w"].to_numpy()
        return pd.DataFrame({
            "pred_step_time_s": step,
            "pred_tokens_per_sec_per_gpu": learned,
            "pred_tokens_per_sec_per_gpu_p10": low,
            "pred_tokens_per_sec_per_gpu_p90": high,
            "pred_tflops_per_gpu": table["tflops_per_gpu"].to_numpy() * scale,
            "pred_mfu": table["mfu"].to_numpy() * scale,
            "pred_memory_gb": table["total_bytes"].to_numpy() / 1e9,
            "pred_fits": table["fits"].to_numpy(),
            "pred_avg_power_w": avg,
            "pred_peak_power_w": table["peak_power_w"].to_numpy(),
            "pred_energy_j_per_token": avg * step * gpus / (
                configs["gbs"].to_numpy() * configs["seq_len"].to_numpy()),
            "pred_throttle_risk": table["throttle_risk"].to_numpy(),
            "pred_source": source,
            "pred_power_source": "analytical",
            "pred_extrapolation": extrapolation,
            "pred_calibrated": bool(table["calibrated"].iloc[0]),
        }, index=part.index).assign(pred_error="")


def _invalid(model, configs: pd.DataFrame) -> np.ndarray:
    """Rows whose layout the model cannot take (checked vectorised; `space.validate` says the
    same one configuration at a time)."""
    tp, pp, cp, dp = (configs[k].to_numpy() for k in ("tp", "pp", "cp", "dp"))
    ep, etp, mbs, gbs = (configs[k].to_numpy() for k in ("ep", "etp", "mbs", "gbs"))
    seq, vp = configs["seq_len"].to_numpy(), configs["vp"].to_numpy()
    from advisor.space import PIPELINE_EXTRA_LAYERS

    # pp·vp may exceed the layers: Megatron can count the embedding and loss as layers.
    most_stages = model.num_layers + max(PIPELINE_EXTRA_LAYERS)
    bad = (model.num_attention_heads % tp != 0) | (pp * vp > most_stages)
    bad |= gbs % (mbs * dp) != 0
    bad |= (cp > 1) & (seq % (2 * cp) != 0)
    if model.is_moe:
        bad |= (model.num_experts % ep != 0) | ((tp * cp * dp) % (ep * etp) != 0)
    else:
        bad |= (ep > 1) | (etp > 1)
    return bad


def _why_invalid(model, platform, configs: pd.DataFrame) -> list[str]:
    from advisor.parallel import ParallelConfig
    from advisor.space import validate

    out = []
    for row in configs.to_dict(orient="records"):
        try:
            config = ParallelConfig(**row)
            validate(config, model, platform, num_gpus=config.world_size)
            out.append("invalid configuration for this model")
        except AdvisorError as e:
            out.append(str(e))
        except (AttributeError, TypeError):
            out.append("invalid configuration for this model (tp must divide the heads, "
                       "pp·vp at most the layers, gbs a multiple of mbs·dp, ep dividing the "
                       "experts)")
    return out


def _resolve(model_key, gpu_key, objects: dict):
    """The `ModelSpec` and `Platform` a row names (objects passed in win over the catalog)."""
    from advisor.catalog import load_model, load_platform

    if pd.isna(model_key) or pd.isna(gpu_key):
        raise ConfigError("model and gpu are required for every row.")
    model = objects.get(model_key) or load_model(str(model_key))
    platform = objects.get(gpu_key) or load_platform(str(gpu_key))
    return model, platform


def _as_frame(configs: pd.DataFrame | list) -> tuple[pd.DataFrame, dict]:
    """The rows with every column `predict` needs (ParallelConfig defaults for empty cells),
    and the `ModelSpec` / `Platform` objects rows refer to by key."""
    from advisor.model import ModelSpec
    from advisor.parallel import PARALLEL_FIELDS, ParallelConfig
    from advisor.platform import Platform

    if isinstance(configs, list):
        rows = []
        for item in configs:
            if not (isinstance(item, tuple) and len(item) == 2
                    and isinstance(item[0], ParallelConfig)):
                raise ConfigError("predict() takes a DataFrame or a list of (ParallelConfig, "
                                  "Job) pairs.")
            config, job = item
            rows.append(config.to_dict() | {
                "model": job.model, "gpu": job.platform,
                "framework": getattr(job, "framework", "megatron"),
                "software": getattr(job, "software", "")})
        configs = pd.DataFrame(rows, columns=[*PARALLEL_FIELDS, "model", "gpu", "framework",
                                              "software"])
    if not isinstance(configs, pd.DataFrame):
        raise ConfigError("predict() takes a DataFrame or a list of (ParallelConfig, Job) "
                          "pairs.")
    frame = configs.copy()
    if "gpu" not in frame and "platform" in frame:
        frame["gpu"] = frame["platform"]
    missing = [c for c in JOB_COLUMNS if c not in frame]
    if missing:
        raise ConfigError(f"predict() needs column(s) {', '.join(missing)} besides the "
                          f"ParallelConfig columns.")
    objects: dict = {}
    for column, kind in (("model", ModelSpec), ("gpu", Platform)):
        keys = []
        for value in frame[column].tolist():
            if isinstance(value, kind):
                key = f"{value.name}#{id(value)}"
                objects[key] = value
                keys.append(key)
            else:
                keys.append(value)
        frame[column] = pd.Series(keys, index=frame.index, dtype=object)
    defaults = ParallelConfig().to_dict()
    for name in PARALLEL_FIELDS:
        if name not in frame:
            frame[name] = defaults[name]
        elif frame[name].isna().any():
            frame[name] = frame[name].astype(object).where(frame[name].notna(), defaults[name])
        try:
            if isinstance(defaults[name], bool):
                frame[name] = frame[name].astype(bool)
            elif isinstance(defaults[name], int):
                frame[name] = frame[name].astype(float).astype(int)
            else:
                frame[name] = frame[name].astype(str).str.lower()
        except (TypeError, ValueError) as e:
            raise ConfigError(f"column {name}: {e}") from None
    for name, default in (("framework", "megatron"), ("software", "")):
        if name not in frame:
            frame[name] = default
        frame[name] = frame[name].astype(object).where(frame[name].notna(), default)
        frame[name] = frame[name].replace("", default) if default else frame[name]
    return frame, objects
