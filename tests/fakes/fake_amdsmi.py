"""A fake of the `amdsmi` Python package (7.0.2): the functions the AMD SMI sampler uses, with
the real names, signatures, dict keys, enums and exceptions (`AmdSmiLibraryException` with
`get_error_code()`, `AmdSmiParameterException` for a handle that is not a processor handle).

Like the real library: calls before `amdsmi_init()` fail (AMDSMI_STATUS_NOT_INIT); power comes
in W with "N/A" where a part does not report it, and an MI250's odd GCD reports "N/A" for
every power key (its package's power is on the even GCD); temperatures are °C; the energy
accumulator counts ticks of `counter_resolution` µJ and wraps at its bit width.
"""

from __future__ import annotations

import ctypes
import time
from collections import Counter
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

from fakes import (
    HW_POWER_BRAKE,
    HW_SLOWDOWN,
    HW_THERMAL_SLOWDOWN,
    SW_POWER_CAP,
    SW_THERMAL_SLOWDOWN,
    ScriptedTrace,
)

AMDSMI_STATUS_SUCCESS = 0
AMDSMI_STATUS_INVAL = 1
AMDSMI_STATUS_NOT_SUPPORTED = 2
AMDSMI_STATUS_RETRY = 9
AMDSMI_STATUS_NO_PERM = 10
AMDSMI_STATUS_INIT_ERROR = 18
AMDSMI_STATUS_NOT_INIT = 32
_NA = "N/A"

amdsmi_processor_handle = ctypes.c_void_p


class AmdSmiException(Exception):
    """Base of every amdsmi error."""


class AmdSmiLibraryException(AmdSmiException):
    def __init__(self, err_code: int) -> None:
        super().__init__(err_code)
        self.err_code = err_code
        self.err_info = f"AMDSMI_STATUS_{err_code}"

    def get_error_code(self) -> int:
        return self.err_code

    def get_error_info(self) -> str:
        return self.err_info

    def __str__(self) -> str:
        return f"Error code:\n\t{self.err_code} | {self.err_info}"


class AmdSmiRetryException(AmdSmiLibraryException):
    def __init__(self) -> None:
        super().__init__(AMDSMI_STATUS_RETRY)


class AmdSmiTimeoutException(AmdSmiLibraryException):
    def __init__(self) -> None:
        super().__init__(8)


class AmdSmiParameterException(AmdSmiException):
    def __init__(self, received_value: Any, expected_type: Any, msg: str | None = None) -> None:
        super().__init__(msg or f"Invalid parameter: {received_value!r}, expected "
                                f"{expected_type}")


class AmdSmiInitFlags(IntEnum):
    INIT_ALL_PROCESSORS = 0xFFFFFFFF
    INIT_AMD_CPUS = 1 << 0
    INIT_AMD_GPUS = 1 << 1
    INIT_NON_AMD_CPUS = 1 << 2
    INIT_NON_AMD_GPUS = 1 << 3


class AmdSmiTemperatureType(IntEnum):
    EDGE = 0
    HOTSPOT = 1
    JUNCTION = 1
    VRAM = 2
    HBM_0 = 3
    HBM_1 = 4
    HBM_2 = 5
    HBM_3 = 6
    PLX = 7


class AmdSmiTemperatureMetric(IntEnum):
    CURRENT = 0
    MAX = 1
    MIN = 2
    CRITICAL = 5
    EMERGENCY = 7


class AmdSmiClkType(IntEnum):
    SYS = 0
    GFX = 0
    DF = 1
    DCEF = 2
    SOC = 3
    MEM = 4
    PCIE = 5


@dataclass
class FakeGcd:
    """One scripted AMD GPU (a GCD on MI250)."""

    trace: ScriptedTrace
    market_name: str = "AMD Instinct MI300X"
    power_key: str = "current_socket_power"
    """Which power key reports (MI300+: current; MI200 and earlier: average_socket_power)."""
    secondary: bool = False
    """An MI250's odd GCD: every power key reads "N/A"."""
    unsupported: frozenset[str] = frozenset()
    """Any of edge, hotspot, vram, energy, activity, violation, metrics, clock."""
    energy_bits: int = 64
    energy_start_ticks: int = 0
    counter_resolution_uj: float = 15.259
    """The MI300 documentation's "15.3 uJ" resolution."""


class _State:
    def __init__(self, gpus: list[FakeGcd]) -> None:
        self.gpus = gpus
        self.initialised = False
        self.calls: Counter[str] = Counter()
        self.handles = [amdsmi_processor_handle(0x1000 + i) for i in range(len(gpus))]


_state = _State([])


def configure(gpus: list[FakeGcd]) -> None:
    """Reset the fake: these GCDs (in BDF order), not initialised."""
    global _state
    _state = _State(list(gpus))


def calls() -> Counter[str]:
    return _state.calls


def _enter(name: str) -> None:
    _state.calls[name] += 1
    if not _state.initialised:
        raise AmdSmiLibraryException(AMDSMI_STATUS_NOT_INIT)


def _gcd(handle: Any, feature: str | None = None) -> FakeGcd:
    if not isinstance(handle, amdsmi_processor_handle):
        raise AmdSmiParameterException(handle, amdsmi_processor_handle)
    index = next((i for i, h in enumerate(_state.handles) if h.value == handle.value), None)
    if index is None:
        raise AmdSmiLibraryException(AMDSMI_STATUS_INVAL)
    gcd = _state.gpus[index]
    if feature in gcd.unsupported:
        raise AmdSmiLibraryException(AMDSMI_STATUS_NOT_SUPPORTED)
    return gcd


def amdsmi_init(flag: AmdSmiInitFlags = AmdSmiInitFlags.INIT_AMD_GPUS) -> None:
    _state.calls["amdsmi_init"] += 1
    _state.initialised = True


def amdsmi_shut_down() -> None:
    _enter("amdsmi_shut_down")
    _state.initialised = False


def amdsmi_get_processor_handles() -> list[Any]:
    _enter("amdsmi_get_processor_handles")
    return list(_state.handles)


def amdsmi_get_gpu_asic_info(processor_handle: Any) -> dict[str, Any]:
    _enter("amdsmi_get_gpu_asic_info")
    return {"market_name": _gcd(processor_handle).market_name, "vendor_id": "0x1002"}


def amdsmi_get_power_info(processor_handle: Any) -> dict[str, Any]:
    _enter("amdsmi_get_power_info")
    gcd = _gcd(processor_handle)
    info: dict[str, Any] = {"socket_power": _NA, "current_socket_power": _NA,
                            "average_socket_power": _NA, "gfx_voltage": _NA,
                            "soc_voltage": _NA, "mem_voltage": _NA, "power_limit": 560}
    if not gcd.secondary:
        watts = int(gcd.trace.at().power_w)
        info.update({"socket_power": watts, gcd.power_key: watts})
    return info


def amdsmi_get_temp_metric(processor_handle: Any, sensor_type: AmdSmiTemperatureType,
                           metric: AmdSmiTemperatureMetric) -> int:
    _enter("amdsmi_get_temp_metric")
    names = {AmdSmiTemperatureType.EDGE: "edge", AmdSmiTemperatureType.HOTSPOT: "hotspot",
             AmdSmiTemperatureType.VRAM: "vram"}
    gcd = _gcd(processor_handle, names.get(sensor_type, "hbm"))
    if metric != AmdSmiTemperatureMetric.CURRENT:
        raise AmdSmiLibraryException(AMDSMI_STATUS_NOT_SUPPORTED)
    phase = gcd.trace.at()
    if sensor_type == AmdSmiTemperatureType.EDGE:
        return int(phase.temp_c) - 8  # edge runs cooler than the junction
    if sensor_type == AmdSmiTemperatureType.HOTSPOT:
        return int(phase.temp_c)
    return int(phase.mem_temp_c)


def amdsmi_get_clock_info(processor_handle: Any, clock_type: AmdSmiClkType) -> dict[str, Any]:
    _enter("amdsmi_get_clock_info")
    phase = _gcd(processor_handle, "clock").trace.at()
    mhz = phase.sm_clock_mhz if clock_type == AmdSmiClkType.GFX else phase.mem_clock_mhz
    return {"clk": int(mhz), "min_clk": 500, "max_clk": 2100, "clk_locked": False,
            "clk_deep_sleep": False}


def amdsmi_get_gpu_activity(processor_handle: Any) -> dict[str, Any]:
    _enter("amdsmi_get_gpu_activity")
    phase = _gcd(processor_handle, "activity").trace.at()
    return {"gfx_activity": phase.utilisation_pct, "umc_activity": phase.utilisation_pct // 2,
            "mm_activity": _NA}


def amdsmi_get_energy_count(processor_handle: Any) -> dict[str, Any]:
    _enter("amdsmi_get_energy_count")
    gcd = _gcd(processor_handle, "energy")
    ticks = 0 if gcd.secondary else gcd.energy_start_ticks + int(
        gcd.trace.energy_j() * 1e6 / gcd.counter_resolution_uj)
    return {"energy_accumulator": ticks % 2**gcd.energy_bits,
            "counter_resolution": gcd.counter_resolution_uj,
            "timestamp": time.monotonic_ns()}


def amdsmi_get_violation_status(processor_handle: Any) -> dict[str, Any]:
    _enter("amdsmi_get_violation_status")
    reasons = _gcd(processor_handle, "violation").trace.at().reasons
    power = bool(reasons & (SW_POWER_CAP | HW_POWER_BRAKE))
    thermal = bool(reasons & (SW_THERMAL_SLOWDOWN | HW_THERMAL_SLOWDOWN))
    status: dict[str, Any] = {"reference_timestamp": time.monotonic_ns(),
                              "violation_timestamp": time.monotonic_ns(), "acc_counter": 1}
    for name, active in (("prochot_thrm", False), ("ppt_pwr", power),
                         ("socket_thrm", thermal), ("vr_thrm", False), ("hbm_thrm", False),
                         ("gfx_clk_below_host_limit", False)):
        status[f"acc_{name}"] = int(active)
        status[f"per_{name}"] = 100 if active else 0
        status[f"active_{name}"] = active
    return status


def amdsmi_get_gpu_metrics_info(processor_handle: Any) -> dict[str, Any]:
    _enter("amdsmi_get_gpu_metrics_info")
    gcd = _gcd(processor_handle, "metrics")
    phase = gcd.trace.at()
    watts = _NA if gcd.secondary else int(phase.power_w)
    throttled = bool(phase.reasons & (SW_POWER_CAP | HW_SLOWDOWN | SW_THERMAL_SLOWDOWN
                                      | HW_THERMAL_SLOWDOWN | HW_POWER_BRAKE))
    return {"temperature_edge": int(phase.temp_c) - 8, "temperature_hotspot": int(phase.temp_c),
            "temperature_mem": int(phase.mem_temp_c), "current_socket_power": watts,
            "average_socket_power": watts, "current_gfxclk": int(phase.sm_clock_mhz),
            "current_uclk": int(phase.mem_clock_mhz), "throttle_status": throttled,
            "indep_throttle_status": throttled}
