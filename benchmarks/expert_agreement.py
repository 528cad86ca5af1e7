"""Published experts as a sanity check: where each NVIDIA-tuned recipe ranks in advisor's
recommendation for the same job, and why advisor prefers its own pick where it does.

    python benchmarks/expert_agreement.py [--workers 2] [--csv out.csv]

Prints the agreement rate that the README quotes — the recipe's layout (how TP, PP, CP, EP split
the GPUs) among advisor's top 5 distinct layouts, and exactly (its VP and micro-batch too) — the
median predicted advantage of advisor's pick over the recipe's best variant, and one line per
disagreement with its reason.
"""

from __future__ import annotations

import argparse
import os
import statistics
from pathlib import Path

import pandas as pd

from advisor.search.expert_check import TOP, agreement

REFERENCE = Path(__file__).resolve().parents[1] / "datasets" / "reference" / "published_runs.csv"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reference", type=Path, default=REFERENCE)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--csv", type=Path, help="Write one row per job here.")
    args = parser.parse_args()
    verdicts = agreement(pd.read_csv(args.reference), workers=args.workers)
    agree = sum(v.agrees for v in verdicts)
    exact = sum(v.agrees_exactly for v in verdicts)
    ratios = [v.ratio for v in verdicts if v.ratio is not None]
    print(f"recipe's layout in advisor's top {TOP}: {agree}/{len(verdicts)} "
          f"({agree / len(verdicts):.0%}); with its VP and micro-batch too: {exact}")
    print(f"recipe ranked at all: {len(ratios)}; median predicted advantage of advisor's pick "
          f"over the recipe: {statistics.median(ratios) - 1:+.1%}; within 10 %: "
          f"{sum(r <= 1.10 for r in ratios)}; within 2 %: {sum(r <= 1.02 for r in ratios)}")
    for v in verdicts:
        if not v.agrees:
            print(f"- {v.job} {v.recipe}: rank {v.rank}; {v.why}")
    if args.csv:
        pd.DataFrame([{"job": v.job, **v.recipe, "rank": v.rank, "exact_rank": v.exact_rank,
                       "ratio": v.ratio, "why": v.why} for v in verdicts]).to_csv(
            args.csv, index=False)


if __name__ == "__main__":
    main()
