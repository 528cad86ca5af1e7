"""Fit each platform's in-domain collective constants (`collectives.DomainCollectives`) to its
measured collective table, and score the model against every table.

Source: XLA's measured collective tables (`datasets/reference/gemm/collectives.csv.gz`, copied
from `datasets/reference/gemm` with its README and licence): all-reduce, all-gather,
reduce-scatter and all-to-all of 1 KiB to 2 GiB (32 GiB on GB200/GB300) over groups of 2-8 GPUs
of one H100, B200, MI300X or MI350 host and 4-72 GPUs of a GB200/GB300 NVL72 domain, timed by
XLA's collective profiler (algorithm bandwidth: tensor bytes over runtime). Nothing here
measures a network between hosts.
"""

from __future__ import annotations

from dataclasses import asdict, replace
from pathlib import Path

import numpy as np
import pandas as pd

from advisor.catalog import load_platform
from advisor.data.reference import reference_path
from advisor.perf.collectives import (
    ALL_GATHER,
    ALL_TO_ALL,
    REDUCE_SCATTER,
    RING_ALLREDUCE,
    CollectiveModel,
    DomainCollectives,
)

DATA = reference_path("gemm")
SYSTEMS = {"H100": "h100", "B200": "b200", "GB200": "gb200", "GB300": "gb300",
           "MI300X": "mi300x", "MI350": "mi355x"}
"""A table's `system` (its first word) -> the catalog platform it measured (the README's
mapping: the MI350-series table is read against MI355X's links)."""
OPS = {"all-reduce": RING_ALLREDUCE, "all-gather": ALL_GATHER,
       "reduce-scatter": REDUCE_SCATTER, "all-to-all": ALL_TO_ALL}
BOUNDS = ([0.0, 0.0, 0.05, 0.0], [1e-3, 1e-4, 1.5, 0.95])
"""α₀ (s), α₁ (s per hop), η (of the catalog's link bandwidth), c (the group penalty)."""
MESH_VENDORS = ("amd",)
"""AMD Instinct platforms link each GPU to the seven others by xGMI (a full mesh: a group of n
drives n − 1 links; the tables' large-message bandwidth grows 3.4 × from 2 to 8 GPUs on
MI300X); NVIDIA's go through NVSwitch (flat within 10-25 % across group sizes)."""
LARGE_BYTES = 16e6
"""Messages this size and up: what a training step's collectives move."""


def load_tables(folder: Path = DATA) -> pd.DataFrame:
    """Every measured row of the four collectives over groups of two or more, newest version
    (MI300X: its ROCm-branch table), with its platform and measured seconds."""
    frame = pd.read_csv(folder / "collectives.csv.gz")
    frame = frame[(frame["in_latest_upstream"] == 1) | frame["system"].str.startswith("MI300X")]
    frame = frame[frame["opcode"].isin(OPS) & (frame["devices_per_group"] > 1)].copy()
    frame["platform"] = frame["system"].str.split().str[0].str.split("-").str[0].map(SYSTEMS)
    frame["measured_s"] = frame["implied_runtime_us"] * 1e-6
    return frame.dropna(subset=["platform"])


def predict(model: CollectiveModel, rows: pd.DataFrame) -> np.ndarray:
    """Seconds of each table row under `model`, inside the platform's domain."""
    platform = load_platform(str(rows["platform"].iloc[0]))
    out = np.empty(len(rows))
    for op, kind in OPS.items():
        sel = (rows["opcode"] == op).to_numpy()
        if sel.any():
            out[sel] = model.time(kind, rows["tensor_bytes"].to_numpy(float)[sel],
                                  rows["devices_per_group"].to_numpy(float)[sel], True,
                                  platform)
    return out


def score(model: CollectiveModel, rows: pd.DataFrame) -> dict[str, float]:
    ratio = predict(model, rows) / rows["measured_s"].to_numpy()
    large = (rows["tensor_bytes"] >= LARGE_BYTES).to_numpy()
    ape = np.abs(ratio - 1.0) * 100
    return {"rows": int(len(rows)), "median_ape_pct": float(np.median(ape)),
            "large_median_ape_pct": float(np.median(ape[large])),
            "large_median_ratio": float(np.median(ratio[large]))}


def fit_domain(base: CollectiveModel, rows: pd.DataFrame) -> DomainCollectives:
    """α₀, α₁, η and c of one platform's domain: robust least squares on log time. AMD's
    domains are full meshes (`MESH_VENDORS`), whose c is 0."""
    from scipy.optimize import least_squares

    measured = np.log(rows["measured_s"].to_numpy())
    mesh = load_platform(str(rows["platform"].iloc[0])).vendor in MESH_VENDORS

    def domain(x: np.ndarray) -> DomainCollectives:
        a0, a1, eta, c = map(float, x)
        return DomainCollectives(a0, a1, eta, 0.0 if mesh else c, mesh=mesh)

    def make(x: np.ndarray) -> CollectiveModel:
        return replace(base, domain=domain(x))

    fit = least_squares(lambda x: np.log(predict(make(x), rows)) - measured,
                        [3e-5, 5e-6, 0.8, 0.3], bounds=BOUNDS, loss="soft_l1", f_scale=0.1)
    return domain(fit.x)


def toml_text(fits: dict[str, DomainCollectives], scores: dict[str, dict[str, float]], *,
              note: str) -> str:
    lines = ["# collective_kernels.toml — in-domain collective constants per measured platform",
             "# (advisor/perf/collectives.py DomainCollectives). Written by",
             "# `python benchmarks/collective_check.py --write` from XLA's measured collective",
             f"# tables in datasets/reference/gemm; do not edit by hand. {note}", ""]
    for name, d in sorted(fits.items()):
        lines += [f"[domains.{name}]", *(f"{k} = {str(v).lower() if k == 'mesh' else f'{v:.6g}'}"
                                         for k, v in asdict(d).items()), ""]
    for name, s in sorted(scores.items()):
        lines += [f"[metrics.{name}]", f"rows = {s['rows']}",
                  f"median_ape_pct = {s['median_ape_pct']:.2f}",
                  f"large_median_ape_pct = {s['large_median_ape_pct']:.2f}", ""]
    lines += ["[sources]",
              'domains = "fit: robust least squares on log time to XLA\'s measured collective '
              'tables (datasets/reference/gemm/collectives.csv.gz: openxla/xla dc660322; MI300X '
              'ROCm/xla 106eb9b5), all-reduce, all-gather, reduce-scatter and all-to-all over '
              'every group size each table holds, against the platform\'s catalog link '
              'bandwidth"', ""]
    return "\n".join(lines)
