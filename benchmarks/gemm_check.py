"""Does the GEMM model reproduce measured kernels? Fit and score it per architecture.

    python benchmarks/gemm_check.py            # score the shipped kernels; fit and compare
    python benchmarks/gemm_check.py --write    # ...and write advisor/catalog/gemm_kernels.toml

Prints, per device and number format, the median and mean error of the shipped kernel
parameters (`advisor/catalog/gemm_kernels.toml`) against XLA's measured GEMM tables
(`datasets/reference/gemm`: 375 shapes each), what a fresh fit gives, and the check on shapes
the fit never saw: MAMF, torch's best matmul per accelerator (cuBLAS/hipBLASLt), against the
model at that shape — including devices that borrow an architecture's kernels (H200, GB200,
B300, MI325X) and A100 on the generic prior. The goal is a median error within 10 % per
device on the BF16 tables.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
from _checkout import head

from advisor.perf import gemm_fit
from advisor.perf.gemm import kernel_table_from_dict, load_kernel_table

ROOT = Path(__file__).resolve().parents[1]
TARGET = ROOT / "advisor" / "catalog" / "gemm_kernels.toml"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help=f"write {TARGET.name}")
    args = parser.parse_args()

    tables = gemm_fit.load_tables()
    print(f"measured tables: {len(tables)} rows "
          + ", ".join(f"{a} {f} {n}" for (a, f), n in tables.groupby(["arch", "format"]).size()
                      .items()))
    fits = gemm_fit.fit_all(tables)
    print("\n## Fit (robust least squares on log time; efficiencies of the full-clock peak)\n")
    for fit in fits:
        k = fit.kernel
        print(f"{fit.arch:7s} {fit.fmt:5s} tile {k.tile_m}x{k.tile_n}  efficiency "
              f"{k.efficiency:.3f}  launch {k.launch_s * 1e6:.2f} us  memory "
              f"{k.memory_efficiency:.2f}  k overhead {k.k_overhead:.0f}  |  median "
              f"{fit.median_ape_pct:.1f} %, mean {fit.mape_pct:.1f} %, M,N,K >= 2048 median "
              f"{fit.large_median_ape_pct:.1f} %  ({fit.rows} shapes)")
    text = gemm_fit.toml_text(fits, commit_note=f"fitted at {head()}")
    if args.write:
        TARGET.write_text(text, encoding="utf-8")
        load_kernel_table.cache_clear()
        print(f"\nwrote {TARGET.relative_to(ROOT)}")
    import tomllib

    fresh = kernel_table_from_dict(tomllib.loads(text))
    shipped = load_kernel_table() if TARGET.exists() else fresh
    print("\n## Shipped kernels against every measured table (error of kernel time, %)\n")
    score = gemm_fit.score_table(tables, shipped)
    print(score.round(1).to_string(index=False))
    bf16 = score[score["format"] == "bf16"]
    worst = bf16["median_ape_pct"].max()
    print(f"\nBF16 median error per device: worst {worst:.1f} % "
          f"({'within' if worst <= 10 else 'outside'} the 10 % goal)")
    print("\n## MAMF (torch matmul, the best of a shape search; never fitted) against the "
          "model at that shape\n")
    mamf = gemm_fit.mamf_check(shipped)
    print(mamf.round(3).to_string(index=False))
    print(f"\npredicted / measured: median {np.median(mamf['ratio']):.2f} "
          f"({mamf['ratio'].min():.2f}-{mamf['ratio'].max():.2f})")
    return 0



if __name__ == "__main__":
    sys.exit(main())
