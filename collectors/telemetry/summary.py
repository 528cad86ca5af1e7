"""Summaries of telemetry samples, per device and per run, with the paper's definitions.

Average power is the time-weighted mean of each device's power trace, then the mean over
devices; peak power is the largest instantaneous sample (p99 too: NVML observes only part of
each interval, so sampled peaks are a lower bound); energy comes from counter deltas (wraps and
resets handled), falling back to integrating power only where no counter exists.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from collectors.spec import TELEMETRY_FIELDS

if TYPE_CHECKING:
    from collectors.telemetry.base import Sample


@dataclass(frozen=True)
class DeviceSummary:
    """One device over one window. Figures the backend cannot measure are None."""

    device: int
    num_samples: int
    avg_power_w: float | None = None
    """Time-weighted mean power."""
    peak_power_w: float | None = None
    """Largest power sample."""
    p99_power_w: float | None = None
    """99th percentile of the power samples (linear interpolation)."""
    power_source: str | None = None
    """`instant` (instantaneous readings) or `average` (the device's own averaged power)."""
    energy_j: float | None = None
    energy_source: str | None = None
    """`counter` (energy counter deltas) or `power` (integral of the power samples)."""
    max_temp_c: float | None = None
    max_mem_temp_c: float | None = None
    mean_sm_clock_mhz: float | None = None
    min_sm_clock_mhz: float | None = None
    mean_utilisation: float | None = None
    throttle_frac_power: float | None = None
    throttle_frac_thermal: float | None = None
    throttle_frac_hw_slowdown: float | None = None
    power_devices: int = 1
    """Devices the power reading covers (2 for an MI250 package read on its even GCD)."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def time_weighted_mean(times_s: Sequence[float], values: Sequence[float]) -> float:
    """Trapezoidal time-weighted mean of a sampled signal (plain mean if no time passes).

    Raises:
        ValueError: The sequences are empty or of different lengths.
    """
    if not values or len(times_s) != len(values):
        raise ValueError(f"need as many times as values, and at least one "
                         f"(got {len(times_s)} times, {len(values)} values)")
    span_s = times_s[-1] - times_s[0]
    if span_s <= 0:
        return sum(values) / len(values)
    area = sum((t1 - t0) * (v0 + v1) / 2 for t0, t1, v0, v1
               in zip(times_s, times_s[1:], values, values[1:], strict=False))
    return area / span_s


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0-100) with linear interpolation, as numpy's default.

    Raises:
        ValueError: `values` is empty or `q` is outside 0-100.
    """
    if not values or not 0 <= q <= 100:
        raise ValueError(f"percentile needs values and 0 <= q <= 100 (got {len(values)} "
                         f"values, q={q})")
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def counter_delta_j(previous_j: float, current_j: float, wrap_j: float | None) -> float:
    """Energy between two counter readings.

    A counter that goes down has wrapped (when its wrap value is known and the wrapped delta
    is plausible, under half the range) or was reset (driver reload): then the energy since
    the reset is the current reading.
    """
    delta_j = current_j - previous_j
    if delta_j >= 0:
        return delta_j
    if wrap_j is not None and 0 <= delta_j + wrap_j < wrap_j / 2:
        return delta_j + wrap_j
    return current_j


def counter_energy_j(samples: Sequence[Sample]) -> float | None:
    """Energy from the counter readings in `samples` (read order); None with fewer than two."""
    readings = [s for s in samples if s.energy_j is not None]
    if len(readings) < 2:
        return None
    return sum(counter_delta_j(a.energy_j, b.energy_j, b.energy_wrap_j)  # type: ignore[arg-type]
               for a, b in zip(readings, readings[1:], strict=False))


def _power_series(samples: Sequence[Sample]) -> tuple[str | None, list[float], list[float]]:
    for source, attr in (("instant", "power_instant_w"), ("average", "power_avg_w")):
        points = sorted((s.timestamp_s, getattr(s, attr)) for s in samples
                        if getattr(s, attr) is not None)
        if points:
            return source, [t for t, _ in points], [v for _, v in points]
    return None, [], []


def _values(samples: Sequence[Sample], attr: str) -> list[Any]:
    return [v for v in (getattr(s, attr) for s in samples) if v is not None]


def _fraction(flags: list[bool]) -> float | None:
    return sum(flags) / len(flags) if flags else None


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def summarize_device(device: int, samples: Sequence[Sample]) -> DeviceSummary:
    """Summarise one device's samples (in read order) over a window."""
    source, times_s, powers_w = _power_series(samples)
    energy_j, energy_source = counter_energy_j(samples), "counter"
    if energy_j is None and len(powers_w) >= 2:
        energy_j = time_weighted_mean(times_s, powers_w) * (times_s[-1] - times_s[0])
        energy_source = "power"
    temps, mem_temps = _values(samples, "gpu_temp_c"), _values(samples, "mem_temp_c")
    clocks = _values(samples, "sm_clock_mhz")
    return DeviceSummary(
        device=device,
        num_samples=len(samples),
        avg_power_w=time_weighted_mean(times_s, powers_w) if powers_w else None,
        peak_power_w=max(powers_w) if powers_w else None,
        p99_power_w=percentile(powers_w, 99) if powers_w else None,
        power_source=source,
        energy_j=energy_j,
        energy_source=energy_source if energy_j is not None else None,
        max_temp_c=max(temps) if temps else None,
        max_mem_temp_c=max(mem_temps) if mem_temps else None,
        mean_sm_clock_mhz=_mean(clocks),
        min_sm_clock_mhz=min(clocks) if clocks else None,
        mean_utilisation=_mean(_values(samples, "utilisation")),
        throttle_frac_power=_fraction(_values(samples, "throttle_power")),
        throttle_frac_thermal=_fraction(_values(samples, "throttle_thermal")),
        throttle_frac_hw_slowdown=_fraction(_values(samples, "throttle_hw_slowdown")),
        power_devices=max((s.power_devices for s in samples), default=1),
    )


def _covered(summary: DeviceSummary, sampled: set[int]) -> int:
    """How many of the sampled devices one device's power reading covers (its package mates
    have consecutive indices: MI250 GCDs 2k and 2k+1)."""
    return sum(1 for d in range(summary.device, summary.device + summary.power_devices)
               if d in sampled)


def _weighted_mean(pairs: list[tuple[float, int]]) -> float | None:
    total = sum(n for _, n in pairs)
    return sum(v * n for v, n in pairs) / total if total else None


def run_summary(per_device: Sequence[DeviceSummary], *,
                telemetry_hz: float | None) -> dict[str, float | None]:
    """The dataset's run-level telemetry columns (`TELEMETRY_FIELDS`, in order).

    avg_power_w is per GPU (the mean over GPUs of each one's time-weighted mean; a package
    reading counts for the GPUs it covers), peak_power_w is the largest sample of any GPU,
    energy_j is the total over all sampled GPUs, clocks and throttle fractions pool every
    sample of every GPU.
    """
    sampled = {d.device for d in per_device}
    powered = [d for d in per_device if d.avg_power_w is not None]
    covered = {d.device: _covered(d, sampled) for d in powered}
    num_powered = sum(covered.values())
    avg_power_w = (sum(d.avg_power_w * covered[d.device] / d.power_devices  # type: ignore[operator]
                       for d in powered) / num_powered) if num_powered else None
    peaks = [d.peak_power_w / d.power_devices for d in powered if d.peak_power_w is not None]
    energies = [d.energy_j * _covered(d, sampled) / d.power_devices
                for d in per_device if d.energy_j is not None]
    temps = [d.max_temp_c for d in per_device if d.max_temp_c is not None]
    mem_temps = [d.max_mem_temp_c for d in per_device if d.max_mem_temp_c is not None]

    def pooled(attr: str) -> float | None:
        return _weighted_mean([(getattr(d, attr), d.num_samples) for d in per_device
                               if getattr(d, attr) is not None])

    values: dict[str, float | None] = {
        "avg_power_w": avg_power_w,
        "peak_power_w": max(peaks) if peaks else None,
        "energy_j": sum(energies) if energies else None,
        "max_temp_c": max(temps) if temps else None,
        "max_mem_temp_c": max(mem_temps) if mem_temps else None,
        "mean_sm_clock_mhz": pooled("mean_sm_clock_mhz"),
        "throttle_frac_power": pooled("throttle_frac_power"),
        "throttle_frac_thermal": pooled("throttle_frac_thermal"),
        "telemetry_hz": telemetry_hz,
    }
    return {name: values[name] for name in TELEMETRY_FIELDS}
