"""A fake of nvidia-ml-py's `pynvml` module (13.615.71): the functions the NVML sampler uses,
with the real names, signatures, return types (ints, ctypes structs and arrays) and errors
(`NVMLError` mapped to `NVMLError_*` subclasses, `.value` the NVML return code).

Like the real library: every call before `nvmlInit()` raises NVML_ERROR_UNINITIALIZED;
`nvmlInit()` without a driver raises NVML_ERROR_LIBRARY_NOT_FOUND; unsupported functions raise
NVML_ERROR_NOT_SUPPORTED and unsupported field ids come back with that `nvmlReturn`;
`nvmlDeviceGetPowerUsage` is the 1-s average (Hopper); field timestamps are µs since the epoch.
Device state comes from each `FakeGpu`'s `ScriptedTrace`.
"""

from __future__ import annotations

import ctypes
import string
import sys
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

from fakes import ScriptedTrace

NVML_SUCCESS = 0
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25
NVML_ERROR_UNKNOWN = 999

NVML_TEMPERATURE_GPU = 0
NVML_CLOCK_GRAPHICS = 0
NVML_CLOCK_SM = 1
NVML_CLOCK_MEM = 2
NVML_FI_DEV_MEMORY_TEMP = 82
NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION = 83
NVML_FI_DEV_POWER_AVERAGE = 185
NVML_FI_DEV_POWER_INSTANT = 186
NVML_POWER_SCOPE_GPU = 0
NVML_POWER_SCOPE_MODULE = 1
NVML_POWER_SCOPE_MEMORY = 2
NVML_VALUE_TYPE_DOUBLE = 0
NVML_VALUE_TYPE_UNSIGNED_INT = 1
NVML_VALUE_TYPE_UNSIGNED_LONG = 2
NVML_VALUE_TYPE_UNSIGNED_LONG_LONG = 3
nvmlTemperature_v1 = 0x100000C

nvmlClocksEventReasonGpuIdle = 0x1
nvmlClocksEventReasonApplicationsClocksSetting = 0x2
nvmlClocksEventReasonSwPowerCap = 0x4
nvmlClocksEventReasonHwSlowdown = 0x8
nvmlClocksEventReasonSyncBoost = 0x10
nvmlClocksEventReasonSwThermalSlowdown = 0x20
nvmlClocksEventReasonHwThermalSlowdown = 0x40
nvmlClocksEventReasonHwPowerBrakeSlowdown = 0x80
nvmlClocksThrottleReasonSwPowerCap = nvmlClocksEventReasonSwPowerCap
nvmlClocksThrottleReasonHwSlowdown = nvmlClocksEventReasonHwSlowdown


class NVMLError(Exception):
    """As in pynvml: `NVMLError(code)` returns the matching `NVMLError_*` subclass."""

    _valClassMapping: dict[int, type] = {}
    _errcode_to_string = {
        NVML_ERROR_UNINITIALIZED: "Uninitialized",
        NVML_ERROR_INVALID_ARGUMENT: "Invalid Argument",
        NVML_ERROR_NOT_SUPPORTED: "Not Supported",
        NVML_ERROR_NO_PERMISSION: "Insufficient Permissions",
        NVML_ERROR_LIBRARY_NOT_FOUND: "NVML Shared Library Not Found",
        NVML_ERROR_FUNCTION_NOT_FOUND: "Function Not Found",
        NVML_ERROR_GPU_IS_LOST: "GPU is lost",
        NVML_ERROR_ARGUMENT_VERSION_MISMATCH: "Argument Version Mismatch",
        NVML_ERROR_UNKNOWN: "Unknown Error",
    }

    def __new__(typ, value: int) -> NVMLError:  # noqa: N804 - pynvml's own signature
        if typ == NVMLError:
            typ = NVMLError._valClassMapping.get(value, typ)
        obj = Exception.__new__(typ)
        obj.value = value
        return obj

    def __str__(self) -> str:
        return self._errcode_to_string.get(self.value, f"NVML Error with code {self.value}")

    def __eq__(self, other: object) -> bool:
        return self.value == other.value  # type: ignore[attr-defined]

    __hash__ = None  # type: ignore[assignment]  # pynvml defines __eq__ only


def _make_error_classes() -> None:
    module = sys.modules[__name__]
    for name in [n for n in dir(module) if n.startswith("NVML_ERROR_")]:
        code = getattr(module, name)
        class_name = "NVMLError_" + string.capwords(
            name.replace("NVML_ERROR_", ""), "_").replace("_", "")

        def new(typ: type, *args: Any, _code: int = code) -> NVMLError:
            return NVMLError.__new__(typ, _code)

        cls = type(class_name, (NVMLError,), {"__new__": new})
        setattr(module, class_name, cls)
        NVMLError._valClassMapping[code] = cls


_make_error_classes()


class c_nvmlValue_t(ctypes.Union):  # noqa: N801 - pynvml's names
    _fields_ = [("dVal", ctypes.c_double), ("uiVal", ctypes.c_uint), ("ulVal", ctypes.c_ulong),
                ("ullVal", ctypes.c_ulonglong), ("sllVal", ctypes.c_longlong),
                ("siVal", ctypes.c_int), ("usVal", ctypes.c_ushort)]


class c_nvmlFieldValue_t(ctypes.Structure):  # noqa: N801
    _fields_ = [("fieldId", ctypes.c_uint32), ("scopeId", ctypes.c_uint32),
                ("timestamp", ctypes.c_int64), ("latencyUsec", ctypes.c_int64),
                ("valueType", ctypes.c_uint), ("nvmlReturn", ctypes.c_uint),
                ("value", c_nvmlValue_t)]


class c_nvmlUtilization_t(ctypes.Structure):  # noqa: N801
    _fields_ = [("gpu", ctypes.c_uint), ("memory", ctypes.c_uint)]


class struct_c_nvmlDevice_t(ctypes.Structure):  # noqa: N801
    _fields_ = [("index", ctypes.c_uint)]  # opaque in NVML; the fake keeps its index here


c_nvmlDevice_t = ctypes.POINTER(struct_c_nvmlDevice_t)


@dataclass
class FakeGpu:
    """One scripted GPU."""

    trace: ScriptedTrace
    name: str = "NVIDIA H200"
    unsupported: frozenset[str] = frozenset()
    """Any of power_instant, power_average, mem_temp, energy, power_usage, temperature,
    clocks, clocks_event_reasons, utilization, field_values."""
    energy_start_mj: int = 987_654_321
    """Counter value (mJ since driver load) at the trace's time zero."""
    energy_reset_at_s: float | None = None
    """Trace time at which the counter restarts from zero (a driver reload)."""
    field_lag_s: float = 0.0
    """Field values are the driver's reading from this long ago, timestamped then."""
    lost_after_s: float | None = None
    """Trace time after which every call raises NVML_ERROR_GPU_IS_LOST."""


class _State:
    def __init__(self, gpus: list[FakeGpu], library_found: bool) -> None:
        self.gpus = gpus
        self.library_found = library_found
        self.refcount = 0
        self.calls: Counter[str] = Counter()
        self.structs = [struct_c_nvmlDevice_t(i) for i in range(len(gpus))]


_state = _State([], library_found=False)


def configure(gpus: list[FakeGpu], *, library_found: bool = True) -> None:
    """Reset the fake: these GPUs, not initialised, no calls counted."""
    global _state
    _state = _State(list(gpus), library_found)


def calls() -> Counter[str]:
    """How often each function was called since `configure`."""
    return _state.calls


def _error(code: int) -> NVMLError:
    return NVMLError(code)


def _enter(name: str) -> None:
    _state.calls[name] += 1
    if _state.refcount == 0:
        raise _error(NVML_ERROR_UNINITIALIZED)


def _gpu(handle: Any, feature: str | None = None) -> FakeGpu:
    if not isinstance(handle, c_nvmlDevice_t) or not handle:
        raise _error(NVML_ERROR_INVALID_ARGUMENT)
    gpu = _state.gpus[handle.contents.index]
    if gpu.lost_after_s is not None and gpu.trace.elapsed_s() >= gpu.lost_after_s:
        raise _error(NVML_ERROR_GPU_IS_LOST)
    if feature in gpu.unsupported:
        raise _error(NVML_ERROR_NOT_SUPPORTED)
    return gpu


def nvmlErrorString(result: int) -> str:  # noqa: N802
    return NVMLError._errcode_to_string.get(result, "Unknown Error")


def nvmlInitWithFlags(flags: int) -> None:  # noqa: N802
    _state.calls["nvmlInit"] += 1
    if not _state.library_found:
        raise _error(NVML_ERROR_LIBRARY_NOT_FOUND)
    _state.refcount += 1


def nvmlInit() -> None:  # noqa: N802
    nvmlInitWithFlags(0)


def nvmlShutdown() -> None:  # noqa: N802
    _enter("nvmlShutdown")
    _state.refcount -= 1


def nvmlDeviceGetCount() -> int:  # noqa: N802
    _enter("nvmlDeviceGetCount")
    return ctypes.c_uint(len(_state.gpus)).value


def nvmlDeviceGetHandleByIndex(index: int) -> Any:  # noqa: N802
    _enter("nvmlDeviceGetHandleByIndex")
    if not 0 <= index < len(_state.gpus):
        raise _error(NVML_ERROR_INVALID_ARGUMENT)
    return ctypes.pointer(_state.structs[index])


def nvmlDeviceGetName(handle: Any) -> str:  # noqa: N802
    _enter("nvmlDeviceGetName")
    return _gpu(handle).name


def nvmlDeviceGetUUID(handle: Any) -> str:  # noqa: N802
    _enter("nvmlDeviceGetUUID")
    _gpu(handle)
    return f"GPU-{handle.contents.index:08x}-fake-0000-0000-000000000000"


def _energy_mj(gpu: FakeGpu, now_s: float) -> int:
    trace = gpu.trace
    reset = gpu.energy_reset_at_s
    if reset is not None and trace.elapsed_s(now_s) >= reset:
        return int((trace.energy_j(now_s) - trace.energy_j(trace.start_s + reset)) * 1000)
    return gpu.energy_start_mj + int(trace.energy_j(now_s) * 1000)


def nvmlDeviceGetTotalEnergyConsumption(handle: Any) -> int:  # noqa: N802
    _enter("nvmlDeviceGetTotalEnergyConsumption")
    return ctypes.c_uint64(_energy_mj(_gpu(handle, "energy"), time.monotonic())).value


def _average_mw(gpu: FakeGpu, now_s: float) -> int:
    return int(gpu.trace.mean_power_w(now_s - 1.0, now_s) * 1000)


def nvmlDeviceGetPowerUsage(handle: Any) -> int:  # noqa: N802
    _enter("nvmlDeviceGetPowerUsage")
    gpu = _gpu(handle, "power_usage")
    return ctypes.c_uint(_average_mw(gpu, time.monotonic())).value


def nvmlDeviceGetTemperatureV(handle: Any, sensor: int,  # noqa: N802
                              version: int = nvmlTemperature_v1) -> int:
    _enter("nvmlDeviceGetTemperatureV")
    if version != nvmlTemperature_v1:
        raise _error(NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
    gpu = _gpu(handle, "temperature")
    if sensor != NVML_TEMPERATURE_GPU:
        raise _error(NVML_ERROR_INVALID_ARGUMENT)
    return ctypes.c_int(int(gpu.trace.at().temp_c)).value


def nvmlDeviceGetTemperature(handle: Any, sensor: int) -> int:  # noqa: N802
    _enter("nvmlDeviceGetTemperature")
    gpu = _gpu(handle, "temperature")
    if sensor != NVML_TEMPERATURE_GPU:
        raise _error(NVML_ERROR_INVALID_ARGUMENT)
    return ctypes.c_uint(int(gpu.trace.at().temp_c)).value


def nvmlDeviceGetClockInfo(handle: Any, type: int) -> int:  # noqa: N802, A002 - pynvml's name
    _enter("nvmlDeviceGetClockInfo")
    phase = _gpu(handle, "clocks").trace.at()
    clocks = {NVML_CLOCK_GRAPHICS: phase.sm_clock_mhz, NVML_CLOCK_SM: phase.sm_clock_mhz,
              NVML_CLOCK_MEM: phase.mem_clock_mhz}
    if type not in clocks:
        raise _error(NVML_ERROR_INVALID_ARGUMENT)
    return ctypes.c_uint(int(clocks[type])).value


def nvmlDeviceGetCurrentClocksEventReasons(handle: Any) -> int:  # noqa: N802
    _enter("nvmlDeviceGetCurrentClocksEventReasons")
    return ctypes.c_ulonglong(_gpu(handle, "clocks_event_reasons").trace.at().reasons).value


def nvmlDeviceGetCurrentClocksThrottleReasons(handle: Any) -> int:  # noqa: N802
    _enter("nvmlDeviceGetCurrentClocksThrottleReasons")
    return ctypes.c_ulonglong(_gpu(handle, "clocks_event_reasons").trace.at().reasons).value


def nvmlDeviceGetUtilizationRates(handle: Any) -> c_nvmlUtilization_t:  # noqa: N802
    _enter("nvmlDeviceGetUtilizationRates")
    phase = _gpu(handle, "utilization").trace.at()
    return c_nvmlUtilization_t(gpu=phase.utilisation_pct, memory=phase.utilisation_pct // 2)


def _field(gpu: FakeGpu, value: c_nvmlFieldValue_t, now_s: float) -> None:
    """Fill one field value as the driver would, or set nvmlReturn to NOT_SUPPORTED."""
    measured_s = now_s - gpu.field_lag_s
    phase = gpu.trace.at(measured_s)
    readings = {
        NVML_FI_DEV_POWER_INSTANT: ("power_instant", NVML_VALUE_TYPE_UNSIGNED_INT, "uiVal",
                                    int(phase.power_w * 1000)),
        NVML_FI_DEV_POWER_AVERAGE: ("power_average", NVML_VALUE_TYPE_UNSIGNED_INT, "uiVal",
                                    _average_mw(gpu, measured_s)),
        NVML_FI_DEV_MEMORY_TEMP: ("mem_temp", NVML_VALUE_TYPE_UNSIGNED_INT, "uiVal",
                                  int(phase.mem_temp_c)),
        NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION: ("energy", NVML_VALUE_TYPE_UNSIGNED_LONG_LONG,
                                               "ullVal", _energy_mj(gpu, measured_s)),
    }
    reading = readings.get(value.fieldId)
    if reading is None or reading[0] in gpu.unsupported:
        value.nvmlReturn = NVML_ERROR_NOT_SUPPORTED
        return
    _, value.valueType, member, number = reading
    setattr(value.value, member, number)
    value.timestamp = int((time.time() - gpu.field_lag_s) * 1e6)
    value.latencyUsec = 0
    value.nvmlReturn = NVML_SUCCESS


def nvmlDeviceGetFieldValues(handle: Any, fieldIds: list[Any]) -> Any:  # noqa: N802, N803
    _enter("nvmlDeviceGetFieldValues")
    gpu = _gpu(handle, "field_values")
    values = (c_nvmlFieldValue_t * len(fieldIds))()
    now_s = time.monotonic()
    for i, field_id in enumerate(fieldIds):
        try:
            values[i].fieldId, values[i].scopeId = field_id
        except TypeError:
            values[i].fieldId = field_id
        _field(gpu, values[i], now_s)
    return values
