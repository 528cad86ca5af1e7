"""CPU fallback, so a campaign runs anywhere: RAPL package energy where readable, CPU
utilisation from /proc/stat always.

RAPL counters live in /sys/class/powercap/intel-rapl:N/energy_uj (µJ; AMD Zen CPUs use the
same powercap names) and wrap at max_energy_range_uj. Since Linux 5.10 (CVE-2020-8694) they
are readable by root only; without them the power and energy fields stay None. Power is the
counter's rate over at least most of a poll period (RAPL updates about every millisecond, so
shorter differences are noise).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from collectors.telemetry.base import Sample, TelemetrySampler, TelemetryUnavailable
from collectors.telemetry.summary import counter_delta_j

POWERCAP_ROOT = Path("/sys/class/powercap")
PROC_STAT = Path("/proc/stat")


@dataclass(frozen=True)
class RaplZone:
    """One top-level RAPL zone (a CPU package)."""

    path: Path
    name: str
    """The zone's `name` file, e.g. package-0."""
    max_energy_range_uj: int

    def read_energy_uj(self) -> int:
        return int((self.path / "energy_uj").read_text())


def find_rapl_zones(root: Path = POWERCAP_ROOT) -> tuple[list[RaplZone], str]:
    """Readable package zones under `root` (subzones such as intel-rapl:0:0 are parts of a
    package and left out), and a sentence saying what was found or why nothing was."""
    zones, problems = [], []
    for path in sorted(root.glob("intel-rapl:*")):
        if path.name.count(":") != 1:
            continue
        try:
            zone = RaplZone(path, (path / "name").read_text().strip(),
                            int((path / "max_energy_range_uj").read_text()))
            zone.read_energy_uj()
        except (OSError, ValueError) as exc:
            problems.append(f"{path.name}: {type(exc).__name__}: {exc}")
            continue
        zones.append(zone)
    if zones:
        return zones, f"RAPL zones {', '.join(z.name for z in zones)} under {root}"
    if problems:
        return [], (f"RAPL counters under {root} are not readable ({'; '.join(problems)}); "
                    "run as root for CPU power, or accept utilisation only")
    return [], f"no RAPL zones under {root} (not Linux, or no powercap driver)"


def read_proc_stat(path: Path = PROC_STAT) -> tuple[int, int]:
    """(busy, total) jiffies of the aggregate `cpu` line of /proc/stat.

    Raises:
        OSError: The file cannot be read.
        ValueError: It has no well-formed `cpu` line.
    """
    for line in path.read_text().splitlines():
        parts = line.split()
        if parts and parts[0] == "cpu":
            # user nice system idle iowait irq softirq steal (guest is inside user already)
            ticks = [int(x) for x in parts[1:9]]
            if len(ticks) < 4:
                break
            idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)
            return sum(ticks) - idle, sum(ticks)
    raise ValueError(f"{path} has no well-formed aggregate 'cpu' line")


class _CounterRate:
    """Power from an energy counter over at least `min_interval_s`; in between, the last."""

    def __init__(self, min_interval_s: float) -> None:
        self.min_interval_s = min_interval_s
        self.ref: tuple[float, float] | None = None
        self.power_w: float | None = None

    def update(self, time_s: float, energy_j: float, wrap_j: float | None) -> float | None:
        if self.ref is None:
            self.ref = (time_s, energy_j)
        elif time_s - self.ref[0] >= self.min_interval_s:
            delta_j = counter_delta_j(self.ref[1], energy_j, wrap_j)
            self.power_w = delta_j / (time_s - self.ref[0])
            self.ref = (time_s, energy_j)
        return self.power_w


class CpuSampler(TelemetrySampler):
    """The host CPU: one device per readable RAPL package, else a single device 0.

    Args:
        powercap_root: Where RAPL zones live (tests point it at a fake tree).
        proc_stat: The /proc/stat file utilisation comes from.
        **kwargs: `rate_hz`, `devices`, `max_buffer_samples` (see `TelemetrySampler`).
    """

    backend: ClassVar[str] = "cpu"

    def __init__(self, *, powercap_root: Path = POWERCAP_ROOT, proc_stat: Path = PROC_STAT,
                 **kwargs: Any) -> None:
        self._powercap_root, self._proc_stat = Path(powercap_root), Path(proc_stat)
        super().__init__(**kwargs)

    def _open(self, devices: list[int] | None) -> list[int]:
        self._zones, self.rapl_reason = find_rapl_zones(self._powercap_root)
        available = list(range(max(1, len(self._zones))))
        chosen = available if devices is None else list(devices)
        bad = [d for d in chosen if d not in available]
        if bad:
            raise TelemetryUnavailable(f"CPU device(s) {bad} not available: {self.rapl_reason}; "
                                       f"use devices in {available}")
        self._min_interval_s = 0.8 / self.rate_hz
        self._power = {d: _CounterRate(self._min_interval_s) for d in chosen}
        self._stat_ref: tuple[float, int, int] | None = None
        self._utilisation_value: float | None = None
        return chosen

    def _utilisation(self, time_s: float) -> float | None:
        """Busy share of all CPUs since the last reference reading of /proc/stat."""
        try:
            busy, total = read_proc_stat(self._proc_stat)
        except (OSError, ValueError):
            return None
        if self._stat_ref is None:
            self._stat_ref = (time_s, busy, total)
            return None
        ref_s, ref_busy, ref_total = self._stat_ref
        if time_s - ref_s >= self._min_interval_s and total > ref_total:
            self._utilisation_value = (busy - ref_busy) / (total - ref_total)
            self._stat_ref = (time_s, busy, total)
        return self._utilisation_value

    def _read(self) -> list[Sample]:
        read_s = time.monotonic()
        utilisation = self._utilisation(read_s)
        samples = []
        for d in self.devices:
            energy_j = wrap_j = power_w = None
            if self._zones:
                zone = self._zones[d]
                wrap_j = zone.max_energy_range_uj / 1e6
                try:
                    energy_j = zone.read_energy_uj() / 1e6
                except (OSError, ValueError):
                    energy_j = None
                if energy_j is not None:
                    power_w = self._power[d].update(read_s, energy_j, wrap_j)
            samples.append(Sample(device=d, timestamp_s=read_s, read_time_s=read_s,
                                  power_avg_w=power_w, energy_j=energy_j, energy_wrap_j=wrap_j,
                                  utilisation=utilisation))
        return samples
