"""`predict --input`: rows shaped like the reference data, read by `advisor.data.predict_input`
and predicted together by one vectorised `Predictor` call.

A bad row gets `pred_error`; the others are predicted.
"""

from __future__ import annotations

import pandas as pd

from advisor.core.parallel import sharding_name
from advisor.data.predict_input import choose_recompute, parse_row
from advisor.perf.analytical import SOURCE
from advisor.predict.predictor import Predictor

PREDICTION_COLUMNS = {
    "pred_step_time_s": 4, "pred_tokens_per_sec_per_gpu": 1, "pred_tflops_per_gpu": 1,
    "pred_mfu": 4, "pred_avg_power_w": 1, "pred_peak_power_w": 1,
    "pred_energy_j_per_token": 4, "pred_board_energy_j_per_token": 4,
    "pred_usd_per_million_tokens": 4, "pred_energy_usd_per_million_tokens": 4,
    "pred_throttle_risk": 3, "pred_thermal_loss": 4, "pred_power_cap_loss": 4,
}
"""Prediction columns every row gets, with their decimals (analytical predictions)."""
LEARNED_EXTRA = ("pred_tokens_per_sec_per_gpu_p10", "pred_tokens_per_sec_per_gpu_p90",
                 "pred_extrapolation", "pred_avg_power_w_p10", "pred_avg_power_w_p90",
                 "pred_peak_power_w_p10", "pred_peak_power_w_p90", "pred_throttle_frac_power",
                 "pred_throttle_frac_thermal", "pred_power_source")
"""Predictor columns the analytical model has no counterpart for (NaN power bands and throttle
fractions until campaigns measured power)."""
LEARNED_OVERRIDES = ("pred_step_time_s", "pred_tokens_per_sec_per_gpu", "pred_tflops_per_gpu",
                     "pred_mfu", "pred_energy_j_per_token", "pred_board_energy_j_per_token",
                     "pred_usd_per_million_tokens", "pred_energy_usd_per_million_tokens",
                     "pred_avg_power_w",
                     "pred_peak_power_w")
"""Columns a learned prediction replaces (given to 4 decimals)."""


def _one_vocabulary(row: dict) -> dict:
    """The row with its dp_sharding in the one vocabulary (ddp, zero1, fsdp, ... read as none,
    optimizer, full) before anything derives from it (overlap defaults)."""
    if isinstance(row.get("dp_sharding"), str):
        row["dp_sharding"] = sharding_name(row["dp_sharding"])
    return row


def predict_frame(frame: pd.DataFrame, predictor=None, *,
                  conditions: dict | None = None) -> pd.DataFrame:
    """Add the prediction columns: memory (`pred_memory_gb`, `pred_capacity_gb`, `pred_fits`),
    `PREDICTION_COLUMNS` (from `predictor` where given and supported, else analytical), the
    throughput band `pred_tokens_per_sec_per_gpu_p10/_p90`, `pred_extrapolation`,
    `pred_source`, `pred_calibrated`, and `pred_assumed`, `pred_notes`, `pred_error`.

    Rows are read one by one (a bad row gets `pred_error`, the others are predicted) and
    predicted together: one vectorised `Predictor` call (analytical only without a
    `predictor`). `conditions` (power limit, inlet, degraded nodes) apply to rows whose own
    columns for them are empty."""
    catalog: dict = {}
    rows = [parse_row(_one_vocabulary(row), catalog, conditions)
            for row in frame.to_dict("records")]
    choose_recompute(rows)
    ok = [i for i, r in enumerate(rows) if r.config is not None]
    learned = predictor is not None
    model = predictor if learned else Predictor(None)
    n = len(rows)
    values: dict[str, list] = {c: [None] * n for c in (
        "pred_memory_gb", "pred_capacity_gb", "pred_fits", *PREDICTION_COLUMNS,
        *LEARNED_EXTRA, "pred_source", "pred_calibrated")}
    values["pred_source"] = [""] * n
    values["pred_power_source"] = [""] * n
    if ok:
        predicted = model.predict([(rows[i].config, rows[i].job) for i in ok])
        columns = {c: predicted[c].tolist() for c in predicted.columns}
        for k, i in enumerate(ok):
            r = rows[i]
            if columns["pred_error"][k]:
                r.error = columns["pred_error"][k]
                continue
            values["pred_memory_gb"][i] = round(columns["pred_memory_gb"][k], 2)
            values["pred_capacity_gb"][i] = round(
                r.job.platform.memory_capacity_bytes / 1e9, 2)
            values["pred_fits"][i] = bool(columns["pred_fits"][k])
            values["pred_calibrated"][i] = bool(columns["pred_calibrated"][k])
            for column, decimals in PREDICTION_COLUMNS.items():
                digits = 4 if learned and column in LEARNED_OVERRIDES else decimals
                values[column][i] = round(float(columns[column][k]), digits)
            values["pred_source"][i] = columns["pred_source"][k] if learned else SOURCE
            stack = model.stack_for(r.job.platform) if learned else None
            if stack is not None:
                r.notes.append(f"predicted with the {stack.describe()}")
            values["pred_power_source"][i] = columns["pred_power_source"][k]
            if learned:
                for column in LEARNED_EXTRA:
                    value = columns[column][k]
                    values[column][i] = (bool(value) if column == "pred_extrapolation"
                                         else str(value) if column == "pred_power_source"
                                         else round(float(value), 4))
    out = frame.copy()
    if "dp_sharding" in out:
        out["dp_sharding"] = [sharding_name(v) for v in out["dp_sharding"]]
    for column, column_values in values.items():
        out[column] = column_values
    out["pred_assumed"] = ["; ".join(r.assumed) for r in rows]
    out["pred_notes"] = ["; ".join(r.notes) for r in rows]
    out["pred_error"] = [r.error for r in rows]
    return out
