"""The few free parameters of the analytical model, per platform family, and where they come from.

`advisor/catalog/calibration.toml` holds them, written by `benchmarks/calibrate.py --write` (fit
to `published_runs.csv`, the MLPerf Training submissions and the vTrain NCCL tables). H200
shares Hopper's, MI325X the MI300X's CDNA 3; a family with no measured runs (MI250's cdna2) uses
the geometric mean of the calibrated families and its predictions say "uncalibrated".
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass, field, fields
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from advisor.core.errors import CatalogError
from advisor.perf.collectives import CollectiveModel


@dataclass(frozen=True)
class Efficiency:
    """How close one platform family runs to its datasheet, in the model's terms."""

    gemm: float
    """Fraction of dense peak a large BF16 GEMM reaches."""
    gemm_half_dim: float
    """Tile and wave quantisation: each GEMM dimension d runs at d / (d + d½) of the best
    efficiency (small GEMMs after TP/EP splitting or with few tokens fill the GPU poorly)."""
    gemm_memory_exposure: float
    """Share of a GEMM's operand and output traffic (2·(MK + KN + MN) elements through HBM)
    not hidden under its math: small or skinny GEMMs after TP/EP splitting, or with few tokens,
    become memory-bound (the roofline). A fit above 1 says the kernels move more than those
    ideal operands (tiles of an operand read from HBM more than once)."""
    attention: float
    """Fraction of BF16 peak the fused (flash) attention kernels reach."""
    scan: float
    """Fraction of BF16 peak the Mamba-2 state-space scan kernels reach (chunked SSD)."""
    layer_overhead_s: float
    """Host (CPU) time to launch one layer's kernels per micro-batch, forward + backward; the
    GPU waits when its own work is shorter."""
    expert_overhead_s: float
    """Host time per local expert of a MoE layer per micro-batch, forward + backward: a
    grouped GEMM of Transformer Engine launches each expert's GEMMs (forward, input and weight
    gradients of both linears) and their FP8 casts one by one, so a MoE layer with many local
    experts and few tokens per micro-batch becomes host-bound (NVIDIA's Megatron-Core MoE
    report, arXiv 2603.07685: small per-expert GEMMs and many kernel launches; CUDA Graphs)."""
    fp8_ratio: float
    """FP8 GEMM efficiency relative to BF16 (FP8 gains less than 2×: scaling, casts)."""
    fp4_ratio: float
    """FP4 GEMM efficiency relative to BF16."""
    calibrated: bool = True
    """False where no measured run of the family constrained these numbers."""

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True)
class FrameworkEfficiency:
    """A framework's compute kernels relative to Megatron-Core with Transformer Engine."""

    gemm: float = 1.0
    attention: float = 1.0
    layer_overhead_s: float | None = None
    """Host time per layer per micro-batch where the framework differs from Megatron-Core
    (eager PyTorch launches many more, smaller kernels); None = the platform family's."""


FRAMEWORK_PARAMETERS = ("gemm", "attention")
FIT_PARAMETERS = ("gemm", "gemm_half_dim", "gemm_memory_exposure", "attention", "scan",
                  "layer_overhead_s", "expert_overhead_s", "fp8_ratio", "fp4_ratio")


@dataclass(frozen=True)
class Calibration:
    families: dict[str, Efficiency]
    prior: Efficiency
    collectives: CollectiveModel
    sources: dict[str, str]
    frameworks: dict[str, FrameworkEfficiency] = field(default_factory=dict)
    """Compute-kernel efficiency of a framework relative to Megatron-Core (1)."""
    metrics: dict[str, float] = field(default_factory=dict)
    """How well the fit did (the file's `[metrics]`: in-sample and cross-validated error)."""

    def efficiency(self, family: str) -> Efficiency:
        """The family's calibrated efficiencies; for a family no measured run covers (cdna2),
        the geometric mean of the calibrated families — what the data says of GPUs in general,
        which is less optimistic than the literature prior — marked uncalibrated."""
        if family in self.families:
            return self.families[family]
        if not self.families:
            return self.prior
        values = {p: float(np.exp(np.mean([np.log(max(getattr(e, p), 1e-9))
                                           for e in self.families.values()])))
                  for p in FIT_PARAMETERS}
        return Efficiency(**values, calibrated=False)

    def with_families(self, families: dict[str, Efficiency]) -> Calibration:
        return dataclasses.replace(self, families=families)

    def framework(self, name: str) -> FrameworkEfficiency:
        return self.frameworks.get(name, FrameworkEfficiency())

    def with_frameworks(self, frameworks: dict[str, FrameworkEfficiency]) -> Calibration:
        return dataclasses.replace(self, frameworks=frameworks)


def _efficiency(table: dict[str, Any], where: str, calibrated: bool) -> Efficiency:
    missing = [k for k in FIT_PARAMETERS if k not in table]
    if missing:
        raise CatalogError(f"{where}: missing {', '.join(missing)}.")
    return Efficiency(**{k: float(table[k]) for k in FIT_PARAMETERS}, calibrated=calibrated)


def calibration_from_dict(data: dict[str, Any], where: str) -> Calibration:
    try:
        coll = data["collectives"]
        collectives = CollectiveModel(**{f.name: float(coll[f.name])
                                         for f in fields(CollectiveModel)})
        families = {name: _efficiency(t, f"{where} [family.{name}]", True)
                    for name, t in data.get("family", {}).items()}
        prior = _efficiency(data["prior"], f"{where} [prior]", False)
        frameworks = {str(k): FrameworkEfficiency(
            **{p: float(t[p]) for p in FRAMEWORK_PARAMETERS},
            layer_overhead_s=float(t["layer_overhead_s"]) if "layer_overhead_s" in t else None)
            for k, t in data.get("framework", {}).items()}
    except KeyError as e:
        raise CatalogError(f"{where}: missing {e}; regenerate it with "
                           f"`python benchmarks/calibrate.py --write`.") from None
    except (TypeError, ValueError, AttributeError) as e:
        raise CatalogError(f"{where}: a value is not a number ({e}); regenerate it with "
                           f"`python benchmarks/calibrate.py --write`.") from None
    return Calibration(families=families, prior=prior, collectives=collectives,
                       sources=dict(data.get("sources", {})), frameworks=frameworks,
                       metrics={str(k): float(v) for k, v in data.get("metrics", {}).items()})


@functools.lru_cache(maxsize=4)
def load_calibration(path: str | None = None) -> Calibration:
    """The bundled calibration, or one written elsewhere by `benchmarks/calibrate.py`."""
    from advisor.catalog import read_toml

    if path is None:
        target = resources.files("advisor.catalog").joinpath("calibration.toml")
        with resources.as_file(target) as p:
            return calibration_from_dict(read_toml(Path(p)), "calibration.toml")
    return calibration_from_dict(read_toml(Path(path)), path)
