"""How one GPU's power limit acts on its clock: the measurements behind the power model's
enforcement window and kernel power ratios (`advisor/catalog/power.toml`).

    python -m collectors.power_probe --out runs/power-probe            # about 3 minutes
    python -m collectors.power_probe --out /tmp/p --device cpu --scale 0.02   # the code path

Phases, in order, on GPU 0 (`CUDA_VISIBLE_DEVICES` picks it):

* idle, then **continuous** best-fed bf16 GEMMs (8192³) long enough for the clock and power to
  settle at the power limit;
* **kernel kinds** back to back: smaller GEMMs (less well fed), causal fused attention and an
  HBM-bound copy, each for a few seconds: their power against their achieved speed;
* **duty cycles**: bursts of the 8192³ GEMM separated by idle gaps, from 5 ms/5 ms to
  2 s/2 s and at duties of 25 % and 75 %. A limit enforced on power averaged over a window
  longer than the period lets short bursts run at a higher clock than continuous load; within a
  long burst the clock falls as the window fills. The speed of every kernel, timed with CUDA
  events, is what the clock did.
* continuous again, to see what heating changed.

Nothing here changes the GPU's settings (clocks, power limit): it measures the card as found.
Written to `--out`: `kernels.csv.gz` (one row per kernel: phase, burst, start and duration in
seconds, FLOP and bytes), `samples.csv.gz` (NVML at 100 Hz through `collectors.telemetry`),
`driver_samples.csv.gz` (the driver's own power and clock sample buffers, where it keeps them)
and `device.json` (name, power limit, clocks, driver, versions, the phases).
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import gzip
import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from collectors.telemetry.nvml import _FIELD_VALUE_ATTR

GEMM_SIDE = 8192


@dataclass(frozen=True)
class Phase:
    name: str
    kernel: str
    """A key of `kernels()`; "" for idle."""
    seconds: float
    burst_s: float = 0.0
    """0: back to back."""
    gap_s: float = 0.0


def plan(scale: float = 1.0) -> list[Phase]:
    """The phases, their durations multiplied by `scale` (bursts and gaps are not scaled)."""
    duty = [(0.005, 0.005), (0.01, 0.01), (0.02, 0.02), (0.05, 0.05), (0.1, 0.1), (0.2, 0.2),
            (0.5, 0.5), (1.0, 1.0), (2.0, 2.0), (0.1, 0.033), (0.1, 0.3), (1.0, 0.333),
            (1.0, 3.0)]
    phases = [Phase("idle", "", 3.0), Phase("continuous", "gemm8192", 30.0)]
    phases += [Phase(f"kind-{k}", k, 5.0) for k in
               ("gemm4096", "gemm2048", "gemm8192x1024", "attention", "copy", "gemm8192")]
    phases += [Phase(f"duty-{b * 1e3:g}ms-{g * 1e3:g}ms", "gemm8192",
                     max(6.0, 3 * (b + g)), burst_s=b, gap_s=g) for b, g in duty]
    phases += [Phase("continuous-end", "gemm8192", 10.0)]
    return [Phase(p.name, p.kernel, p.seconds * scale, p.burst_s, p.gap_s) for p in phases]


def kernels(torch: Any, device: Any, small: bool) -> dict[str, tuple[Callable[[], Any], float,
                                                                    float]]:
    """name -> (launch, FLOP, bytes moved) on `device`; `small` shrinks them for CPUs."""
    import torch.nn.functional as F

    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    shrink = 16 if small else 1

    def gemm(m: int, n: int, k: int):
        m, n, k = max(m // shrink, 8), max(n // shrink, 8), max(k // shrink, 8)
        a = torch.randn(m, k, device=device, dtype=dtype)
        b = torch.randn(k, n, device=device, dtype=dtype)
        out = torch.empty(m, n, device=device, dtype=dtype)
        size = a.element_size()
        return (lambda: torch.matmul(a, b, out=out)), 2.0 * m * n * k, size * (m * k + k * n
                                                                                + m * n)

    batch, heads, seq, dim = (4, 32, 4096 // shrink, 128 // min(shrink, 8))
    q, k, v = (torch.randn(batch, heads, seq, dim, device=device, dtype=dtype) for _ in range(3))
    words = (1 << 30) // shrink ** 2  # 2 GiB of bf16
    src = torch.randn(words, device=device, dtype=dtype)
    dst = torch.empty_like(src)
    return {
        "gemm8192": gemm(GEMM_SIDE, GEMM_SIDE, GEMM_SIDE),
        "gemm4096": gemm(4096, 4096, 4096),
        "gemm2048": gemm(2048, 2048, 2048),
        "gemm8192x1024": gemm(GEMM_SIDE, GEMM_SIDE, 1024),
        "attention": ((lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True)),
                      2.0 * batch * heads * seq * seq * dim,  # causal: half of 4·b·h·s²·d
                      q.element_size() * 4 * q.numel()),
        "copy": ((lambda: dst.copy_(src)), 0.0, 2.0 * src.element_size() * src.numel()),
    }


class Timer:
    """Kernel durations: CUDA events on a GPU, the host clock (synchronous kernels) on a CPU."""

    def __init__(self, torch: Any, device: Any) -> None:
        self.torch, self.cuda = torch, device.type == "cuda"

    def run(self, launch: Callable[[], Any], count: int) -> list[float]:
        if not self.cuda:
            out = []
            for _ in range(count):
                t = time.monotonic()
                launch()
                out.append(time.monotonic() - t)
            return out
        events = [self.torch.cuda.Event(enable_timing=True) for _ in range(count + 1)]
        events[0].record()
        for e in events[1:]:
            launch()
            e.record()
        events[-1].synchronize()
        return [a.elapsed_time(b) / 1e3 for a, b in zip(events, events[1:], strict=False)]


class DriverSamples:
    """The driver's power and SM-clock sample buffers (`nvmlDeviceGetSamples`), drained every
    half second; empty where NVML or the buffer is not there."""

    KINDS = {"power_w": (0, 1e-3), "sm_clock_mhz": (5, 1.0)}
    """column -> (nvmlSamplingType_t: NVML_TOTAL_POWER_SAMPLES=0 in mW,
    NVML_PROCESSOR_CLK_SAMPLES=5 in MHz, scale)."""

    def __init__(self) -> None:
        self.rows: list[tuple[str, float, float]] = []
        self.error = ""
        self._stop = threading.Event()
        try:
            import pynvml as nv

            nv.nvmlInit()
            self._nv, self._handle = nv, nv.nvmlDeviceGetHandleByIndex(0)
        except Exception as exc:  # no NVML: the probe still runs
            self.error = f"{type(exc).__name__}: {exc}"
            return
        self._last = dict.fromkeys(self.KINDS, 0)
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _drain(self) -> None:
        offset = time.monotonic() - time.time()
        for column, (kind, scale) in self.KINDS.items():
            try:
                vtype, samples = self._nv.nvmlDeviceGetSamples(self._handle, kind,
                                                               self._last[column])
            except Exception as exc:  # NOT_FOUND before the first sample; unsupported
                self.error = self.error or f"{column}: {type(exc).__name__}: {exc}"
                continue
            attr = _FIELD_VALUE_ATTR.get(vtype, "uiVal")
            for s in samples:
                if s.timeStamp > self._last[column]:
                    self._last[column] = s.timeStamp
                    self.rows.append((column, s.timeStamp / 1e6 + offset,
                                      getattr(s.sampleValue, attr) * scale))

    def _loop(self) -> None:
        while not self._stop.wait(0.5):
            self._drain()

    def close(self) -> None:
        if hasattr(self, "_thread"):
            self._stop.set()
            self._thread.join()
            self._drain()


def _write_csv(path: Path, header: list[str], rows: Iterator[tuple] | list[tuple]) -> None:
    with gzip.open(path, "wt", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)


def device_facts(torch: Any, device: Any) -> dict[str, Any]:
    facts: dict[str, Any] = {"torch": torch.__version__, "device": str(device)}
    if device.type != "cuda":
        return facts
    facts["name"] = torch.cuda.get_device_name(device)
    try:
        import pynvml as nv

        nv.nvmlInit()
        h = nv.nvmlDeviceGetHandleByIndex(0)
    except Exception as exc:  # no NVML: the probe still times kernels
        facts["nvml_error"] = f"{type(exc).__name__}: {exc}"
        return facts
    reads = {
        "driver": lambda: nv.nvmlSystemGetDriverVersion(),
        "power_limit_w": lambda: nv.nvmlDeviceGetEnforcedPowerLimit(h) / 1e3,
        "power_limit_default_w": lambda: nv.nvmlDeviceGetPowerManagementDefaultLimit(h) / 1e3,
        "max_sm_clock_mhz": lambda: nv.nvmlDeviceGetMaxClockInfo(h, nv.NVML_CLOCK_SM),
        "max_mem_clock_mhz": lambda: nv.nvmlDeviceGetMaxClockInfo(h, nv.NVML_CLOCK_MEM),
        "slowdown_temp_c": lambda: nv.nvmlDeviceGetTemperatureThreshold(
            h, nv.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN),
        "shutdown_temp_c": lambda: nv.nvmlDeviceGetTemperatureThreshold(
            h, nv.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN),
    }
    for key, read in reads.items():
        with contextlib.suppress(Exception):  # a field this driver does not report
            facts[key] = read()
    return facts


def run_probe(out: Path, *, device_kind: str = "cuda", scale: float = 1.0,
              telemetry: str = "nvml") -> dict[str, Any]:
    """Run every phase and write the files; returns what `device.json` holds."""
    import torch

    from collectors.telemetry import open_sampler

    out.mkdir(parents=True, exist_ok=True)
    device = torch.device(device_kind, 0) if device_kind == "cuda" else torch.device("cpu")
    phases = plan(scale)
    launches = kernels(torch, device, small=device.type != "cuda")
    timer = Timer(torch, device)
    facts = device_facts(torch, device) | {"phases": [asdict(p) for p in phases],
                                           "scale": scale}
    for launch, _, _ in launches.values():  # warm-up: cuBLAS handles, kernels chosen
        timer.run(launch, 3)
    per_kernel = {name: sorted(timer.run(launch, 5))[2] for name, (launch, _, _) in
                  launches.items()}
    facts["warm_kernel_s"] = per_kernel
    sampler = open_sampler(telemetry, rate_hz=100, devices=[0] if device.type == "cuda"
                           else None)
    driver = DriverSamples() if device.type == "cuda" else None
    rows: list[tuple] = []
    spans: list[tuple[str, float, float]] = []
    sampler.begin_window("probe")
    try:
        for phase in phases:
            begin = time.monotonic()
            stop = begin + phase.seconds
            burst = 0
            if not phase.kernel:
                time.sleep(phase.seconds)
            launch, flop, moved = launches.get(phase.kernel, (None, 0.0, 0.0))
            while launch is not None and time.monotonic() < stop:
                if phase.burst_s:
                    count = max(1, round(phase.burst_s / per_kernel[phase.kernel]))
                else:  # back to back, in chunks of about a quarter second
                    count = max(1, round(0.25 / per_kernel[phase.kernel]))
                start = time.monotonic()
                durations = timer.run(launch, count)
                t = start
                for d in durations:
                    rows.append((phase.name, burst, round(t, 6), round(d, 7), flop, moved))
                    t += d
                burst += 1
                if phase.gap_s:
                    time.sleep(phase.gap_s)
            spans.append((phase.name, begin, time.monotonic()))
            print(f"{phase.name}: {time.monotonic() - begin:.1f} s, {burst} bursts", flush=True)
    finally:
        window = sampler.end_window("probe")
        sampler.close()
        if driver is not None:
            driver.close()
            facts["driver_samples_error"] = driver.error
        facts["spans"] = spans
        facts["telemetry_error"] = window.error
        _write_csv(out / "kernels.csv.gz", ["phase", "burst", "start_s", "duration_s", "flop",
                                            "bytes"], rows)
        fields = ["timestamp_s", "power_instant_w", "power_avg_w", "energy_j", "gpu_temp_c",
                  "mem_temp_c", "sm_clock_mhz", "mem_clock_mhz", "utilisation",
                  "throttle_power", "throttle_thermal", "throttle_hw_slowdown"]
        _write_csv(out / "samples.csv.gz", fields,
                   [tuple(getattr(s, f) for f in fields) for s in window.samples])
        _write_csv(out / "driver_samples.csv.gz", ["column", "timestamp_s", "value"],
                   driver.rows if driver is not None else [])
        (out / "device.json").write_text(json.dumps(facts, indent=1) + "\n")
    return facts


def check_target(parser: argparse.ArgumentParser, out: Path, device: str, *,
                 cpu_flags: str) -> None:
    """Exit with one `error:` line (code 2) unless `out` can be written and, on `cuda`, torch
    sees a GPU; `cpu_flags` is how the probe runs its code path on a CPU instead."""
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        parser.exit(2, f"error: cannot write to {out}: {e.strerror or e}; pass another "
                       f"--out.\n")
    import torch

    if device == "cuda" and not torch.cuda.is_available():
        parser.exit(2, f"error: no CUDA GPU is visible to torch; run on a GPU node, or use "
                       f"{cpu_flags} to try the code path.\n")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for the four files")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--scale", type=float, default=1.0,
                        help="multiply every phase's duration (0.02 for a smoke test)")
    parser.add_argument("--telemetry", default=None,
                        help="collectors.telemetry kind (default: nvml on cuda, cpu on cpu)")
    args = parser.parse_args(argv)
    telemetry = args.telemetry or ("nvml" if args.device == "cuda" else "cpu")
    check_target(parser, args.out, args.device, cpu_flags="--device cpu --scale 0.02")
    facts = run_probe(args.out, device_kind=args.device, scale=args.scale, telemetry=telemetry)
    print(json.dumps({k: v for k, v in facts.items() if k not in ("phases", "spans")}))


if __name__ == "__main__":
    main()
