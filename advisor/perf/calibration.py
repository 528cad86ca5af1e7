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
    """Training GEMMs' speed against the measured-kernel model (`advisor/perf/gemm.py`):
    what the kernel tables cannot see (the framework's library and kernel choice, casts beside
    the GEMM). About 1 where a platform's own table is measured; on a device with no table it
    scales the generic prior kernel."""
    expert_gemm: float
    """Routed experts' GEMMs against the measured dense kernels: the tables time one dense GEMM
    per shape, not a MoE layer's grouped GEMMs over uneven token counts with their permutes
    and the dispatcher's kernels around them (fitted on the MoE runs alone, so dense models
    keep the kernels' speed)."""
    attention: float
    """Fraction of BF16 peak the fused (flash) attention kernels reach on long sequences
    (shorter ones run at L / (L + `step_compute.ATTENTION_HALF_SPEED_TOKENS`) of it)."""
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
MEGATRON_KERNELS = ("megatron", "megatron-deepspeed")
"""Frameworks that run Megatron's kernels (Megatron-Core with Transformer Engine; the
Megatron-DeepSpeed fork): Megatron-Core's factors (1) where none is fitted. Any other framework
no run calibrated gets `Calibration.uncalibrated_framework()`."""
STACK_SEPARATOR = "@"
"""A stack's key: framework @ platform family (`llm-foundry@hopper`): one framework's kernels on
two GPU generations are two stacks (its H100 and A100 releases differ)."""
CURRENT_RELEASE = float("inf")
"""The release year of a team's own runs (`advisor train --stack`): the software they run now,
priced as a new job is, at the family's reference release (`SoftwareTrend.factor`)."""


@dataclass(frozen=True)
class SoftwareTrend:
    """How a family's measured throughput moved with the software release (a container or
    MLPerf round of the runs): log tokens/s per year, fitted on the family's dated runs. The
    family's efficiencies describe its newest release in the data (`reference_year`): a run of
    an older release is priced slower by exp(rate × years before it); a release newer than
    any measured, as the newest (no trend is extrapolated); a run whose release is not known,
    as of the dated runs' mean release (`undated_year`). Predictions of a new job are at the
    reference release (the software a team would install today)."""

    rate_per_year: float
    reference_year: float
    undated_year: float

    def factor(self, year: float | np.ndarray) -> np.ndarray:
        """Throughput of a run of release `year` (a decimal year; NaN: not known;
        `CURRENT_RELEASE`: a team's own runs) against the reference release's."""
        year = np.asarray(year, float)
        known = np.where(np.isnan(year), self.undated_year, year)
        return np.exp(self.rate_per_year * (np.minimum(known, self.reference_year)
                                            - self.reference_year))


FIT_PARAMETERS = ("gemm", "expert_gemm", "attention", "scan", "layer_overhead_s",
                  "expert_overhead_s", "fp8_ratio", "fp4_ratio")


@dataclass(frozen=True)
class Calibration:
    families: dict[str, Efficiency]
    prior: Efficiency
    collectives: CollectiveModel
    sources: dict[str, str]
    frameworks: dict[str, FrameworkEfficiency] = field(default_factory=dict)
    """Compute-kernel efficiency of a framework relative to Megatron-Core (1), per stack
    (`framework@family`) or for the framework on every family (`framework`)."""
    metrics: dict[str, float] = field(default_factory=dict)
    """How well the fit did (the file's `[metrics]`: in-sample and cross-validated error)."""
    software: dict[str, SoftwareTrend] = field(default_factory=dict)
    """Per platform family, how throughput moved with the software release of its runs
    (`SoftwareTrend`); a family without one has no dated runs spanning releases."""

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

    def release_factor(self, families, years) -> np.ndarray:
        """Per run, its release's throughput against its family's reference release
        (`SoftwareTrend.factor` of the run's `families` entry at its decimal year in `years`,
        NaN where not known; 1 for a family without a trend)."""
        families = np.asarray(families, dtype=object)
        years = np.asarray(years, float)
        out = np.ones(len(families))
        for family, trend in self.software.items():
            at = families == family
            out[at] = trend.factor(years[at])
        return out

    def with_families(self, families: dict[str, Efficiency]) -> Calibration:
        return dataclasses.replace(self, families=families)

    def framework(self, name: str, family: str | None = None) -> FrameworkEfficiency:
        """A framework's kernel factors on a platform family: its stack's own
        (`llm-foundry@hopper`) where fitted, else the framework's, else Megatron-Core's (1) for
        Megatron's kernels and `uncalibrated_framework()` for any other."""
        stack = self.frameworks.get(f"{name}{STACK_SEPARATOR}{family}") if family else None
        general = self.frameworks.get(name)
        if stack is not None:
            if (stack.layer_overhead_s is None and general is not None
                    and general.layer_overhead_s is not None):
                # host time is the framework's (vTrain's fit)
                return dataclasses.replace(stack, layer_overhead_s=general.layer_overhead_s)
            return stack
        if general is not None:
            return general
        return (FrameworkEfficiency() if name in MEGATRON_KERNELS
                else self.uncalibrated_framework())

    def knows_stack(self, name: str, family: str) -> bool:
        """Whether measured runs calibrated this framework on this family (or it runs
        Megatron's kernels, the reference): the band widens where not (`bands.at_least`)."""
        return (name in MEGATRON_KERNELS or name in self.frameworks
                or f"{name}{STACK_SEPARATOR}{family}" in self.frameworks)

    def uncalibrated_framework(self) -> FrameworkEfficiency:
        """Kernel factors of a framework no run calibrated: the geometric mean of every
        fitted stack's (what the data says of frameworks other than Megatron-Core's tuned
        recipes), Megatron-Core's where none is fitted."""
        stacks = [f for k, f in self.frameworks.items() if STACK_SEPARATOR in k]
        if not stacks:
            return FrameworkEfficiency()
        return FrameworkEfficiency(**{p: float(np.exp(np.mean([np.log(getattr(f, p))
                                                               for f in stacks])))
                                      for p in FRAMEWORK_PARAMETERS})

    def with_frameworks(self, frameworks: dict[str, FrameworkEfficiency]) -> Calibration:
        return dataclasses.replace(self, frameworks=frameworks)

    def with_host_scale(self, factor: float) -> Calibration:
        """Every host time (per layer and per local expert, each family's, the prior's and
        every framework's own) times `factor`: a stack whose software launches its kernels
        `factor` times slower or faster (`advisor.learn.stack.fit_stack_host`)."""
        if factor == 1.0:
            return self

        def host(e: Efficiency) -> Efficiency:
            return dataclasses.replace(e, layer_overhead_s=e.layer_overhead_s * factor,
                                       expert_overhead_s=e.expert_overhead_s * factor)

        return dataclasses.replace(
            self, families={k: host(e) for k, e in self.families.items()},
            prior=host(self.prior),
            frameworks={k: f if f.layer_overhead_s is None else dataclasses.replace(
                f, layer_overhead_s=f.layer_overhead_s * factor)
                for k, f in self.frameworks.items()})


def _efficiency(table: dict[str, Any], where: str, calibrated: bool) -> Efficiency:
    missing = [k for k in FIT_PARAMETERS if k not in table]
    if missing:
        raise CatalogError(f"{where}: missing {', '.join(missing)}.")
    return Efficiency(**{k: float(table[k]) for k in FIT_PARAMETERS}, calibrated=calibrated)


def calibration_from_dict(data: dict[str, Any], where: str) -> Calibration:
    try:
        coll = data["collectives"]
        collectives = CollectiveModel(**{f.name: float(coll[f.name])
                                         for f in fields(CollectiveModel) if f.name != "domain"})
        families = {name: _efficiency(t, f"{where} [family.{name}]", True)
                    for name, t in data.get("family", {}).items()}
        prior = _efficiency(data["prior"], f"{where} [prior]", False)
        frameworks = {str(k): FrameworkEfficiency(
            **{p: float(t[p]) for p in FRAMEWORK_PARAMETERS},
            layer_overhead_s=float(t["layer_overhead_s"]) if "layer_overhead_s" in t else None)
            for k, t in data.get("framework", {}).items()}
        software = {str(k): SoftwareTrend(rate_per_year=float(t["rate_per_year"]),
                                          reference_year=float(t["reference_year"]),
                                          undated_year=float(t["undated_year"]))
                    for k, t in data.get("software", {}).items()}
    except KeyError as e:
        raise CatalogError(f"{where}: missing {e}; regenerate it with "
                           f"`python benchmarks/calibrate.py --write`.") from None
    except (TypeError, ValueError, AttributeError) as e:
        raise CatalogError(f"{where}: a value is not a number ({e}); regenerate it with "
                           f"`python benchmarks/calibrate.py --write`.") from None
    return Calibration(families=families, prior=prior, collectives=collectives,
                       sources=dict(data.get("sources", {})), frameworks=frameworks,
                       metrics={str(k): float(v) for k, v in data.get("metrics", {}).items()},
                       software=software)


@functools.lru_cache(maxsize=4)
def load_calibration(path: str | None = None) -> Calibration:
    """The bundled calibration, or one written elsewhere by `benchmarks/calibrate.py`."""
    from advisor.catalog import read_toml

    if path is None:
        target = resources.files("advisor.catalog").joinpath("calibration.toml")
        with resources.as_file(target) as p:
            return calibration_from_dict(read_toml(Path(p)), "calibration.toml")
    return calibration_from_dict(read_toml(Path(path)), path)
