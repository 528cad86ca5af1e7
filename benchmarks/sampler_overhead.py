"""Cost of telemetry sampling to a training loop: the median step time of a small PyTorch MLP
trained on the CPU with a sampler polling in the background, relative to none.

    python benchmarks/sampler_overhead.py [--rounds 5] [--steps 40] [--kinds cpu replay]

Configurations run interleaved in rounds (these machines are shared and noisy), and each ratio
is median(step with sampler) / median(step without). The sampler's duty cycle (one poll's
cost x rate) is printed too: it is the overhead's floor and far less noisy. Target: <= 1 %.
`--kinds nvml` measures real NVML on a GPU machine. Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from collectors.telemetry import Sample, TelemetrySampler, open_sampler, write_trace

RATES_HZ = (20.0, 100.0)


def make_trace(path: Path, *, num_devices: int = 8, duration_s: float = 2.0) -> Path:
    """A synthetic 8-GPU trace at 100 Hz for the replay sampler."""
    samples = [Sample(d, i / 100, i / 100, power_instant_w=400.0 + 10 * d,
                      energy_j=(400.0 + 10 * d) * i / 100, gpu_temp_c=60.0 + d,
                      mem_temp_c=70.0, sm_clock_mhz=1980.0, throttle_power=False,
                      throttle_thermal=False)
               for i in range(int(duration_s * 100)) for d in range(num_devices)]
    return write_trace(path, samples)


def make_step(width: int, batch: int):
    """One training step of a 4-layer MLP (forward, backward, AdamW)."""
    import torch

    torch.manual_seed(0)
    layers = []
    for _ in range(4):
        layers += [torch.nn.Linear(width, width), torch.nn.GELU()]
    model = torch.nn.Sequential(*layers)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x, y = torch.randn(batch, width), torch.randn(batch, width)

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()

    return step


def time_steps(step, num_steps: int) -> list[float]:
    times = []
    for _ in range(num_steps):
        t = time.perf_counter()
        step()
        times.append(time.perf_counter() - t)
    return times


def poll_cost_s(sampler: TelemetrySampler, repeats: int = 200) -> float:
    """Median wall time of one backend read (all devices)."""
    costs = []
    for _ in range(repeats):
        t = time.perf_counter()
        with sampler._read_lock:  # noqa: SLF001 - measuring the read itself
            sampler._read()  # noqa: SLF001
        costs.append(time.perf_counter() - t)
    return statistics.median(costs)


def thread_cpu_s(sampler: TelemetrySampler) -> float | None:
    """CPU seconds the polling thread has used (Linux /proc; 10 ms resolution)."""
    thread = sampler._thread  # noqa: SLF001 - the sampler's own thread
    try:
        fields = Path(f"/proc/self/task/{thread.native_id}/stat").read_text().rsplit(")", 1)[1]
    except (AttributeError, OSError):
        return None
    utime, stime = (int(x) for x in fields.split()[11:13])
    return (utime + stime) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--steps", type=int, default=10, help="steps per timed block")
    parser.add_argument("--width", type=int, default=512)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--kinds", nargs="+", default=["cpu", "replay"])
    args = parser.parse_args()
    step = make_step(args.width, args.batch)
    time_steps(step, 10)  # warm-up
    with tempfile.TemporaryDirectory() as tmp:
        trace = make_trace(Path(tmp) / "trace.csv")
        kinds = [f"replay:{trace}" if k == "replay" else k for k in args.kinds]
        configs = [(k, r) for k in kinds for r in RATES_HZ]
        ratios: dict[tuple[str, float], list[float]] = {c: [] for c in configs}
        base: list[float] = []
        cpu_s = {c: 0.0 for c in configs}
        wall_s = {c: 0.0 for c in configs}
        duty: dict[tuple[str, float], float] = {}
        for _ in range(args.rounds):
            for config in configs:
                before = statistics.median(time_steps(step, args.steps))  # paired baseline
                with open_sampler(config[0], rate_hz=config[1]) as sampler:
                    cpu0, t0 = thread_cpu_s(sampler), time.perf_counter()
                    sampler.begin_window("bench")
                    during = statistics.median(time_steps(step, args.steps))
                    sampler.end_window("bench")
                    cpu1, t1 = thread_cpu_s(sampler), time.perf_counter()
                    if cpu0 is not None and cpu1 is not None:
                        cpu_s[config] += cpu1 - cpu0
                        wall_s[config] += t1 - t0
                    duty[config] = poll_cost_s(sampler) * config[1]
                base.append(before)
                ratios[config].append(during / before)
    print(f"workload: {args.width}-wide 4-layer MLP, batch {args.batch}; {args.rounds} rounds "
          f"of paired {args.steps}-step blocks; median step without a sampler "
          f"{statistics.median(base) * 1e3:.2f} ms")
    print("sampler              step-time ratio   polling-thread CPU   read cost x rate")
    for kind, rate_hz in configs:
        config = (kind, rate_hz)
        ratio = statistics.median(ratios[config])
        share = f"{cpu_s[config] / wall_s[config] * 100:6.2f} %" if wall_s[config] else "   n/a"
        name = "replay" if kind.startswith("replay:") else kind
        print(f"{name:>7} at {rate_hz:5.0f} Hz   {ratio:6.3f} ({(ratio - 1) * 100:+5.1f} %)"
              f"      {share}            {duty[config] * 100:6.3f} %")


if __name__ == "__main__":
    main()
