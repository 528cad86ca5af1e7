"""Fit the GEMM kernel parameters (`advisor/perf/gemm.py`) to measured GEMM tables, and score
them against the tables and against an independent measurement.

Sources (`datasets/reference/gemm`, copied from `datasets/reference/gemm` with its README and
licence): XLA's measured matmul tables (375 shapes, b ∈ {1, 2, 4} × M, N, K ∈ 256…4,096, per
number format) for H100 (`sm_90`), B200 (`sm_100`), MI300X (`gfx942`) and the MI350 series
(`gfx950`), and Stas Bekman's "Maximum Achievable Matmul FLOPS" (MAMF: the best shape torch's
matmul found per accelerator), which checks the fitted kernels on a shape and a library (cuBLAS
through torch, the path Megatron-LM and TorchTitan take) the fit never saw.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd

from advisor.catalog import load_platform
from advisor.data.reference import reference_path
from advisor.perf.gemm import GemmKernel

DATA = reference_path("gemm")
TABLE_DEVICES = {"H100 SXM": ("h100", "sm_90"), "B200": ("b200", "sm_100"),
                 "MI300X": ("mi300x", "gfx942"), "MI355X": ("mi355x", "gfx950")}
"""The tables' devices, as the catalog names them, and their kernel architecture
(datasets/reference/gemm/README.md, 'GPU mapping')."""
FORMATS = {
    "bf16": {"sm_90": "bf16xbf16->bf16", "sm_100": "bf16xbf16->bf16",
             "gfx942": "bf16xbf16->bf16", "gfx950": "bf16xbf16->bf16"},
    "fp8": {"sm_100": "f8e4m3fnxf8e4m3fn->bf16", "gfx942": "f8e4m3fnuzxf8e4m3fnuz->bf16",
            "gfx950": "f8e4m3fnxf8e4m3fn->bf16"},
}
"""The table rows each kernel format is fitted on. H100's FP8 rows are left out: they run up to
1.32 × the dense FP8 peak, which no kernel does (the table's median-over-all-kernels caveat:
an FP8 dot launches a cast or layout kernel beside the GEMM), so Hopper FP8 runs the BF16
kernel shape at the FP8 peak. MI300X's stale `f8e4m3fn` rows are superseded by `fnuz`."""
ELEMENT_BYTES = {"bf16": 2.0, "fp8": 1.0}
TILES = ((64, 64), (64, 128), (128, 64), (128, 128), (128, 256), (256, 128), (256, 256))
"""Output tiles the fit may choose for an architecture (the libraries' common CTA tiles)."""
GENERIC = GemmKernel(tile_m=128, tile_n=128, efficiency=0.75, launch_s=5e-6,
                     memory_efficiency=0.8, k_overhead=64.0, overlap_exponent=4.0)
"""placeholder: the kernel of a device with no measured table (A100, MI250), which its family's
end-to-end fit scales: large BF16 GEMMs reach 70-80 % of peak (MAMF: A100 87 % at its best
shape), a 128 × 128 tile, a 5 µs shortest kernel (every measured table's smallest GEMMs take
4-7 µs), 80 % of HBM bandwidth, 64 reduction steps of prologue and epilogue, traffic mostly
hidden (p = 4)."""
BOUNDS = {"efficiency": (0.05, 1.0), "launch_s": (1e-7, 3e-5),
          "memory_efficiency": (0.05, 1.0), "k_overhead": (1.0, 4096.0),
          "overlap_exponent": (1.0, 16.0)}
"""Efficiency and memory efficiency are fractions of the full-clock peak and of the HBM
bandwidth: at most 1."""
MAMF_DEVICES = {"NVIDIA A100 SXM": "a100", "NVIDIA H100 SXM": "h100", "NVIDIA B200 SXM": "b200",
                "NVIDIA B300 SXM": "b300", "NVIDIA GB200 SXM": "gb200", "AMD MI300X": "mi300x",
                "AMD MI325X": "mi325x", "AMD MI355X": "mi355x"}
MAMF_FORMATS = {"bf16": "bf16", "fp8_e4m3fn": "fp8"}


def load_tables(folder: Path = DATA) -> pd.DataFrame:
    """Every measured row of the kernel formats above, with its device, architecture, format,
    the device's full-clock peak, unit count and bandwidth, and the measured seconds."""
    frame = pd.concat([pd.read_csv(folder / "gemm.csv.gz"),
                       pd.read_csv(folder / "gemm_amd.csv.gz")], ignore_index=True)
    parts = []
    for fmt, by_arch in FORMATS.items():
        for device, (platform_name, arch) in TABLE_DEVICES.items():
            dtype = by_arch.get(arch)
            if dtype is None:
                continue
            rows = frame[(frame["gpu"] == device) & (frame["dtype"] == dtype)].copy()
            platform = load_platform(platform_name)
            rows["platform"], rows["arch"], rows["format"] = platform_name, arch, fmt
            rows["full_clock_peak"] = platform.full_clock_peak_flops(fmt)
            rows["num_units"] = platform.num_compute_units
            rows["hbm"] = platform.hbm_bandwidth_bytes_per_s
            rows["measured_s"] = 2.0 * rows.b * rows.m * rows.n * rows.k / rows.flops_per_s
            parts.append(rows)
    return pd.concat(parts, ignore_index=True)


def predict(kernel: GemmKernel, rows: pd.DataFrame) -> np.ndarray:
    """Seconds of each table row (a batch of b GEMMs runs as b × the tiles of one)."""
    b = rows["b"].to_numpy(float)
    fmt = rows["format"].to_numpy()
    return kernel.seconds(rows["m"].to_numpy(float), rows["n"].to_numpy(float),
                          rows["k"].to_numpy(float), batch=b,
                          peak_flops_per_s=rows["full_clock_peak"].to_numpy(),
                          num_units=int(rows["num_units"].iloc[0]),
                          hbm_bytes_per_s=float(rows["hbm"].iloc[0]),
                          element_bytes=np.vectorize(ELEMENT_BYTES.get)(fmt))


@dataclass(frozen=True)
class KernelFit:
    arch: str
    fmt: str
    kernel: GemmKernel
    rows: int
    median_ape_pct: float
    mape_pct: float
    large_median_ape_pct: float
    """Median error on shapes with M, N, K ≥ 2,048 (the size of training GEMMs)."""


def _score(kernel: GemmKernel, rows: pd.DataFrame) -> tuple[float, float, float]:
    ape = np.abs(predict(kernel, rows) / rows["measured_s"].to_numpy() - 1.0) * 100
    large = ((rows.m >= 2048) & (rows.n >= 2048) & (rows.k >= 2048)).to_numpy()
    return float(np.median(ape)), float(np.mean(ape)), float(np.median(ape[large]))


def fit_kernel(rows: pd.DataFrame) -> KernelFit:
    """The tile and the five parameters that reproduce one architecture's table for one format
    best: robust least squares on log time (soft L1, so a handful of odd entries does not pull
    the rest), the tile with the lowest median error."""
    from scipy.optimize import least_squares

    names = list(BOUNDS)
    lo = np.log([BOUNDS[k][0] for k in names])
    hi = np.log([BOUNDS[k][1] for k in names])
    start = np.log([GENERIC.efficiency, GENERIC.launch_s, 0.5, GENERIC.k_overhead, 2.0])
    measured = np.log(rows["measured_s"].to_numpy())
    best: KernelFit | None = None
    for tile_m, tile_n in TILES:
        def make(z: np.ndarray, tm: int = tile_m, tn: int = tile_n) -> GemmKernel:
            return GemmKernel(tile_m=tm, tile_n=tn, **dict(zip(names, np.exp(z), strict=True)))

        fit = least_squares(lambda z: np.log(predict(make(z), rows)) - measured,
                            np.clip(start, lo + 1e-6, hi - 1e-6), bounds=(lo, hi),
                            loss="soft_l1", f_scale=0.1)
        kernel = make(fit.x)
        median, mean, large = _score(kernel, rows)
        if best is None or median < best.median_ape_pct:
            best = KernelFit(str(rows["arch"].iloc[0]), str(rows["format"].iloc[0]), kernel,
                             len(rows), median, mean, large)
    assert best is not None
    return best


MAMF_ANCHORED = {("sm_90", "fp8"): "h100"}
"""Formats whose table is left out (above), derived instead from the architecture's BF16 kernel
with its efficiency scaled to the device's MAMF measurement of the format."""


def fit_all(tables: pd.DataFrame, folder: Path = DATA) -> list[KernelFit]:
    """A kernel per architecture and format the tables measure, plus the MAMF-anchored ones."""
    fits = [fit_kernel(part) for _, part in tables.groupby(["arch", "format"], sort=True)]
    mamf = pd.read_csv(folder / "mamf.csv")
    for (arch, fmt), device in MAMF_ANCHORED.items():
        bf16 = next(f for f in fits if f.arch == arch and f.fmt == "bf16")
        row = mamf[(mamf["accelerator"].map(MAMF_DEVICES) == device)
                   & (mamf["dtype"].map(MAMF_FORMATS) == fmt)].iloc[0]
        platform = load_platform(device)
        m, n, k = float(row["m"]), float(row["n"]), float(row["k"])
        seconds = bf16.kernel.seconds(np.array([m]), n, k,
                                      peak_flops_per_s=platform.full_clock_peak_flops(fmt),
                                      num_units=platform.num_compute_units,
                                      hbm_bytes_per_s=platform.hbm_bandwidth_bytes_per_s,
                                      element_bytes=ELEMENT_BYTES[fmt])[0]
        scale = float(row["mamf_tflops"]) * 1e12 / (2.0 * m * n * k / seconds)
        kernel = replace(bf16.kernel, efficiency=bf16.kernel.efficiency * scale)
        fits.append(KernelFit(arch, fmt, kernel, 1, 0.0, 0.0, 0.0))
    return sorted(fits, key=lambda f: (f.arch, f.fmt))


def score_table(tables: pd.DataFrame, kernels) -> pd.DataFrame:
    """Median and mean error of the shipped kernels on every table, per device and format."""
    out = []
    for (platform, fmt), part in tables.groupby(["platform", "format"], sort=True):
        kernel = kernels.kernel(load_platform(platform), fmt)
        median, mean, large = _score(kernel, part)
        out.append({"platform": platform, "format": fmt, "rows": len(part),
                    "median_ape_pct": median, "mape_pct": mean,
                    "large_median_ape_pct": large})
    return pd.DataFrame(out)


FASTER_BY = 0.10
"""A doubling counts as an inversion where the larger GEMM measures this much faster."""


def inversions(tables: pd.DataFrame) -> pd.DataFrame:
    """How often each measured table contradicts itself, per device and format: of every pair
    of shapes that differ by doubling one of b, M, N or K, the share (%) where the larger GEMM
    measured more than `FASTER_BY` faster, and the fastest such ratio of times. A larger GEMM
    never needs less time than a smaller one padded into it, so these entries record which
    kernel the library picked for a shape (XLA's autotuner over hipBLASLt or cuBLAS), not what
    the hardware can do; no model in which time grows with the work reproduces them."""
    out = []
    dims = ["b", "m", "n", "k"]
    for (platform, fmt), part in tables.groupby(["platform", "format"], sort=True):
        seconds = part.set_index(dims)["measured_s"]
        ratios = []
        for dim in dims:
            larger = part[dims].copy()
            larger[dim] = larger[dim] * 2
            after = seconds.reindex(pd.MultiIndex.from_frame(larger)).to_numpy()
            known = ~np.isnan(after)
            ratios.append(after[known] / part["measured_s"].to_numpy()[known])
        ratio = np.concatenate(ratios)
        out.append({"platform": platform, "format": fmt, "doublings": len(ratio),
                    "faster_pct": float(np.mean(ratio < 1.0 - FASTER_BY) * 100),
                    "fastest_ratio": float(ratio.min())})
    return pd.DataFrame(out)


def mamf_check(kernels, folder: Path = DATA) -> pd.DataFrame:
    """Each MAMF measurement (torch matmul, the best of a brute-force shape search) against the
    kernel model at that shape on that device: predicted / measured FLOP/s. Devices with no
    table of their own run their architecture's kernels (H200, GB200, B300, MI325X) or the
    generic prior (A100)."""
    mamf = pd.read_csv(folder / "mamf.csv")
    out = []
    for _, row in mamf.iterrows():
        name = MAMF_DEVICES.get(row["accelerator"])
        fmt = MAMF_FORMATS.get(row["dtype"])
        if name is None or fmt is None or pd.isna(row["mamf_tflops"]):
            continue
        platform = load_platform(name)
        kernel = kernels.kernel(platform, fmt)
        m, n, k = float(row["m"]), float(row["n"]), float(row["k"])
        seconds = kernel.seconds(np.array([m]), n, k,
                                 peak_flops_per_s=platform.full_clock_peak_flops(fmt),
                                 num_units=platform.num_compute_units,
                                 hbm_bytes_per_s=platform.hbm_bandwidth_bytes_per_s,
                                 element_bytes=ELEMENT_BYTES[fmt])[0]
        predicted = 2.0 * m * n * k / seconds / 1e12
        out.append({"device": name, "format": fmt, "shape": f"{int(m)}x{int(n)}x{int(k)}",
                    "kernels": platform.gemm_kernels or "generic",
                    "measured_tflops": float(row["mamf_tflops"]),
                    "predicted_tflops": predicted,
                    "ratio": predicted / float(row["mamf_tflops"])})
    return pd.DataFrame(out)


def toml_text(fits: list[KernelFit], *, commit_note: str) -> str:
    """`gemm_kernels.toml` for `fits`."""
    lines = ["# gemm_kernels.toml — GEMM kernel parameters per architecture and number format",
             "# (advisor/perf/gemm.py). Written by `python benchmarks/gemm_check.py --write` from",
             "# XLA's measured GEMM tables in datasets/reference/gemm; do not edit by hand.",
             f"# {commit_note}", ""]
    for fit in fits:
        lines.append(f"[kernels.{fit.arch}.{fit.fmt}]")
        lines += [f"{k} = {_number(v)}" for k, v in asdict(fit.kernel).items()]
        lines.append("")
    lines.append("[generic]")
    lines += [f"{k} = {_number(v)}" for k, v in asdict(GENERIC).items()]
    lines.append("")
    for fit in fits:
        if (fit.arch, fit.fmt) in MAMF_ANCHORED:
            continue
        lines.append(f'[metrics."{fit.arch}.{fit.fmt}"]')
        lines += [f"rows = {fit.rows}", f"median_ape_pct = {fit.median_ape_pct:.2f}",
                  f"mape_pct = {fit.mape_pct:.2f}",
                  f"large_median_ape_pct = {fit.large_median_ape_pct:.2f}", ""]
    sources = {
        "kernels": "fit: robust least squares on log time to XLA's measured matmul tables "
                   "(datasets/reference/gemm: openxla/xla dc660322 for sm_90, sm_100 and gfx950; "
                   "ROCm/xla 106eb9b5 for gfx942), one tile chosen from "
                   + ", ".join(f"{a}x{b}" for a, b in TILES) + " by median error; efficiencies "
                   "are fractions of the full-clock peak (Platform.full_clock_peak_flops)",
        "sm_90.fp8": "derived: H100's FP8 table runs up to 1.32 x the dense FP8 peak (the "
                     "table's median-over-all-kernels caveat), so Hopper FP8 runs sm_90.bf16's "
                     "kernel with its efficiency scaled to MAMF's H100 FP8 measurement (1402.6 "
                     "TFLOP/s at 1024x9216x14336, stas00/ml-engineering; "
                     "datasets/reference/gemm/mamf.csv)",
        "generic": GENERIC_SOURCE,
    }
    lines.append("[sources]")
    lines += [f'{k} = "{v}"' for k, v in sources.items()]
    return "\n".join(lines) + "\n"


GENERIC_SOURCE = ("placeholder: a device with no measured table (A100, MI250), scaled by its "
                  "family's end-to-end gemm factor: large BF16 GEMMs reach 70-80 % of peak "
                  "(MAMF: A100 87 % at its best shape), a 128 x 128 tile, a 5 us shortest kernel "
                  "(the measured tables' smallest GEMMs take 4-7 us), 80 % of HBM bandwidth, 64 "
                  "reduction steps of prologue and epilogue, traffic mostly hidden (p = 4)")


def _number(value: float | int) -> str:
    return str(value) if isinstance(value, int) else f"{value:.6g}"
