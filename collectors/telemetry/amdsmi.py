"""AMD GPUs through AMD SMI's Python interface (`amdsmi`, imported only when used).

Checked against amdsmi 7.0.2 (`amdsmi_interface.py`): power info in W (`current_socket_power`
on MI300+, `average_socket_power` on MI200 and earlier, "N/A" where unsupported), temperatures
in °C from `amdsmi_get_temp_metric`, clocks in MHz, the energy accumulator times its
resolution in µJ, and `amdsmi_get_violation_status` for power/thermal throttling (MI300-class;
elsewhere the cause-less `throttle_status` of the GPU metrics).

An MI250(X) package shows up as two GCDs; only the even one reports power, for both dies
(ROCm/rocm_smi_lib#160). Its samples carry `power_devices=2` and the odd GCD's power and energy
are None, so summaries count the package once and per-GPU figures halve it.

Samples carry the read time: the energy counter's own `timestamp` has no documented origin
that can be related to the host clock.
"""

from __future__ import annotations

import contextlib
import functools
import io
import time
from collections.abc import Callable
from typing import Any, ClassVar

from collectors.telemetry.base import (
    Sample,
    TelemetryError,
    TelemetrySampler,
    TelemetryUnavailable,
)

# amdsmi_status_t (amdsmi.h): NOT_SUPPORTED, NOT_YET_IMPLEMENTED, NO_PERM leave a field out.
_UNSUPPORTED_CODES = {2, 3, 10}
_UNSET = 0xFFFF
"""The wrapper reports 0xFFFF as "N/A"; the C header uses UINT32_MAX: treat both as unset."""
_HINT = ("AMD SMI needs ROCm's libamd_smi.so (set ROCM_PATH) and the amdsmi Python package of "
         "the same version (`pip install amdsmi==<ROCm version>`); otherwise use "
         "telemetry='nvml' or 'cpu'")


def import_amdsmi() -> Any:
    """Import `amdsmi`, which prints and raises when ROCm's library is missing.

    Raises:
        TelemetryUnavailable: The package or ROCm's library is missing or mismatched.
    """
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            import amdsmi
    except (ImportError, OSError, AttributeError, KeyError) as exc:
        raise TelemetryUnavailable(
            f"amdsmi is not usable ({type(exc).__name__}: {exc}); {_HINT}") from exc
    return amdsmi


def _init(smi: Any) -> None:
    try:
        smi.amdsmi_init()
    except smi.AmdSmiException as exc:
        raise TelemetryUnavailable(f"AMD SMI did not start ({exc}): is the amdgpu driver "
                                   f"loaded? {_HINT}") from exc


@functools.cache
def amdsmi_available() -> tuple[bool, str]:
    """Whether AMD SMI can sample here, and why not (cached; `.cache_clear()` resets)."""
    try:
        smi = import_amdsmi()
        _init(smi)
    except TelemetryUnavailable as exc:
        return False, str(exc)
    try:
        count = len(smi.amdsmi_get_processor_handles())
    except smi.AmdSmiException as exc:
        return False, f"AMD SMI started but could not list GPUs ({exc})"
    finally:
        smi.amdsmi_shut_down()
    if count == 0:
        return False, "AMD SMI started but sees no GPU"
    return True, f"AMD SMI sees {count} GPU(s)"


def _number(value: Any) -> float | None:
    """A reading, or None for "N/A", negative or unset sentinels."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return None if value < 0 or value >= _UNSET else float(value)


def _watts(value: Any) -> float | None:
    """Power in W; 0 W is the MI250 secondary die's placeholder, never a real reading."""
    watts = _number(value)
    return watts if watts else None


def _power(info: dict[str, Any] | None) -> tuple[float | None, float | None]:
    """(instantaneous, average) socket power from amdsmi_get_power_info. The unified
    `socket_power` (ROCm 7) is whichever of the two the part has, so it is only a fallback,
    and not claimed to be instantaneous."""
    if info is None:
        return None, None
    instant = _watts(info.get("current_socket_power"))
    average = _watts(info.get("average_socket_power"))
    if instant is None and average is None:
        average = _watts(info.get("socket_power"))
    return instant, average


class AmdSmiSampler(TelemetrySampler):
    """AMD GPUs via AMD SMI. `devices` index `amdsmi_get_processor_handles()` (BDF order).

    Args:
        energy_counter_bits: Width of the energy accumulator (64 in amdsmi.h); it sets where
            the counter wraps.
        **kwargs: `rate_hz`, `devices`, `max_buffer_samples` (see `TelemetrySampler`).
    """

    backend: ClassVar[str] = "amdsmi"

    def __init__(self, *, energy_counter_bits: int = 64, **kwargs: Any) -> None:
        self._energy_counter_bits = energy_counter_bits
        super().__init__(**kwargs)

    def _open(self, devices: list[int] | None) -> list[int]:
        smi = self._smi = import_amdsmi()
        _init(smi)
        try:
            handles = smi.amdsmi_get_processor_handles()
            chosen = list(range(len(handles))) if devices is None else list(devices)
            bad = [d for d in chosen if not 0 <= d < len(handles)]
            if not handles or bad:
                raise TelemetryUnavailable(f"AMD GPU index(es) {bad or chosen} not available: "
                                           f"AMD SMI sees {len(handles)} GPU(s)")
            self._handles = {d: handles[d] for d in chosen}
            self._unsupported: set[tuple[int, str]] = set()
            powered = [any(_power(self._call(i, "power", smi.amdsmi_get_power_info, h)))
                       for i, h in enumerate(handles)]
            # MI250: an odd GCD without power whose even sibling has it is the secondary die.
            self._secondary = {i for i in range(1, len(handles), 2)
                               if not powered[i] and powered[i - 1]}
            self._temps = {d: self._probe_temps(d) for d in chosen}
        except Exception:
            smi.amdsmi_shut_down()
            raise
        return chosen

    def _probe_temps(self, device: int) -> dict[str, Any]:
        """The temperature sensors this GPU answers, by Sample field."""
        kinds = self._smi.AmdSmiTemperatureType
        wanted = {"gpu_temp_c": kinds.HOTSPOT, "edge_temp_c": kinds.EDGE,
                  "mem_temp_c": kinds.VRAM}
        return {name: kind for name, kind in wanted.items()
                if self._temp(device, name, kind) is not None}

    def _temp(self, device: int, name: str, kind: Any) -> float | None:
        smi = self._smi
        return _number(self._call(device, name, smi.amdsmi_get_temp_metric,
                                  self._handles[device], kind,
                                  smi.AmdSmiTemperatureMetric.CURRENT))

    def _call(self, device: int, name: str, fn: Callable[..., Any], *args: Any) -> Any:
        """Call AMD SMI; None where unsupported (remembered) or busy this time."""
        smi = self._smi
        if (device, name) in self._unsupported:
            return None
        try:
            return fn(*args)
        except (smi.AmdSmiRetryException, smi.AmdSmiTimeoutException):
            return None  # busy: try again next poll
        except smi.AmdSmiLibraryException as exc:
            if exc.get_error_code() in _UNSUPPORTED_CODES:
                self._unsupported.add((device, name))
                return None
            raise TelemetryError(f"AMD SMI {name} failed on GPU {device}: {exc}") from exc

    def _read(self) -> list[Sample]:
        return [self._read_device(d) for d in self.devices]

    def _energy_j(self, device: int) -> tuple[float | None, float | None]:
        """(counter in J, wrap value in J); the key was `power` before amdsmi 6.2.1."""
        count = self._call(device, "energy", self._smi.amdsmi_get_energy_count,
                           self._handles[device])
        if not count:
            return None, None
        ticks = count.get("energy_accumulator", count.get("power"))
        resolution_uj = _number(count.get("counter_resolution"))
        if not isinstance(ticks, int) or not resolution_uj:
            return None, None
        return ticks * resolution_uj / 1e6, 2**self._energy_counter_bits * resolution_uj / 1e6

    def _throttle(self, device: int) -> tuple[bool | None, bool | None, bool | None]:
        """(power, thermal, cause-less) from the violation status, else the GPU metrics."""
        smi, handle = self._smi, self._handles[device]
        status = self._call(device, "violation", smi.amdsmi_get_violation_status, handle)
        if status is not None:
            def active(*keys: str) -> bool | None:
                flags = [status.get(k) for k in keys if isinstance(status.get(k), bool)]
                return any(flags) if flags else None
            return (active("active_ppt_pwr"),
                    active("active_socket_thrm", "active_hbm_thrm", "active_vr_thrm",
                           "active_prochot_thrm"), None)
        metrics = self._call(device, "metrics", smi.amdsmi_get_gpu_metrics_info, handle)
        flag = None if metrics is None else metrics.get("throttle_status")
        return None, None, flag if isinstance(flag, bool) else None

    def _read_device(self, device: int) -> Sample:
        smi, handle, call = self._smi, self._handles[device], self._call
        read_s = time.monotonic()
        secondary = device in self._secondary
        instant_w, avg_w = (None, None) if secondary else _power(
            call(device, "power", smi.amdsmi_get_power_info, handle))
        energy_j, wrap_j = (None, None) if secondary else self._energy_j(device)
        temps = {name: self._temp(device, name, kind)
                 for name, kind in self._temps[device].items()}
        clocks = {name: call(device, name, smi.amdsmi_get_clock_info, handle, kind)
                  for name, kind in (("sm_clock_mhz", smi.AmdSmiClkType.GFX),
                                     ("mem_clock_mhz", smi.AmdSmiClkType.MEM))}
        activity = call(device, "activity", smi.amdsmi_get_gpu_activity, handle)
        busy_pct = None if activity is None else _number(activity.get("gfx_activity"))
        power, thermal, other = self._throttle(device)
        return Sample(
            device=device, timestamp_s=read_s, read_time_s=read_s,
            power_instant_w=instant_w, power_avg_w=avg_w,
            energy_j=energy_j, energy_wrap_j=wrap_j, **temps,
            sm_clock_mhz=None if clocks["sm_clock_mhz"] is None
            else _number(clocks["sm_clock_mhz"].get("clk")),
            mem_clock_mhz=None if clocks["mem_clock_mhz"] is None
            else _number(clocks["mem_clock_mhz"].get("clk")),
            utilisation=None if busy_pct is None else busy_pct / 100,
            throttle_power=power, throttle_thermal=thermal, throttle_hw_slowdown=other,
            power_devices=2 if device + 1 in self._secondary else 1,
        )

    def _shutdown(self) -> None:
        with contextlib.suppress(self._smi.AmdSmiException):
            self._smi.amdsmi_shut_down()
