"""NVIDIA GPUs through NVML (`nvidia-ml-py`, module `pynvml`, imported only when used).

Per poll and GPU: one `nvmlDeviceGetFieldValues` call for instantaneous and 1-s average power
(NVML_FI_DEV_POWER_INSTANT / _AVERAGE) and memory temperature, then the energy counter, GPU
temperature, SM and memory clocks, clock-event reasons and utilisation. `NVMLError` is
translated in one place: NOT_SUPPORTED (and NO_PERMISSION, FUNCTION_NOT_FOUND) make the field
None from then on; anything else stops sampling with the error in the window's `Telemetry`.
"""

from __future__ import annotations

import functools
import os
import time
import warnings
from collections.abc import Callable
from typing import Any, ClassVar

from collectors.telemetry.base import (
    Sample,
    TelemetryError,
    TelemetrySampler,
    TelemetryUnavailable,
)

# Clock-event reason bits: the same values for nvmlClocksEventReason* and the deprecated
# nvmlClocksThrottleReason* names (NVML API reference, group nvmlClocksEventReasons).
SW_POWER_CAP = 0x4
HW_SLOWDOWN = 0x8
SW_THERMAL_SLOWDOWN = 0x20
HW_THERMAL_SLOWDOWN = 0x40
HW_POWER_BRAKE_SLOWDOWN = 0x80
POWER_REASONS = SW_POWER_CAP | HW_POWER_BRAKE_SLOWDOWN
THERMAL_REASONS = SW_THERMAL_SLOWDOWN | HW_THERMAL_SLOWDOWN

# NVML return codes after which a field is left out for good (pynvml.py 13.615.71).
_NOT_SUPPORTED, _NO_PERMISSION, _FUNCTION_NOT_FOUND = 3, 4, 13
_FIELD_VALUE_ATTR = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal",
                     6: "usVal"}
"""nvmlValueType_t -> member of the c_nvmlValue_t union holding the value."""
_INSTALL_HINT = ("install it with `pip install nvidia-ml-py` (or advisor[collect]), or use "
                 "telemetry='cpu'")


def decode_clock_event_reasons(mask: int) -> tuple[bool, bool, bool]:
    """Split NVML's clock-event bitmask into (power, thermal, hw_slowdown).

    Power: SW power cap or HW power brake. Thermal: SW or HW thermal slowdown. HW slowdown
    has no single cause (temperature, power brake or the power fast-trigger), so it is kept
    apart. GPU idle, application clocks, sync boost and display clocks are not throttling.
    """
    return bool(mask & POWER_REASONS), bool(mask & THERMAL_REASONS), bool(mask & HW_SLOWDOWN)


def import_pynvml() -> Any:
    """Import `pynvml` from nvidia-ml-py.

    Raises:
        TelemetryUnavailable: nvidia-ml-py is not installed.
    """
    try:
        with warnings.catch_warnings():
            # The deprecated `pynvml` package's import hook warns even for nvidia-ml-py's module.
            warnings.filterwarnings("ignore", message="The pynvml package is deprecated",
                                    category=FutureWarning)
            import pynvml
    except ImportError as exc:
        raise TelemetryUnavailable(f"NVML telemetry needs nvidia-ml-py (module pynvml), which "
                                   f"is not importable ({exc}); {_INSTALL_HINT}") from exc
    return pynvml


def _init(nv: Any) -> None:
    try:
        nv.nvmlInit()
    except nv.NVMLError as exc:
        raise TelemetryUnavailable(f"NVML did not start ({exc}): no NVIDIA driver or GPU here; "
                                   "use telemetry='amdsmi' or 'cpu'") from exc


@functools.cache
def nvml_available() -> tuple[bool, str]:
    """Whether NVML can sample here, and why not (cached; `nvml_available.cache_clear()`)."""
    try:
        nv = import_pynvml()
        _init(nv)
    except TelemetryUnavailable as exc:
        return False, str(exc)
    try:
        count = nv.nvmlDeviceGetCount()
    except nv.NVMLError as exc:
        return False, f"NVML started but could not count GPUs ({exc})"
    finally:
        nv.nvmlShutdown()
    if count == 0:
        return False, "NVML started but sees no GPU"
    return True, f"NVML sees {count} GPU(s)"


def _visible_to_nvml(nv: Any, count: int) -> list[int]:
    """NVML index of each CUDA-visible device (CUDA_VISIBLE_DEVICES: indices or UUIDs)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return list(range(count))
    uuids: list[str] | None = None
    indices = []
    for entry in (e.strip() for e in visible.split(",") if e.strip()):
        if entry.isdigit():
            indices.append(int(entry))
            continue
        if uuids is None:
            uuids = [str(nv.nvmlDeviceGetUUID(nv.nvmlDeviceGetHandleByIndex(i)))
                     for i in range(count)]
        matches = [i for i, u in enumerate(uuids) if u.startswith(entry)]
        if len(matches) != 1:
            raise TelemetryUnavailable(f"CUDA_VISIBLE_DEVICES entry {entry!r} matches "
                                       f"{len(matches)} GPU UUIDs; give indices or full UUIDs")
        indices.append(matches[0])
    return indices


class NvmlSampler(TelemetrySampler):
    """NVIDIA GPUs via NVML. `devices` are CUDA indices (after CUDA_VISIBLE_DEVICES)."""

    backend: ClassVar[str] = "nvml"

    def _open(self, devices: list[int] | None) -> list[int]:
        nv = self._nv = import_pynvml()
        _init(nv)
        try:
            count = nv.nvmlDeviceGetCount()
            visible = _visible_to_nvml(nv, count)
            chosen = list(range(len(visible))) if devices is None else list(devices)
            bad = [d for d in chosen if not 0 <= d < len(visible) or visible[d] >= count]
            if bad:
                raise TelemetryUnavailable(
                    f"GPU index(es) {bad} not available: NVML sees {count} GPU(s), "
                    f"{len(visible)} visible to CUDA; use indices 0-{len(visible) - 1}")
            self._handles = {d: nv.nvmlDeviceGetHandleByIndex(visible[d]) for d in chosen}
            self._unsupported: set[tuple[int, str]] = set()
            self._fields: dict[int, list[tuple[str, int]]] = {}
            self.power_source: dict[int, str] = {}
            # Newer name first; the older one where the bindings or the driver lack it.
            self._temperature = self._resolve("nvmlDeviceGetTemperatureV",
                                              "nvmlDeviceGetTemperature")
            self._reasons = self._resolve("nvmlDeviceGetCurrentClocksEventReasons",
                                          "nvmlDeviceGetCurrentClocksThrottleReasons")
            for d in chosen:
                self._probe_fields(d)
        except Exception:
            nv.nvmlShutdown()
            raise
        return chosen

    def _resolve(self, *names: str) -> list[tuple[str, Callable[..., Any]]]:
        """Those of `names` these bindings have, in order."""
        return [(n, getattr(self._nv, n)) for n in names if hasattr(self._nv, n)]

    def _call_first(self, device: int, functions: list[tuple[str, Callable[..., Any]]],
                    *args: Any) -> Any:
        """The first of `functions` the driver supports for this GPU, or None."""
        for name, fn in functions:
            value = self._call(device, name, fn, *args)
            if value is not None or (device, name) not in self._unsupported:
                return value
        return None

    def _probe_fields(self, device: int) -> None:
        """Keep the field ids this GPU answers; without the instant field, fall back to
        nvmlDeviceGetPowerUsage (a 1-s average on Ampere and newer, except GA100)."""
        nv = self._nv
        wanted = [("power_instant_w", nv.NVML_FI_DEV_POWER_INSTANT),
                  ("power_avg_w", nv.NVML_FI_DEV_POWER_AVERAGE),
                  ("mem_temp_c", nv.NVML_FI_DEV_MEMORY_TEMP)]
        values = self._call(device, "fields", nv.nvmlDeviceGetFieldValues,
                            self._handles[device], [fid for _, fid in wanted])
        ok = [] if values is None else [
            w for w, v in zip(wanted, values, strict=True) if v.nvmlReturn == nv.NVML_SUCCESS]
        self._fields[device] = ok
        has_instant = any(name == "power_instant_w" for name, _ in ok)
        self.power_source[device] = ("NVML_FI_DEV_POWER_INSTANT" if has_instant
                                     else "nvmlDeviceGetPowerUsage")

    def _call(self, device: int, name: str, fn: Callable[..., Any], *args: Any) -> Any:
        """Call NVML; None where the GPU or driver does not support `name` (remembered)."""
        if (device, name) in self._unsupported:
            return None
        try:
            return fn(*args)
        except self._nv.NVMLError as exc:
            if exc.value in (_NOT_SUPPORTED, _NO_PERMISSION, _FUNCTION_NOT_FOUND):
                self._unsupported.add((device, name))
                return None
            raise TelemetryError(f"NVML {name} failed on GPU {device}: {exc}") from exc

    def _read(self) -> list[Sample]:
        return [self._read_device(d) for d in self.devices]

    def _read_device(self, device: int) -> Sample:
        nv, handle, call = self._nv, self._handles[device], self._call
        read_s = time.monotonic()
        wall_to_mono_s = read_s - time.time()
        values: dict[str, Any] = {}
        timestamp_s = read_s
        fields = self._fields[device]
        result = call(device, "fields", nv.nvmlDeviceGetFieldValues, handle,
                      [fid for _, fid in fields]) if fields else None
        for (name, _), value in zip(fields, result or (), strict=False):
            if value.nvmlReturn != nv.NVML_SUCCESS:
                continue
            raw = getattr(value.value, _FIELD_VALUE_ATTR.get(value.valueType, "uiVal"))
            values[name] = raw / 1000 if name.startswith("power") else float(raw)
            if name == "power_instant_w" and value.timestamp > 0:  # µs since the epoch
                timestamp_s = value.timestamp / 1e6 + wall_to_mono_s
        if "power_instant_w" not in values:
            power_mw = call(device, "power_usage", nv.nvmlDeviceGetPowerUsage, handle)
            values["power_instant_w"] = None if power_mw is None else power_mw / 1000
        energy_mj = call(device, "energy", nv.nvmlDeviceGetTotalEnergyConsumption, handle)
        reasons = self._call_first(device, self._reasons, handle)
        power, thermal, hw = (None, None, None) if reasons is None else \
            decode_clock_event_reasons(reasons)
        util = call(device, "utilization", nv.nvmlDeviceGetUtilizationRates, handle)
        return Sample(
            device=device, timestamp_s=timestamp_s, read_time_s=read_s,
            power_instant_w=values.get("power_instant_w"),
            power_avg_w=values.get("power_avg_w"),
            energy_j=None if energy_mj is None else energy_mj / 1000,
            gpu_temp_c=self._call_first(device, self._temperature, handle,
                                        nv.NVML_TEMPERATURE_GPU),
            mem_temp_c=values.get("mem_temp_c"),
            sm_clock_mhz=call(device, "sm_clock", nv.nvmlDeviceGetClockInfo, handle,
                              nv.NVML_CLOCK_SM),
            mem_clock_mhz=call(device, "mem_clock", nv.nvmlDeviceGetClockInfo, handle,
                               nv.NVML_CLOCK_MEM),
            utilisation=None if util is None else util.gpu / 100,
            throttle_power=power, throttle_thermal=thermal, throttle_hw_slowdown=hw,
        )

    def _shutdown(self) -> None:
        try:
            self._nv.nvmlShutdown()
        except self._nv.NVMLError:
            pass  # already shut down elsewhere: nothing left to release
