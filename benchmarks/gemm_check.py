"""Does the GEMM model reproduce measured kernels? Fit and score it per architecture.

    python benchmarks/gemm_check.py            # score the shipped kernels; fit and compare
    python benchmarks/gemm_check.py --write    # ...and write advisor/catalog/gemm_kernels.toml
    python benchmarks/gemm_check.py --plots DIR    # ...and its figures (PNG) in DIR

Prints, per device and number format, the median and mean error of the shipped kernel
parameters (`advisor/catalog/gemm_kernels.toml`) against XLA's measured GEMM tables
(`datasets/reference/gemm`: 375 shapes each), what a fresh fit gives, and the check on shapes
the fit never saw: MAMF, torch's best matmul per accelerator (cuBLAS/hipBLASLt), against the
model at that shape — including devices that borrow an architecture's kernels (H200, GB200,
B300, MI325X) and A100 on the generic prior. The goal is a median error within 10 % per
device on the BF16 tables. A last table says how often each measured table contradicts itself (a
larger GEMM measured faster than a smaller one), which bounds what any kernel model can reach on
it. `--plots DIR` draws the rows of both tables (`plots`, matplotlib):
predicted against measured TFLOP/s of every table shape per device and format, and of MAMF.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import _plots
import numpy as np
import pandas as pd
from _checkout import head

from advisor.catalog import load_platform
from advisor.perf import gemm_fit
from advisor.perf.gemm import kernel_table_from_dict, load_kernel_table

ROOT = Path(__file__).resolve().parents[1]
TARGET = ROOT / "advisor" / "catalog" / "gemm_kernels.toml"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help=f"write {TARGET.name}")
    parser.add_argument("--plots", type=Path, metavar="DIR",
                        help="also write the figures (PNG) into DIR (needs matplotlib)")
    args = parser.parse_args(argv)

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
    print("\n## How often a table contradicts itself: shape pairs one doubling of b, M, N or K "
          "apart where\n## the larger GEMM measured more than "
          f"{gemm_fit.FASTER_BY:.0%} faster (the library's kernel choice; no model in which\n"
          "## time grows with the work reproduces those entries)\n")
    print(gemm_fit.inversions(tables).round(2).to_string(index=False))
    print("\n## MAMF (torch matmul, the best of a shape search; never fitted) against the "
          "model at that shape\n")
    mamf = gemm_fit.mamf_check(shipped)
    print(mamf.round(3).to_string(index=False))
    print(f"\npredicted / measured: median {np.median(mamf['ratio']):.2f} "
          f"({mamf['ratio'].min():.2f}-{mamf['ratio'].max():.2f})")
    if args.plots:
        for path in plots(table_points(tables, shipped), mamf, args.plots):
            print(f"wrote {path}", file=sys.stderr)
    return 0


def table_points(tables: pd.DataFrame, kernels) -> pd.DataFrame:
    """Every table row under the shipped kernels, as `gemm_fit.score_table` scores it:
    device, format, measured and predicted TFLOP/s (the same FLOPs over either time)."""
    parts = []
    for (platform, fmt), part in tables.groupby(["platform", "format"], sort=True):
        predicted_s = gemm_fit.predict(kernels.kernel(load_platform(platform), fmt), part)
        flops = part["measured_s"].to_numpy() * part["flops_per_s"].to_numpy()
        parts.append(pd.DataFrame({"device": f"{platform} {fmt}",
                                   "measured": part["flops_per_s"].to_numpy() / 1e12,
                                   "predicted": flops / predicted_s / 1e12}))
    return pd.concat(parts, ignore_index=True)


def plots(points: pd.DataFrame, mamf: pd.DataFrame, folder: Path) -> list[Path]:
    """The figure of `--plots`: predicted against measured TFLOP/s of every shape of the
    measured tables (`table_points`, the shipped kernels' table) per device and format, and of
    the MAMF shapes no fit saw (the rows of both tables printed above it)."""
    figures = _plots.Figures(folder)
    fig, axes = _plots.figure(2, width_in=11, height_in=6.4)
    # The tables' error is that of kernel time (`score_table`): measured / predicted TFLOP/s.
    ape = (points["measured"] / points["predicted"] - 1).abs() * 100
    labels = {d: f"{d} ({int((points['device'] == d).sum())}; median "
                 f"{ape[points['device'] == d].median():.1f} %)"
              for d in points["device"].unique()}
    _plots.predicted_vs_measured(axes[0], points["measured"], points["predicted"],
                                 points["device"], unit="TFLOP/s", labels=labels, size=4,
                                 alpha=0.5)
    _plots.legend_below(axes[0], title="device and format (shapes; median error of time)",
                        ncol=2)
    axes[0].set_title(f"Shipped kernels (gemm_kernels.toml) against XLA's GEMM tables\n(the "
                      f"fit's data): {len(points)} shapes", fontsize=10)
    device = mamf["device"] + " " + mamf["format"]
    labels = {d: f"{d} ({r:.2f})" for d, r in zip(device, mamf["ratio"], strict=True)}
    _plots.predicted_vs_measured(axes[1], mamf["measured_tflops"], mamf["predicted_tflops"],
                                 device, unit="TFLOP/s", labels=labels, size=30,
                                 order=list(device))
    ticks = [t for t in (200, 300, 500, 1000, 2000, 3000, 5000)
             if t <= 1.2 * max(mamf["measured_tflops"].max(), mamf["predicted_tflops"].max())]
    for axis in (axes[1].xaxis, axes[1].yaxis):
        axis.set_ticks(ticks, [str(t) for t in ticks])
        axis.set_ticks([], minor=True)
    _plots.legend_below(axes[1], title="device and format (predicted / measured)", ncol=2)
    axes[1].set_title(f"MAMF, torch's best matmul per device (never fitted):\n{len(mamf)} "
                      f"shapes", fontsize=10)
    return [figures.save(fig, "gemm-predicted-vs-measured",
                         f"Predicted against measured GEMM TFLOP/s (log-log): the {len(points)} "
                         f"shapes of XLA's measured tables per device and format, and the "
                         f"{len(mamf)} MAMF shapes no fit saw, with the y = x and ±20 % lines")]


if __name__ == "__main__":
    sys.exit(main())
