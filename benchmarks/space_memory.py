"""Enumerate and memory-check whole configuration spaces; print counts and configurations/s.

    python benchmarks/space_memory.py [--repeats 5]

Figures are medians over repeats (these machines are noisy).
"""

from __future__ import annotations

import argparse
import statistics
import time

from advisor.catalog import load_model, load_platform
from advisor.core.parallel import make_job
from advisor.core.space import enumerate_space
from advisor.perf.memory import memory_table

CASES = [("llama3-70b", "h200", 64), ("llama3.1-405b", "h100", 16_384)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    print(f"{'job':34s} {'valid':>9s} {'fit':>8s} {'enumerate/s':>12s} {'memory/s':>12s} "
          f"{'both/s':>12s}")
    for model_name, platform_name, gpus in CASES:
        model, platform = load_model(model_name), load_platform(platform_name)
        job = make_job(model, platform, num_gpus=gpus)
        enum_s, mem_s = [], []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            space = enumerate_space(job)
            t1 = time.perf_counter()
            memory = memory_table(model, platform=platform, configs=space)
            t2 = time.perf_counter()
            enum_s.append(t1 - t0)
            mem_s.append(t2 - t1)
        n = len(space)
        e, m = statistics.median(enum_s), statistics.median(mem_s)
        label = f"{model_name} × {gpus} {platform_name} (gbs {job.gbs})"
        print(f"{label:34s} {n:9,d} {int(memory['fits'].sum()):8,d} {n / e:12,.0f} "
              f"{n / m:12,.0f} {n / (e + m):12,.0f}")


if __name__ == "__main__":
    main()
