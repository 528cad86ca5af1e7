"""Speed of `advisor recommend`, process start to exit, as a user runs it.

    python benchmarks/recommend_speed.py [--repeats 5]

Targets: <= 2 s wall for Llama 3 70B on 64 H200 and <= 10 s for Llama 3.1 405B on 4,096 H200
(issue 5); 70B on 64 H200 under 1 s of process (CPU) time and `advisor --help` under 0.3 s
(issue 16). Figures are medians of the repeats (these machines are noisy); CPU is the child's
user + system time. Prediction does not import the xgboost package (which imports scikit-learn
and SciPy when they are installed): large batches go to its C library through the C API.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import resource
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
    print(f"scikit-learn installed: {sklearn} (recommend does not import it: prediction "
          f"calls XGBoost's C library, not the xgboost package)")
    print(f"{'command':<28} {'median s':>9} {'min s':>7} {'CPU s':>6} {'target s':>9}  engine")
    wall, cpu = _time([exe, "--help"], args.repeats)
    print(f"{'advisor --help':<28} {statistics.median(wall):9.2f} {min(wall):7.2f} "
          f"{statistics.median(cpu):6.2f} {0.3:>9}  -{_verdict(wall, 0.3)}")
    for model, gpus, platform, target in CASES:
        command = [exe, "recommend", "-m", model, "-g", str(gpus), "-p", platform, "--json"]
        wall, cpu = _time(command, args.repeats)
        engine = json.loads(subprocess.run(command, capture_output=True, text=True,
                                           check=True).stdout)["engine"]
        label = f"{model} on {gpus} × {platform}"
        print(f"{label:<28} {statistics.median(wall):9.2f} {min(wall):7.2f} "
              f"{statistics.median(cpu):6.2f} {target if target else '-':>9}  {engine}"
              f"{_verdict(wall, target)}")


def _time(command: list[str], repeats: int) -> tuple[list[float], list[float]]:
    """Wall and CPU (user + system) seconds of each run of `command`."""
    wall, cpu = [], []
    for _ in range(repeats):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        subprocess.run(command, capture_output=True, text=True, check=True)
        wall.append(time.perf_counter() - start)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return wall, cpu


def _verdict(times: list[float], target: float | None) -> str:
    if target is None:
        return ""
    return " ok" if statistics.median(times) <= target else " MISSED"

if __name__ == "__main__":
    main()
