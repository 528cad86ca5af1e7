"""The one sampler interface every telemetry backend implements (Zeus's pattern).

A `TelemetrySampler` polls its backend from a background thread at `rate_hz` and buffers the
readings while at least one window is open. `begin_window(key)` / `end_window(key)` bracket a
region of interest (windows may nest or overlap, each under its own key) and return a
`Telemetry`: the window's samples summarised per device and for the run.

Backends implement three hooks: `_open(devices) -> list[int]`, `_read() -> list[Sample]` (one
reading per device) and `_shutdown()`.
"""

from __future__ import annotations

import threading
import time
import warnings
from collections import deque
from dataclasses import dataclass, field
from typing import Any, ClassVar

from advisor.core.errors import AdvisorError
from collectors.telemetry import summary

MIN_RATE_HZ = 1.0
MAX_RATE_HZ = 100.0
DEFAULT_RATE_HZ = 20.0
"""The paper polls every 50 ms; NVML power updates every 20-100 ms, so > 100 Hz only repeats."""
DEFAULT_MAX_BUFFER_SAMPLES = 2_000_000
"""About 300 MB of samples: 8 GPUs at 100 Hz for 40 minutes of open windows."""


class TelemetryError(AdvisorError):
    """A sampler was misused, or its backend failed while sampling."""


class TelemetryUnavailable(TelemetryError):
    """A backend cannot run on this machine; the message says why and what to use instead."""


@dataclass(frozen=True, slots=True)
class Sample:
    """One timestamped reading of one device. Fields a backend cannot measure are None."""

    device: int
    """Device index as the caller named it (CUDA index for NVML, amdsmi order for AMD SMI)."""
    timestamp_s: float
    """When the value was measured, on `time.monotonic`'s clock: the library's own timestamp
    where it gives one (NVML field values), otherwise the time of the read."""
    read_time_s: float
    """`time.monotonic()` when the sampler read the value; windows select samples by it."""
    power_instant_w: float | None = None
    """Instantaneous power (NVML_FI_DEV_POWER_INSTANT, amdsmi current_socket_power)."""
    power_avg_w: float | None = None
    """Power averaged by the device (NVML 1-s average, amdsmi average_socket_power) or, for
    RAPL, over the last poll interval."""
    energy_j: float | None = None
    """Cumulative energy counter (it may wrap or reset; summaries handle both)."""
    energy_wrap_j: float | None = None
    """Value at which `energy_j` wraps to zero, where known (RAPL max_energy_range_uj)."""
    gpu_temp_c: float | None = None
    """GPU die temperature (NVML GPU sensor; AMD hotspot/junction, else edge)."""
    mem_temp_c: float | None = None
    """Memory (HBM) temperature."""
    edge_temp_c: float | None = None
    """AMD edge sensor (None elsewhere)."""
    sm_clock_mhz: float | None = None
    """SM (NVIDIA) or GFX (AMD) clock."""
    mem_clock_mhz: float | None = None
    utilisation: float | None = None
    """Busy fraction, 0-1 (GPU utilisation or, for the CPU sampler, CPU utilisation)."""
    throttle_power: bool | None = None
    """Clocks held back for power: NVML SW power cap or HW power brake; AMD PPT violation."""
    throttle_thermal: bool | None = None
    """Clocks held back for temperature: NVML SW/HW thermal slowdown; AMD thermal violations."""
    throttle_hw_slowdown: bool | None = None
    """NVML HW slowdown (cause not given: temperature, power brake or power fast-trigger) or
    AMD's cause-less throttle_status."""
    power_devices: int = 1
    """Devices one power/energy reading covers: 2 on an MI250's even GCD (package power), so
    per-GPU figures divide by it."""


@dataclass(frozen=True)
class Telemetry:
    """What a window saw: per-device summaries, and the run summary the dataset stores."""

    key: str
    backend: str
    begin_s: float
    """`time.monotonic()` at begin_window."""
    end_s: float
    """`time.monotonic()` at end_window."""
    telemetry_hz: float | None
    """Background polls per second achieved during the window (None without devices)."""
    per_device: list[summary.DeviceSummary]
    samples: tuple[Sample, ...] = field(default=(), repr=False, compare=False)
    """The raw readings, oldest first (`replay.write_trace` records them)."""
    error: str | None = None
    """Why sampling stopped early during the window, if it did (the summaries cover the
    samples taken before)."""

    @property
    def duration_s(self) -> float:
        return self.end_s - self.begin_s

    def run_summary(self) -> dict[str, float | None]:
        """Run-level figures keyed by `collectors.spec.TELEMETRY_FIELDS` (None: not measured)."""
        return summary.run_summary(self.per_device, telemetry_hz=self.telemetry_hz)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form: the run summary plus one dict per device."""
        return {"key": self.key, "backend": self.backend, "duration_s": self.duration_s,
                "error": self.error, "run": self.run_summary(),
                "per_device": [d.to_dict() for d in self.per_device]}


def check_rate_hz(rate_hz: float) -> float:
    """Return `rate_hz` as a float, or raise ValueError naming the allowed range."""
    if not MIN_RATE_HZ <= rate_hz <= MAX_RATE_HZ:
        raise ValueError(
            f"rate_hz must be between {MIN_RATE_HZ:g} and {MAX_RATE_HZ:g} Hz (got {rate_hz!r}); "
            f"the paper samples at {DEFAULT_RATE_HZ:g} Hz, and power counters update every "
            "10-100 ms, so faster polling only repeats values")
    return float(rate_hz)


def achieved_rate_hz(poll_times_s: list[float], duration_s: float) -> float:
    """Polls per second: from the spacing of the polls when there are two or more (no
    fence-post bias), else the count over the window."""
    if len(poll_times_s) >= 2 and poll_times_s[-1] > poll_times_s[0]:
        return (len(poll_times_s) - 1) / (poll_times_s[-1] - poll_times_s[0])
    return len(poll_times_s) / duration_s if duration_s > 0 else 0.0


class TelemetrySampler:
    """Polls one backend in a background thread; keyed windows summarise what it read.

    Args:
        rate_hz: Polling rate, 1-100 Hz.
        devices: Device indices to sample (backend-specific meaning); None for all.
        max_buffer_samples: Samples kept while windows are open; the oldest go first.

    Raises:
        ValueError: `rate_hz` is out of range.
        TelemetryUnavailable: The backend cannot run here (the message says why).
    """

    backend: ClassVar[str] = "base"

    def __init__(self, *, rate_hz: float = DEFAULT_RATE_HZ, devices: list[int] | None = None,
                 max_buffer_samples: int = DEFAULT_MAX_BUFFER_SAMPLES) -> None:
        self.rate_hz = check_rate_hz(rate_hz)
        self._lock = threading.Lock()  # buffer, poll times, windows, error
        self._read_lock = threading.Lock()  # one backend read at a time
        self._buffer: deque[Sample] = deque(maxlen=max_buffer_samples)
        self._poll_times_s: deque[float] = deque(maxlen=max_buffer_samples)
        self._windows: dict[str, float] = {}
        """Open windows: key -> time.monotonic() at begin."""
        self._error: str | None = None
        self._closed = False
        self._stop = threading.Event()
        self.devices: list[int] = self._open(devices)
        self._thread: threading.Thread | None = None
        if self.devices:
            self._thread = threading.Thread(target=self._run, daemon=True,
                                            name=f"telemetry-{self.backend}")
            self._thread.start()

    # -- backend hooks -------------------------------------------------------------------------
    def _open(self, devices: list[int] | None) -> list[int]:
        """Start the backend and return the device indices it will sample."""
        raise NotImplementedError

    def _read(self) -> list[Sample]:
        """Read every device once (called with the read lock held)."""
        raise NotImplementedError

    def _shutdown(self) -> None:
        """Release the backend (called once, by close)."""

    # -- public interface ----------------------------------------------------------------------
    @property
    def is_running(self) -> bool:
        """Whether the polling thread is alive."""
        return self._thread is not None and self._thread.is_alive()

    @property
    def num_buffered_samples(self) -> int:
        """Samples held for open windows (zero when none is open)."""
        with self._lock:
            return len(self._buffer)

    @property
    def open_windows(self) -> list[str]:
        with self._lock:
            return list(self._windows)

    def begin_window(self, key: str) -> None:
        """Start collecting samples under `key`.

        Raises:
            TelemetryError: The sampler is closed, or a window `key` is already open.
        """
        self._check_not_closed(f"begin_window({key!r})")
        with self._lock:
            if key in self._windows:
                raise TelemetryError(f"telemetry window {key!r} is already open; end it with "
                                     f"end_window({key!r}) first or use another key")
            self._windows[key] = time.monotonic()
        self._poll(background=False)  # a reading at the edge, however short the window

    def end_window(self, key: str) -> Telemetry:
        """Stop the window `key` and summarise the samples read while it was open.

        Raises:
            TelemetryError: The sampler is closed, or no window `key` is open.
        """
        self._check_not_closed(f"end_window({key!r})")
        with self._lock:
            if key not in self._windows:
                open_keys = ", ".join(repr(k) for k in self._windows) or "none"
                raise TelemetryError(f"no telemetry window {key!r} is open (open: {open_keys}); "
                                     f"call begin_window({key!r}) first")
        self._poll(background=False)
        end_s = time.monotonic()
        with self._lock:
            begin_s = self._windows.pop(key)
            samples = tuple(s for s in self._buffer if begin_s <= s.read_time_s <= end_s)
            polls = [t for t in self._poll_times_s if begin_s <= t <= end_s]
            self._trim()
            error = self._error
        rate_hz = achieved_rate_hz(polls, end_s - begin_s) if self.devices else None
        per_device = [summary.summarize_device(d, [s for s in samples if s.device == d])
                      for d in self.devices]
        return Telemetry(key=key, backend=self.backend, begin_s=begin_s, end_s=end_s,
                         telemetry_hz=rate_hz, per_device=per_device, samples=samples,
                         error=error)

    def close(self) -> None:
        """Stop polling and release the backend. Calling it again does nothing."""
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5.0)
        with self._read_lock:
            self._shutdown()
        with self._lock:
            self._windows.clear()
            self._buffer.clear()
            self._poll_times_s.clear()

    def __enter__(self) -> TelemetrySampler:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"{self.rate_hz:g} Hz"
        return f"{type(self).__name__}(devices={self.devices}, {state})"

    # -- internals -----------------------------------------------------------------------------
    def _check_not_closed(self, what: str) -> None:
        if self._closed:
            raise TelemetryError(f"{what} on a closed {type(self).__name__}; open a new sampler "
                                 "with collectors.telemetry.open_sampler(...)")

    def _poll(self, *, background: bool) -> None:
        if self._error is not None:
            return
        try:
            with self._read_lock:
                if self._closed:
                    return
                poll_s = time.monotonic()
                samples = self._read()
        except Exception as exc:  # noqa: BLE001 - any backend failure ends sampling, reported
            self._fail(exc)
            return
        with self._lock:
            if self._windows:
                self._buffer.extend(samples)
                if background:
                    self._poll_times_s.append(poll_s)

    def _fail(self, exc: BaseException) -> None:
        message = f"{type(exc).__name__}: {exc}"
        with self._lock:
            if self._error is None:
                self._error = message
                warnings.warn(f"{self.backend} telemetry stopped: {message}", RuntimeWarning,
                              stacklevel=3)

    def _trim(self) -> None:
        """Drop samples no open window needs (lock held)."""
        if not self._windows:
            self._buffer.clear()
            self._poll_times_s.clear()
            return
        oldest_s = min(self._windows.values())
        while self._buffer and self._buffer[0].read_time_s < oldest_s:
            self._buffer.popleft()
        while self._poll_times_s and self._poll_times_s[0] < oldest_s:
            self._poll_times_s.popleft()

    def _run(self) -> None:
        period_s = 1.0 / self.rate_hz
        next_s = time.monotonic()
        while not self._stop.is_set() and self._error is None:
            self._poll(background=True)
            next_s += period_s
            now_s = time.monotonic()
            if now_s - next_s > period_s:  # starved (loaded machine): resync, do not burst
                next_s = now_s
            self._stop.wait(max(0.0, next_s - now_s))


class NullSampler(TelemetrySampler):
    """kind="none": no devices, no thread; every figure is None."""

    backend: ClassVar[str] = "none"

    def _open(self, devices: list[int] | None) -> list[int]:
        return []

    def _read(self) -> list[Sample]:
        return []
