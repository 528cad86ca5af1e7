"""Figures beside a benchmark's tables (`--plots DIR`): predicted against measured per group, an
error's spread per bin, and the share of runs inside a band, drawn from the rows the tables are
computed from.

matplotlib (the `plot` extra) is imported only when a figure is drawn, so the scripts run
without it when no figure is asked for. `Figures.save` writes `<name>.png` and lists it, with
its alt text, in `figures.json`, which `docs/generate_validation.py` reads to embed the figures
in the validation page, in the order they were saved. The PNGs are stored with a palette of
`PALETTE` colours (Pillow, which matplotlib needs): a third of the bytes of the RGBA that
matplotlib writes, the colours as drawn.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

DPI = 100
WIDTH_IN = 7.5
"""One figure per column of a page: 750 px wide at `DPI`."""
MARKERS = "osD^vP*Xph<>"
BAND_PCT = 20.0
"""The ± lines drawn beside y = x on predicted-against-measured plots (percent)."""
INDEX = "figures.json"
PALETTE = 256


def pyplot():
    """matplotlib.pyplot on a file-only backend (or SystemExit naming the extra)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise SystemExit("--plots needs matplotlib: pip install -e '.[plot]'") from None
    return plt


class Figures:
    """A folder of PNGs and their index (`figures.json`: file and alt text, in order)."""

    def __init__(self, folder: Path):
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.saved: list[dict[str, str]] = []

    def save(self, fig, name: str, alt: str) -> Path:
        plt = pyplot()
        path = self.folder / f"{name}.png"
        fig.savefig(path, dpi=DPI, bbox_inches="tight")
        plt.close(fig)
        _palette(path)
        self.saved = [s for s in self.saved if s["file"] != path.name] + [
            {"file": path.name, "alt": alt}]
        (self.folder / INDEX).write_text(json.dumps(self.saved, indent=1, ensure_ascii=False)
                                         + "\n", encoding="utf-8")
        return path


def _palette(path: Path) -> None:
    """`path` rewritten as a palette PNG of `PALETTE` colours (octree: the few flat colours of
    a plot survive exactly)."""
    from PIL import Image

    with Image.open(path) as image:
        quantized = image.convert("RGB").quantize(colors=PALETTE,
                                                  method=Image.Quantize.FASTOCTREE)
    quantized.save(path, optimize=True)


def figure(panels: int = 1, *, width_in: float = WIDTH_IN, height_in: float = 5.5,
           stacked: bool = False, ratios: Sequence[float] | None = None):
    """A figure of `panels` axes side by side (`stacked`: one above the other), `width_in` ×
    `height_in` in all, their widths (heights) in `ratios`."""
    plt = pyplot()
    shape = (panels, 1) if stacked else (1, panels)
    ratio_key = "height_ratios" if stacked else "width_ratios"
    fig, axes = plt.subplots(*shape, figsize=(width_in, height_in), squeeze=False,
                             gridspec_kw={ratio_key: ratios} if ratios else None)
    return fig, list(axes.ravel())


def legend_below(ax, *, title: str | None = None, ncol: int = 1) -> None:
    """The legend under the axes, where it cannot hide a point."""
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.11), ncol=ncol, fontsize=7.5,
              title=title, title_fontsize=7.5, frameon=False)


def _style(ax) -> None:
    ax.grid(True, which="major", alpha=0.3)
    ax.set_axisbelow(True)


def _colours(n: int) -> list:
    plt = pyplot()
    cmap = plt.get_cmap("tab10" if n <= 10 else "tab20")
    return [cmap(i % cmap.N) for i in range(n)]


def predicted_vs_measured(ax, measured: Sequence[float], predicted: Sequence[float],
                          groups: Sequence[str], *, unit: str, labels: dict | None = None,
                          band_pct: float | None = BAND_PCT, log: bool = True,
                          order: Sequence[str] | None = None, size: float = 18,
                          alpha: float = 0.75) -> None:
    """Each group's runs as (measured, predicted), one colour and marker per group, with
    y = x and the ±`band_pct` lines; `labels` names a group in the legend (default: the group
    and its number of runs)."""
    measured, predicted = np.asarray(measured, float), np.asarray(predicted, float)
    groups = pd.Series(np.asarray(groups, dtype=object)).astype(str).to_numpy()
    keys = list(order) if order is not None else sorted(set(groups))
    for k, (key, colour) in enumerate(zip(keys, _colours(len(keys)), strict=True)):
        sel = groups == key
        if not sel.any():
            continue
        label = (labels or {}).get(key, f"{key} ({int(sel.sum())})")
        ax.scatter(measured[sel], predicted[sel], s=size, alpha=alpha, color=colour,
                   marker=MARKERS[k % len(MARKERS)], label=label, linewidths=0.3,
                   edgecolors="black" if size >= 12 else "none")
    both = np.concatenate([measured, predicted])
    both = both[np.isfinite(both) & ((both > 0) if log else True)]
    lo, hi = both.min(), both.max()
    lo, hi = (lo / 1.3, hi * 1.3) if log else (lo - 0.05 * (hi - lo), hi + 0.05 * (hi - lo))
    line = np.geomspace(lo, hi, 50) if log else np.linspace(lo, hi, 50)
    ax.plot(line, line, color="black", linewidth=1, label="predicted = measured")
    if band_pct:
        for sign, style in ((1, "--"), (-1, "--")):
            ax.plot(line, line * (1 + sign * band_pct / 100), color="grey", linewidth=0.9,
                    linestyle=style, label=f"±{band_pct:g} %" if sign > 0 else None)
    if log:
        ax.set_xscale("log")
        ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    ax.set_aspect("equal", adjustable="box")
    ax.set_xlabel(f"measured {unit}")
    ax.set_ylabel(f"predicted {unit}")
    _style(ax)


def box_by_bin(ax, values: Sequence[float], bins: Sequence[str], *, order: Sequence[str],
               ylabel: str, points: bool = True, zero: float | None = 0.0) -> None:
    """Per bin (in `order`) the spread of `values`: the box spans p25-p75 with the median,
    the whiskers p10-p90; each run is a dot beside it; the x labels carry the number of
    runs."""
    values = np.asarray(values, float)
    bins = np.asarray(bins, dtype=object)
    data = [values[bins == b] for b in order]
    keep = [k for k, d in enumerate(data) if len(d)]
    data = [data[k] for k in keep]
    names = [f"{order[k]}\n({len(d)})" for k, d in zip(keep, data, strict=True)]
    positions = np.arange(1, len(data) + 1)
    ax.boxplot(data, positions=positions, whis=(10, 90), showfliers=False, widths=0.5,
               medianprops={"color": "tab:red", "linewidth": 1.5})
    if points:
        rng = np.random.default_rng(0)  # the same jitter on every run
        for x, d in zip(positions, data, strict=True):
            ax.scatter(x + 0.32 + rng.uniform(-0.06, 0.06, len(d)), d, s=6, alpha=0.45,
                       color="tab:blue", linewidths=0)
    if zero is not None:
        ax.axhline(zero, color="black", linewidth=0.8)
    ax.set_xticks(positions, names)
    ax.set_ylabel(ylabel)
    _style(ax)


def coverage_bars(ax, inside: Sequence[bool], groups: Sequence[str], *, promise: float,
                  order: Sequence[str] | None = None, ylabel: str = "") -> pd.DataFrame:
    """Share of runs inside the band per group (horizontal bars, in `order` from the top,
    labelled share and inside / runs; orange below `promise`) against the share the band
    promises (a dashed line);
    returns the table (runs, inside, share)."""
    frame = pd.DataFrame({"group": np.asarray(groups, dtype=object),
                          "inside": np.asarray(inside, bool)})
    table = frame.groupby("group")["inside"].agg(runs="size", inside="sum")
    table["share"] = table["inside"] / table["runs"]
    if order is not None:
        table = table.reindex([g for g in order if g in table.index])
    y = np.arange(len(table))[::-1]
    colours = ["tab:green" if s >= promise else "tab:orange" for s in table["share"]]
    ax.barh(y, table["share"] * 100, color=colours, height=0.6)
    for yi, (_, row) in zip(y, table.iterrows(), strict=True):
        text = f"{row['share']:.0%} ({int(row['inside'])}/{int(row['runs'])})"
        if row["share"] >= 0.3:  # inside the bar, clear of the dashed line
            ax.text(2, yi, text, ha="left", va="center", fontsize=8, color="white",
                    fontweight="bold")
        else:
            ax.text(row["share"] * 100 + 1, yi, text, ha="left", va="center", fontsize=8)
    ax.axvline(promise * 100, color="black", linestyle="--", linewidth=1)
    ax.set_yticks(y, [str(g) for g in table.index], fontsize=8)
    ax.set_xlim(0, 100)
    ax.set_xlabel(f"runs inside the band (%); dashed: the {promise:.0%} the band promises")
    if ylabel:
        ax.set_ylabel(ylabel)
    _style(ax)
    return table
