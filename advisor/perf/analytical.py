"""The analytical model as one call: memory, step time with its breakdown, power and thermal.

`analytical_arrays` is vectorised over columns of configurations (what the Predictor and search
use; `analytical_table` takes and gives DataFrames, for training and evaluation);
`predict_config` wraps it for one configuration and returns its typed `Breakdown`.
"""

from __future__ import annotations

import typing
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING

import numpy as np

from advisor.core.model import ModelSpec
from advisor.core.parallel import ParallelConfig
from advisor.core.platform import Platform
from advisor.perf.calibration import Calibration, load_calibration
from advisor.perf.columns import Columns, columns_of, config_columns, full_length
from advisor.perf.memory import MemoryBreakdown, memory_arrays
from advisor.perf.step import COMPONENTS, DEFAULT_FRAMEWORK, step_arrays

if TYPE_CHECKING:
    import pandas as pd

SOURCE = "analytical"


@dataclass(frozen=True)
class StepTimeBreakdown:
    """One training step, seconds per component (they add up to `step_time_s`)."""

    step_time_s: float
    tokens_per_sec_per_gpu: float
    tflops_per_gpu: float
    """Model TFLOP/s per GPU, Megatron convention (no recompute FLOPs)."""
    mfu: float
    """Model FLOPs utilisation against the dense peak of the run's precision."""
    compute_s: float
    recompute_s: float
    tp_comm_s: float
    """Exposed (not overlapped) communication, per parallelism."""
    cp_comm_s: float
    ep_comm_s: float
    pp_comm_s: float
    dp_comm_s: float
    bubble_s: float
    optimizer_s: float
    overhead_s: float
    throttle_s: float
    """Time lost to clocks below maximum (power capping, thermal slowdown) on the straggler."""
    num_microbatches: int

    COMPONENTS = COMPONENTS

    def components(self) -> dict[str, float]:
        return {c: getattr(self, c) for c in self.COMPONENTS}


@dataclass(frozen=True)
class PowerThermal:
    avg_power_w: float
    """Mean draw per GPU over the step; never above the power limit."""
    peak_power_w: float
    """The highest 50 ms NVML instantaneous sample of any GPU (may pass the limit briefly)."""
    gemm_power_demand_w: float
    """The hungriest GPU's draw at full clock (its die's leakage included): above the limit,
    the power cap binds."""
    energy_j_per_token: float
    samples_per_mj: float
    """The paper's efficiency metric: sequences per megajoule over all GPUs."""
    temp_front_c: float
    """Hottest steady temperature of a front-row (fresh-air) GPU."""
    temp_rear_c: float
    """Hottest steady temperature of a rear-row GPU (= front where the chassis has none)."""
    peak_temp_c: float
    """Hottest temperature any GPU reaches during a burst (held at the slowdown limit)."""
    min_clock_frac: float
    """Lowest clock of any GPU relative to its maximum."""
    power_limit_w: float
    """The power limit in force (the board's default or the one set)."""
    throttle_risk: float
    """Probability that some GPU of the job reaches its slowdown temperature, over the room's
    inlet and the GPU-to-GPU spread (`advisor/perf/variability.py`), 0..1."""
    throttle_risk_power: float
    """Share of the step the pace-setting GPU runs power-capped (ordinary, not a risk)."""
    throttle_risk_thermal: float
    """The thermal slowdown probability (= `throttle_risk`)."""
    power_cap_loss: float
    """Share of the step lost to clocks below maximum under the power cap."""
    straggler_loss: float
    """Share of the step spent waiting for the slowest of the job's GPUs."""
    thermal_loss: float
    """Expected share of the step lost to thermal slowdown."""
    degraded_loss: float
    """Share of the step lost to the cluster's degraded nodes."""
    throttle_loss: float
    """All of them: the fraction of the unthrottled throughput the step loses."""
    straggler_stage: int
    """Pipeline stage of the GPU that sets the pace."""
    straggler_slot: int
    """Its slot in the node (`advisor/catalog/chassis.toml`)."""

    def losses(self) -> dict[str, float]:
        """The expected losses by cause (shares of the step) and their total."""
        return {"power_cap": self.power_cap_loss, "slowest_gpu": self.straggler_loss,
                "thermal": self.thermal_loss, "degraded_nodes": self.degraded_loss,
                "total": self.throttle_loss}

    def loss_split(self) -> str:
        """`cap/slowest/heat` in percent, e.g. "4.3/3.5/1.0" (a degraded node's share added
        where there is one)."""
        parts = [self.power_cap_loss, self.straggler_loss, self.thermal_loss]
        if self.degraded_loss > 0:
            parts.append(self.degraded_loss)
        return "/".join(f"{100 * x:.1f}" for x in parts)


@dataclass(frozen=True)
class Breakdown:
    """Everything the analytical model says about one configuration: the breakdown behind a
    `predict.predictor.Prediction` (and the whole answer of `predict_config`)."""

    config: ParallelConfig
    step: StepTimeBreakdown
    memory: MemoryBreakdown
    power: PowerThermal
    calibrated: bool
    """False where the platform family had no measured runs to calibrate on."""
    source: str = SOURCE


def analytical_table(model: ModelSpec, platform: Platform, configs: pd.DataFrame, *,
                     calibration: Calibration | None = None,
                     framework: str = DEFAULT_FRAMEWORK) -> pd.DataFrame:
    """Memory, step-time breakdown, power and thermal columns for every row of `configs`
    (run by `framework`'s kernels: Megatron-Core unless said)."""
    import pandas as pd

    return pd.DataFrame(analytical_arrays(model, platform, config_columns(configs),
                                          calibration=calibration, framework=framework),
                        index=configs.index)


def analytical_arrays(model: ModelSpec, platform: Platform, cols: Columns, *,
                      calibration: Calibration | None = None,
                      framework: str = DEFAULT_FRAMEWORK,
                      memory: Mapping[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
    """`analytical_table`'s columns, from and to arrays. `memory`: the memory model's columns
    for these rows where the caller has them already (search runs it over the whole space to
    know what fits), so it does not run twice."""
    calibration = calibration or load_calibration()
    step = step_arrays(model, platform, cols, calibration=calibration, framework=framework)
    if memory is None:
        memory = memory_arrays(model, platform=platform, cols=cols, framework=framework)
    return step | dict(memory)


def predict_config(model: ModelSpec, platform: Platform, config: ParallelConfig, *,
                   calibration: Calibration | None = None,
                   framework: str = DEFAULT_FRAMEWORK) -> Breakdown:
    """The analytical prediction for one configuration."""
    return predict_configs(model, platform, [config], calibration=calibration,
                           framework=framework)[0]


def predict_configs(model: ModelSpec, platform: Platform, configs: list[ParallelConfig], *,
                    calibration: Calibration | None = None,
                    framework: str = DEFAULT_FRAMEWORK) -> list[Breakdown]:
    """The analytical predictions for several configurations of one model and platform, from
    one vectorised run of the model."""
    table = analytical_arrays(model, platform, columns_of(configs), calibration=calibration,
                              framework=framework)
    table = full_length(table, len(configs))
    return [breakdown_from_row(config, {k: v[i] for k, v in table.items()})
            for i, config in enumerate(configs)]


def breakdown_from_row(config: ParallelConfig, row: Mapping, *,
                       prefix: str = "") -> Breakdown:
    """The typed view of one row of `analytical_table`'s columns (named `prefix` + field, as
    the `Predictor` returns them with `breakdown=True`: prefix "analytical_")."""
    def part(cls: type) -> object:
        return cls(**{name: cast(row[prefix + name]) for name, cast in _CASTS[cls].items()})

    return Breakdown(config=config, step=part(StepTimeBreakdown), memory=part(MemoryBreakdown),
                     power=part(PowerThermal),
                     calibrated=bool(np.asarray(row[prefix + "calibrated"]).item()))


def _casts(cls: type) -> dict[str, type]:
    """Each field of `cls` and the plain type its value is converted to (int, bool, float)."""
    hints = typing.get_type_hints(cls)
    out = {}
    for f in fields(cls):
        kind = hints[f.name]
        out[f.name] = next((t for t in (bool, int) if kind is t or t in typing.get_args(kind)),
                           float)
    return out


_CASTS = {cls: _casts(cls) for cls in (StepTimeBreakdown, MemoryBreakdown, PowerThermal)}
BREAKDOWN_PREFIX = "analytical_"
"""How the `Predictor` names the analytical columns it returns with `breakdown=True`."""
