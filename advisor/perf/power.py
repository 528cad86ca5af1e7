"""Power, clocks, temperature and throttling of every GPU, from each pipeline stage's timeline.

* **Phases draw what they do.** A stage's compute draws a demand at full clock: tensor-core GEMMs
  the most, their dynamic power in proportion to how well fed the tensor cores are (so larger
  micro-batches and less tensor parallelism draw more, and cap deeper: the H200 campaign's
  clock falls 9 % from micro-batch 1 to 8), fused attention and HBM-bound kernels less;
  communication under compute adds to it (overlap heats); exposed communication and waiting
  (bubbles, idle between micro-batches, host launch gaps) draw little. Shares of the power
  limit, fitted on `datasets/reference/power` (`advisor/catalog/power.toml` says which); a site
  that probed its own chips can set their best-fed GEMM power (`Platform.gemm_power_w`).
* **DVFS.** Busy power at clock fraction φ is static + (demand − static)·φ^a; where demand exceeds
  the limit the clock drops until it fits (power capping), and compute time stretches as
  β/φ + 1 − β (the clock-bound share β; the rest waits on HBM).
* **The limit binds on a window, not an instant.** Measured on an H200
  (`datasets/probes/h200-power`, `benchmarks/power_probe.py`): a GEMM burst after an idle gap
  runs at full clock for about 40 ms before the controller pulls it to the capped clock, and
  bursts of 5-20 ms between equal gaps run at 97-99 % of full speed while continuous load runs
  at 83 %. So the limit holds power averaged over some tens of milliseconds. A stage's compute
  is interleaved with gaps far shorter than that (exposed TP/CP/EP/PP/FSDP communication, host
  launch waits, `StageTimeline.interleaved_comm_s` and `host_wait_s`): the limit binds on the
  local average d·P_busy + (1 − d)·P_gap (d: the compute share between gaps), so a layout that
  waits more between kernels keeps a higher clock while it computes (`windowed_limit`).
* **Heat.** Each GPU's slot (`advisor/perf/thermal.py`) gives its inlet air (the room's inlet,
  preheated by the GPU upstream) and its platform's heat sink or cold plate gives the rise, so
  its steady temperature; bursts (one micro-batch's uninterrupted compute) heat it further.
  Hotter dies leak more, so under a power cap a rear GPU keeps less power for its clock (the
  V100 fleet measures about −1.25 % clock per 10 °C at the cap). No temperature beyond the
  slowdown point is ever shown: there the firmware lowers the clock.
* **Expected losses** (`advisor/perf/variability.py`), each for the GPU that sets the pace and
  each a share of the step: the *power cap* (clock below maximum while capped: the ordinary
  state of a busy GPU, predictable); the *slowest of N* (capped GPUs of one model differ in
  speed, and a synchronous step waits for the slowest, more so the more GPUs); *thermal
  slowdown*, weighted by its probability over the room's inlet and the GPU-to-GPU temperature
  spread (`throttle_risk` is that probability: the one risk that is a real event); and a
  degraded node's lower limit where the cluster has one.
* **Stragglers.** A synchronous step waits for its slowest GPU: each stage's micro-batch runs at
  its slowest GPU's clock, the slowest stage sets the pipeline's pace, and the prediction names
  the straggler.
* **Samples.** Average power is the time-weighted mean over the step and never exceeds the
  power limit; peak power is what the highest 50 ms NVML instantaneous sample of the hungriest
  burst reads (the compute with its short gaps), which may exceed the limit briefly (the
  excursion the controller lets through).
* **The power limit** (`Platform.limit_w`: `--power-limit-w`, a cluster file, or the search)
  caps the draw; demand is a share of the board's design power `tdp_w` whatever the limit.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from advisor.core.platform import Platform
from advisor.perf.power_params import PowerParams, load_power_params
from advisor.perf.thermal import (
    Chassis,
    SlotMap,
    burst_heating,
    burst_reach,
    chassis_for,
    inlet_temperature,
    slot_map,
    steady_temperature,
)
from advisor.perf.thermal_fit import load_thermal_fit
from advisor.perf.timeline import StageTimeline
from advisor.perf.variability import normal_cdf, slowdown_event, slowest_of

ITERATIONS = 3
"""Fixed-point passes between clocks, step time, power and temperature (converges in 2-3)."""
CAP_EDGE = 0.02
"""Width (share of the limit) of the ramp between uncapped and capped demand, centred on the
limit."""


def windowed_limit(limit_w: float | np.ndarray, busy_s: np.ndarray, gaps_s: np.ndarray,
                   gaps_w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The busy power a limit allows when it binds on the average over the controller's window
    and the compute is interleaved with shorter gaps drawing `gaps_w`: the local average
    d·P + (1 − d)·P_gap meets the limit, d = busy / (busy + gaps). Returns (allowed busy power,
    d); d = 1 (no gaps) gives the limit itself."""
    duty = np.clip(busy_s / np.maximum(busy_s + gaps_s, 1e-12), 1e-3, 1.0)
    return (limit_w - (1.0 - duty) * np.minimum(gaps_w, limit_w)) / duty, duty


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
    """Share of the step the GPU runs power-capped."""
    throttle_frac_thermal: np.ndarray
    """Probability that this GPU reaches its slowdown temperature (its own spreads)."""
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


def _stage_mean(x: np.ndarray, valid: np.ndarray) -> np.ndarray:
    return np.where(valid, x, 0.0).sum(axis=2) / np.maximum(valid.sum(axis=2), 1)


def phase_demand(platform: Platform, tl: StageTimeline, p: PowerParams) -> np.ndarray:
    """Each stage's busy demand at full clock (configs × stages), in watts: shares of the
    board's design power `tdp_w`, whatever limit is set."""
    design = platform.tdp_w
    busy = p.best_gemm_w(platform)
    gemm = p.gemm_demand(design, tl.gemm_utilization[:, None], busy)
    compute = tl.compute_s
    safe = np.maximum(compute, 1e-12)
    mix = (gemm * tl.gemm_s + busy * p.attention_ratio * tl.attention_s
           + busy * p.memory_ratio * tl.memory_s) / safe
    overlap = design * p.overlap_share * np.minimum(tl.hidden_comm_s / safe, 1.0)
    return np.where(compute > 0, mix + overlap, design * p.wait_share)


def power_thermal(platform: Platform, tl: StageTimeline, *, num_gpus: np.ndarray,
                  tokens_per_step: np.ndarray, params: PowerParams | None = None,
                  stage_order: np.ndarray | None = None,
                  detail: bool = False) -> dict[str, np.ndarray | GpuState]:
    """Step time with its expected losses, and power/thermal columns per configuration (and,
    with `detail`, the per-GPU `GpuState` under key "gpus").

    The step is the power-capped one (every GPU at the clock its limit allows, the slowest
    stage setting the pace) plus two expected losses from GPU-to-GPU variation
    (`advisor/perf/variability.py`): the slowest of the job's GPUs while capped, and thermal
    slowdown weighted by its probability; plus, on a cluster with degraded nodes, the stage
    they hold running at their lower limit.
    """
    p = params or load_power_params()
    spread = load_thermal_fit()
    design = float(platform.tdp_w)
    limit = float(platform.limit_w)
    slowdown_c = float(platform.thermal_slowdown_c)
    chassis = chassis_for(platform)
    inlet = inlet_temperature(chassis, platform)
    pp = tl.gemm_s.shape[1]
    slots = slot_map(chassis, gpus_per_stage=tl.gpus_per_stage, pp=pp, stage_order=stage_order)
    valid = slots.valid
    demand = phase_demand(platform, tl, p)[:, :, None]
    busy_s = tl.compute_s[:, :, None]
    comm_s = tl.exposed_comm_s[:, :, None]
    burst_s = tl.burst_s[:, :, None]
    wait_w = min(design * p.wait_share, limit)
    comm_w = min(wait_w + design * p.comm_extra_share, limit)
    # The short gaps between a micro-batch's kernels, and what they draw.
    gap_comm_s = tl.interleaved_comm_s[:, :, None]
    gap_host_s = tl.host_wait_s[:, :, None]
    gaps_s = gap_comm_s + gap_host_s
    gaps_w = np.where(gaps_s > 0, (gap_comm_s * comm_w + gap_host_s * wait_w)
                      / np.maximum(gaps_s, 1e-12), wait_w)
    nominal_step = tl.step_time()
    shape = np.broadcast_shapes(demand.shape, valid.shape)
    temp = np.full(shape, p.leakage_reference_c)

    def at_clock(clock: np.ndarray, static: np.ndarray, load: np.ndarray) -> _AtClock:
        stretch = p.slowdown(clock)
        return _AtClock(stretch, busy_s * stretch, p.busy_power(static, load, clock),
                        burst_reach(chassis, burst_s * stretch))

    def at_step(c: _AtClock, step: np.ndarray, local_w: np.ndarray):
        energy = c.busy * c.burst_w + comm_s * comm_w + np.maximum(
            step[:, None, None] - c.busy - comm_s, 0.0) * wait_w
        # The power controller holds the average under the limit (the optimizer's stretch is
        # not in the step's critical path, so the phase sum can overrun it slightly).
        avg = np.minimum(energy / step[:, None, None], limit)
        steady = steady_temperature(chassis, inlet, avg, slots)
        # the die sees the compute and its short gaps together: their local average
        peak = steady + burst_heating(chassis, local_w, avg, c.reach)
        return avg, steady, peak

    step = nominal_step
    stretch = np.ones_like(busy_s)
    for _ in range(ITERATIONS):
        # Leakage follows the die (held at its slowdown point by the firmware) and adds to
        # the draw at every clock: under a cap a hotter GPU keeps less for its clock (the
        # V100 fleet's −1.2 % clock per 10 °C, `advisor/perf/thermal_fit.py`).
        leak = design * p.static_share * p.leakage_per_c * (
            np.minimum(temp, slowdown_c) - p.leakage_reference_c)
        static = design * p.static_share + leak
        load = demand + leak
        burst_limit, duty = windowed_limit(limit, busy_s * stretch, gaps_s, gaps_w)
        clock = p.capped_clock(static, load, burst_limit)
        running = at_clock(clock, static, load)
        stretch = running.stretch
        local_w = duty * running.burst_w + (1.0 - duty) * gaps_w
        stage_slow = np.where(valid, running.stretch, 1.0).max(axis=2)
        step = tl.step_time(stage_slow)
        avg, steady, peak = at_step(running, step, local_w)
        temp = peak
    capped_step = step

    stretch, burst_w = running.stretch, running.burst_w
    n = len(step)
    rows = np.arange(n)
    busy_share = np.clip(busy_s * stretch / step[:, None, None], 0.0, 1.0)
    w_power = np.clip((load - burst_limit) / (CAP_EDGE * limit) + 0.5, 0.0, 1.0)
    frac_power = w_power * busy_share
    microbatch = tl.microbatch_s[:, :, None] + tl.microbatch_compute_s[:, :, None] * (
        stretch - 1.0)
    masked_mb = np.where(valid, microbatch, -np.inf).reshape(n, -1)
    straggler = masked_mb.argmax(axis=1)
    pace = (rows, straggler)

    def at_pace(x: np.ndarray) -> np.ndarray:
        return np.broadcast_to(x, shape).reshape(n, -1)[pace]

    # Slowest of N: a capped GPU's speed varies from die to die; the job waits for the slowest.
    paced_compute = at_pace(busy_s * stretch)
    straggler_s = slowest_of(num_gpus, spread.gpu_speed_sigma) * paced_compute * at_pace(
        w_power)
    # Thermal slowdown: the hottest GPUs' chance of passing the slowdown point, and how far:
    # the room's inlet is one draw for the job, each node's airflow one per node, each GPU
    # one of its own (V100 fleet: `thermal_fit.toml`).
    flat_peak = np.where(valid, peak, -np.inf).reshape(n, -1)
    hottest = flat_peak.max(axis=1)
    copies = num_gpus / valid.reshape(n, -1).sum(axis=1)
    hot_gpus = copies * (flat_peak >= hottest[:, None] - spread.temp_sigma_gpu_c).sum(axis=1)
    nodes = np.maximum(num_gpus / platform.num_gpus_per_node, 1.0)
    hot_nodes = np.clip(hot_gpus, 1.0, nodes)
    thermal_risk, excess_c = slowdown_event(hottest, slowdown_c, [
        (p.inlet_sigma_c, np.ones(n)), (spread.temp_sigma_node_c, hot_nodes),
        (spread.temp_sigma_gpu_c, np.maximum(hot_gpus / hot_nodes, 1.0))])
    hot = flat_peak.argmax(axis=1)
    hot_busy_w = np.broadcast_to(burst_w, shape).reshape(n, -1)[rows, hot]
    hot_static = np.broadcast_to(static, shape).reshape(n, -1)[rows, hot]
    # Holding the die ΔT cooler takes ΔT/R watts off its busy power: a clock cut of
    # ΔP / (a·(P − static)), of which the clock-bound share β stretches the step.
    loss_per_c = p.clock_bound_share / (chassis.resistance_c_per_w * p.clock_power_exponent
                                        * np.maximum(hot_busy_w - hot_static, 1.0))
    thermal_share = np.minimum(excess_c * loss_per_c, 1.0 - p.min_clock_frac)
    thermal_s = thermal_share * capped_step
    degraded_s = degraded_extra(platform, tl, p, demand=load, static=static, valid=valid,
                                stage_slow=stage_slow, capped_step=capped_step,
                                num_gpus=num_gpus, busy_s=busy_s * stretch, gaps_s=gaps_s,
                                gaps_w=gaps_w)
    step = capped_step + straggler_s + thermal_s + degraded_s
    # Waiting for the slowest GPU, the hot one or the degraded node draws the waiting power.
    stage_avg = _stage_mean(avg, valid)
    avg_w = (stage_avg.mean(axis=1) * capped_step
             + (step - capped_step) * wait_w) / step

    # A 50 ms sample averages the compute with its short gaps; it overshoots the limit by a
    # share of what that local average would draw uncapped.
    local_demand = duty * load + (1.0 - duty) * gaps_w
    overshoot = p.peak_excursion * np.maximum(local_demand - limit, 0.0)
    window = 1.0 - np.exp(-burst_s * stretch / p.sample_window_s)
    # The highest of a step's samples is at least their mean (long host waits between a
    # micro-batch's kernels can pull the burst's local average below the step's).
    sampled = np.maximum(avg + (local_w + overshoot - avg) * window, avg)
    peak_temp = np.minimum(peak, slowdown_c)
    k = valid.shape[2]
    front = np.asarray(chassis.row)[slots.slot] == "front"
    steady_c = np.minimum(steady, slowdown_c)
    front_c = np.where(valid & front, steady_c, -np.inf).reshape(n, -1).max(axis=1)
    rear_c = np.where(valid & ~front, steady_c, -np.inf).reshape(n, -1).max(axis=1)
    rear_c = np.where(np.isfinite(rear_c), rear_c, front_c)
    out: dict[str, np.ndarray | GpuState] = {
        "step_time_s": step,
        "throttle_s": step - nominal_step,
        "avg_power_w": avg_w,
        "peak_power_w": np.where(valid, sampled, 0.0).reshape(n, -1).max(axis=1),
        "gemm_power_demand_w": np.where(valid, load, -np.inf).reshape(n, -1).max(axis=1),
        "power_limit_w": np.full(n, limit),
        "energy_j_per_token": avg_w * step * num_gpus / tokens_per_step,
        "temp_front_c": front_c,
        "temp_rear_c": rear_c,
        "peak_temp_c": np.where(valid, peak_temp, -np.inf).reshape(n, -1).max(axis=1),
        "min_clock_frac": np.where(valid, clock, np.inf).reshape(n, -1).min(axis=1),
        "throttle_risk": thermal_risk,
        "throttle_risk_power": at_pace(frac_power),
        "throttle_risk_thermal": thermal_risk,
        "power_cap_loss": (capped_step - nominal_step) / step,
        "straggler_loss": straggler_s / step,
        "thermal_loss": thermal_s / step,
        "degraded_loss": degraded_s / step,
        "throttle_loss": 1.0 - nominal_step / step,
        "straggler_stage": straggler // k,
        "straggler_slot": slots.slot.reshape(n, -1)[rows, straggler],
    }
    if detail:
        out["gpus"] = GpuState(slots=slots, chassis=chassis, clock_frac=clock,
                               avg_power_w=avg, peak_power_w=sampled,
                               steady_temp_c=steady_c, peak_temp_c=peak_temp,
                               throttle_frac_power=frac_power,
                               throttle_frac_thermal=np.where(valid, normal_cdf(
                                   (peak - slowdown_c) / np.sqrt(
                                       p.inlet_sigma_c ** 2 + spread.temp_sigma_node_c ** 2
                                       + spread.temp_sigma_gpu_c ** 2)), 0.0),
                               microbatch_s=microbatch)
    return out


def degraded_extra(platform: Platform, tl: StageTimeline, p: PowerParams, *,
                   demand: np.ndarray, static: np.ndarray, valid: np.ndarray,
                   stage_slow: np.ndarray, capped_step: np.ndarray,
                   num_gpus: np.ndarray, busy_s: np.ndarray, gaps_s: np.ndarray,
                   gaps_w: np.ndarray) -> np.ndarray:
    """Seconds a step loses to the cluster's degraded nodes (`Platform.degraded_nodes` held at
    `degraded_power_w`): the stage on them runs at the clock their limit allows, and the
    synchronous job waits for it. Which stage lands there is not known, so the heaviest is
    taken (what a scheduler that does not know of the fault gets); every stage when the
    degraded nodes hold the whole job. `demand` and `static` carry the die's leakage."""
    n = len(capped_step)
    if not platform.degraded_nodes or platform.degraded_power_w is None:
        return np.zeros(n)
    allowed, _ = windowed_limit(float(platform.degraded_power_w), busy_s, gaps_s, gaps_w)
    degraded_clock = p.capped_clock(static, demand, allowed)
    slow = np.where(valid, p.slowdown(degraded_clock), 1.0).max(axis=2)
    worst = np.zeros(n)
    for s in range(stage_slow.shape[1]):
        hit = stage_slow.copy()
        hit[:, s] = np.maximum(hit[:, s], slow[:, s])
        worst = np.maximum(worst, tl.step_time(hit))
    everything = tl.step_time(np.maximum(stage_slow, slow))
    whole = platform.degraded_nodes * platform.num_gpus_per_node >= num_gpus
    return np.where(whole, everything, worst) - capped_step


POWER_COLUMNS = ("throttle_s", "avg_power_w", "peak_power_w", "gemm_power_demand_w",
                 "power_limit_w", "energy_j_per_token", "temp_front_c", "temp_rear_c",
                 "peak_temp_c", "min_clock_frac", "throttle_risk", "throttle_risk_power",
                 "throttle_risk_thermal", "power_cap_loss", "straggler_loss", "thermal_loss",
                 "degraded_loss", "throttle_loss", "straggler_stage", "straggler_slot")
"""The columns `power_thermal` adds to the step table (besides the throttled step time)."""
