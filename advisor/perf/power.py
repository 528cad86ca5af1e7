"""Power, clocks, temperature and throttling of every GPU, from each pipeline stage's timeline.

* **Phases draw what they do.** A stage's compute draws a demand at full clock: tensor-core GEMMs
  the most (more the better fed they are), fused attention and HBM-bound kernels less;
  communication under compute adds to it (overlap heats); exposed communication and waiting
  (bubbles, idle between micro-batches, host launch gaps) draw little. Shares of the power
  limit, fitted on `shared/reference/power` (`advisor/catalog/power.toml` says which).
* **DVFS.** Busy power at clock fraction φ is static + (demand − static)·φ^a; where demand exceeds
  the limit the clock drops until it fits (power capping), and compute time stretches as
  β/φ + 1 − β (the clock-bound share β; the rest waits on HBM).
* **Heat.** Each GPU's slot (`advisor/perf/thermal.py`) gives its inlet air and so its steady
  temperature; bursts (one micro-batch's uninterrupted compute) heat it further. Above the
  slowdown temperature the GPU lowers its clock until the peak sits at the limit: no steady or
  peak temperature beyond it is ever predicted. Hotter dies leak more, so under a power cap a
  rear GPU keeps less power for its clock.
* **Stragglers.** A synchronous step waits for its slowest GPU: each stage's micro-batch runs at
  its slowest GPU's clock, the slowest stage sets the pipeline's pace, and the prediction names
  the straggler.
* **Samples.** Average power is the time-weighted mean over the (throttled) step; peak power is
  what a 50 ms NVML sample of the hungriest burst reads (the excursion above a cap that samples
  still catch included).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field, fields
from dataclasses import replace as replace_fields
from importlib import resources
from typing import NamedTuple

import numpy as np

from advisor.core.errors import CatalogError
from advisor.core.platform import Platform
from advisor.perf.thermal import (
    Chassis,
    SlotMap,
    burst_heating,
    burst_reach,
    chassis_for,
    slot_map,
    steady_temperature,
    thermal_resistance,
)
from advisor.perf.timeline import StageTimeline

ITERATIONS = 3
"""Fixed-point passes between clocks, step time, power and temperature (converges in 2-3)."""
BISECTION_STEPS = 18
"""Thermal slowdown: clock found to 2^-18 of its range."""
CAP_EDGE = 0.02
"""Width (share of the limit) of the ramp between uncapped and capped demand, centred on the
limit."""
THERMAL_EDGE_C = 1.0
"""Width of the soft edge around the slowdown temperature."""


@dataclass(frozen=True)
class PowerParams:
    """The power model's parameters (`advisor/catalog/power.toml`); shares of the power limit."""

    busy_share: float
    wait_share: float
    static_share: float
    clock_power_exponent: float
    clock_bound_share: float
    gemm_floor: float
    attention_ratio: float
    memory_ratio: float
    overlap_share: float
    comm_extra_share: float
    peak_excursion: float
    leakage_per_c: float
    leakage_reference_c: float
    min_clock_frac: float
    sample_window_s: float
    sources: dict[str, str] = field(default_factory=dict, compare=False, repr=False)

    FITTED = ("busy_share", "wait_share", "static_share", "clock_power_exponent",
              "clock_bound_share")

    def replace(self, **changes: float) -> PowerParams:
        return replace_fields(self, **changes)

    def slowdown(self, clock_frac: np.ndarray) -> np.ndarray:
        """Compute time at clock fraction φ relative to full clock: β/φ + 1 − β."""
        b = self.clock_bound_share
        return b / clock_frac + 1.0 - b

    def busy_power(self, static_w: np.ndarray, demand_w: np.ndarray,
                   clock_frac: np.ndarray) -> np.ndarray:
        return static_w + (demand_w - static_w) * clock_frac ** self.clock_power_exponent

    def capped_clock(self, static_w: np.ndarray, demand_w: np.ndarray,
                     limit_w: float | np.ndarray) -> np.ndarray:
        """The clock fraction at which busy power meets the limit (1 where it fits)."""
        headroom = np.maximum(limit_w - static_w, 1e-9)
        over = np.maximum(demand_w - static_w, 1e-9)
        phi = (headroom / over) ** (1.0 / self.clock_power_exponent)
        return np.clip(phi, self.min_clock_frac, 1.0)


@functools.cache
def load_power_params() -> PowerParams:
    """The shipped parameters."""
    import tomllib

    text = resources.files("advisor.catalog").joinpath("power.toml").read_text()
    data = tomllib.loads(text)
    values = {**data.get("fitted", {}), **data.get("fixed", {})}
    names = {f.name for f in fields(PowerParams)} - {"sources"}
    if set(values) != names:
        raise CatalogError(f"power.toml: expected keys {', '.join(sorted(names))}; "
                           f"got {', '.join(sorted(values))}.")
    sources = data.get("sources", {})
    for key in names:
        if not str(sources.get(key, "")).strip():
            raise CatalogError(f"power.toml: {key} has no entry in [sources].")
    return PowerParams(**{k: float(v) for k, v in values.items()}, sources=sources)


@dataclass(frozen=True)
class GpuState:
    """Every modelled GPU (configs × stages × slot entries; see `thermal.SlotMap`)."""

    slots: SlotMap
    chassis: Chassis
    clock_frac: np.ndarray
    avg_power_w: np.ndarray
    peak_power_w: np.ndarray
    steady_temp_c: np.ndarray
    peak_temp_c: np.ndarray
    throttle_frac_power: np.ndarray
    throttle_frac_thermal: np.ndarray
    microbatch_s: np.ndarray
    """One micro-batch at this GPU's clock."""


class _AtClock(NamedTuple):
    """What one clock gives every GPU, whatever the step time."""

    stretch: np.ndarray
    """Compute time relative to full clock."""
    busy: np.ndarray
    """Compute seconds per step."""
    burst_w: np.ndarray
    reach: np.ndarray
    """`thermal.burst_reach` of one burst."""


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-np.clip(x, -50.0, 50.0)))


def _stage_mean(x: np.ndarray, valid: np.ndarray) -> np.ndarray:
    return np.where(valid, x, 0.0).sum(axis=2) / np.maximum(valid.sum(axis=2), 1)


def phase_demand(platform: Platform, tl: StageTimeline, p: PowerParams) -> np.ndarray:
    """Each stage's busy demand at full clock (configs × stages), in watts."""
    limit = platform.tdp_w
    busy = limit * p.busy_share
    gemm = busy * (p.gemm_floor + (1.0 - p.gemm_floor) * tl.gemm_utilization[:, None])
    compute = tl.compute_s
    safe = np.maximum(compute, 1e-12)
    mix = (gemm * tl.gemm_s + busy * p.attention_ratio * tl.attention_s
           + busy * p.memory_ratio * tl.memory_s) / safe
    overlap = limit * p.overlap_share * np.minimum(tl.hidden_comm_s / safe, 1.0)
    return np.where(compute > 0, mix + overlap, limit * p.wait_share)


def power_thermal(platform: Platform, tl: StageTimeline, *, num_gpus: np.ndarray,
                  tokens_per_step: np.ndarray, params: PowerParams | None = None,
                  stage_order: np.ndarray | None = None,
                  detail: bool = False) -> dict[str, np.ndarray | GpuState]:
    """Throttled step time and power/thermal columns per configuration (and, with `detail`,
    the per-GPU `GpuState` under key "gpus")."""
    p = params or load_power_params()
    limit = float(platform.tdp_w)
    chassis = chassis_for(platform)
    resistance = thermal_resistance(chassis, platform)
    pp = tl.gemm_s.shape[1]
    slots = slot_map(chassis, gpus_per_stage=tl.gpus_per_stage, pp=pp, stage_order=stage_order)
    valid = slots.valid
    demand = phase_demand(platform, tl, p)[:, :, None]
    busy_s = tl.compute_s[:, :, None]
    comm_s = tl.exposed_comm_s[:, :, None]
    burst_s = tl.burst_s[:, :, None]
    wait_w = limit * p.wait_share
    comm_w = wait_w + limit * p.comm_extra_share
    nominal_step = tl.step_time()
    shape = np.broadcast_shapes(demand.shape, valid.shape)
    temp = np.full(shape, p.leakage_reference_c)

    def at_clock(clock: np.ndarray, static: np.ndarray) -> _AtClock:
        stretch = p.slowdown(clock)
        return _AtClock(stretch, busy_s * stretch, p.busy_power(static, demand, clock),
                        burst_reach(chassis, burst_s * stretch))

    def at_step(c: _AtClock, step: np.ndarray):
        energy = c.busy * c.burst_w + comm_s * comm_w + np.maximum(
            step[:, None, None] - c.busy - comm_s, 0.0) * wait_w
        # The power controller holds the average under the limit (the optimizer's stretch is
        # not in the step's critical path, so the phase sum can overrun it slightly).
        avg = np.minimum(energy / step[:, None, None], limit)
        steady = steady_temperature(chassis, resistance, avg, slots)
        peak = steady + burst_heating(resistance, c.burst_w, avg, c.reach)
        return avg, steady, peak

    step = nominal_step
    for _ in range(ITERATIONS):
        static = limit * p.static_share * (1.0 + p.leakage_per_c
                                           * (temp - p.leakage_reference_c))
        cap_clock = p.capped_clock(static, demand, limit)
        capped = at_clock(cap_clock, static)
        unthrottled_peak = at_step(capped, step)[2]
        hot = valid & (unthrottled_peak > platform.thermal_slowdown_c)
        if hot.any():
            # Thermal slowdown: the highest clock whose burst peak stays at the limit.
            lo, hi = np.full(shape, p.min_clock_frac), cap_clock.copy()
            for _ in range(BISECTION_STEPS):
                mid = 0.5 * (lo + hi)
                too_hot = at_step(at_clock(mid, static), step)[2] > platform.thermal_slowdown_c
                hi = np.where(too_hot, mid, hi)
                lo = np.where(too_hot, lo, mid)
            clock = np.minimum(cap_clock, np.where(hot, lo, 1.0))
            running = at_clock(clock, static)
        else:  # every GPU at its power-capped clock (the clip keeps it at most 1)
            clock, running = cap_clock, capped
        stage_slow = np.where(valid, running.stretch, 1.0).max(axis=2)
        step = tl.step_time(stage_slow)
        avg, steady, peak = at_step(running, step)
        temp = peak

    stretch, burst_w = running.stretch, running.burst_w
    busy_share = np.clip(busy_s * stretch / step[:, None, None], 0.0, 1.0)
    w_power = np.clip((demand - limit) / (CAP_EDGE * limit) + 0.5, 0.0, 1.0)
    w_thermal = _sigmoid((unthrottled_peak - platform.thermal_slowdown_c) / THERMAL_EDGE_C)
    frac_power = w_power * busy_share
    frac_thermal = w_thermal * busy_share
    overshoot = p.peak_excursion * np.maximum(demand - limit, 0.0) * (clock / cap_clock)
    window = 1.0 - np.exp(-burst_s * stretch / p.sample_window_s)
    sampled = avg + (burst_w + overshoot - avg) * window
    peak_temp = np.minimum(peak, platform.thermal_slowdown_c)
    microbatch = tl.microbatch_s[:, :, None] + tl.microbatch_compute_s[:, :, None] * (
        stretch - 1.0)

    n = len(step)
    rows = np.arange(n)
    masked_mb = np.where(valid, microbatch, -np.inf).reshape(n, -1)
    straggler = masked_mb.argmax(axis=1)
    k = valid.shape[2]
    front = np.asarray(chassis.row)[slots.slot] == "front"
    steady_c = np.minimum(steady, platform.thermal_slowdown_c)
    front_c = np.where(valid & front, steady_c, -np.inf).reshape(n, -1).max(axis=1)
    rear_c = np.where(valid & ~front, steady_c, -np.inf).reshape(n, -1).max(axis=1)
    rear_c = np.where(np.isfinite(rear_c), rear_c, front_c)
    stage_avg = _stage_mean(avg, valid)
    avg_w = stage_avg.mean(axis=1)
    risk = 1.0 - (1.0 - frac_power) * (1.0 - frac_thermal)
    out: dict[str, np.ndarray | GpuState] = {
        "step_time_s": step,
        "throttle_s": step - nominal_step,
        "avg_power_w": avg_w,
        "peak_power_w": np.where(valid, sampled, 0.0).reshape(n, -1).max(axis=1),
        "gemm_power_demand_w": demand[:, :, 0].max(axis=1),
        "energy_j_per_token": avg_w * step * num_gpus / tokens_per_step,
        "temp_front_c": front_c,
        "temp_rear_c": rear_c,
        "peak_temp_c": np.where(valid, peak_temp, -np.inf).reshape(n, -1).max(axis=1),
        "min_clock_frac": np.where(valid, clock, np.inf).reshape(n, -1).min(axis=1),
        "throttle_risk": np.where(valid, risk, 0.0).reshape(n, -1).max(axis=1),
        "throttle_risk_power": np.where(valid, frac_power, 0.0).reshape(n, -1).max(axis=1),
        "throttle_risk_thermal": np.where(valid, frac_thermal, 0.0).reshape(n, -1).max(axis=1),
        "throttle_loss": 1.0 - nominal_step / step,
        "straggler_stage": straggler // k,
        "straggler_slot": slots.slot.reshape(n, -1)[rows, straggler],
    }
    if detail:
        out["gpus"] = GpuState(slots=slots, chassis=chassis, clock_frac=clock,
                               avg_power_w=avg, peak_power_w=sampled,
                               steady_temp_c=steady_c, peak_temp_c=peak_temp,
                               throttle_frac_power=frac_power,
                               throttle_frac_thermal=frac_thermal, microbatch_s=microbatch)
    return out


POWER_COLUMNS = ("throttle_s", "avg_power_w", "peak_power_w", "gemm_power_demand_w",
                 "energy_j_per_token", "temp_front_c", "temp_rear_c", "peak_temp_c",
                 "min_clock_frac", "throttle_risk", "throttle_risk_power",
                 "throttle_risk_thermal", "throttle_loss", "straggler_stage", "straggler_slot")
"""The columns `power_thermal` adds to the step table (besides the throttled step time)."""
