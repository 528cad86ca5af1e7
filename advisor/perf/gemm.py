"""Time of one GEMM on one device, from measured kernel tables.

A GEMM of an M × K by a K × N matrix runs as output tiles of `tile_m` × `tile_n`, each compute
unit (SM, CU) working one tile at a time over the whole reduction: ⌈M/tm⌉·⌈N/tn⌉ tiles in
⌈tiles / units⌉ waves, so a GEMM a little larger than a wave, or with a dimension just past a
tile, pays for idle units and padded rows (tile and wave quantization). Where the tiles do not
fill the device, the library splits the reduction (split-K, stream-K) into as many parts as fill
it, down to 256-deep slices. Each tile's loop runs at `efficiency` of the device's full-clock peak
per unit and pays `k_overhead` reduction steps of prologue and epilogue; every kernel pays
`launch_s` (its shortest duration, a few microseconds), and a GEMM too small or skinny for its
math waits on HBM for its operands and output (`memory_efficiency` of the bandwidth: a roofline).

    math    = waves · 2·tm·tn·(K/split + k_overhead) / (unit peak · efficiency)
    traffic = (MK + KN + MN) · element bytes / (HBM · memory_efficiency)
    t = launch_s + (math^p + traffic^p)^(1/p)

(p, `overlap_exponent`: 1 where a kernel's operand traffic adds to its math, large where the
math hides it: the roofline's max.)

The parameters of each kernel architecture (`sm_90` H100, `sm_100` B200, `gfx942` MI300X,
`gfx950` MI350 series) and number format are fitted to XLA's measured GEMM tables
(`datasets/reference/gemm`, `benchmarks/gemm_check.py --write`) before any end-to-end fit, and
stated against the full-clock peak (`Platform.full_clock_peak_flops`: the tables time lone
kernels, which run at the maximum clock), so devices of one architecture but other clocks or
unit counts (H200, GB200) scale correctly. A device with no table (A100, MI250) runs the generic
prior, which the family's end-to-end fit scales.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, fields
from importlib import resources
from typing import Any

import numpy as np

from advisor.core.errors import CatalogError
from advisor.core.platform import Platform

MIN_SPLIT_DEPTH = 256.0
"""The shallowest reduction slice split-K cuts (cuBLAS and hipBLASLt split down to a few
hundred; below, the partial sums cost more than they save)."""
KERNEL_CLASSES = ("bf16", "fp8")
"""Number formats with their own kernel parameters; fp16 runs bf16's, fp4 fp8's."""


@dataclass(frozen=True)
class GemmKernel:
    """How one architecture's GEMM library runs one number format."""

    tile_m: int
    tile_n: int
    efficiency: float
    """Fraction of the full-clock peak per unit inside a tile's reduction loop."""
    launch_s: float
    """The shortest kernel: launch, setup and the last wave's drain."""
    memory_efficiency: float
    """Fraction of HBM bandwidth a memory-bound GEMM reaches."""
    k_overhead: float
    """Prologue and epilogue of one tile, in reduction steps."""
    overlap_exponent: float
    """How the operand traffic meets the math: the time is the p-norm of the two (p = 1: one
    after the other, as the AMD tables measure; large p: the traffic hidden under the math, the
    roofline's max, as on Hopper and Blackwell)."""

    def seconds(self, m: np.ndarray, n: np.ndarray | float, k: np.ndarray | float, *,
                peak_flops_per_s: np.ndarray | float, num_units: int | None,
                hbm_bytes_per_s: float, element_bytes: np.ndarray | float,
                batch: np.ndarray | float = 1.0) -> np.ndarray:
        """Seconds of one kernel running `batch` (M × K)·(K × N) GEMMs, broadcast over arrays;
        `peak_flops_per_s` is the device's full-clock peak for the format (times any end-to-end
        factor). Without a unit count the device is one continuous pool (no quantization)."""
        m = np.maximum(m, 1.0)
        if num_units:
            units = float(num_units)
            tiles = batch * np.ceil(m / self.tile_m) * np.ceil(n / self.tile_n)
            split = np.clip(np.floor(units / tiles), 1.0,
                            np.maximum(np.floor(k / MIN_SPLIT_DEPTH), 1.0))
            waves = np.ceil(tiles * split / units)
            math = (waves * 2.0 * self.tile_m * self.tile_n * (k / split + self.k_overhead)
                    * units / (peak_flops_per_s * self.efficiency))
        else:
            math = (batch * 2.0 * m * n * (k + self.k_overhead)
                    / (peak_flops_per_s * self.efficiency))
        traffic = batch * (m * k + k * n + m * n) * element_bytes / (hbm_bytes_per_s
                                                                    * self.memory_efficiency)
        p = self.overlap_exponent
        return self.launch_s + (math ** p + traffic ** p) ** (1.0 / p)


@dataclass(frozen=True)
class KernelTable:
    """Kernel parameters per architecture and format (`gemm_kernels.toml`)."""

    kernels: dict[str, dict[str, GemmKernel]]
    generic: GemmKernel
    sources: dict[str, str]
    metrics: dict[str, dict[str, float]]

    def kernel(self, platform: Platform, precision_class: str) -> GemmKernel:
        """The kernel a platform runs for a precision class (fp16 as bf16, fp4 as fp8, a
        format the table lacks as bf16); the generic prior where the platform names none."""
        name = platform.gemm_kernels
        if name is None:
            return self.generic
        if name not in self.kernels:
            raise CatalogError(f"{platform.path or platform.name}: gemm_kernels = {name!r} is "
                               f"not in advisor/catalog/gemm_kernels.toml; use one of "
                               f"{', '.join(sorted(self.kernels))}, or leave it out.")
        formats = self.kernels[name]
        cls = {"fp16": "bf16", "fp4": "fp8"}.get(precision_class, precision_class)
        return formats.get(cls, formats["bf16"])


def _kernel(table: dict[str, Any], where: str) -> GemmKernel:
    names = [f.name for f in fields(GemmKernel)]
    missing = [k for k in names if k not in table]
    if missing:
        raise CatalogError(f"gemm_kernels.toml [{where}]: missing {', '.join(missing)}; "
                           f"regenerate it with `python benchmarks/gemm_check.py --write`.")
    return GemmKernel(**{k: (int(table[k]) if k.startswith("tile") else float(table[k]))
                         for k in names})


@functools.cache
def load_kernel_table() -> KernelTable:
    """The shipped kernel parameters (`advisor/catalog/gemm_kernels.toml`)."""
    import tomllib

    text = resources.files("advisor.catalog").joinpath("gemm_kernels.toml").read_text(
        encoding="utf-8")
    return kernel_table_from_dict(tomllib.loads(text))


def kernel_table_from_dict(data: dict[str, Any]) -> KernelTable:
    kernels = {arch: {cls: _kernel(t, f"{arch}.{cls}") for cls, t in formats.items()}
               for arch, formats in data.get("kernels", {}).items()}
    for arch, formats in kernels.items():
        if "bf16" not in formats:
            raise CatalogError(f"gemm_kernels.toml [kernels.{arch}]: needs a bf16 entry.")
    return KernelTable(kernels=kernels, generic=_kernel(data["generic"], "generic"),
                       sources=dict(data.get("sources", {})),
                       metrics={k: dict(v) for k, v in data.get("metrics", {}).items()})
