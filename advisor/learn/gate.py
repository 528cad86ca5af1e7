"""The refit gate: held-out error per cell of platform family × precision × dense/MoE, compared
with a recorded baseline, so a model change or refit that makes one kind of job worse cannot
land unnoticed behind a better average.

Each cell's error comes from leave-one-series-out predictions (a publication series — every
release of one performance summary — held out whole, the families refitted on the rest), the
error on a software stack never seen. `benchmarks/calibrate.py` prints the table, compares it
with `benchmarks/baselines/loso_series_cells.json` and fails when a cell of at least
`MIN_ROWS` rows got worse by more than `TOLERANCE_PCT` points of MAPE or median error, unless
the change is accepted with a reason (`--accept "why"`).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from advisor.core.parallel import PRECISIONS

MIN_ROWS = 10
"""Cells with fewer rows are shown but never block: one run moves their mean by points."""
TOLERANCE_PCT = 1.0
"""How much a gated cell's MAPE or median error may rise (percentage points) before the gate
fails."""
CELL_KEYS = ("family", "precision_class", "kind")
METRICS = ("mape", "median_ape")


def precision_class(precision: str) -> str:
    """The arithmetic a run's GEMMs use: bf16 (bf16, fp16, unspecified 16-bit), fp8 (per-tensor,
    current-scaling, blockwise, MX) or fp4."""
    cls = PRECISIONS.get(str(precision).strip().lower(), str(precision))
    return "bf16" if cls == "fp16" else cls


def cell_table(rows: pd.DataFrame, predicted: pd.Series) -> pd.DataFrame:
    """Per cell (family × precision class × dense/moe): rows, MAPE, median absolute error and
    the signed median error (positive: predicted too fast), in percent, plus the whole table
    as the cell `all`."""
    ratio = predicted.reindex(rows.index) / rows["measured"]
    frame = pd.DataFrame({
        "family": rows["family"], "precision_class": rows["precision"].map(precision_class),
        "kind": np.where(rows["moe"].astype(bool), "moe", "dense"),
        "ape": (ratio - 1.0).abs() * 100, "signed": (ratio - 1.0) * 100}).dropna()
    table = frame.groupby(list(CELL_KEYS)).agg(
        rows=("ape", "size"), mape=("ape", "mean"), median_ape=("ape", "median"),
        signed_median=("signed", "median"))
    overall = pd.DataFrame({"rows": [len(frame)], "mape": [frame["ape"].mean()],
                            "median_ape": [frame["ape"].median()],
                            "signed_median": [frame["signed"].median()]},
                           index=pd.MultiIndex.from_tuples([("all", "", "")], names=CELL_KEYS))
    return pd.concat([table, overall]).sort_index().round(2)


GPU_COUNT_BINS = (1, 9, 65, 257, 1025, 10**9)
"""Edges of the GPU-count bins `scale_table` reports: one node, 2-8 nodes, up to 256 GPUs, up
to 1,024, and beyond."""


def scale_table(rows: pd.DataFrame, predicted: pd.Series) -> pd.DataFrame:
    """Error by the job's GPU count (the bins of `GPU_COUNT_BINS`): rows, MAPE, median absolute
    and signed median error (%)."""
    ratio = predicted.reindex(rows.index) / rows["measured"]
    edges = list(GPU_COUNT_BINS)
    labels = [f"{lo}-{hi - 1}" if hi < 10**9 else f"{lo}+"
              for lo, hi in zip(edges, edges[1:], strict=False)]
    frame = pd.DataFrame({"gpus": pd.cut(rows["num_gpus"], edges, right=False, labels=labels),
                          "ape": (ratio - 1.0).abs() * 100, "signed": (ratio - 1.0) * 100})
    return frame.dropna().groupby("gpus", observed=True).agg(
        rows=("ape", "size"), mape=("ape", "mean"), median_ape=("ape", "median"),
        signed_median=("signed", "median")).round(2)


def compare(before: pd.DataFrame, after: pd.DataFrame, *, min_rows: int = MIN_ROWS,
            tolerance_pct: float = TOLERANCE_PCT) -> pd.DataFrame:
    """Cells side by side (`mape_before`, `mape_after`, ...; a cell only one side has shows NaN
    on the other) with `regressed`: a cell of at least `min_rows` rows (after) whose MAPE or
    median error rose by more than `tolerance_pct` points."""
    joined = pd.merge(before[["rows", *METRICS]], after[["rows", *METRICS]], how="outer",
                      left_index=True, right_index=True, suffixes=("_before", "_after"))
    worse = np.zeros(len(joined), dtype=bool)
    for metric in METRICS:
        joined[f"{metric}_change"] = joined[f"{metric}_after"] - joined[f"{metric}_before"]
        worse |= (joined[f"{metric}_change"] > tolerance_pct).to_numpy()
    gated = (joined["rows_after"].fillna(0) >= min_rows).to_numpy()
    joined["regressed"] = worse & gated
    return joined


def regressions(comparison: pd.DataFrame) -> list[str]:
    """One line per regressed cell, naming it and what moved."""
    out = []
    for key, row in comparison[comparison["regressed"]].iterrows():
        name = " × ".join(k for k in key if k)
        out.append(f"{name} ({int(row['rows_after'])} rows): MAPE {row['mape_before']:.1f} → "
                   f"{row['mape_after']:.1f} %, median {row['median_ape_before']:.1f} → "
                   f"{row['median_ape_after']:.1f} %")
    return out


def write_baseline(path: Path, table: pd.DataFrame, *, commit: str, note: str) -> None:
    """Record `table` as the baseline later refits are compared with."""
    cells = [{**dict(zip(CELL_KEYS, key, strict=True)),
              **{k: (int(v) if k == "rows" else float(v)) for k, v in row.items()}}
             for key, row in table.iterrows()]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"commit": commit, "note": note, "cells": cells}, indent=1,
                               ensure_ascii=False) + "\n", encoding="utf-8")


def read_baseline(path: Path) -> tuple[pd.DataFrame, dict]:
    """The recorded cell table and its metadata (`commit`, `note`)."""
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    table = pd.DataFrame(data["cells"]).set_index(list(CELL_KEYS))
    return table, {k: v for k, v in data.items() if k != "cells"}
