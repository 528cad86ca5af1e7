"""Speed of `advisor recommend`, process start to exit, as a user runs it.

    python benchmarks/recommend_speed.py [--repeats 5] [--no-picks]

Targets: <= 2 s wall for Llama 3 70B on 64 H200 and <= 10 s for Llama 3.1 405B on 4,096 H200
(issue 5); 70B on 64 H200 under 1 s of process (CPU) time and `advisor --help` under 0.3 s
(issue 16); DeepSeek-V3 on 1,024 H100 and Kimi-K2 on 1,024 GB200 within 2x the CPU time of 70B
on 64 H200, with the picks of scoring every layout (issue 48: the "x 70B" column; the picks
check runs `recommend` in this process twice, with and without the throughput bound that
prunes the search, and says whether the top five layouts agree). Figures are medians of the
repeats (these machines are noisy); CPU is the child's user + system time. Prediction does not
import the xgboost package (which imports scikit-learn and SciPy when they are installed):
large batches go to its C library through the C API.
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
    ("kimi-k2", 1024, "gb200", None),
    ("mixtral-8x22b", 64, "h100", None),
)
BASE = "70b on 64 × h200"
RATIO_TARGET = 2.0
"""The big jobs' CPU time over the base job's (issue 48)."""
CHECK_PICKS = ("deepseek-v3 on 1024 × h100", "kimi-k2 on 1024 × gb200")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--no-picks", action="store_true",
                        help="skip the check that pruning keeps the picks (about 15 s)")
    args = parser.parse_args()
    exe = shutil.which("advisor")
    if exe is None:
        raise SystemExit("advisor is not on PATH: pip install . first")
    sklearn = importlib.util.find_spec("sklearn") is not None
    print(f"scikit-learn installed: {sklearn} (recommend does not import it: prediction "
          f"calls XGBoost's C library, not the xgboost package)")
    print(f"{'command':<28} {'median s':>9} {'min s':>7} {'CPU s':>6} {'× 70B':>6} "
          f"{'target s':>9}  engine")
    wall, cpu = _time([exe, "--help"], args.repeats)
    print(f"{'advisor --help':<28} {statistics.median(wall):9.2f} {min(wall):7.2f} "
          f"{statistics.median(cpu):6.2f} {'':>6} {0.3:>9}  -{_verdict(wall, 0.3)}")
    base_cpu = None
    for model, gpus, platform, target in CASES:
        command = [exe, "recommend", "-m", model, "-g", str(gpus), "-p", platform, "--json"]
        wall, cpu = _time(command, args.repeats)
        engine = json.loads(subprocess.run(command, capture_output=True, text=True,
                                           check=True).stdout)["engine"]
        label = f"{model} on {gpus} × {platform}"
        base_cpu = statistics.median(cpu) if label == BASE else base_cpu
        ratio = statistics.median(cpu) / base_cpu
        verdict = (_verdict(wall, target) if target else
                   " ok" if ratio <= RATIO_TARGET and label in CHECK_PICKS else
                   " MISSED" if label in CHECK_PICKS else "")
        print(f"{label:<28} {statistics.median(wall):9.2f} {min(wall):7.2f} "
              f"{statistics.median(cpu):6.2f} {ratio:6.2f} {target if target else '-':>9}  "
              f"{engine}{verdict}")
    if not args.no_picks:
        for label in CHECK_PICKS:
            print(_picks(label))


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


def _picks(label: str) -> str:
    """Whether `recommend` in this process picks the same five layouts, with the same
    predictions, with the bound pruning the search as when it scores every layout that fits."""
    from advisor import catalog
    from advisor.core.parallel import make_job
    from advisor.search import engine
    from advisor.search.recommend import recommend

    model, _, gpus, _, platform = label.split()
    job = make_job(catalog.load_model(model), catalog.load_platform(platform),
                   num_gpus=int(gpus))
    pruned = recommend(job)
    limit = engine.PRUNE_ABOVE
    engine.PRUNE_ABOVE = 10 ** 9
    try:
        whole = recommend(job, engine=engine.SearchEngine("exhaustive"))
    finally:
        engine.PRUNE_ABOVE = limit
    same = [(c.config, round(c.prediction.tokens_per_sec_per_gpu, 6)) for c in pruned.choices] \
        == [(c.config, round(c.prediction.tokens_per_sec_per_gpu, 6)) for c in whole.choices]
    return (f"{label}: {pruned.num_fit:,} layouts fit, {pruned.num_fit - pruned.num_pruned:,} "
            f"predicted with the bound; top {len(pruned.choices)} "
            f"{'the same as' if same else 'DIFFER from'} scoring all {whole.num_fit:,}")


def _verdict(times: list[float], target: float | None) -> str:
    if target is None:
        return ""
    return " ok" if statistics.median(times) <= target else " MISSED"

if __name__ == "__main__":
    main()
