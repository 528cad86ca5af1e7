"""Do the collective costs reproduce measured collectives? Fit and score them per platform.

    python benchmarks/collective_check.py            # score; fit each platform's domain
    python benchmarks/collective_check.py --write    # ...and write collective_kernels.toml
    python benchmarks/collective_check.py --plots DIR    # ...and its figures (PNG) in DIR

Prints, per platform whose NVLink/xGMI domain was measured (XLA's collective tables: H100 and
B200 hosts, GB200/GB300 NVL72 domains up to 72 GPUs, MI300X and MI350 hosts), the error of the
constants fitted on A100's NCCL tables (`calibration.toml [collectives]`, what every platform
used before), of the platform's own fit, and the median predicted / measured time of messages
of 16 MB and up (what training moves). `--plots DIR` draws the rows the table scores (`plots`,
matplotlib): predicted against measured time per platform under both sets of constants, and the
error by message size.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

import _plots
import numpy as np
import pandas as pd
from _checkout import head

from advisor.perf import collective_fit
from advisor.perf.calibration import load_calibration
from advisor.perf.collectives import load_domain_table

ROOT = Path(__file__).resolve().parents[1]
TARGET = ROOT / "advisor" / "catalog" / "collective_kernels.toml"
SIZE_BINS = (0, 64e3, 1e6, collective_fit.LARGE_BYTES, 256e6, 4e9, np.inf)
SIZE_LABELS = ("< 64 kB", "64 kB-1 MB", "1-16 MB", "16-256 MB", "256 MB-4 GB", ">= 4 GB")
"""Message-size bins of the error figure (16 MB: the table's `LARGE_BYTES`)."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help=f"write {TARGET.name}")
    parser.add_argument("--plots", type=Path, metavar="DIR",
                        help="also write the figures (PNG) into DIR (needs matplotlib)")
    args = parser.parse_args(argv)

    tables = collective_fit.load_tables()
    base = replace(load_calibration().collectives, domain=None)
    fits, scores, rows, points = {}, {}, [], []
    for name, part in tables.groupby("platform", sort=True):
        fits[name] = collective_fit.fit_domain(base, part)
        scores[name] = collective_fit.score(replace(base, domain=fits[name]), part)
        before = collective_fit.score(base, part)
        d = fits[name]
        points.append(part[["platform", "opcode", "tensor_bytes", "measured_s"]].assign(
            a100=collective_fit.predict(base, part),
            own=collective_fit.predict(replace(base, domain=d), part)))
        rows.append({"platform": name, "rows": len(part),
                     "groups": ",".join(str(int(g)) for g in sorted(part.devices_per_group
                                                                   .unique())),
                     "a100_median_pct": before["median_ape_pct"],
                     "a100_large_ratio": before["large_median_ratio"],
                     "own_median_pct": scores[name]["median_ape_pct"],
                     "own_large_median_pct": scores[name]["large_median_ape_pct"],
                     "own_large_ratio": scores[name]["large_median_ratio"],
                     "alpha0_us": d.alpha0_s * 1e6, "alpha1_us": d.alpha1_s * 1e6,
                     "efficiency": d.efficiency, "group_penalty": d.group_penalty})
    pd.set_option("display.width", 200)
    print("In-domain collectives: A100-fitted constants against each platform's own fit "
          "(error of time, %; ratio = predicted / measured, messages >= 16 MB)\n")
    print(pd.DataFrame(rows).round(3).to_string(index=False))
    if args.write:
        TARGET.write_text(collective_fit.toml_text(fits, scores, note=f"Fitted at {head()}."),
                          encoding="utf-8")
        load_domain_table.cache_clear()
        print(f"\nwrote {TARGET.relative_to(ROOT)}")
    if args.plots:
        for path in plots(pd.concat(points, ignore_index=True), args.plots):
            print(f"wrote {path}", file=sys.stderr)
    return 0


def plots(points: pd.DataFrame, folder: Path) -> list[Path]:
    """The figures of `--plots`, from the rows the table scores (`points`: platform, measured
    seconds, predicted seconds under the A100 constants and under the platform's own fit):
    predicted against measured time per platform under each, and predicted / measured time by
    message size under each."""
    figures = _plots.Figures(folder)
    fits = (("a100", "A100-fitted constants (before)"), ("own", "each platform's own fit"))
    fig, axes = _plots.figure(2, width_in=11, height_in=6.6)
    for ax, (column, title) in zip(axes, fits, strict=True):
        ape = (points[column] / points["measured_s"] - 1).abs() * 100
        labels = {p: f"{p} ({int((points['platform'] == p).sum())}; median "
                     f"{ape[points['platform'] == p].median():.1f} %)"
                  for p in points["platform"].unique()}
        _plots.predicted_vs_measured(ax, points["measured_s"] * 1e6, points[column] * 1e6,
                                     points["platform"], unit="time (µs)", labels=labels,
                                     size=4, alpha=0.5)
        _plots.legend_below(ax, title="platform (rows; median error of time)", ncol=2)
        ax.set_title(f"{title}:\n{len(points)} collectives in NVLink / xGMI domains",
                     fontsize=10)
    paths = [figures.save(fig, "collectives-predicted-vs-measured",
                          f"Predicted against measured time (µs, log-log) of {len(points)} "
                          f"all-reduce, all-gather, reduce-scatter and all-to-all rows of XLA's "
                          f"collective tables, per platform, under the A100-fitted constants "
                          f"and under each platform's own fit, with the y = x and ±20 % lines")]

    bins = pd.cut(points["tensor_bytes"], SIZE_BINS, right=False,
                  labels=SIZE_LABELS).astype(str).to_numpy()
    ratios = points[["a100", "own"]].to_numpy() / points[["measured_s"]].to_numpy()
    lo, hi = ratios.min() / 1.2, ratios.max() * 1.2
    ticks = [t for t in (0.1, 0.2, 0.5, 1, 2, 5, 10, 20) if lo <= t <= hi]
    fig, axes = _plots.figure(2, height_in=8.4, stacked=True)
    for ax, (column, title) in zip(axes, fits, strict=True):
        _plots.box_by_bin(ax, points[column] / points["measured_s"], bins, order=SIZE_LABELS,
                          ylabel="predicted / measured time", zero=1.0)
        ax.set_yscale("log")
        ax.set_ylim(lo, hi)
        ax.set_yticks(ticks, [f"{t:g}" for t in ticks])
        ax.set_yticks([], minor=True)
        ax.set_title(title, fontsize=10)
    axes[1].set_xlabel("message size (rows)")
    fig.subplots_adjust(hspace=0.45)
    fig.suptitle("Collective time by message size (> 1: predicted too slow)\nbox p25-p75 "
                 "with the median, whiskers p10-p90, each row a dot", fontsize=10)
    paths.append(figures.save(fig, "collectives-error-by-size",
                              "Predicted / measured collective time by message size, under the "
                              "A100-fitted constants and under each platform's own fit: "
                              "median, p25-p75 box, p10-p90 whiskers and every row"))
    return paths


if __name__ == "__main__":
    sys.exit(main())
