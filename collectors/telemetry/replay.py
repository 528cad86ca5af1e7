"""Recorded telemetry traces: write, read, record from any sampler, and replay as a sampler.

A trace is CSV (a header of `Sample` field names; empty cells are None) or JSON lines (one
object of `Sample` fields per line). `device` and `timestamp_s` are required; the other fields
default to None. `ReplaySampler` plays a trace back in real time (or `speed` times faster),
looping, so tests and demos exercise the full sampler on any machine.
"""

from __future__ import annotations

import bisect
import csv
import json
import time
from collections.abc import Sequence
from dataclasses import asdict, fields, replace
from pathlib import Path
from typing import Any, ClassVar

from collectors.telemetry.base import (
    Sample,
    Telemetry,
    TelemetryError,
    TelemetrySampler,
    TelemetryUnavailable,
)
from collectors.telemetry.summary import counter_delta_j

FIELDS = tuple(f.name for f in fields(Sample))
_TYPES = {f.name: str(f.type) for f in fields(Sample)}
_SUFFIXES = {".csv": "csv", ".jsonl": "jsonl", ".json": "jsonl", ".ndjson": "jsonl"}


def _format(path: Path) -> str:
    try:
        return _SUFFIXES[path.suffix.lower()]
    except KeyError:
        raise TelemetryError(f"trace {path} must end in .csv or .jsonl (got "
                             f"{path.suffix or 'no suffix'!r})") from None


def write_trace(path: Path | str, samples: Sequence[Sample]) -> Path:
    """Write `samples` as a CSV or JSON-lines trace (chosen by the suffix); return the path."""
    path = Path(path)
    rows = [asdict(s) for s in samples]
    if _format(path) == "jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        return path
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=FIELDS)
        writer.writeheader()
        writer.writerows({k: "" if v is None else v for k, v in r.items()} for r in rows)
    return path


def _parse(name: str, value: Any) -> Any:
    kind = _TYPES[name]
    if value is None or value == "":
        return None
    if "bool" in kind:
        if isinstance(value, bool):
            return value
        if str(value).lower() in ("true", "1"):
            return True
        if str(value).lower() in ("false", "0"):
            return False
        raise ValueError(f"{name}={value!r} is not a boolean (true/false)")
    if kind == "int":
        return int(value)
    return float(value)


def read_trace(path: Path | str) -> list[Sample]:
    """Read a trace written by `write_trace` (or by hand).

    Raises:
        TelemetryError: The file is missing, empty or malformed (names the line and field).
    """
    path = Path(path)
    kind = _format(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise TelemetryError(f"cannot read telemetry trace {path}: {exc}") from exc
    if kind == "jsonl":
        rows = []
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                rows.append((n, json.loads(line)))
            except json.JSONDecodeError as exc:
                raise TelemetryError(f"{path}: line {n}: not JSON ({exc.msg})") from exc
    else:
        rows = list(enumerate(csv.DictReader(text.splitlines()), 2))
    samples = []
    for line, row in rows:
        if not isinstance(row, dict):
            raise TelemetryError(f"{path}: line {line}: expected an object of Sample fields")
        unknown = sorted(str(k) for k in row if k not in FIELDS)
        missing = [k for k in ("device", "timestamp_s") if row.get(k) in (None, "")]
        if unknown or missing:
            raise TelemetryError(f"{path}: line {line}: "
                                 + (f"unknown field(s) {unknown}; " if unknown else "")
                                 + (f"missing {missing}; " if missing else "")
                                 + f"fields are {', '.join(FIELDS)}")
        try:
            values = {k: _parse(k, v) for k, v in row.items()}
        except ValueError as exc:
            raise TelemetryError(f"{path}: line {line}: {exc}") from exc
        values.setdefault("read_time_s", values["timestamp_s"])
        if values["read_time_s"] is None:
            values["read_time_s"] = values["timestamp_s"]
        values["power_devices"] = values.get("power_devices") or 1
        samples.append(Sample(**values))
    if not samples:
        raise TelemetryError(f"telemetry trace {path} has no samples")
    return samples


def record_trace(sampler: TelemetrySampler, path: Path | str, *,
                 duration_s: float) -> Telemetry:
    """Record `duration_s` seconds from `sampler` into a trace file; return the window."""
    key = f"record:{path}"
    sampler.begin_window(key)
    time.sleep(duration_s)
    telemetry = sampler.end_window(key)
    write_trace(path, telemetry.samples)
    return telemetry


class _DeviceTrace:
    """One device's samples on a time axis starting at zero, with cumulative energy."""

    def __init__(self, samples: list[Sample], start_s: float, period_s: float) -> None:
        self.samples = samples
        self.offsets_s = [s.read_time_s - start_s for s in samples]
        self.energy_j: list[float | None] = []
        total_j, last = 0.0, None
        for s in samples:
            if s.energy_j is not None and last is not None:
                total_j += counter_delta_j(last.energy_j, s.energy_j, s.energy_wrap_j)
            last = s if s.energy_j is not None else last
            self.energy_j.append(total_j if last is not None else None)
        tail = samples[-1].power_instant_w or samples[-1].power_avg_w or 0.0
        self.energy_per_loop_j = total_j + tail * (period_s - self.offsets_s[-1])

    def at(self, position_s: float, loops: int) -> Sample:
        index = max(0, bisect.bisect_right(self.offsets_s, position_s) - 1)
        energy_j = self.energy_j[index]
        if energy_j is not None:
            energy_j += loops * self.energy_per_loop_j
        return replace(self.samples[index], energy_j=energy_j, energy_wrap_j=None)


class ReplaySampler(TelemetrySampler):
    """Plays a recorded trace back as if it were a live device.

    Args:
        path: A CSV or JSON-lines trace (see `write_trace`).
        speed: Trace seconds per wall-clock second.
        loop: Start again at the end of the trace (otherwise hold the last sample).
        **kwargs: `rate_hz`, `devices`, `max_buffer_samples` (see `TelemetrySampler`).
    """

    backend: ClassVar[str] = "replay"

    def __init__(self, path: Path | str, *, speed: float = 1.0, loop: bool = True,
                 **kwargs: Any) -> None:
        if speed <= 0:
            raise ValueError(f"speed must be positive (got {speed}); 1.0 replays in real time")
        self.path, self._speed, self._loop = Path(path), speed, loop
        super().__init__(**kwargs)

    def _open(self, devices: list[int] | None) -> list[int]:
        samples = sorted(read_trace(self.path), key=lambda s: s.read_time_s)
        in_trace = sorted({s.device for s in samples})
        chosen = in_trace if devices is None else list(devices)
        missing = [d for d in chosen if d not in in_trace]
        if missing:
            raise TelemetryUnavailable(f"device(s) {missing} are not in trace {self.path}; "
                                       f"it has {in_trace}")
        start_s = samples[0].read_time_s
        reads = sorted({s.read_time_s for s in samples})
        gap_s = (reads[-1] - reads[0]) / (len(reads) - 1) if len(reads) > 1 else 1 / self.rate_hz
        self._period_s = reads[-1] - start_s + gap_s
        self._traces = {d: _DeviceTrace([s for s in samples if s.device == d], start_s,
                                        self._period_s) for d in chosen}
        self._start_s = time.monotonic()
        return chosen

    def _read(self) -> list[Sample]:
        read_s = time.monotonic()
        elapsed_s = (read_s - self._start_s) * self._speed
        loops, position_s = divmod(elapsed_s, self._period_s)
        if not self._loop and loops >= 1:
            loops, position_s = 0, self._period_s
        return [replace(trace.at(position_s, int(loops)), timestamp_s=read_s, read_time_s=read_s)
                for trace in self._traces.values()]
