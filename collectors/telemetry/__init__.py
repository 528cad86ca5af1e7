"""Power, thermal and clock telemetry behind one small interface.

    sampler = open_sampler("auto", rate_hz=20)
    sampler.begin_window("measure")
    ...  # the steps to measure
    t = sampler.end_window("measure")
    t.run_summary()   # the dataset's TELEMETRY_FIELDS; None where not measurable
    t.per_device      # one DeviceSummary per GPU
    sampler.close()

Backends: NVML (`nvidia-ml-py`), AMD SMI (`amdsmi`), the CPU (RAPL, /proc/stat), a recorded
trace (`replay:PATH`) and `none`. Vendor libraries are imported only when their sampler opens.
"""

from __future__ import annotations

from collectors.telemetry.amdsmi import AmdSmiSampler, amdsmi_available
from collectors.telemetry.base import (
    DEFAULT_RATE_HZ,
    MAX_RATE_HZ,
    MIN_RATE_HZ,
    NullSampler,
    Sample,
    Telemetry,
    TelemetryError,
    TelemetrySampler,
    TelemetryUnavailable,
    check_rate_hz,
)
from collectors.telemetry.cpu import CpuSampler
from collectors.telemetry.nvml import NvmlSampler, nvml_available
from collectors.telemetry.replay import ReplaySampler, read_trace, record_trace, write_trace
from collectors.telemetry.summary import DeviceSummary, run_summary, summarize_device

KINDS = ("auto", "nvml", "amdsmi", "cpu", "none", "replay:PATH")

__all__ = [
    "DEFAULT_RATE_HZ", "KINDS", "MAX_RATE_HZ", "MIN_RATE_HZ", "AmdSmiSampler", "CpuSampler",
    "DeviceSummary", "NullSampler", "NvmlSampler", "ReplaySampler", "Sample", "Telemetry",
    "TelemetryError", "TelemetrySampler", "TelemetryUnavailable", "amdsmi_available",
    "auto_kind", "nvml_available", "open_sampler", "read_trace", "record_trace",
    "run_summary", "summarize_device", "write_trace",
]


def auto_kind() -> tuple[str, str]:
    """The backend "auto" picks here, and why: NVML if usable, else AMD SMI, else the CPU."""
    nvml_ok, nvml_reason = nvml_available()
    if nvml_ok:
        return "nvml", nvml_reason
    amd_ok, amd_reason = amdsmi_available()
    if amd_ok:
        return "amdsmi", amd_reason
    return "cpu", f"no GPU telemetry ({nvml_reason}; {amd_reason})"


def open_sampler(kind: str = "auto", *, rate_hz: float = DEFAULT_RATE_HZ,
                 devices: list[int] | None = None) -> TelemetrySampler:
    """Open and start a telemetry sampler.

    Args:
        kind: auto, nvml, amdsmi, cpu, none, or replay:PATH (a CSV or JSON-lines trace).
        rate_hz: Polling rate, 1-100 Hz (the paper used 20).
        devices: Device indices to sample; None for all.

    Returns:
        A running sampler; close it (or use it as a context manager) when done.

    Raises:
        ValueError: Unknown `kind`, or `rate_hz` out of range.
        TelemetryUnavailable: The requested backend cannot run here (the message says why).
    """
    check_rate_hz(rate_hz)
    if kind == "auto":
        kind, _ = auto_kind()
    if kind.startswith("replay:"):
        path = kind.removeprefix("replay:")
        if not path:
            raise ValueError("telemetry kind 'replay:' needs a trace path, e.g. replay:trace.csv")
        return ReplaySampler(path, rate_hz=rate_hz, devices=devices)
    classes: dict[str, type[TelemetrySampler]] = {
        "nvml": NvmlSampler, "amdsmi": AmdSmiSampler, "cpu": CpuSampler, "none": NullSampler}
    if kind not in classes:
        raise ValueError(f"unknown telemetry kind {kind!r}; use one of {', '.join(KINDS)}")
    return classes[kind](rate_hz=rate_hz, devices=devices)
