"""Throughput of the vectorised analytical model: configurations predicted per second.

    python benchmarks/perf_model.py [--repeats 5]

For each job the whole valid configuration space is enumerated once, then step time (with its
breakdown), power/thermal and memory are predicted for every configuration. Figures are medians
over repeats (these machines are noisy). Target: >= 100,000 configurations/s.
"""

from __future__ import annotations

import argparse
import statistics
import time

from advisor.catalog import load_model, load_platform
from advisor.core.parallel import make_job
from advisor.core.space import enumerate_space
from advisor.perf.analytical import analytical_table
from advisor.perf.calibration import load_calibration
from advisor.perf.step import step_table

CASES = [("llama3-70b", "h200", 64), ("mixtral-8x22b", "h100", 256),
         ("deepseek-v3", "gb200", 1024), ("llama3.1-405b", "h100", 16_384)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    load_calibration()
    print(f"{'job':36s} {'configs':>9s} {'step time/s':>12s} {'full model/s':>13s}")
    for model_name, platform_name, gpus in CASES:
        model, platform = load_model(model_name), load_platform(platform_name)
        job = make_job(model, platform, num_gpus=gpus)
        space = enumerate_space(job)
        step_s, full_s = [], []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            step_table(model, platform, space)
            t1 = time.perf_counter()
            analytical_table(model, platform, space)
            t2 = time.perf_counter()
            step_s.append(t1 - t0)
            full_s.append(t2 - t1)
        n = len(space)
        label = f"{model_name} × {gpus} {platform_name}"
        print(f"{label:36s} {n:9,d} {n / statistics.median(step_s):12,.0f} "
              f"{n / statistics.median(full_s):13,.0f}")


if __name__ == "__main__":
    main()
