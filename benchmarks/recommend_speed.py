"""Speed of `advisor recommend`, process start to exit, as a user runs it.

    python benchmarks/recommend_speed.py [--repeats 5]

Targets (issue 5): <= 2 s for Llama 3 70B on 64 H200, <= 10 s for Llama 3.1 405B on 4,096
H200. Figures are medians of the repeats (these machines are noisy). Importing xgboost also
imports scikit-learn when it is installed (about +0.9 s here); advisor does not depend on it.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import shutil
import statistics
import subprocess
import time

CASES = (
    ("70b", 64, "h200", 2.0),
    ("405b", 4096, "h200", 10.0),
    ("deepseek-v3", 1024, "h100", None),
    ("mixtral-8x22b", 64, "h100", None),
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    exe = shutil.which("advisor")
    if exe is None:
        raise SystemExit("advisor is not on PATH: pip install . first")
    sklearn = importlib.util.find_spec("sklearn") is not None
    print(f"scikit-learn installed: {sklearn} (xgboost imports it when present)")
    print(f"{'job':<28} {'median s':>9} {'min s':>7} {'target s':>9}  engine")
    for model, gpus, platform, target in CASES:
        times, engine = [], ""
        for _ in range(args.repeats):
            start = time.perf_counter()
            out = subprocess.run([exe, "recommend", "-m", model, "-g", str(gpus), "-p",
                                  platform, "--json"], capture_output=True, text=True,
                                 check=True)
            times.append(time.perf_counter() - start)
            engine = json.loads(out.stdout)["engine"]
        label = f"{model} on {gpus} × {platform}"
        verdict = "" if target is None else (" ok" if statistics.median(times) <= target
                                             else " MISSED")
        print(f"{label:<28} {statistics.median(times):9.2f} {min(times):7.2f} "
              f"{target if target else '-':>9}  {engine}{verdict}")


if __name__ == "__main__":
    main()
