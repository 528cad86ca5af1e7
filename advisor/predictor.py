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

import math
from importlib import resources
from pathlib import Path

import numpy as np
import pandas as pd

from advisor.errors import AdvisorError, ConfigError

Z90 = 1.2816
"""Standard-normal quantile of 0.9: p10/p90 = median · exp(∓Z90 · σ) for a log-normal error."""
JOB_COLUMNS = ("model", "gpu")


def bundled_models_dir() -> Path:
    """Where the shipped artifacts are: inside an installed wheel (advisor/_models), else the
    checkout's models/ directory."""
    try:
        return Path(str(resources.files("advisor._models")))
    except ModuleNotFoundError:
        return Path(__file__).resolve().parents[1] / "models"


class Predictor:
    """Predictions for many configurations at once (see module docstring)."""

    def __init__(self, surrogate=None, calibration=None, *, path: Path | None = None) -> None:
        from advisor.perf.calibration import load_calibration

        self.surrogate = surrogate
        self.calibration = calibration or load_calibration()
        self.path = path
        metrics = _metrics(self.calibration)
        median_ape = metrics.get("loso_median_ape_pct", 15.0)
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
        """`pred_*` columns for every configuration (a DataFrame with `model`, `gpu` and
        `ParallelConfig` columns, optional `framework` and `software`; or a list of
        (ParallelConfig, Job) pairs). Rows that cannot be predicted get `pred_error`."""
        frame = _as_frame(configs)
        parts = []
        for key, part in frame.groupby(["model", "gpu", "framework"], sort=False):
            try:
                parts.append(self._predict_group(*key, part).assign(pred_error=""))
            except AdvisorError as e:
                parts.append(pd.DataFrame({"pred_error": str(e)}, index=part.index))
        out = parts[0] if len(parts) == 1 else pd.concat(parts)
        return out.reindex(frame.index)

    def _predict_group(self, model_name: str, gpu: str, framework: str,
                       part: pd.DataFrame) -> pd.DataFrame:
        from advisor.catalog import load_model, load_platform
        from advisor.learn.features import group_features
        from advisor.parallel import PARALLEL_FIELDS
        from advisor.perf.analytical import analytical_table

        model, platform = load_model(model_name), load_platform(gpu)
        configs = part[list(PARALLEL_FIELDS)]
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
        }, index=part.index)


def _metrics(calibration) -> dict:
    """The `[metrics]` of the bundled calibration file (LOSO error of the analytical model)."""
    from advisor.catalog import read_toml

    target = resources.files("advisor.catalog").joinpath("calibration.toml")
    with resources.as_file(target) as p:
        return dict(read_toml(Path(p)).get("metrics", {}))


def _as_frame(configs: pd.DataFrame | list) -> pd.DataFrame:
    from advisor.parallel import ParallelConfig

    if isinstance(configs, list):
        rows = []
        for item in configs:
            if not (isinstance(item, tuple) and len(item) == 2
                    and isinstance(item[0], ParallelConfig)):
                raise ConfigError("predict() takes a DataFrame or a list of (ParallelConfig, "
                                  "Job) pairs.")
            config, job = item
            rows.append(config.to_dict() | {"model": job.model.name, "gpu": job.platform.name})
        configs = pd.DataFrame(rows)
    frame = configs.copy()
    if "gpu" not in frame and "platform" in frame:
        frame["gpu"] = frame["platform"]
    missing = [c for c in JOB_COLUMNS if c not in frame]
    if missing:
        raise ConfigError(f"predict() needs column(s) {', '.join(missing)} besides the "
                          f"ParallelConfig columns.")
    from advisor.parallel import PARALLEL_FIELDS, ParallelConfig

    defaults = ParallelConfig().to_dict()
    for name in PARALLEL_FIELDS:
        if name not in frame:
            frame[name] = defaults[name]
    if "framework" not in frame:
        frame["framework"] = "megatron"
    if "software" not in frame:
        frame["software"] = ""
    frame["framework"] = frame["framework"].fillna("megatron").replace("", "megatron")
    frame["software"] = frame["software"].fillna("")
    return frame
