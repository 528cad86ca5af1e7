"""Stand-ins for vendor libraries, driven by scripted traces, for tests without hardware.

`fake_pynvml` behaves like nvidia-ml-py's `pynvml` and `fake_amdsmi` like `amdsmi` 7.0.2 (same
function names, signatures, return types and errors). Both read their devices' power,
temperatures, clocks and throttle state from a `ScriptedTrace`, whose exact energy integral
lets tests check the samplers' summaries against the truth. Install them with
`install_fake_pynvml(monkeypatch, ...)` / `install_fake_amdsmi(monkeypatch, ...)`.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

# NVML clock-event reason bits (pynvml.py 13.615.71), shared by both fakes' traces.
SW_POWER_CAP = 0x4
HW_SLOWDOWN = 0x8
SW_THERMAL_SLOWDOWN = 0x20
HW_THERMAL_SLOWDOWN = 0x40
HW_POWER_BRAKE = 0x80
GPU_IDLE = 0x1


@dataclass(frozen=True)
class Phase:
    """A stretch of constant device state."""

    duration_s: float
    power_w: float
    temp_c: float = 60.0
    mem_temp_c: float = 70.0
    sm_clock_mhz: float = 1980.0
    mem_clock_mhz: float = 2619.0
    utilisation_pct: int = 100
    reasons: int = 0
    """NVML clock-event reason bitmask (the AMD fake maps it to violation flags)."""


class ScriptedTrace:
    """Piecewise-constant device state that repeats, on `time.monotonic`'s clock.

    Args:
        phases: The stretches, played in order and looped.
        start_s: Time zero of the trace (default: now).
    """

    def __init__(self, phases: Sequence[Phase], *, start_s: float | None = None) -> None:
        if not phases:
            raise ValueError("a ScriptedTrace needs at least one Phase")
        self.phases = list(phases)
        self.period_s = sum(p.duration_s for p in self.phases)
        self.loop_energy_j = sum(p.power_w * p.duration_s for p in self.phases)
        self.start_s = time.monotonic() if start_s is None else start_s

    @classmethod
    def constant(cls, power_w: float, **state: Any) -> ScriptedTrace:
        """A device that has been in one state for a minute already (so averages are steady)."""
        return cls([Phase(3600.0, power_w, **state)], start_s=time.monotonic() - 60.0)

    def elapsed_s(self, now_s: float | None = None) -> float:
        return (time.monotonic() if now_s is None else now_s) - self.start_s

    def at(self, now_s: float | None = None) -> Phase:
        position_s = self.elapsed_s(now_s) % self.period_s
        for phase in self.phases:
            if position_s < phase.duration_s:
                return phase
            position_s -= phase.duration_s
        return self.phases[-1]

    def energy_j(self, now_s: float | None = None) -> float:
        """Exact energy since time zero."""
        loops, position_s = divmod(max(0.0, self.elapsed_s(now_s)), self.period_s)
        energy_j = loops * self.loop_energy_j
        for phase in self.phases:
            step_s = min(position_s, phase.duration_s)
            energy_j += phase.power_w * step_s
            position_s -= step_s
            if position_s <= 0:
                break
        return energy_j

    def mean_power_w(self, begin_s: float, end_s: float) -> float:
        """Exact mean power between two `time.monotonic` instants."""
        return (self.energy_j(end_s) - self.energy_j(begin_s)) / (end_s - begin_s)


def _install(monkeypatch: Any, name: str, module: ModuleType) -> ModuleType:
    monkeypatch.setitem(sys.modules, name, module)
    return module


def install_fake_pynvml(monkeypatch: Any, gpus: Sequence[Any], **options: Any) -> ModuleType:
    """Make `import pynvml` return the fake, configured with `gpus` (`fake_pynvml.FakeGpu`)."""
    from collectors.telemetry.nvml import nvml_available
    from fakes import fake_pynvml

    fake_pynvml.configure(gpus, **options)
    nvml_available.cache_clear()
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    return _install(monkeypatch, "pynvml", fake_pynvml)


def install_fake_amdsmi(monkeypatch: Any, gpus: Sequence[Any], **options: Any) -> ModuleType:
    """Make `import amdsmi` return the fake, configured with `gpus` (`fake_amdsmi.FakeGcd`)."""
    from collectors.telemetry.amdsmi import amdsmi_available
    from fakes import fake_amdsmi

    fake_amdsmi.configure(gpus, **options)
    amdsmi_available.cache_clear()
    return _install(monkeypatch, "amdsmi", fake_amdsmi)
