"""The headline figures of one prediction, each with its source: what `predict` and `explain`
print and write as JSON, so both commands show the same numbers from the same place (the
`Predictor`'s row, never the analytical breakdown behind it).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass

from advisor.predict.predictor import Prediction


@dataclass(frozen=True)
class Figure:
    """One number and where it comes from."""

    value: float | bool
    source: str
    """`surrogate`, `analytical`, or `derived: ...` saying from what."""
    p10: float | None = None
    p90: float | None = None
    """The band, where the source has one (None otherwise)."""

    def to_dict(self) -> dict:
        return {k: v for k, v in asdict(self).items() if v is not None or k == "value"}


def _band(value) -> float | None:
    return None if value is None or not math.isfinite(float(value)) else float(value)


def figures(prediction: Prediction, row: Mapping | None = None) -> dict[str, Figure]:
    """Every headline figure of `prediction` (a `Predictor` row with its breakdown) by name:
    throughput and what follows from it from `prediction.source`, power from
    `prediction.power_source`, memory and thermal risk analytical, energy per token and samples
    per MJ derived from the headline step time and average power. `row`: the `Predictor`'s
    row, for the power bands (learned power only)."""
    row = row or {}
    p, b = prediction, prediction.breakdown
    speed, power = p.source, p.power_source
    energy_how = (f"derived: (average power ({power}) + the host's share per GPU) × PUE × step "
                  f"time ({speed}) × GPUs / tokens per step")
    config = p.config
    samples_per_mj = 1e6 / (p.energy_j_per_token * config.seq_len)
    out = {
        "step_time_s": Figure(p.step_time_s, speed),
        "tokens_per_sec_per_gpu": Figure(p.tokens_per_sec_per_gpu, speed,
                                         _band(p.tokens_per_sec_per_gpu_p10),
                                         _band(p.tokens_per_sec_per_gpu_p90)),
        "tflops_per_gpu": Figure(p.tflops_per_gpu, speed),
        "mfu": Figure(p.mfu, speed),
        "memory_gb": Figure(p.memory_gb, "analytical"),
        "fits": Figure(p.fits, "analytical"),
        "avg_power_w": Figure(p.avg_power_w, power, _band(row.get("pred_avg_power_w_p10")),
                              _band(row.get("pred_avg_power_w_p90"))),
        "peak_power_w": Figure(p.peak_power_w, power, _band(row.get("pred_peak_power_w_p10")),
                               _band(row.get("pred_peak_power_w_p90"))),
        "energy_j_per_token": Figure(p.energy_j_per_token, energy_how),
        "board_energy_j_per_token": Figure(p.board_energy_j_per_token,
                                           f"derived: average power ({power}) × step time "
                                           f"({speed}) × GPUs / tokens per step"),
        "samples_per_mj": Figure(samples_per_mj, "derived: 10^6 / (energy per token × "
                                 "sequence length)"),
        "throttle_risk": Figure(p.throttle_risk, "analytical"),
    }
    if b is not None:
        out["expected_loss"] = Figure(b.power.throttle_loss, "analytical")
    return out


def figures_json(prediction: Prediction, row: Mapping | None = None) -> dict[str, dict]:
    """`figures` as JSON-ready dicts (`value`, `source`, and `p10`/`p90` where there is a
    band)."""
    return {name: f.to_dict() for name, f in figures(prediction, row).items()}
