"""Average and peak power, energy per token, temperature and throttling risk, from the step
breakdown. Analytical: every constant below is a cited figure or a marked placeholder that
campaign telemetry (issue 6) replaces.

* Each kind of work draws a share of the dynamic range between idle power and the power limit
  (TDP): tensor-core GEMMs the most, fused attention and HBM-bound kernels less, exposed
  communication and pipeline bubbles close to idle (POLCA, Patel et al. ASPLOS'24: training
  swings between compute phases near TDP and communication phases near idle). Communication
  hidden under compute adds NVLink/NIC and SM power on top (paper finding 4: overlap raises
  temperature). Average power is the time-weighted mean, each phase capped at the limit.
* Peak power is what a 50 ms NVML sample sees: the hungriest phase's draw — GEMMs, higher the
  better they are fed, so it grows with micro-batch tokens — plus a burst term that grows with
  the length of one uninterrupted micro-batch forward (paper finding 3: peak power rises with
  micro-batch size); bounded by the limit plus the excursion the power controller lets through.
* GEMM demand above the limit means power-cap throttling: clocks fall until power fits.
* Temperature is steady state (thermal time constants are far longer than a step): inlet plus
  thermal resistance × average power; an air-cooled chassis heats its rear GPUs up to 27 % more
  above inlet (paper finding 4). A synchronous job runs at its slowest GPU's clock, so the rear
  GPU decides.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from advisor.platform import Platform

ACTIVITY = {"attention": 0.8, "memory_bound": 0.6, "exposed_comm": 0.25, "idle": 0.1}
"""Share of (TDP − idle) drawn during each non-GEMM phase. placeholder: chosen with the GEMM
shares below so that a compute-bound dense step averages about 80-90 % of TDP per GPU, in line
with compute-heavy training measurements (Newkirk et al. 2025: about 76 % of node TDP, CPUs and
fans included; Latif et al. arXiv 2412.08602: 8 × H100 peaked at 8.4-8.5 kW of a 10.2 kW
rating); replace with campaign telemetry."""
GEMM_BASE_ACTIVITY = 0.6
GEMM_DEMAND_AT_FULL_EFFICIENCY = 1.1
"""GEMM-phase demand as a share of (TDP − idle): GEMM_BASE_ACTIVITY for poorly fed tensor
cores rising linearly to this for GEMMs at the family's best efficiency, where the power limit
binds. placeholder: large BF16/FP8 GEMMs on 700 W H100/H200 run at the power limit with clocks
below boost (paper notes: about 1.98 GHz down to about 1.7 GHz under throttling, secondary)."""
HIDDEN_COMM_ACTIVITY = 0.1
"""Extra share of (TDP − idle) while communication runs under compute. placeholder."""
BURST_ACTIVITY = 0.1
"""Largest burst above the GEMM-phase draw, as a share of (TDP − idle), reached when one
micro-batch's forward lasts much longer than a sample window. placeholder (paper finding 3)."""
SAMPLE_WINDOW_S = 0.05
"""NVML instantaneous power polled at 20 Hz (paper's telemetry; Zeus monitor)."""
PEAK_EXCURSION = 0.05
"""How far above the limit a sampled peak may read: the power controller acts within
milliseconds, so 50 ms samples stay within a few percent of the limit. placeholder."""
CLOCK_POWER_EXPONENT = 2.5
"""Dynamic power ∝ f^2.5 (voltage scales with frequency: P ∝ C·V²·f). placeholder."""
THERMAL_CLOCK_DROP = 0.14
"""Fractional clock drop when thermal slowdown engages: about 1.98 → 1.7 GHz on H200 (paper
notes, secondary)."""
INLET_C = {"air": 25.0, "liquid": 35.0}
"""Inlet air (ASHRAE A1 recommended range tops at 27 °C) / warm-water coolant supply.
placeholder."""
THERMAL_RESISTANCE_C_PER_W = {"air": 0.072, "liquid": 0.035}
"""GPU temperature rise over inlet per watt. placeholder: puts a front air-cooled GPU drawing
700 W near 75 °C and its rear neighbour (+27 % rise) near the 89 °C slowdown threshold, as the
paper's H200 testbed throttled on rear GPUs."""
REAR_FACTOR = {"air": 1.27, "liquid": 1.0}
"""Rear GPUs of an air-cooled HGX chassis run up to 27 % hotter than front ones (paper finding 4),
taken on the rise above inlet (the air reaching them was warmed by the front GPUs); liquid cold
plates see no position effect (placeholder)."""
POWER_RISK_SCALE = 0.05
"""Width, as a share of TDP, of the smooth step from "demand below the limit" to "throttling"."""
THERMAL_RISK_SCALE_C = 3.0
"""Width in °C of the smooth step around the slowdown temperature."""


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-np.clip(x, -50, 50)))


STEP_COLUMNS = ("step_time_s", "gemm_s", "attention_s", "memory_bound_s", "tp_comm_s",
                "cp_comm_s", "ep_comm_s", "pp_comm_s", "dp_comm_s", "hidden_comm_s")
"""The `step_table` columns the power model reads."""


def power_table(platform: Platform, step: pd.DataFrame, *, num_gpus: np.ndarray,
                tokens_per_step: np.ndarray, gemm_utilization: np.ndarray,
                forward_burst_s: np.ndarray) -> pd.DataFrame:
    """Power, energy and thermal predictions aligned with `step` (a `step_table` frame).

    `gemm_utilization` is the GEMMs' shape efficiency relative to the best the family reaches
    (0..1); `forward_burst_s` the length of one micro-batch's forward on the slowest stage.
    """
    return pd.DataFrame(power_arrays(platform, {c: step[c].to_numpy() for c in STEP_COLUMNS},
                                     num_gpus=num_gpus, tokens_per_step=tokens_per_step,
                                     gemm_utilization=gemm_utilization,
                                     forward_burst_s=forward_burst_s), index=step.index)


def power_arrays(platform: Platform, step: Mapping[str, np.ndarray], *, num_gpus: np.ndarray,
                 tokens_per_step: np.ndarray, gemm_utilization: np.ndarray,
                 forward_burst_s: np.ndarray) -> dict[str, np.ndarray]:
    """`power_table`'s columns from the step breakdown's arrays."""
    idle, tdp = platform.idle_power_w, platform.tdp_w
    span = tdp - idle
    step_s = step["step_time_s"]
    gemm_demand = idle + span * (GEMM_BASE_ACTIVITY + (GEMM_DEMAND_AT_FULL_EFFICIENCY
                                                       - GEMM_BASE_ACTIVITY) * gemm_utilization)
    power_capped = np.minimum(gemm_demand, tdp)
    phases = {
        "gemm": (step["gemm_s"], power_capped),
        "attention": (step["attention_s"], idle + span * ACTIVITY["attention"]),
        "memory_bound": (step["memory_bound_s"], idle + span
                         * ACTIVITY["memory_bound"]),
    }
    busy = sum(t for t, _ in phases.values())
    exposed = (step["tp_comm_s"] + step["cp_comm_s"] + step["ep_comm_s"] + step["pp_comm_s"]
               + step["dp_comm_s"])
    idle_time = np.maximum(step_s - busy - exposed, 0.0)
    energy = sum(t * p for t, p in phases.values())
    energy = energy + exposed * (idle + span * ACTIVITY["exposed_comm"])
    energy = energy + idle_time * (idle + span * ACTIVITY["idle"])
    hidden = np.minimum(step["hidden_comm_s"], busy)
    energy = energy + hidden * span * HIDDEN_COMM_ACTIVITY
    avg = np.minimum(energy / step_s, tdp)

    # The sustained draw of the hungriest phase (with overlapped communication on top, when
    # any runs): never below the average, never lower for a bigger micro-batch.
    others = max(p for name, (_, p) in phases.items() if name != "gemm")
    busiest = np.maximum(gemm_demand, others)
    busiest = busiest + span * HIDDEN_COMM_ACTIVITY * (hidden > 0)
    burst = 1.0 - np.exp(-forward_burst_s / SAMPLE_WINDOW_S)
    limit = tdp * (1.0 + PEAK_EXCURSION)
    peak = np.minimum(busiest + span * BURST_ACTIVITY * burst, limit)

    # Power-cap throttling: clocks drop until GEMM power fits under the limit.
    # When the cap engages, demand sits at least one risk-width above the limit.
    capped_demand = np.maximum(gemm_demand, tdp * (1.0 + POWER_RISK_SCALE))
    clock_at_cap = (span / (capped_demand - idle)) ** (1.0 / CLOCK_POWER_EXPONENT)
    p_power = _sigmoid((gemm_demand - tdp) / (POWER_RISK_SCALE * tdp))
    inlet = INLET_C[platform.cooling]
    rise = THERMAL_RESISTANCE_C_PER_W[platform.cooling] * avg
    front = inlet + rise
    rear = inlet + rise * REAR_FACTOR[platform.cooling]
    p_thermal = _sigmoid((rear - platform.thermal_slowdown_c) / THERMAL_RISK_SCALE_C)
    risk = 1.0 - (1.0 - p_power) * (1.0 - p_thermal)
    compute_share = np.clip(busy / step_s, 0.0, 1.0)
    # The slowest GPU sets the pace of a synchronous job: one throttled GPU slows all.
    clock_loss = np.maximum(p_power * (1.0 - clock_at_cap), p_thermal * THERMAL_CLOCK_DROP)
    loss = clock_loss * compute_share

    world_energy = avg * step_s * num_gpus
    return {
        "avg_power_w": avg,
        "peak_power_w": peak,
        "gemm_power_demand_w": gemm_demand,
        "energy_j_per_token": world_energy / tokens_per_step,
        "temp_front_c": front,
        "temp_rear_c": rear,
        "throttle_risk": risk,
        "throttle_risk_power": p_power,
        "throttle_risk_thermal": p_thermal,
        "throttle_loss": loss,
    }
