"""Turn rows shaped like the reference data (`published_runs.csv` columns) into jobs and
configurations, filling unknown cells with stated assumptions, and predict each row.

A bad row gets an error and the other rows are still predicted.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from advisor.catalog import load_model, load_platform
from advisor.core.errors import AdvisorError, ConfigError
from advisor.core.model import ModelSpec
from advisor.core.parallel import ParallelConfig, default_etp
from advisor.core.platform import Platform
from advisor.core.space import validate
from advisor.data import framework_defaults
from advisor.perf.analytical import SOURCE, Prediction, predict_config
from advisor.perf.memory import MemoryBreakdown, estimate_memory
from advisor.perf.step import DEFAULT_FRAMEWORK

REQUIRED_COLUMNS = ("model", "gpu", "num_gpus", "seq_len", "gbs")
RECOMPUTE_SPELLINGS = {"none": "none", "selective": "selective", "full": "full",
                       "selective+sequence-parallel": "selective"}


@dataclass(frozen=True)
class _RowJob:
    """What the `Predictor` needs besides the configuration."""

    model: ModelSpec
    platform: Platform
    framework: str
    software: str


@dataclass
class RowPrediction:
    memory: MemoryBreakdown | None = None
    analytical: Prediction | None = None
    learned: dict | None = None
    """The `Predictor`'s columns for this row (surrogate where it has support)."""
    config: ParallelConfig | None = None
    job_spec: _RowJob | None = None
    notes: list[str] = field(default_factory=list)
    assumed: list[str] = field(default_factory=list)
    error: str = ""


def read_rows(path: Path) -> pd.DataFrame:
    """Read a CSV of runs; refuses a file without the columns every row needs."""
    from advisor.core.files import TABLE_LIMIT_BYTES, check_regular

    check_regular(path, limit_bytes=TABLE_LIMIT_BYTES, what="CSV")
    try:
        frame = pd.read_csv(path, dtype=str, keep_default_na=False)
    except OSError as e:
        raise AdvisorError(f"{path}: cannot read ({e.strerror}).") from None
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as e:
        raise AdvisorError(f"{path}: not a readable CSV ({str(e).splitlines()[0]}).") from None
    missing = [c for c in REQUIRED_COLUMNS if c not in frame.columns]
    if missing:
        raise AdvisorError(f"{path}: missing column(s) {', '.join(missing)}; rows need "
                           f"{', '.join(REQUIRED_COLUMNS)} (the columns of published_runs.csv).")
    return frame


def _int(row: pd.Series, key: str, default: int | None, assumed: list[str],
         why: str = "") -> int:
    raw = str(row.get(key, "")).strip()
    if raw == "":
        if default is None:
            raise ConfigError(f"{key} is empty; it is required.")
        assumed.append(f"{key}={default}{' (' + why + ')' if why else ''}")
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{key} = {raw!r} is not a number.") from None
    if not math.isfinite(value) or value != int(value) or value < 1:
        raise ConfigError(f"{key} = {raw!r} must be a positive whole number.")
    return int(value)


def parse_run_row(row: pd.Series, model: ModelSpec) -> tuple[ParallelConfig, list[str]]:
    """The `ParallelConfig` a row describes, and the assumptions made for empty cells."""
    assumed: list[str] = []
    num_gpus = _int(row, "num_gpus", None, assumed)
    tp = _int(row, "tp", 1, assumed)
    pp = _int(row, "pp", 1, assumed)
    cp = _int(row, "cp", 1, assumed)
    if num_gpus % (tp * pp * cp):
        raise ConfigError(f"tp × pp × cp ({tp * pp * cp}) does not divide num_gpus ({num_gpus}).")
    dp = _int(row, "dp", num_gpus // (tp * pp * cp), assumed, "num_gpus / (tp·pp·cp)")
    precision = str(row.get("precision", "")).strip().lower() or "bf16"
    if not str(row.get("precision", "")).strip():
        assumed.append("precision=bf16")
    recompute_raw = str(row.get("recompute", "")).strip().lower()
    if recompute_raw and recompute_raw not in RECOMPUTE_SPELLINGS:
        raise ConfigError(f"recompute = {recompute_raw!r}; use none, selective or full.")
    sharding = str(row.get("dp_sharding", "")).strip().lower()
    if not sharding:
        sharding = "optimizer"
        assumed.append("dp_sharding=optimizer (Megatron distributed optimizer)")
    overlap = _framework_defaults(row, tp=tp, sharding=sharding, assumed=assumed)
    ep = _int(row, "ep", 1, assumed if model.is_moe else [])
    config = ParallelConfig(
        tp=tp, pp=pp, dp=dp, cp=cp, ep=ep,
        etp=_int(row, "etp", default_etp(model, tp=tp, cp=cp, dp=dp, ep=ep),
                 assumed if model.is_moe else [], "Megatron-Core's default: the TP size"),
        vp=_int(row, "vp", 1, assumed),
        mbs=_int(row, "mbs", 1, assumed), gbs=_int(row, "gbs", None, assumed),
        seq_len=_int(row, "seq_len", None, assumed), precision=precision,
        recompute=RECOMPUTE_SPELLINGS.get(recompute_raw, "none"), dp_sharding=sharding,
        sequence_parallel=tp > 1, first_stage_layers=_stage_layers(row, "first_stage_layers"),
        last_stage_layers=_stage_layers(row, "last_stage_layers"), **_finetune(row), **overlap)
    return config, assumed


def _finetune(row: pd.Series) -> dict[str, object]:
    """finetune (empty = pre-training), lora_rank (empty = 16) and lora_targets (empty =
    attention); ParallelConfig checks the values."""
    out: dict[str, object] = {}
    finetune = str(row.get("finetune", "")).strip().lower()
    if finetune:
        out["finetune"] = finetune
    if str(row.get("lora_rank", "")).strip():
        out["lora_rank"] = _int(row, "lora_rank", 16, [])
    targets = str(row.get("lora_targets", "")).strip().lower()
    if targets:
        out["lora_targets"] = targets
    return out


def _stage_layers(row: pd.Series, key: str) -> int:
    """An uneven pipeline split's layer count; empty or 0 is the even share."""
    raw = str(row.get(key, "")).strip()
    if raw == "":
        return 0
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{key} = {raw!r} is not a number.") from None
    if not math.isfinite(value) or value != int(value) or value < 0:
        raise ConfigError(f"{key} = {raw!r} must be a whole number ≥ 0 (0 or empty = even "
                          f"split).")
    return int(value)


def _framework_defaults(row: pd.Series, *, tp: int, sharding: str,
                        assumed: list[str]) -> dict[str, bool | str]:
    """Overlap, gradient and attention settings a row's framework runs with when the row does
    not say (`advisor.data.framework_defaults`: current Megatron-Core unless the row names a
    2021-22 release or source)."""
    given = {k: str(row.get(k, "")).strip().lower() for k in
             ("overlap_grad_reduce", "overlap_param_gather", "tp_comm_overlap",
              "grad_reduce_in_fp32", "attention")}
    framework = str(row.get("framework", "")).strip().lower() or "megatron"
    software = str(row.get("software", "")).strip()
    source = str(row.get("source_name", ""))
    table = framework_defaults.defaults(np.array([framework], dtype=object),
                                        np.array([software], dtype=object), np.array([tp]),
                                        np.array([sharding], dtype=object),
                                        np.array([source], dtype=object))
    out: dict[str, bool | str] = {}
    defaulted = []
    for key in given:
        default = table[key][0]
        default = str(default) if key == "attention" else bool(default)
        if key == "attention":
            out[key] = given[key] or default
            if not given[key]:
                defaulted.append(f"attention={default}")
        elif given[key] in ("true", "1", "yes"):
            out[key] = True
        elif given[key] in ("false", "0", "no"):
            out[key] = False
        else:
            out[key] = default
            defaulted.append(f"{key}={str(default).lower()}")
    if out["overlap_param_gather"] and sharding == "none":
        out["overlap_param_gather"] = False
    if defaulted:
        reason = framework_defaults.why(framework, software, source)
        assumed.append(f"{', '.join(defaulted)} ({reason})")
    return out


def predict_row(row: pd.Series) -> RowPrediction:
    """The analytical prediction (memory, time, power) for one row, with the row's framework's
    kernels; errors are captured, never raised."""
    out = RowPrediction()
    try:
        model = load_model(str(row["model"]))
        platform = load_platform(str(row["gpu"]))
        config, out.assumed = parse_run_row(row, model)
        framework = str(row.get("framework", "")).strip().lower() or DEFAULT_FRAMEWORK
        out.notes = validate(config, model, platform, num_gpus=int(float(row["num_gpus"])),
                             framework=framework)
        if str(row.get("recompute", "")).strip() == "":
            config, _ = lightest_recompute_that_fits(model, config, platform)
            out.assumed.append(f"recompute={config.recompute} (unknown: the least recompute "
                               f"that fits, as tuned recipes turn it on only when needed)")
        out.analytical = predict_config(model, platform, config, framework=framework)
        out.memory = out.analytical.memory
        out.config = config
        out.job_spec = _RowJob(model=model, platform=platform, framework=framework,
                               software=str(row.get("software", "")).strip())
    except AdvisorError as e:
        out.error = str(e)
    return out


def lightest_recompute_that_fits(model: ModelSpec, config: ParallelConfig,
                                  platform: Platform) -> tuple[ParallelConfig, MemoryBreakdown]:
    for mode in ("none", "selective", "full"):
        candidate = config.replace(recompute=mode)
        mem = estimate_memory(model, parallel=candidate, platform=platform)
        if mem.fits:
            return candidate, mem
    return candidate, mem


PREDICTION_COLUMNS = {
    "pred_step_time_s": lambda p: round(p.step.step_time_s, 4),
    "pred_tokens_per_sec_per_gpu": lambda p: round(p.step.tokens_per_sec_per_gpu, 1),
    "pred_tflops_per_gpu": lambda p: round(p.step.tflops_per_gpu, 1),
    "pred_mfu": lambda p: round(p.step.mfu, 4),
    "pred_avg_power_w": lambda p: round(p.power.avg_power_w, 1),
    "pred_peak_power_w": lambda p: round(p.power.peak_power_w, 1),
    "pred_energy_j_per_token": lambda p: round(p.power.energy_j_per_token, 4),
    "pred_throttle_risk": lambda p: round(p.power.throttle_risk, 3),
}


LEARNED_EXTRA = ("pred_tokens_per_sec_per_gpu_p10", "pred_tokens_per_sec_per_gpu_p90",
                 "pred_extrapolation", "pred_avg_power_w_p10", "pred_avg_power_w_p90",
                 "pred_peak_power_w_p10", "pred_peak_power_w_p90", "pred_throttle_frac_power",
                 "pred_throttle_frac_thermal", "pred_power_source")
"""Predictor columns the analytical model has no counterpart for (NaN power bands and throttle
fractions until campaigns measured power)."""
LEARNED_OVERRIDES = ("pred_step_time_s", "pred_tokens_per_sec_per_gpu", "pred_tflops_per_gpu",
                     "pred_mfu", "pred_energy_j_per_token", "pred_avg_power_w",
                     "pred_peak_power_w")


def _add_learned(results: list[RowPrediction], predictor) -> None:
    """Run the `Predictor` over every row that parsed, in one vectorised call."""
    if predictor is None:
        return
    ok = [r for r in results if r.analytical]
    if not ok:
        return
    learned = predictor.predict([(r.config, r.job_spec) for r in ok])
    for r, (_, row) in zip(ok, learned.iterrows(), strict=True):
        if row["pred_error"]:
            r.notes.append(f"surrogate unavailable: {row['pred_error']}")
            continue
        r.learned = {k: (bool(row[k]) if k == "pred_extrapolation" else str(row[k])
                         if k == "pred_power_source" else round(float(row[k]), 4))
                     for k in (*LEARNED_OVERRIDES, *LEARNED_EXTRA)}
        r.learned["pred_source"] = row["pred_source"]


def predict_frame(frame: pd.DataFrame, predictor=None) -> pd.DataFrame:
    """Add the prediction columns: memory (`pred_memory_gb`, `pred_capacity_gb`, `pred_fits`),
    `PREDICTION_COLUMNS` (from `predictor` where given and supported, else analytical), the
    throughput band `pred_tokens_per_sec_per_gpu_p10/_p90`, `pred_extrapolation`,
    `pred_source`, `pred_calibrated`, and `pred_assumed`, `pred_notes`, `pred_error`."""
    results = [predict_row(row) for _, row in frame.iterrows()]
    _add_learned(results, predictor)
    out = frame.copy()
    out["pred_memory_gb"] = [round(r.memory.total_bytes / 1e9, 2) if r.memory else None
                             for r in results]
    out["pred_capacity_gb"] = [round(r.memory.capacity_bytes / 1e9, 2) if r.memory else None
                               for r in results]
    out["pred_fits"] = [r.memory.fits if r.memory else None for r in results]
    for column, get in PREDICTION_COLUMNS.items():
        out[column] = [r.learned.get(column, get(r.analytical)) if r.learned
                       else get(r.analytical) if r.analytical else None for r in results]
    for column in LEARNED_EXTRA:
        out[column] = [r.learned[column] if r.learned else None for r in results]
    out["pred_source"] = [r.learned["pred_source"] if r.learned else SOURCE if r.analytical
                          else "" for r in results]
    out["pred_power_source"] = [r.learned["pred_power_source"] if r.learned else SOURCE
                                if r.analytical else "" for r in results]
    out["pred_calibrated"] = [r.analytical.calibrated if r.analytical else None
                              for r in results]
    out["pred_assumed"] = ["; ".join(r.assumed) for r in results]
    out["pred_notes"] = ["; ".join(r.notes) for r in results]
    out["pred_error"] = [r.error for r in results]
    return out
